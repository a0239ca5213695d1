"""Early-warning judges: a node's GPU counters (D-DEV-TREND-01) and a node's or pair's busbw
(D-NET-NCCL-TREND-01) across sweeps → `warn` with the evidence, `pass`, or `inconclusive`.

Pure functions over `fleetval.trends.history` records; the rules and thresholds are the rows of
`fleetval.trends.rules`, the result and action the trend rows of the node health decision table
(`fleetval.policy.node_health.TREND_TABLE`: warn is recorded, never cordons).

- A finding stands even when another GPU's history is damaged (a drift seen is a drift seen); a
  pass needs every GPU readable with at least `min_samples` sweeps and a rule that could read it.
- Garbage never warns: a GPU whose sweeps are not strictly increasing integers is left out (its
  problem is in the evidence); a value that is not a finite, non-negative number or is a DCGM
  blank sentinel is not read; a rule without enough readable samples does not run.
- Counter resets never warn: an interval where a cumulative counter went down is left out of the
  rates (`fleetval.trends.stats.increments`), and a rule with too few intervals left does not run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval import criteria
from fleetval.nccl.judge import EVIDENCE_LIMITS
from fleetval.policy import node_health as nh
from fleetval.records import Verdict
from fleetval.trends import history as h
from fleetval.trends.history import BusbwPoint, Sample, order_problem, points
from fleetval.trends.rules import (
    DEVICE_RULES,
    LINK_CRITERION,
    LINK_RULES,
    MIN_SAMPLES,
    TREND_POLICY_VERSION,
    TrendRule,
    hard_min_ratio,
)
from fleetval.trends.stats import decreasing_fraction, increments, theil_sen


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule that fired on one GPU (or link), with what it saw."""

    rule_id: str
    gpu: str | None
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"rule_id": self.rule_id, "gpu": self.gpu, "reason": self.reason, **self.evidence}


# An evaluator: (samples, rule, gpu) → None when the rule cannot read this history, else the
# finding (None inside: evaluated, nothing drifting).
Evaluated = tuple[Finding | None] | None
Evaluator = Callable[[Sequence[Sample], TrendRule, str], Evaluated]


def _r(x: float, digits: int = 3) -> float:
    return round(x, digits)


def _projected(latest: float, limit: float, slope: float) -> float | None:
    """Sweeps until a line through `latest` with `slope` reaches `limit` (0 if already there)."""
    if latest >= limit:
        return 0.0
    if slope <= 0:
        return None
    return (limit - latest) / slope


def _rising_rate(samples: Sequence[Sample], rule: TrendRule, gpu: str) -> Evaluated:
    p = rule.params
    window = int(p["window"])
    for name in rule.fields:  # the first field with enough readable intervals (VOL, then AGG)
        incs, resets = increments(points(samples, name)[-(window + 1) :])
        if len(incs) >= p["min_intervals"]:
            break
    else:
        return None
    rates = [i.per_sweep for i in incs]
    active = sum(r >= p["min_per_sweep"] for r in rates)
    growth = theil_sen([i.end for i in incs], [math.log2(1 + r) for r in rates])
    raw = theil_sen([i.end for i in incs], rates)
    if growth is None or raw is None:
        return None
    if active < p["min_active"] or growth.slope < p["min_log2_growth"]:
        return (None,)
    evidence = {
        "field": name,
        "sweeps": [i.end for i in incs],
        "rate_per_sweep": [_r(r, 2) for r in rates],
        "latest_rate_per_sweep": _r(rates[-1], 2),
        "rate_slope_per_sweep": _r(raw.slope, 2),
        "growth_factor_per_sweep": _r(2**growth.slope, 2),
        "counter_resets": resets,
        "hard_threshold": (
            "uncorrectable ECC error (Xid 48, xid.48.ecc_dbe: cordon)"
            if name in (h.SBE_VOL, h.SBE_AGG)
            else "DCGM r2 thermal failure"
        ),
        "projected_sweeps_to_threshold": None,
    }
    reason = (
        f"{name} rising: {rates[-1]:.0f}/sweep, x{2**growth.slope:.1f} per sweep over sweeps "
        f"{incs[0].end}-{incs[-1].end}"
    )
    return (Finding(rule.rule_id, gpu, reason, evidence),)


