"""Baseline backfill: re-derive an NCCL busbw baseline from stored measurements and re-judge the
stored raw output of past runs against it, reporting which verdicts change.

Used after hardware changes (new NICs, a firmware or driver generation) and by Airflow backfill
(`baseline_backfill`, one data interval per run). Nothing is overwritten:

- the baseline is a new **candidate** version of (profile, `nccl.busbw`, scope), computed like
  `establish_baseline` from every *usable* measurement whose probe started in [since, until)
  (rows of cut-short, erroring or wrong-transport runs are left out; reference subjects below
  D-NET-NCCL-01's ratio of the others are dropped as outliers); it is promoted only if asked;
- each past run with NCCL probes of that profile and scope in the range is re-judged from its
  stored raw output under a **new** run `<backfill run key>/rejudge/run-<id>` (suite
  `baseline_backfill`); the old run keeps its verdicts and the baseline version they name;
- the report lists every verdict whose result differs: old run/result/baseline version → new.

Re-running the same backfill run key reuses its candidate baseline and upserts the same
re-judgement verdicts (idempotent). Isolation conclusions (`nccl.isolation.*`) are not re-derived:
they came from the order probes were run in; their group probes are re-judged like any other.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from fleetval.nccl.baseline_stats import BaselineError
from fleetval.nccl.baselines import baseline_from_rows, save_candidate
from fleetval.nccl.judge_stored import (
    BaselineRef,
    evaluate_subject,
    group_probes,
    probe_context,
    repeat_from_probe,
)
from fleetval.store import nccl_queries
from fleetval.store.repository import Store

SUITE: Final = "baseline_backfill"


@dataclass(frozen=True, slots=True)
class VerdictChange:
    criterion: str
    subject: str
    old: dict[str, Any]
    new: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BackfillReport:
    profile: str
    scope: str
    since: str
    until: str
    run_id: int
    status: str  # ok | no_measurements
    baseline: dict[str, Any] | None = None
    rejudged_runs: list[dict[str, Any]] = field(default_factory=list)
    changes: list[VerdictChange] = field(default_factory=list)
    unchanged: int = 0
    new_subjects: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _iso(value: dt.datetime) -> str:
    return value.isoformat()


def _against(row: Mapping[str, Any]) -> dict[str, Any]:
    against = row.get("judged_against") or {}
    return {
        "result": row["result"],
        "rule_id": row["rule_id"],
        "baseline_id": row.get("baseline_id") or against.get("baseline_id"),
        "baseline_version": against.get("baseline_version"),
    }


def _candidate(
    store: Store,
    *,
    run_id: int,
    profile: str,
    scope: str,
    rows: Sequence[Mapping[str, Any]],
    since: dt.datetime,
    until: dt.datetime,
) -> dict[str, Any]:
    """This backfill run's candidate baseline: the one recorded on a previous try, else a new one."""
    meta = store.run_meta(run_id)
    recorded = meta.get("baseline_id")
    if recorded is not None:
        row = nccl_queries.baseline_by_id(store, int(recorded))
        if row is not None:
            return row
    stats, excluded = baseline_from_rows(rows)
    if stats.headline_busbw_gbps is None:
        raise BaselineError(f"no rows with size >= {stats.min_size_bytes} B in range: no headline busbw")
    source = {
        "method": "median over runs of each run's mean busbw at sizes >= 1 GiB"
        " (fleetval.nccl.baseline_stats)",
        "derived_by": "baseline_backfill",
        "backfill_run_id": run_id,
        "since": _iso(since),
        "until": _iso(until),
        "run_ids": sorted({int(r["run_id"]) for r in rows}),
        "reference_subjects": sorted({str(r["node"]) for r in rows} - set(excluded)),
        "excluded_outliers": excluded,
        "collective": "all_reduce",
        "measurement_rows": len(rows),
    }
    baseline_id, _version = save_candidate(store, profile=profile, scope=scope, stats=stats, source=source)
    store.update_run_meta(run_id, baseline_id=baseline_id)
    row = nccl_queries.baseline_by_id(store, baseline_id)
    assert row is not None
    return row


