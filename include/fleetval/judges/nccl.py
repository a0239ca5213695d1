"""NCCL judges: busbw against a measured baseline, errors, transport, repeat stability.

Rules (thresholds are `fleetval.criteria` parameters, never literals here):

- D-NET-NCCL-01 / -02: the *headline busbw* of a run — the mean out-of-place busbw over the rows
  with size ≥ `min_size_bytes` (1 GiB) — divided by the promoted baseline's busbw must be ≥
  `min_ratio` (0.90). No such rows, no baseline, one rank, or a collective other than the
  baseline's → inconclusive. Below the ratio → fail even if the run was cut short (the low number
  was measured); at or above it on an incomplete run → inconclusive (never pass).
  Why the mean and not the max: every large size counts, so one sagging size is not hidden by a
  good one, and averaging 4 rows damps noise; the baseline (`fleetval.baselines.nccl`) uses the
  same statistic per run, so the ratio compares like with like. Out-of-place, because in-place
  numbers of some collectives are not comparable (alltoall in-place: algbw 43046 GB/s on 1 GPU).
- D-NET-NCCL-03: any NCCL error (IB completion, bootstrap, transport propagation), timeout,
  `#wrong` > 0 or `Out of bounds values : N FAILED` → fail; otherwise a harness failure
  (`Test NCCL/CUDA failure`) → error; otherwise an output that ended before the footer →
  inconclusive; otherwise pass.
- D-NET-NCCL-TRANSPORT: the profile's fabric (ib | roce) must be the network NCCL used. Socket
  anywhere → fail, even with zero errors and good-looking numbers (the silent-fallback defect).
  No network line (run without NCCL_DEBUG=INFO) → inconclusive. RoCE expected: NCCL names its
  verbs network "IB" for both link layers, so "IB" without a device list passes.
- D-NET-NCCL-04: coefficient of variation (sample std / mean) of the headline busbw over ≥
  `min_repeats` (3) runs must be ≤ `max_cv` (5 %); fewer usable runs → inconclusive.

Every verdict names the criteria catalog version; busbw verdicts name the baseline id/version.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from fleetval import criteria
from fleetval.parsers.nccl import NcclRun, busbw_factor, normalize_collective
from fleetval.records import Result, Verdict

#: What the pipeline does with a verdict of each result (the gate halts on `hold`).
ACTIONS: Final[dict[Result, str]] = {
    Result.PASS: "none",
    Result.WARN: "review",
    Result.INCONCLUSIVE: "rerun",
    Result.FAIL: "hold",
    Result.ERROR: "investigate-harness",
}

HEADLINE_STATISTIC: Final = "mean out-of-place busbw over rows with size >= min_size_bytes"
_FABRICS: Final = ("ib", "roce")
_FLEET_ERROR_KINDS: Final = frozenset(
    {"ib_completion", "ib_async", "bootstrap", "transport", "timeout", "cuda", "nccl"}
)


@dataclass(frozen=True, slots=True)
class NcclBaseline:
    """A promoted busbw baseline for one hardware profile and scope (e.g. `intra-8gpu`,
    `inter-pair`), measured on our reference nodes; `busbw_gbps` is its headline busbw."""

    baseline_id: str
    version: int
    profile: str
    scope: str
    busbw_gbps: float
    collective: str = "all_reduce"

    def judged_against(self) -> dict[str, Any]:
        return {
            "baseline_id": self.baseline_id,
            "baseline_version": self.version,
            "profile": self.profile,
            "scope": self.scope,
            "baseline_busbw_gbps": self.busbw_gbps,
            "criteria_catalog": criteria.CATALOG_VERSION,
        }


def _verdict(
    criterion: str,
    subject: str,
    result: Result,
    rule_id: str,
    reason: str,
    evidence: dict[str, Any],
    judged_against: dict[str, Any] | None = None,
) -> Verdict:
    return Verdict(
        criterion=criterion,
        subject=subject,
        result=result,
        action=ACTIONS[result],
        rule_id=rule_id,
        reason=reason,
        evidence=evidence,
        judged_against=judged_against or {"criteria_catalog": criteria.CATALOG_VERSION},
    )


def large_size_busbw(
    run: NcclRun, *, min_size_bytes: int | None = None, ranks: int | None = None
) -> list[float]:
    """Out-of-place busbw of the rows ≥ `min_size_bytes`, in size order.

    `ranks` recomputes busbw from algbw with that rank count (the CLI's `--ranks`), assuming
    all-reduce when the collective is not known.
    """
    min_size = _min_size(min_size_bytes)
    values: list[float] = []
    for row in sorted(run.rows, key=lambda r: r.size):
        if row.size < min_size:
            continue
        if ranks is not None:
            if row.algbw_oop is not None:
                values.append(row.algbw_oop * busbw_factor(run.collective or "all_reduce", ranks))
        elif row.busbw_oop is not None:
            values.append(row.busbw_oop)
    return values


def headline_busbw(
    run: NcclRun, *, min_size_bytes: int | None = None, ranks: int | None = None
) -> float | None:
    """The run's headline busbw (see module doc), or None without rows ≥ `min_size_bytes`."""
    values = large_size_busbw(run, min_size_bytes=min_size_bytes, ranks=ranks)
    return statistics.fmean(values) if values else None


def _min_size(override: int | None) -> int:
    if override is not None:
        return override
    return int(criteria.get("D-NET-NCCL-01").parameters["min_size_bytes"])


def _run_facts(run: NcclRun) -> dict[str, Any]:
    return {
        "collective": run.collective,
        "nranks": run.nranks,
        "nnodes": run.nnodes,
        "nccl_version": run.nccl_version,
        "transports": list(run.transports),
        "in_network_reduction": run.in_network_reduction,
        "complete": run.complete,
    }


def judge_busbw(
    run: NcclRun,
    *,
    subject: str,
    baseline: NcclBaseline | None,
    criterion: str = "D-NET-NCCL-01",
    ranks: int | None = None,
) -> Verdict:
    """D-NET-NCCL-01 / -02 for one run."""
    if criterion not in ("D-NET-NCCL-01", "D-NET-NCCL-02"):
        raise ValueError(f"busbw criterion must be D-NET-NCCL-01 or D-NET-NCCL-02, got {criterion!r}")
    params = criteria.get(criterion).parameters
    min_ratio = float(params["min_ratio"])
    min_size = int(params["min_size_bytes"])
    nranks = ranks if ranks is not None else run.nranks
    evidence: dict[str, Any] = {
        **_run_facts(run),
        "nranks": nranks,
        "min_ratio": min_ratio,
        "min_size_bytes": min_size,
        "statistic": HEADLINE_STATISTIC,
    }
    if ranks is not None:
        evidence["busbw_source"] = f"algbw x busbw_factor({run.collective or 'all_reduce'}, {ranks})"
    if run.in_network_reduction:
        evidence["note"] = "NVLS/CollNet in use: busbw is not the ring-equivalent link bandwidth"
    say = partial(_verdict, criterion, subject, evidence=evidence)

    if baseline is None:
        return say(
            Result.INCONCLUSIVE, "nccl.busbw.no_baseline", "no promoted baseline for this profile and scope"
        )
    say = partial(_verdict, criterion, subject, evidence=evidence, judged_against=baseline.judged_against())
    if baseline.busbw_gbps <= 0:
        return say(
            Result.INCONCLUSIVE,
            "nccl.busbw.bad_baseline",
            f"baseline busbw {baseline.busbw_gbps} GB/s is not positive",
        )
    if run.collective is not None and run.collective != normalize_collective(baseline.collective):
        return say(
            Result.INCONCLUSIVE,
            "nccl.busbw.other_collective",
            f"run is {run.collective}, baseline is {baseline.collective}",
        )
    if nranks is not None and nranks < 2:
        return say(Result.INCONCLUSIVE, "nccl.busbw.single_rank", "busbw is 0 by definition with one rank")
    values = large_size_busbw(run, min_size_bytes=min_size, ranks=ranks)
    evidence["large_sizes"] = [r.size for r in sorted(run.rows, key=lambda r: r.size) if r.size >= min_size]
    evidence["busbw_values_gbps"] = [round(v, 3) for v in values]
    if not values:
        largest = max((r.size for r in run.rows), default=None)
        evidence["largest_size"] = largest
        return say(
            Result.INCONCLUSIVE,
            "nccl.busbw.no_large_sizes",
            f"no rows with size >= {min_size} B (largest: {largest})",
        )
    measured = statistics.fmean(values)
    ratio = measured / baseline.busbw_gbps
    evidence.update(busbw_gbps=round(measured, 3), ratio=round(ratio, 4))
    # The small epsilon keeps "exactly at the threshold" a pass despite float rounding.
    if ratio + 1e-9 < min_ratio:
        return say(
            Result.FAIL,
            "nccl.busbw.below_baseline",
            f"busbw {measured:.2f} GB/s is {ratio:.1%} of baseline {baseline.busbw_gbps:.2f} GB/s "
            f"(< {min_ratio:.0%})",
        )
    if not run.complete:
        return say(
            Result.INCONCLUSIVE,
            "nccl.busbw.incomplete",
            f"busbw {ratio:.1%} of baseline but the run did not finish",
        )
    return say(
        Result.PASS,
        "nccl.busbw.ok",
        f"busbw {measured:.2f} GB/s is {ratio:.1%} of baseline {baseline.busbw_gbps:.2f} GB/s",
    )


def judge_errors(run: NcclRun, *, subject: str) -> Verdict:
    """D-NET-NCCL-03 for one run."""
    crit = "D-NET-NCCL-03"
    fleet_errors = [e for e in run.errors if e.kind in _FLEET_ERROR_KINDS]
    wrong_rows = [r.size for r in run.rows if (r.wrong_oop or 0) > 0 or (r.wrong_ip or 0) > 0]
    evidence: dict[str, Any] = {
        **_run_facts(run),
        "errors": [e.to_json() for e in fleet_errors[:20]],
        "error_count": len(fleet_errors),
        "error_kinds": sorted({e.kind for e in fleet_errors}),
        "wrong_sizes": wrong_rows,
        "oob_values": run.oob_values,
        "oob_failed": run.oob_failed,
        "harness_failures": [e.to_json() for e in run.harness_failures[:10]],
        "interrupted_at_size": run.interrupted_at_size,
    }
    say = partial(_verdict, crit, subject, evidence=evidence)
    if fleet_errors or wrong_rows or run.oob_failed:
        if any(e.kind == "timeout" for e in fleet_errors):
            rule, what = "nccl.errors.timeout", "timeout"
        elif fleet_errors:
            rule, what = "nccl.errors.nccl", f"NCCL errors ({', '.join(evidence['error_kinds'])})"
        elif wrong_rows:
            rule, what = "nccl.errors.wrong", f"#wrong > 0 at {len(wrong_rows)} sizes"
        else:
            rule, what = "nccl.errors.out_of_bounds", f"Out of bounds values : {run.oob_values} FAILED"
        return say(Result.FAIL, rule, what)
    if run.harness_failures:
        first = run.harness_failures[0]
        return say(
            Result.ERROR, "nccl.errors.harness", f"nccl-tests harness failed: {first.host}: {first.message}"
        )
    if not run.complete:
        return say(
            Result.INCONCLUSIVE,
            "nccl.errors.incomplete",
            "output ended before the nccl-tests footer; errors after that point are unknown",
        )
    return say(Result.PASS, "nccl.errors.none", "no NCCL errors, timeouts or wrong values")


def judge_transport(run: NcclRun, *, subject: str, expected_fabric: str | None) -> Verdict:
    """D-NET-NCCL-TRANSPORT for one run."""
    crit = "D-NET-NCCL-TRANSPORT"
    if expected_fabric is not None and expected_fabric not in _FABRICS:
        raise ValueError(f"expected_fabric must be one of {_FABRICS} or None, got {expected_fabric!r}")
    net = {"IB", "RoCE", "Socket"} & set(run.transports)
    other_networks = [n for n in run.networks if not n.upper().startswith("IB") and n != "Socket"]
    evidence: dict[str, Any] = {
        **_run_facts(run),
        "expected_fabric": expected_fabric,
        "networks": list(run.networks),
        "net_devices": list(run.net_devices),
        "nccl_env": dict(run.nccl_env),
    }
    say = partial(_verdict, crit, subject, evidence=evidence)
    if "Socket" in net and expected_fabric is not None:
        return say(
            Result.FAIL,
            "nccl.transport.socket_fallback",
            f"NCCL used TCP sockets where the profile declares {expected_fabric}",
        )
    if not net and not other_networks:
        why = (
            "no NCCL_DEBUG=INFO transport lines in the output"
            if not run.transports
            else "NCCL_DEBUG=INFO lines show no network selection"
        )
        return say(Result.INCONCLUSIVE, "nccl.transport.unknown", why)
    if expected_fabric is None:
        return say(
            Result.INCONCLUSIVE,
            "nccl.transport.no_fabric_declared",
            f"no expected fabric declared; network used: {', '.join(sorted(net) or other_networks)}",
        )
    # RoCE expected: NCCL names its verbs network "IB" whatever the link layer; only a device
    # list that shows /IB links contradicts it.
    ok = "IB" in net if expected_fabric == "ib" else ("RoCE" in net or ("IB" in net and not run.net_devices))
    if ok and not other_networks:
        return say(
            Result.PASS,
            "nccl.transport.ok",
            f"NCCL used {', '.join(sorted(net))} as the profile declares ({expected_fabric})",
        )
    return say(
        Result.FAIL,
        "nccl.transport.mismatch",
        f"network {', '.join(sorted(net) or other_networks)} is not the declared fabric {expected_fabric}",
    )


def judge_nccl_run(
    run: NcclRun,
    *,
    subject: str,
    baseline: NcclBaseline | None,
    expected_fabric: str | None,
    criterion: str = "D-NET-NCCL-01",
    ranks: int | None = None,
) -> list[Verdict]:
    """All single-run NCCL verdicts: busbw (`criterion`), D-NET-NCCL-03 and the transport."""
    return [
        judge_busbw(run, subject=subject, baseline=baseline, criterion=criterion, ranks=ranks),
        judge_errors(run, subject=subject),
        judge_transport(run, subject=subject, expected_fabric=expected_fabric),
    ]


def judge_nccl_repeats(runs: Sequence[NcclRun], *, subject: str) -> Verdict:
    """D-NET-NCCL-04 over repeats of the same test on the same nodes (or pair)."""
    crit = "D-NET-NCCL-04"
    params = criteria.get(crit).parameters
    min_repeats, max_cv = int(params["min_repeats"]), float(params["max_cv"])
    values = [headline_busbw(r) for r in runs]
    usable = [v for v in values if v is not None]
    shapes = {(r.collective, r.nranks) for r in runs}
    evidence: dict[str, Any] = {
        "repeats": len(runs),
        "usable_repeats": len(usable),
        "busbw_gbps": [round(v, 3) if v is not None else None for v in values],
        "min_repeats": min_repeats,
        "max_cv": max_cv,
        "statistic": HEADLINE_STATISTIC,
    }
    say = partial(_verdict, crit, subject, evidence=evidence)
    if len(shapes) > 1:
        evidence["shapes"] = sorted([list(map(str, s)) for s in shapes])
        return say(
            Result.INCONCLUSIVE, "nccl.repeats.not_comparable", "repeats differ in collective or rank count"
        )
    if len(usable) < min_repeats:
        return say(
            Result.INCONCLUSIVE, "nccl.repeats.too_few", f"{len(usable)} usable repeats, {min_repeats} needed"
        )
    mean = statistics.fmean(usable)
    if mean <= 0:
        return say(Result.INCONCLUSIVE, "nccl.repeats.zero_busbw", "mean busbw is 0")
    std = statistics.stdev(usable)  # sample std (ddof=1): 3 repeats are a sample, not the population
    cv = std / mean
    evidence.update(mean_gbps=round(mean, 3), std_gbps=round(std, 4), cv=round(cv, 5))
    if cv <= max_cv + 1e-12:
        return say(
            Result.PASS,
            "nccl.repeats.stable",
            f"busbw CV {cv:.2%} over {len(usable)} repeats (<= {max_cv:.0%})",
        )
    return say(
        Result.FAIL, "nccl.repeats.noisy", f"busbw CV {cv:.2%} over {len(usable)} repeats (> {max_cv:.0%})"
    )


def busbw_criterion_for(run: NcclRun) -> str:
    """D-NET-NCCL-02 for a multi-node run, else D-NET-NCCL-01 (by node count, then rank count)."""
    if run.nnodes is not None:
        return "D-NET-NCCL-02" if run.nnodes >= 2 else "D-NET-NCCL-01"
    return "D-NET-NCCL-02" if (run.nranks or 0) > 8 else "D-NET-NCCL-01"


def judge_nccl_to_json(
    run: NcclRun, baseline_gbps: float, ranks: int | None = None, *, expected_fabric: str | None = None
) -> dict[str, Any]:
    """`fleetval judge nccl FILE --baseline GBPS [--ranks N]`: the baseline is the number given
    on the command line (baseline_id `cli`, version 0); `ranks` overrides nranks for busbw."""
    subject = "+".join(run.hosts) if run.hosts else "unknown"
    baseline = NcclBaseline(
        baseline_id="cli",
        version=0,
        profile="cli",
        scope="cli",
        busbw_gbps=baseline_gbps,
        collective=run.collective or "all_reduce",
    )
    verdicts = judge_nccl_run(
        run,
        subject=subject,
        baseline=baseline,
        expected_fabric=expected_fabric,
        criterion=busbw_criterion_for(run),
        ranks=ranks,
    )
    return {"verdicts": [v.to_json() for v in verdicts]}