def _bank_low(samples: Sequence[Sample], rule: TrendRule, gpu: str) -> Evaluated:
    latest = samples[-1]
    low, none = latest.usable(h.BANKS_REMAP_ROWS_AVAIL_LOW), latest.usable(h.BANKS_REMAP_ROWS_AVAIL_NONE)
    if low is None and none is None:
        return None
    banks = (low or 0) + (none or 0)
    if banks <= rule.params["max_banks_low"]:
        return (None,)
    evidence = {
        "field": f"{h.BANKS_REMAP_ROWS_AVAIL_LOW} + {h.BANKS_REMAP_ROWS_AVAIL_NONE}",
        "sweep": latest.sweep,
        "banks_low": low,
        "banks_none": none,
        "hard_threshold": "row remap failure (DCGM_FI_DEV_ROW_REMAP_FAILURE, Xid 64: cordon)",
        "projected_sweeps_to_threshold": "next remap in that bank",
    }
    reason = f"{banks:.0f} memory bank(s) at their last spare row or none (sweep {latest.sweep})"
    return (Finding(rule.rule_id, gpu, reason, evidence),)


def _summed(samples: Sequence[Sample], names: Sequence[str]) -> list[tuple[int, float]]:
    """(sweep, sum of the readable `names`) where at least one of them is readable."""
    out = []
    for s in samples:
        values = [v for v in (s.usable(n) for n in names) if v is not None]
        if values:
            out.append((s.sweep, sum(values)))
    return out


def _accumulating(
    samples: Sequence[Sample], rule: TrendRule, gpu: str, *, counted: Sequence[str], pending: str
) -> tuple[Finding | None, dict[str, Any]] | None:
    p = rule.params
    window = int(p["window"])
    pts = _summed(samples, counted)[-(window + 1) :]
    incs, resets = increments(pts)
    if len(incs) < p["min_intervals"]:
        return None
    fit = theil_sen([s for s, _ in pts], [v for _, v in pts])
    if fit is None:
        return None
    rising = sum(i.per_sweep > 0 for i in incs)
    added = sum(i.per_sweep * (i.end - i.start) for i in incs)
    first = pts[0][0]
    pending_samples = sum((s.usable(pending) or 0) > 0 for s in samples if s.sweep >= first)
    latest = pts[-1][1]
    evidence = {
        "field": " + ".join(counted),
        "sweeps": [s for s, _ in pts],
        "values": [v for _, v in pts],
        "added_in_window": added,
        "rising_intervals": rising,
        "slope_per_sweep": _r(fit.slope, 2),
        "pending_samples": pending_samples,
        "counter_resets": resets,
    }
    return None, {"latest": latest, "slope": fit.slope, **evidence}


def _row_remap(samples: Sequence[Sample], rule: TrendRule, gpu: str) -> Evaluated:
    p = rule.params
    got = _accumulating(
        samples,
        rule,
        gpu,
        counted=(h.CORRECTABLE_REMAPPED_ROWS, h.UNCORRECTABLE_REMAPPED_ROWS),
        pending=h.ROW_REMAP_PENDING,
    )
    if got is None:
        return None
    _, ev = got
    latest, slope = ev.pop("latest"), ev.pop("slope")
    projected = _projected(latest, p["budget_rows"], slope)
    near = projected is not None and projected <= p["horizon"]
    if (
        ev["rising_intervals"] < p["min_rising"]
        or ev["added_in_window"] < p["min_rows"]
        or not (ev["pending_samples"] >= p["min_pending"] or near)
    ):
        return (None,)
    ev.update(
        hard_threshold=(
            f"row remap failure (Xid 64: cordon) when a bank runs out of spare rows; at most "
            f"{p['budget_rows']:.0f} remaps per GPU"
        ),
        projected_sweeps_to_threshold=None if projected is None else _r(projected, 1),
    )
    reason = (
        f"remapped rows {latest:.0f} (+{ev['added_in_window']:.0f} over {len(ev['sweeps']) - 1} sweeps, "
        f"{ev['pending_samples']} sample(s) with a remap pending)"
    )
    return (Finding(rule.rule_id, gpu, reason, ev),)


def _retired_pages(samples: Sequence[Sample], rule: TrendRule, gpu: str) -> Evaluated:
    p = rule.params
    got = _accumulating(samples, rule, gpu, counted=(h.RETIRED_SBE, h.RETIRED_DBE), pending=h.RETIRED_PENDING)
    if got is None:
        return None
    _, ev = got
    latest, slope = ev.pop("latest"), ev.pop("slope")
    projected = _projected(latest, p["limit"], slope)
    near = projected is not None and projected <= p["horizon"]
    if ev["rising_intervals"] < p["min_rising"] or not (near or latest >= p["soft_limit"]):
        return (None,)
    ev.update(
        hard_threshold=f"DCGM r2 retired-page limit: {p['limit']:.0f} (SBE + DBE)",
        projected_sweeps_to_threshold=None if projected is None else _r(projected, 1),
    )
    when = "" if projected is None else f", limit {p['limit']:.0f} in ~{projected:.1f} sweeps"
    reason = f"retired pages {latest:.0f} and rising ({slope:.1f}/sweep{when})"
    return (Finding(rule.rule_id, gpu, reason, ev),)