def rederive_and_rejudge(
    store: Store,
    *,
    profile: str,
    scope: str,
    since: dt.datetime,
    until: dt.datetime,
    promote: bool,
    run_key: str | None = None,
) -> BackfillReport:
    """Re-derive the (profile, scope) busbw baseline from measurements in [since, until) and
    re-judge the past runs in that range against it (see module doc)."""
    if until <= since:
        raise ValueError(f"empty range: since {since.isoformat()} is not before until {until.isoformat()}")
    key = run_key or f"{SUITE}/{profile}/{scope}/{since:%Y%m%dT%H%M}-{until:%Y%m%dT%H%M}"
    run_id = store.ensure_run(
        key,
        suite=SUITE,
        backend="store",
        meta={
            "profile": profile,
            "scope": scope,
            "since": _iso(since),
            "until": _iso(until),
            "promote": promote,
        },
    )
    rows = nccl_queries.nccl_measurements(
        store, profile=profile, scope=scope, since=since, until=until, exclude_suites=(SUITE,)
    )
    for row in rows:  # one baseline "run" per stored probe, across every past run in range
        row["repeat"] = row["probe_id"]
    if not rows:
        report = BackfillReport(profile, scope, _iso(since), _iso(until), run_id, "no_measurements")
        store.update_run_meta(run_id, report=report.to_json())
        store.finish_run(run_id)
        return report

    baseline_row = _candidate(
        store, run_id=run_id, profile=profile, scope=scope, rows=rows, since=since, until=until
    )
    if promote and baseline_row["status"] == "candidate":
        store.promote_baseline(int(baseline_row["id"]))
        baseline_row = nccl_queries.baseline_by_id(store, int(baseline_row["id"])) or baseline_row
    ref = BaselineRef.from_row(baseline_row)

    index = nccl_queries.nccl_probe_index(
        store, since=since, until=until, profile=profile, scope=scope, exclude_suites=(SUITE,)
    )
    by_run: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for probe in index:
        by_run[int(probe["run_id"])].append(probe)

    rejudged: list[dict[str, Any]] = []
    changes: list[VerdictChange] = []
    unchanged = new_subjects = 0
    for old_run_id, probes in sorted(by_run.items()):
        old_key = str(probes[0]["run_key"])
        new_key = f"{key}/rejudge/run-{old_run_id}"
        new_run_id = store.ensure_run(
            new_key,
            suite=SUITE,
            backend="store",
            meta={
                "rejudges_run_id": old_run_id,
                "rejudges_run_key": old_key,
                "baseline_id": ref.row_id,
                "backfill_run_id": run_id,
            },
        )
        old = {
            (r["criterion"], r["subject"]): r
            for r in store.verdicts(old_run_id)
            if r["criterion"].startswith("D-NET")
        }
        full = nccl_queries.probes_by_ids(store, [int(p["id"]) for p in probes])
        subjects = 0
        for nodes, group in group_probes(full).items():
            _profile, _scope, fabric = probe_context(group[0])
            outcome = evaluate_subject(
                nodes, [repeat_from_probe(p) for p in group], ref=ref, expected_fabric=fabric
            )
            store.add_verdicts(new_run_id, outcome.verdicts, node=nodes[0] if len(nodes) == 1 else None)
            subjects += 1
            for v in outcome.verdicts:
                before = old.get((v.criterion, v.subject))
                if before is None:
                    new_subjects += 1
                    continue
                if before["result"] == v.result.value:
                    unchanged += 1
                    continue
                changes.append(
                    VerdictChange(
                        v.criterion,
                        v.subject,
                        {"run_id": old_run_id, "run_key": old_key, **_against(before)},
                        {
                            "run_id": new_run_id,
                            "run_key": new_key,
                            "result": v.result.value,
                            "rule_id": v.rule_id,
                            "baseline_id": ref.row_id,
                            "baseline_version": ref.baseline.version if ref.baseline else None,
                        },
                    )
                )
        store.finish_run(new_run_id)
        rejudged.append(
            {"old_run_id": old_run_id, "old_run_key": old_key, "new_run_id": new_run_id, "subjects": subjects}
        )

    report = BackfillReport(
        profile,
        scope,
        _iso(since),
        _iso(until),
        run_id,
        "ok",
        baseline={
            "id": ref.row_id,
            "version": int(baseline_row["version"]),
            "value_gbps": float(baseline_row["value"]),
            "status": str(baseline_row["status"]),
            "excluded_outliers": list((baseline_row.get("source") or {}).get("excluded_outliers", [])),
        },
        rejudged_runs=rejudged,
        changes=changes,
        unchanged=unchanged,
        new_subjects=new_subjects,
    )
    store.update_run_meta(run_id, report=report.to_json())
    store.finish_run(run_id)
    return report


def profile_scopes(store: Store, *, since: dt.datetime, until: dt.datetime) -> list[tuple[str, str]]:
    """The (profile, scope) series with NCCL probes in [since, until), outside backfill runs."""
    seen = {
        (str(p["params"].get("profile")), str(p["params"].get("scope")))
        for p in nccl_queries.nccl_probe_index(store, since=since, until=until, exclude_suites=(SUITE,))
        if p["params"].get("profile") and p["params"].get("scope")
    }
    return sorted(seen)
