"""NCCL busbw baselines computed with pandas from stored measurement rows.

A measurement row is one message size of one nccl-tests run on one reference node (or pair)::

    node      repeat  size        busbw_gbps  ...
    r01-n01   0       1073741824  436.95
    r01-n01   0       2147483648  443.72
    r01-n01   0       4294967296  465.87

(busbw values from the real 2-node p5 table, tests/fixtures/nccl/
all_reduce_perf-2node-p5-16gpu-efa-slurm-awsome.txt; node names illustrative). `rows_from_run`
turns a parsed run into such rows.

Statistics:
- per size: samples, nodes, runs, median, mean, sample std, CV, quartiles and IQR, min, max —
  across repeats *and* nodes, so the spread shows both noise and node-to-node variation;
- headline: each run's mean out-of-place busbw over sizes ≥ 1 GiB (the very statistic the judge
  applies to a later run, `fleetval.nccl.judge.headline_busbw`), then the median across runs
  (robust to one bad repeat) with its std, CV and IQR;
- per node: the median of its runs' headlines and its ratio to the overall headline; a reference
  node below D-NET-NCCL-01's `min_ratio` of the others is listed in `outlier_nodes` — a baseline
  should not be promoted from a sick reference node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

import pandas as pd

from fleetval import criteria
from fleetval.errors import FleetvalError
from fleetval.nccl.judge import NcclBaseline
from fleetval.nccl.parser import NcclRun

REQUIRED_COLUMNS: Final = ("node", "repeat", "size", "busbw_gbps")


class BaselineError(FleetvalError, ValueError):
    """Measurements from which no baseline can be computed (empty, wrong columns, no usable rows)."""


@dataclass(frozen=True, slots=True)
class SizeStats:
    size: int
    samples: int
    nodes: int
    runs: int
    median_gbps: float
    mean_gbps: float
    std_gbps: float | None
    cv: float | None
    q1_gbps: float
    q3_gbps: float
    iqr_gbps: float
    min_gbps: float
    max_gbps: float

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "samples": self.samples,
            "nodes": self.nodes,
            "runs": self.runs,
            "median_gbps": self.median_gbps,
            "mean_gbps": self.mean_gbps,
            "std_gbps": self.std_gbps,
            "cv": self.cv,
            "q1_gbps": self.q1_gbps,
            "q3_gbps": self.q3_gbps,
            "iqr_gbps": self.iqr_gbps,
            "min_gbps": self.min_gbps,
            "max_gbps": self.max_gbps,
        }


@dataclass(frozen=True, slots=True)
class NodeStats:
    node: str
    runs: int
    headline_gbps: float
    ratio: float

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "runs": self.runs,
            "headline_gbps": self.headline_gbps,
            "ratio": self.ratio,
        }


@dataclass(frozen=True, slots=True)
class BaselineStats:
    sizes: tuple[SizeStats, ...]
    headline_busbw_gbps: float | None
    headline_runs: int
    headline_nodes: int
    headline_std_gbps: float | None
    headline_cv: float | None
    headline_iqr_gbps: float | None
    per_node: tuple[NodeStats, ...]
    outlier_nodes: tuple[str, ...]
    min_size_bytes: int
    rows_used: int
    rows_dropped: int

    def size(self, size: int) -> SizeStats | None:
        return next((s for s in self.sizes if s.size == size), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "sizes": [s.to_json() for s in self.sizes],
            "headline": {
                "busbw_gbps": self.headline_busbw_gbps,
                "statistic": "median over runs of each run's mean busbw at sizes >= min_size_bytes",
                "min_size_bytes": self.min_size_bytes,
                "runs": self.headline_runs,
                "nodes": self.headline_nodes,
                "std_gbps": self.headline_std_gbps,
                "cv": self.headline_cv,
                "iqr_gbps": self.headline_iqr_gbps,
            },
            "per_node": [n.to_json() for n in self.per_node],
            "outlier_nodes": list(self.outlier_nodes),
            "rows_used": self.rows_used,
            "rows_dropped": self.rows_dropped,
        }

    def to_baseline(
        self, *, baseline_id: str, version: int, profile: str, scope: str, collective: str = "all_reduce"
    ) -> NcclBaseline:
        """The judge's view of these statistics; refuses when there is no headline number."""
        if self.headline_busbw_gbps is None:
            raise BaselineError(f"no rows with size >= {self.min_size_bytes} B: no headline busbw to promote")
        return NcclBaseline(
            baseline_id=baseline_id,
            version=version,
            profile=profile,
            scope=scope,
            busbw_gbps=self.headline_busbw_gbps,
            collective=collective,
        )


def rows_from_run(run: NcclRun, *, node: str, repeat: int) -> list[dict[str, Any]]:
    """Measurement rows (one per size with an out-of-place busbw) for storing and for baselines."""
    return [
        {
            "node": node,
            "repeat": repeat,
            "size": row.size,
            "busbw_gbps": row.busbw_oop,
            "algbw_gbps": row.algbw_oop,
            "time_us": row.time_oop,
            "busbw_ip_gbps": row.busbw_ip,
            "collective": run.collective,
            "nranks": run.nranks,
            "nccl_version": run.nccl_version,
        }
        for row in run.rows
        if row.busbw_oop is not None
    ]