def _gauge_rising(samples: Sequence[Sample], rule: TrendRule, gpu: str) -> Evaluated:
    p = rule.params
    name = rule.fields[0]
    pts = points(samples, name)[-int(p["window"]) :]
    if len(pts) < p["min_points"]:
        return None
    xs, ys = [s for s, _ in pts], [v for _, v in pts]
    fit = theil_sen(xs, ys)
    if fit is None:
        return None
    rising = 1 - decreasing_fraction(ys) if len(ys) > 1 else 0.0
    fitted = fit.at(xs[-1])
    projected = _projected(fitted, p["limit_c"], fit.slope)
    if (
        fit.slope < p["min_slope"]
        or rising < p["min_rising_fraction"]
        or projected is None
        or projected > p["horizon"]
    ):
        return (None,)
    evidence = {
        "field": name,
        "sweeps": xs,
        "values": ys,
        "slope_per_sweep": _r(fit.slope, 2),
        "rising_fraction": _r(rising, 2),
        "fitted_latest": _r(fitted, 1),
        "hard_threshold": f"slowdown temperature {p['limit_c']:.0f} C (per profile)",
        "projected_sweeps_to_threshold": _r(projected, 1),
    }
    reason = (
        f"{name} rising {fit.slope:.1f} C/sweep to {fitted:.0f} C: "
        f"{p['limit_c']:.0f} C in ~{projected:.1f} sweeps"
    )
    return (Finding(rule.rule_id, gpu, reason, evidence),)


EVALUATORS: Final[dict[str, Evaluator]] = {
    "rising_rate": _rising_rate,
    "bank_low": _bank_low,
    "row_remap": _row_remap,
    "retired_pages": _retired_pages,
    "gauge_rising": _gauge_rising,
}
# Samples any device rule reads (the longest window plus one): older ones are not looked at, so a
# reader of the history (`fleetval.trends.prometheus`) fetches no more sweeps than this.
DEVICE_LOOKBACK: Final = max(int(r.params.get("window", 1)) + 1 for r in DEVICE_RULES)


def _judged_against(gate: str) -> dict[str, Any]:
    return {
        "trend_policy": TREND_POLICY_VERSION,
        "policy_version": nh.NODE_HEALTH_POLICY_VERSION,
        "gate": gate,
        "criteria_catalog": criteria.CATALOG_VERSION,
    }


def _verdict(
    gate: str, subject: str, outcome: str, findings: list[Finding], reason: str, evidence: dict[str, Any]
) -> Verdict:
    row = nh.lookup(gate, outcome, nh.TREND_TABLE)
    evidence = {"decision_rule": row.rule_id, **evidence, "findings": [f.to_json() for f in findings]}
    return Verdict(
        criterion=nh.TREND_CRITERION[gate],
        subject=subject,
        result=row.result,
        action=row.action,
        rule_id=findings[0].rule_id if findings else row.rule_id,
        reason=reason or row.reason,
        evidence=evidence,
        judged_against=_judged_against(gate),
    )


def _sample_problem(samples: Any) -> str | None:
    if isinstance(samples, str | bytes) or not isinstance(samples, Sequence):
        return "history is not a sequence of samples"
    if not all(isinstance(s, Sample) for s in samples):
        return "history holds something that is not a sample"
    return order_problem([s.sweep for s in samples])


def unreadable_device_history(node: str, reason: str, evidence: Mapping[str, Any]) -> Verdict:
    """D-DEV-TREND-01 for a node whose history could not be read (its source broke or answered
    garbage): `inconclusive`, the trend table's no-evidence row; never pass, never warn."""
    return _verdict("trend-device", node, "no_evidence", [], reason, dict(evidence))


def judge_device_trend(
    node: str,
    gpus: Mapping[str, Sequence[Sample]],
    *,
    rules: Sequence[TrendRule] = DEVICE_RULES,
    min_samples: int = MIN_SAMPLES,
) -> Verdict:
    """D-DEV-TREND-01 for one node: each GPU's samples (oldest first) → one verdict."""
    findings: list[Finding] = []
    problems: dict[str, str] = {}
    evaluated: dict[str, list[str]] = {}
    if not isinstance(gpus, Mapping) or not gpus:
        problems["node"] = "no GPU history"
        gpus = {}
    for gpu, samples in sorted(gpus.items(), key=lambda kv: str(kv[0])):
        problem = _sample_problem(samples)
        if problem is None and len(samples) < min_samples:
            problem = f"{len(samples)} sweep(s) of history, {min_samples} needed"
        if problem is not None:
            problems[str(gpu)] = problem
            continue
        recent = samples[-DEVICE_LOOKBACK:]
        ran = []
        for rule in rules:
            got = EVALUATORS[rule.kind](recent, rule, str(gpu))
            if got is None:
                continue
            ran.append(rule.rule_id)
            if got[0] is not None:
                findings.append(got[0])
        evaluated[str(gpu)] = ran
        if not ran:
            problems[str(gpu)] = "no rule could read this GPU's fields"
    evidence: dict[str, Any] = {"gpus": len(gpus), "rules_evaluated": evaluated}
    if problems:
        evidence["history_problems"] = problems
    if findings:
        more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
        first = findings[0]
        return _verdict(
            "trend-device", node, "warn", findings, f"GPU {first.gpu}: {first.reason}{more}", evidence
        )
    if problems:
        gpu, problem = next(iter(problems.items()))
        return _verdict("trend-device", node, "no_evidence", [], f"{gpu}: {problem}", evidence)
    return _verdict("trend-device", node, "pass", [], "", evidence)


