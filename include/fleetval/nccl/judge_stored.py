"""Post-upgrade NCCL sweep, step 2 — judge: stored raw output → parsed runs → verdicts.

Each repeat of a subject (a node, a pair, an isolation group) is judged against the *promoted*
baseline of (profile, `nccl.busbw`, scope) — scope `intra-<gpus>` or `inter-2x<gpus>` — and the
repeats are combined per criterion (one measured failure fails the subject; otherwise the worst
result); D-NET-NCCL-04 over the complete repeats. No promoted baseline → D-NET-NCCL-01/02 are
`inconclusive`, naming the missing profile/scope. Measurement rows (one per message size, metric
`nccl.busbw`) carry the NCCL version, transports, networks, NCCL_* environment, repeat and scope,
so baselines can be derived and results re-judged from the store alone.

`evaluate_subject` is pure; `judge_stored_nccl` reads the store's raw output and writes
measurements and verdicts (re-judging replaces, never duplicates). An unexpected exception while
parsing or judging one probe (a bug, not a finding) becomes `error` verdicts for that subject,
naming the exception type, and the other subjects are judged as usual. A group of more than two
nodes would be judged against the pair baseline (`inter-2x<gpus>`), which it does not match: busbw
per rank falls with ring size (a healthy 64–128-node ring looks bad against it). Isolation
therefore probes pairs only (`fleetval.nccl.isolation_search`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval import criteria
from fleetval.errors import ParseError
from fleetval.nccl.judge import ACTIONS, NcclBaseline, judge_nccl_repeats, judge_nccl_run
from fleetval.nccl.parser import NcclRun, parse_nccl
from fleetval.nccl.probe import nccl_subject
from fleetval.policy.node_health import TREND_CRITERION
from fleetval.probes import outputs as probe_outputs
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Result, Verdict, worst
from fleetval.store import nccl_queries
from fleetval.store.repository import MeasurementIn, Store

METRIC: Final = nccl_queries.METRIC
UNIT: Final = "GB/s"
SINGLE_RUN_CRITERIA: Final = ("D-NET-NCCL-03", "D-NET-NCCL-TRANSPORT")
# Subjects judged per store round trip: all repeats of a subject are always judged together.
JUDGE_CHUNK: Final = 256


def busbw_criterion(nodes: Sequence[str]) -> str:
    return "D-NET-NCCL-02" if len(nodes) > 1 else "D-NET-NCCL-01"


@dataclass(frozen=True, slots=True)
class BaselineRef:
    """The baseline a subject is judged against (None: no promoted baseline) and its store id."""

    profile: str
    scope: str
    baseline: NcclBaseline | None = None
    row_id: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> BaselineRef:
        source = row.get("source") or {}
        return cls(
            profile=str(row["profile"]),
            scope=str(row["scope"]),
            baseline=NcclBaseline(
                baseline_id=str(row["id"]),
                version=int(row["version"]),
                profile=str(row["profile"]),
                scope=str(row["scope"]),
                busbw_gbps=float(row["value"]),
                collective=str(source.get("collective", "all_reduce")),
            ),
            row_id=int(row["id"]),
        )


BaselineLookup = Callable[[str, str], BaselineRef]


def promoted_lookup(store: Store) -> BaselineLookup:
    """(profile, scope) → the promoted `nccl.busbw` baseline, read once per pair of keys."""
    cache: dict[tuple[str, str], BaselineRef] = {}

    def lookup(profile: str, scope: str) -> BaselineRef:
        key = (profile, scope)
        if key not in cache:
            row = store.promoted_baseline(profile=profile, metric=METRIC, scope=scope)
            cache[key] = BaselineRef.from_row(row) if row else BaselineRef(profile, scope)
        return cache[key]

    return lookup


@dataclass(frozen=True, slots=True)
class Repeat:
    """One stored repeat: the parsed run, or why there is none (harness error, unparseable output,
    or an unexpected exception in our own parser: `internal_error`)."""

    probe_key: str
    probe_id: int | None
    repeat: int
    run: NcclRun | None
    harness_error: str | None = None
    parse_error: str | None = None
    internal_error: str | None = None


def repeat_from_probe(probe: Mapping[str, Any]) -> Repeat:
    spec = probe.get("spec") or {}
    params = spec.get("params") or {}
    harness = spec.get("harness_error")
    run: NcclRun | None = None
    parse_error: str | None = None
    internal_error: str | None = None
    if not harness:
        try:
            run = parse_nccl(str(probe.get("raw") or ""))
        except ParseError as exc:
            parse_error = str(exc)
        except Exception as exc:  # a parser bug: this probe gets error verdicts, the wave goes on
            internal_error = _describe(exc)
    return Repeat(
        probe_key=str(probe["probe_key"]),
        probe_id=int(probe["id"]) if probe.get("id") is not None else None,
        repeat=int(params.get("repeat", 0)),
        run=run,
        harness_error=str(harness) if harness else None,
        parse_error=parse_error,
        internal_error=internal_error,
    )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


@dataclass(frozen=True, slots=True)
class SubjectOutcome:
    subject: str
    nodes: tuple[str, ...]
    profile: str
    scope: str
    result: Result
    failed: tuple[str, ...]
    verdicts: tuple[Verdict, ...] = ()
    measurements: dict[str, list[MeasurementIn]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "nodes": list(self.nodes),
            "profile": self.profile,
            "scope": self.scope,
            "result": self.result.value,
            "failed": list(self.failed),
        }


def _internal_error_verdict(criterion: str, subject: str, error: str, probe_keys: Sequence[str]) -> Verdict:
    return Verdict(
        criterion,
        subject,
        Result.ERROR,
        ACTIONS[Result.ERROR],
        "nccl.internal_error",
        f"judging this probe raised {error}: a fleetval bug, the probe's output is kept for a rerun",
        {"error": error, "exception_type": error.split(":", 1)[0], "probe_keys": list(probe_keys)},
        {"criteria_catalog": criteria.CATALOG_VERSION},
    )


def _no_run_verdict(criterion: str, subject: str, rep: Repeat) -> Verdict:
    if rep.internal_error:
        return _internal_error_verdict(criterion, subject, rep.internal_error, [rep.probe_key])
    if rep.harness_error:
        return Verdict(
            criterion,
            subject,
            Result.ERROR,
            ACTIONS[Result.ERROR],
            "harness.probe_failed",
            "the probe did not run to completion",
            {"error": rep.harness_error, "probe_key": rep.probe_key},
            {"criteria_catalog": criteria.CATALOG_VERSION},
        )
    return Verdict(
        criterion,
        subject,
        Result.INCONCLUSIVE,
        ACTIONS[Result.INCONCLUSIVE],
        "nccl.unparseable",
        f"nothing recognisable in the output: {rep.parse_error}",
        {"probe_key": rep.probe_key},
        {"criteria_catalog": criteria.CATALOG_VERSION},
    )


def _name_baseline(v: Verdict, ref: BaselineRef) -> Verdict:
    """Busbw verdicts carry the baseline's store id (an int, so the row's FK is set), or say
    which profile/scope has no promoted baseline."""
    if v.rule_id == "nccl.busbw.no_baseline":
        return dataclasses.replace(
            v,
            reason=(
                f"no promoted {METRIC} baseline for profile {ref.profile!r} scope {ref.scope!r}: "
                "establish one from reference nodes and promote it"
            ),
            judged_against={**v.judged_against, "baseline": None, "profile": ref.profile, "scope": ref.scope},
        )
    if ref.row_id is not None and "baseline_id" in v.judged_against:
        return dataclasses.replace(v, judged_against={**v.judged_against, "baseline_id": ref.row_id})
    return v


def _combine(criterion: str, subject: str, per_repeat: Sequence[tuple[Repeat, Verdict]]) -> Verdict:
    """One verdict per criterion and subject: a measured failure in any repeat fails; otherwise
    the worst result. The representative repeat's rule, reason and baseline are kept."""
    results = [v.result for _, v in per_repeat]
    combined = Result.FAIL if Result.FAIL in results else worst(results)
    rep = next(v for _, v in per_repeat if v.result is combined)
    count = results.count(combined)
    reason = (
        rep.reason if len(results) == 1 else f"{count}/{len(results)} repeats {combined.value}: {rep.reason}"
    )
    evidence = {
        **rep.evidence,
        "repeats": [
            {
                "repeat": r.repeat,
                "probe_key": r.probe_key,
                "result": v.result.value,
                "rule_id": v.rule_id,
                **{k: v.evidence[k] for k in ("busbw_gbps", "ratio") if k in v.evidence},
            }
            for r, v in per_repeat
        ],
    }
    return Verdict(
        criterion, subject, combined, rep.action, rep.rule_id, reason, evidence, rep.judged_against
    )


