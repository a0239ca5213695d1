"""NCCL busbw baselines from our own measurements, never from spec sheets.

`establish_baseline` computes one from a run's stored measurements on reference nodes (pandas,
`fleetval.nccl.baseline_stats`) and stores it as a *candidate*; promotion is a separate, explicit step
(`Store.promote_baseline`). Onboarding runs the sweep on known-good reference nodes, then
establishes and promotes a baseline per (profile, scope) from that run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fleetval.nccl.baseline_stats import REQUIRED_COLUMNS, BaselineError, BaselineStats, compute_baseline
from fleetval.nccl.judge_stored import METRIC, UNIT
from fleetval.store import nccl_queries
from fleetval.store.repository import Store


@dataclass(frozen=True, slots=True)
class EstablishedBaseline:
    baseline_id: int
    version: int
    value: float
    stats: dict[str, Any]
    source: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def baseline_from_rows(
    rows: Sequence[Mapping[str, Any]], *, exclude_outliers: bool = True
) -> tuple[Any, list[str]]:
    """compute_baseline over measurement rows, dropping reference subjects that are outliers
    (below D-NET-NCCL-01's min_ratio of the others: a sick reference node must not set the bar)."""
    frame = pd.DataFrame.from_records(
        [{c: r[c] for c in REQUIRED_COLUMNS} for r in rows], columns=list(REQUIRED_COLUMNS)
    )
    stats = compute_baseline(frame)
    excluded: list[str] = []
    if exclude_outliers and stats.outlier_nodes and len(stats.outlier_nodes) < len(stats.per_node):
        excluded = list(stats.outlier_nodes)
        stats = compute_baseline(frame.loc[~frame["node"].isin(excluded)])
    return stats, excluded


def establish_baseline(
    store: Store,
    run_id: int,
    profile: str,
    scope: str,
    *,
    nodes: Sequence[str] | None = None,
    collective: str = "all_reduce",
) -> EstablishedBaseline:
    """A candidate `nccl.busbw` baseline for (profile, scope) from the usable measurements this
    run took on its reference nodes (all probed subjects, or `nodes`). Not promoted."""
    rows = nccl_queries.nccl_measurements(store, profile=profile, scope=scope, run_id=run_id, nodes=nodes)
    if not rows:
        raise BaselineError(
            f"run {run_id} has no usable {METRIC} measurements for profile {profile!r} scope {scope!r}"
        )
    stats, excluded = baseline_from_rows(rows)
    if stats.headline_busbw_gbps is None:
        raise BaselineError(f"no rows with size >= {stats.min_size_bytes} B: no headline busbw")
    source = {
        "method": "median over runs of each run's mean busbw at sizes >= 1 GiB"
        " (fleetval.nccl.baseline_stats)",
        "run_ids": [run_id],
        "reference_subjects": sorted({str(r["node"]) for r in rows} - set(excluded)),
        "excluded_outliers": excluded,
        "collective": collective,
        "measurement_rows": len(rows),
    }
    baseline_id, version = save_candidate(store, profile=profile, scope=scope, stats=stats, source=source)
    return EstablishedBaseline(baseline_id, version, stats.headline_busbw_gbps, stats.to_json(), source)


def save_candidate(
    store: Store, *, profile: str, scope: str, stats: BaselineStats, source: dict[str, Any]
) -> tuple[int, int]:
    """Store `stats`' headline busbw as the next candidate version of (profile, scope)."""
    if stats.headline_busbw_gbps is None:
        raise BaselineError(f"no rows with size >= {stats.min_size_bytes} B: no headline busbw")
    return store.add_baseline_candidate(
        profile=profile,
        metric=METRIC,
        scope=scope,
        value=stats.headline_busbw_gbps,
        unit=UNIT,
        stats=stats.to_json(),
        source=source,
    )