def judge_link_trend(
    subject: str,
    history: Sequence[BusbwPoint],
    *,
    busbw_criterion: str = "D-NET-NCCL-01",
    rule: TrendRule = LINK_RULES[0],
) -> Verdict:
    """D-NET-NCCL-TREND-01 for one node (intra-node busbw) or pair: busbw per sweep vs baseline."""
    p = rule.params
    min_ratio = hard_min_ratio(busbw_criterion)
    min_samples = int(criteria.get(LINK_CRITERION).parameters["min_samples"])
    evidence: dict[str, Any] = {"busbw_criterion": busbw_criterion, "min_ratio": min_ratio}
    say = _verdict
    if isinstance(history, str | bytes) or not isinstance(history, Sequence):
        return say("trend-link", subject, "no_evidence", [], "history is not a sequence of points", evidence)
    if not all(isinstance(x, BusbwPoint) for x in history):
        return say(
            "trend-link", subject, "no_evidence", [], "history holds something that is not a point", evidence
        )
    problem = order_problem([x.sweep for x in history])
    if problem is not None:
        return say("trend-link", subject, "no_evidence", [], problem, evidence)
    recent, reference = int(p["recent"]), int(p["reference"])
    usable = []
    for x in history[-(recent + reference) :]:
        ratio = x.ratio()
        # Above the NCCL judge's believed limit is a damaged number, not a measurement.
        if ratio is not None and ratio <= EVIDENCE_LIMITS.max_ratio_to_baseline:
            usable.append((x.sweep, ratio))
    evidence["points"] = [[s, _r(v, 4)] for s, v in usable]
    if len(usable) < min_samples:
        return say(
            "trend-link",
            subject,
            "no_evidence",
            [],
            f"{len(usable)} readable sweep(s) of busbw in the last {recent + reference}, "
            f"{min_samples} needed",
            evidence,
        )
    xs, ys = [s for s, _ in usable[-recent:]], [v for _, v in usable[-recent:]]
    before = [v for _, v in usable[:-recent]]
    if len(before) < p["min_reference"]:
        return say(
            "trend-link",
            subject,
            "no_evidence",
            [],
            f"{len(before)} readable sweep(s) before the last {recent}, {p['min_reference']:.0f} needed "
            "for the node's own level",
            evidence,
        )
    fit = theil_sen(xs, ys)
    if fit is None:  # unreachable: sweeps are distinct
        return say("trend-link", subject, "no_evidence", [], "no line through the points", evidence)
    falling = decreasing_fraction(ys)
    own = statistics.median(before)
    now = statistics.median(ys[-int(p["level_points"]) :])
    drop = own - now
    projected = None if fit.slope >= 0 else max(0.0, (now - min_ratio) / -fit.slope)
    evidence.update(
        own_level=_r(own, 4),
        recent_level=_r(now, 4),
        drop_from_own_level=_r(drop, 4),
        slope_per_sweep=_r(fit.slope, 4),
        decreasing_fraction=_r(falling, 2),
        projected_sweeps_to_threshold=None if projected is None else _r(projected, 1),
    )
    if (
        drop < p["min_drop"]
        or fit.slope > -p["min_decline"]
        or falling < p["min_decreasing_fraction"]
        or projected is None
        or projected > p["horizon"]
    ):
        return say("trend-link", subject, "pass", [], "", evidence)
    below = " (already below it: the hard judge's fail)" if ys[-1] + 1e-9 < min_ratio else ""
    reason = (
        f"busbw {ys[-1]:.1%} of baseline, falling {-fit.slope:.1%}/sweep over sweeps {xs[0]}-{xs[-1]}: "
        f"{min_ratio:.0%} ({busbw_criterion}) in ~{projected:.1f} sweeps{below}"
    )
    finding = Finding(
        rule.rule_id,
        None,
        reason,
        {
            "hard_threshold": f"{busbw_criterion} min_ratio {min_ratio}",
            "projected_sweeps_to_threshold": _r(projected, 1),
        },
    )
    return say("trend-link", subject, "warn", [finding], reason, evidence)