def measurement_rows(
    run: NcclRun, *, subject: str, repeat: int, profile: str, scope: str, usable: bool
) -> list[MeasurementIn]:
    """One `nccl.busbw` row per message size, with what must be recorded with every result."""
    common = {
        "repeat": repeat,
        "profile": profile,
        "scope": scope,
        "collective": run.collective,
        "nranks": run.nranks,
        "nnodes": run.nnodes,
        "nccl_version": run.nccl_version,
        "transports": list(run.transports),
        "networks": list(run.networks),
        "nccl_env": dict(run.nccl_env),
        "in_network_reduction": run.in_network_reduction,
        "complete": run.complete,
        "usable": usable,
    }
    return [
        MeasurementIn(
            node=subject,
            metric=METRIC,
            value=row.busbw_oop,
            unit=UNIT,
            attrs={
                **common,
                "size": row.size,
                "algbw_gbps": row.algbw_oop,
                "time_us": row.time_oop,
                "busbw_ip_gbps": row.busbw_ip,
            },
        )
        for row in run.rows
        if row.busbw_oop is not None
    ]


def evaluate_subject(
    nodes: Sequence[str],
    repeats: Sequence[Repeat],
    *,
    ref: BaselineRef,
    expected_fabric: str | None,
) -> SubjectOutcome:
    """All NCCL verdicts of one node or group over its repeats (pure; see module doc)."""
    subject = nccl_subject(nodes)
    reps = sorted(repeats, key=lambda r: r.repeat)
    busbw_crit = busbw_criterion(nodes)
    per_crit: dict[str, list[tuple[Repeat, Verdict]]] = defaultdict(list)
    measurements: dict[str, list[MeasurementIn]] = {}
    for rep in reps:
        if rep.run is None:
            for crit in (busbw_crit, *SINGLE_RUN_CRITERIA):
                per_crit[crit].append((rep, _no_run_verdict(crit, subject, rep)))
            measurements[rep.probe_key] = []
            continue
        try:
            verdicts = [
                _name_baseline(v, ref)
                for v in judge_nccl_run(
                    rep.run,
                    subject=subject,
                    baseline=ref.baseline,
                    expected_fabric=expected_fabric,
                    criterion=busbw_crit,
                )
            ]
            usable = rep.run.complete and all(
                v.result is Result.PASS for v in verdicts if v.criterion in SINGLE_RUN_CRITERIA
            )
            rows = measurement_rows(
                rep.run,
                subject=subject,
                repeat=rep.repeat,
                profile=ref.profile,
                scope=ref.scope,
                usable=usable,
            )
        except Exception as exc:  # a judge bug: this probe gets error verdicts, the others are judged
            error = _describe(exc)
            verdicts = [
                _internal_error_verdict(c, subject, error, [rep.probe_key])
                for c in (busbw_crit, *SINGLE_RUN_CRITERIA)
            ]
            rows = []
        for v in verdicts:
            per_crit[v.criterion].append((rep, v))
        measurements[rep.probe_key] = rows
    combined = [_combine(c, subject, per_crit[c]) for c in (busbw_crit, *SINGLE_RUN_CRITERIA) if per_crit[c]]
    complete = [r.run for r in reps if r.run is not None and r.run.complete]
    try:
        stability = judge_nccl_repeats(complete, subject=subject)
    except Exception as exc:  # a judge bug: an error verdict, not an abort
        stability = _internal_error_verdict(
            "D-NET-NCCL-04", subject, _describe(exc), [r.probe_key for r in reps]
        )
    stability = dataclasses.replace(
        stability,
        evidence={**stability.evidence, "repeats_run": len(reps), "probe_keys": [r.probe_key for r in reps]},
    )
    if len(nodes) > 2:  # a group's subject may be a digest: name its members
        combined = [dataclasses.replace(v, evidence={**v.evidence, "nodes": list(nodes)}) for v in combined]
    final = (*combined, stability)
    results = [v.result for v in final]
    return SubjectOutcome(
        subject=subject,
        nodes=tuple(nodes),
        profile=ref.profile,
        scope=ref.scope,
        result=Result.FAIL if Result.FAIL in results else worst(results),
        failed=tuple(v.criterion for v in final if v.result is Result.FAIL),
        verdicts=final,
        measurements=measurements,
    )