def _opt(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _clean(rows: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    if not isinstance(rows, pd.DataFrame):
        raise BaselineError(f"expected a pandas DataFrame, got {type(rows).__name__}")
    missing = [c for c in REQUIRED_COLUMNS if c not in rows.columns]
    if missing:
        raise BaselineError(
            f"measurement rows lack column(s) {', '.join(missing)} (need {', '.join(REQUIRED_COLUMNS)})"
        )
    if rows.empty:
        raise BaselineError("no measurement rows: a baseline needs at least one measured run")
    df = pd.DataFrame(
        {
            "node": rows["node"],
            "repeat": rows["repeat"],
            "size": pd.to_numeric(rows["size"], errors="coerce"),
            "busbw_gbps": pd.to_numeric(rows["busbw_gbps"], errors="coerce"),
        }
    )
    # Unreadable, missing, negative or infinite numbers are measurement garbage, not zeros.
    ok = (
        df["node"].notna()
        & df["repeat"].notna()
        & df["size"].notna()
        & (df["size"] >= 0)
        & df["busbw_gbps"].notna()
        & (df["busbw_gbps"] >= 0)
        & (df["busbw_gbps"] != float("inf"))
    )
    dropped = int((~ok).sum())
    df = df.loc[ok].copy()
    if df.empty:
        raise BaselineError(f"all {len(rows)} measurement rows were unusable (missing or invalid size/busbw)")
    df["node"] = df["node"].astype(str)
    df["size"] = df["size"].astype("int64")
    df["busbw_gbps"] = df["busbw_gbps"].astype("float64")
    return df, dropped


def compute_baseline(rows: pd.DataFrame, *, min_size_bytes: int | None = None) -> BaselineStats:
    """Per-size and headline busbw statistics over measurement rows (see module doc)."""
    df, dropped = _clean(rows)
    min_size = (
        min_size_bytes
        if min_size_bytes is not None
        else int(criteria.get("D-NET-NCCL-01").parameters["min_size_bytes"])
    )
    min_ratio = float(criteria.get("D-NET-NCCL-01").parameters["min_ratio"])

    sizes: list[SizeStats] = []
    for size, group in df.groupby("size", sort=True):
        bw = group["busbw_gbps"]
        mean = float(bw.mean())
        std = _opt(float(bw.std(ddof=1))) if len(bw) > 1 else None
        q1, q3 = float(bw.quantile(0.25)), float(bw.quantile(0.75))
        sizes.append(
            SizeStats(
                size=int(cast(int, size)),
                samples=len(bw),
                nodes=int(group["node"].nunique()),
                runs=len(group.groupby(["node", "repeat"], sort=False)),
                median_gbps=float(bw.median()),
                mean_gbps=mean,
                std_gbps=std,
                cv=(std / mean) if std is not None and mean > 0 else None,
                q1_gbps=q1,
                q3_gbps=q3,
                iqr_gbps=q3 - q1,
                min_gbps=float(bw.min()),
                max_gbps=float(bw.max()),
            )
        )

    large = df.loc[df["size"] >= min_size]
    headline: float | None = None
    h_std: float | None = None
    h_cv: float | None = None
    h_iqr: float | None = None
    per_node: list[NodeStats] = []
    outliers: list[str] = []
    run_count = node_count = 0
    if not large.empty:
        per_run = large.groupby(["node", "repeat"], sort=True)["busbw_gbps"].mean().reset_index()
        run_bw = per_run["busbw_gbps"]
        run_count, node_count = len(per_run), int(per_run["node"].nunique())
        headline = float(run_bw.median())
        if run_count > 1:
            h_std = _opt(float(run_bw.std(ddof=1)))
            run_mean = float(run_bw.mean())
            h_cv = h_std / run_mean if h_std is not None and run_mean > 0 else None
            h_iqr = float(run_bw.quantile(0.75) - run_bw.quantile(0.25))
        for node, group in per_run.groupby("node", sort=True):
            node_bw = float(group["busbw_gbps"].median())
            ratio = node_bw / headline if headline > 0 else math.nan
            per_node.append(NodeStats(node=str(node), runs=len(group), headline_gbps=node_bw, ratio=ratio))
            if headline > 0 and ratio < min_ratio:
                outliers.append(str(node))

    return BaselineStats(
        sizes=tuple(sizes),
        headline_busbw_gbps=headline,
        headline_runs=run_count,
        headline_nodes=node_count,
        headline_std_gbps=h_std,
        headline_cv=h_cv,
        headline_iqr_gbps=h_iqr,
        per_node=tuple(per_node),
        outlier_nodes=tuple(outliers),
        min_size_bytes=min_size,
        rows_used=len(df),
        rows_dropped=dropped,
    )


def compute_baseline_from_runs(
    runs: Sequence[tuple[str, int, NcclRun]], *, min_size_bytes: int | None = None
) -> BaselineStats:
    """Convenience: (node, repeat, run) triples → rows → `compute_baseline`."""
    records = [r for node, repeat, run in runs for r in rows_from_run(run, node=node, repeat=repeat)]
    frame = pd.DataFrame.from_records(records, columns=[*REQUIRED_COLUMNS, "algbw_gbps"])
    return compute_baseline(frame, min_size_bytes=min_size_bytes)