def failed_evaluation(
    nodes: Sequence[str], repeats: Sequence[Repeat], *, ref: BaselineRef, error: str
) -> SubjectOutcome:
    """The outcome of a subject whose evaluation raised: `error` on every criterion, naming it."""
    subject = nccl_subject(nodes)
    keys = [r.probe_key for r in repeats]
    verdicts = tuple(
        _internal_error_verdict(c, subject, error, keys)
        for c in (busbw_criterion(nodes), *SINGLE_RUN_CRITERIA, "D-NET-NCCL-04")
    )
    return SubjectOutcome(
        subject=subject,
        nodes=tuple(nodes),
        profile=ref.profile,
        scope=ref.scope,
        result=Result.ERROR,
        failed=(),
        verdicts=verdicts,
        measurements={k: [] for k in keys},
    )


def group_probes(probes: Iterable[Mapping[str, Any]]) -> dict[tuple[str, ...], list[Mapping[str, Any]]]:
    """Stored probes by their node group (the repeats of one subject)."""
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for p in probes:
        params = (p.get("spec") or {}).get("params") or {}
        nodes = tuple(params.get("nodes") or p["nodes"])
        groups[nodes].append(p)
    return groups


def probe_context(probe: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """(profile, scope, expected fabric) recorded in a stored probe's spec."""
    params = (probe.get("spec") or {}).get("params") or {}
    return str(params.get("profile", "")), str(params.get("scope", "")), params.get("fabric")


def judge_stored_nccl(
    store: Store, run_id: int, probe_keys: Sequence[str], *, lookup: BaselineLookup
) -> list[SubjectOutcome]:
    """Parse and judge stored NCCL probes of a run; store measurements and one verdict per
    criterion and subject. Re-judging the same probes replaces, never duplicates."""
    outcomes: list[SubjectOutcome] = []
    attach: list[tuple[str, Sequence[MeasurementIn], Sequence[Verdict], str | None]] = []
    for nodes, probes in group_probes(store.probes(run_id, probe_keys)).items():
        profile, scope, fabric = probe_context(probes[0])
        ref = lookup(profile, scope)
        repeats = [repeat_from_probe(p) for p in probes]
        try:
            outcome = evaluate_subject(nodes, repeats, ref=ref, expected_fabric=fabric)
        except Exception as exc:  # one subject's bug never aborts the others
            outcome = failed_evaluation(nodes, repeats, ref=ref, error=_describe(exc))
        node = nodes[0] if len(nodes) == 1 else None
        attach.extend((key, rows, (), node) for key, rows in outcome.measurements.items())
        outcomes.append(outcome)
    store.attach_results(run_id, attach)
    for outcome in outcomes:
        store.add_verdicts(
            run_id, outcome.verdicts, node=outcome.nodes[0] if len(outcome.nodes) == 1 else None
        )
    return outcomes


def judge_sweep(
    store: Store, run_id: int, specs: Sequence[ProbeSpec], *, lookup: BaselineLookup
) -> list[SubjectOutcome]:
    """Judge every probe of a sweep: a probe that left nothing in the store (its task failed before
    the pod or MPIJob completed, or its wave never ran) is stored as a harness error first, so
    its subject gets `error` verdicts, never a pass. Judged a chunk of subjects at a time."""
    probe_outputs.record_missing_probes(store, run_id, specs)
    by_subject: dict[str, list[str]] = defaultdict(list)
    for spec in specs:
        by_subject[spec.node].append(spec.probe_key)
    subjects = list(by_subject)
    outcomes: list[SubjectOutcome] = []
    for start in range(0, len(subjects), JUDGE_CHUNK):
        keys = [k for s in subjects[start : start + JUDGE_CHUNK] for k in by_subject[s]]
        outcomes.extend(judge_stored_nccl(store, run_id, keys, lookup=lookup))
    return outcomes


def summarize(outcomes: Sequence[SubjectOutcome]) -> dict[str, Any]:
    return {
        "subjects": len(outcomes),
        "results": dict(Counter(o.result.value for o in outcomes)),
        "failed": {o.subject: list(o.failed) for o in outcomes if o.failed},
    }


def subject_results(rows: Iterable[Mapping[str, Any]]) -> dict[str, Result]:
    """Per subject of a run's verdict rows: fail if any verdict failed, else the worst result. The
    trend verdicts (D-NET-NCCL-TREND-01) are left out: they are recorded, they never gate."""
    record_only = set(TREND_CRITERION.values())
    by_subject: dict[str, list[Result]] = defaultdict(list)
    for r in rows:
        if r["criterion"] not in record_only:
            by_subject[str(r["subject"])].append(Result(r["result"]))
    return {s: Result.FAIL if Result.FAIL in results else worst(results) for s, results in by_subject.items()}
