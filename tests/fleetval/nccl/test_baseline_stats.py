"""Baseline statistics (pandas) over measurement rows: hand-checkable frames, the real a3mega table,
and simulator runs judged against the baseline they produced."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest

from fleetval.nccl.baseline_stats import (
    BaselineError,
    compute_baseline,
    compute_baseline_from_runs,
    rows_from_run,
)
from fleetval.nccl.judge import headline_busbw, judge_busbw
from fleetval.nccl.parser import parse_nccl
from fleetval.nccl.simulated import render_nccl_tests
from fleetval.records import Result

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
A3MEGA = FIXTURES / "all_reduce_perf-2node-h100-a3mega-16rank-mpirun-full.txt"
GIB = 1 << 30


def frame(values: dict[tuple[str, int], dict[int, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"node": node, "repeat": rep, "size": size, "busbw_gbps": bw}
            for (node, rep), sizes in values.items()
            for size, bw in sizes.items()
        ]
    )


# Two nodes x three repeats; sizes 1 MiB (excluded from the headline), 1 GiB, 2 GiB.
HAND = {
    ("n1", 0): {1 << 20: 10.0, GIB: 400.0, 2 * GIB: 420.0},
    ("n1", 1): {1 << 20: 11.0, GIB: 404.0, 2 * GIB: 424.0},
    ("n1", 2): {1 << 20: 12.0, GIB: 396.0, 2 * GIB: 416.0},
    ("n2", 0): {1 << 20: 10.5, GIB: 390.0, 2 * GIB: 410.0},
    ("n2", 1): {1 << 20: 10.0, GIB: 394.0, 2 * GIB: 414.0},
    ("n2", 2): {1 << 20: 9.5, GIB: 386.0, 2 * GIB: 406.0},
}


def test_per_size_median_and_spread() -> None:
    stats = compute_baseline(frame(HAND))
    one_gib = stats.size(GIB)
    assert one_gib is not None
    values = [400.0, 404.0, 396.0, 390.0, 394.0, 386.0]
    assert (one_gib.samples, one_gib.nodes, one_gib.runs) == (6, 2, 6)
    assert one_gib.median_gbps == pytest.approx(statistics.median(values))
    assert one_gib.mean_gbps == pytest.approx(statistics.fmean(values))
    assert one_gib.std_gbps == pytest.approx(statistics.stdev(values))
    assert one_gib.cv == pytest.approx(statistics.stdev(values) / statistics.fmean(values))
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    assert one_gib.q1_gbps == pytest.approx(q1)
    assert one_gib.q3_gbps == pytest.approx(q3)
    assert one_gib.iqr_gbps == pytest.approx(q3 - q1)
    assert (one_gib.min_gbps, one_gib.max_gbps) == (386.0, 404.0)
    assert [s.size for s in stats.sizes] == [1 << 20, GIB, 2 * GIB]


def test_headline_is_median_of_per_run_means_at_one_gib_and_up() -> None:
    stats = compute_baseline(frame(HAND))
    per_run = [statistics.fmean([v[GIB], v[2 * GIB]]) for v in HAND.values()]
    assert stats.headline_busbw_gbps == pytest.approx(statistics.median(per_run))
    assert stats.headline_runs == 6
    assert stats.headline_nodes == 2
    assert stats.headline_std_gbps == pytest.approx(statistics.stdev(per_run))
    assert stats.headline_cv == pytest.approx(statistics.stdev(per_run) / statistics.fmean(per_run))
    assert [n.node for n in stats.per_node] == ["n1", "n2"]
    assert stats.outlier_nodes == ()
    json.dumps(stats.to_json())


def test_a_slow_reference_node_is_flagged() -> None:
    values = dict(HAND)
    values[("n3", 0)] = {GIB: 300.0, 2 * GIB: 310.0}
    values[("n3", 1)] = {GIB: 302.0, 2 * GIB: 312.0}
    stats = compute_baseline(frame(values))
    assert stats.outlier_nodes == ("n3",)
    n3 = next(n for n in stats.per_node if n.node == "n3")
    assert n3.ratio < 0.9


def test_unusable_rows_are_dropped_and_counted() -> None:
    df = frame(HAND)
    junk = pd.DataFrame(
        [
            {"node": "n1", "repeat": 3, "size": GIB, "busbw_gbps": "n/a"},
            {"node": "n1", "repeat": 3, "size": GIB, "busbw_gbps": -1.0},
            {"node": None, "repeat": 3, "size": GIB, "busbw_gbps": 999.0},
            {"node": "n1", "repeat": 3, "size": "big", "busbw_gbps": 999.0},
        ]
    )
    stats = compute_baseline(pd.concat([df, junk], ignore_index=True))
    assert stats.rows_dropped == 4
    assert stats.rows_used == len(df)
    assert stats.headline_busbw_gbps == compute_baseline(df).headline_busbw_gbps


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (pd.DataFrame(columns=["node", "repeat", "size", "busbw_gbps"]), "no measurement rows"),
        (pd.DataFrame([{"node": "n1", "repeat": 0, "size": GIB}]), "busbw_gbps"),
        (pd.DataFrame([{"node": "n1", "repeat": 0, "size": GIB, "busbw_gbps": None}]), "unusable"),
    ],
    ids=["empty", "missing-column", "all-invalid"],
)
def test_clear_errors(rows: pd.DataFrame, message: str) -> None:
    with pytest.raises(BaselineError, match=message):
        compute_baseline(rows)


def test_not_a_dataframe() -> None:
    with pytest.raises(BaselineError, match="DataFrame"):
        compute_baseline([{"node": "n1"}])  # type: ignore[arg-type]


def test_without_large_sizes_there_is_no_headline_to_promote() -> None:
    stats = compute_baseline(frame({("n1", 0): {1 << 20: 10.0}}))
    assert stats.headline_busbw_gbps is None
    with pytest.raises(BaselineError, match="no headline"):
        stats.to_baseline(baseline_id="b", version=1, profile="p", scope="s")


def test_real_table_baseline_equals_the_judge_statistic() -> None:
    run = parse_nccl(A3MEGA.read_text(encoding="utf-8"))
    rows = rows_from_run(run, node="ztan-mig-235z+ztan-mig-gq73", repeat=0)
    assert len(rows) == 31
    stats = compute_baseline(pd.DataFrame(rows))
    assert stats.headline_busbw_gbps == pytest.approx(headline_busbw(run))
    base = stats.to_baseline(baseline_id="a3mega-pair", version=1, profile="a3-mega", scope="inter-pair")
    v = judge_busbw(run, subject="pair", baseline=base, criterion="D-NET-NCCL-02")
    assert v.result is Result.PASS
    assert v.evidence["ratio"] == pytest.approx(1.0)


def _sim(node: str, seed: int, busbw: float) -> str:
    return render_nccl_tests(
        nranks=8, nnodes=1, busbw_gbps=busbw, seed=seed, transport="NVLink", hosts=[node]
    )


def test_baseline_from_simulated_reference_nodes_judges_later_runs() -> None:
    truth = 480.0
    refs = [
        (f"r01-n0{i}", rep, parse_nccl(_sim(f"r01-n0{i}", 100 * i + rep, truth)))
        for i in range(1, 4)
        for rep in range(3)
    ]
    stats = compute_baseline_from_runs(refs)
    assert stats.headline_runs == 9
    assert stats.headline_nodes == 3
    assert stats.headline_busbw_gbps == pytest.approx(truth, rel=0.02)
    assert stats.headline_cv is not None and stats.headline_cv < 0.03
    small = stats.size(8)
    assert small is not None and small.median_gbps < 0.01  # latency-bound sizes stay near 0 GB/s
    base = stats.to_baseline(baseline_id="h100-intra-8", version=1, profile="h100", scope="intra-8gpu")
    healthy = parse_nccl(_sim("r02-n01", 7, truth))
    degraded = parse_nccl(_sim("r02-n02", 8, truth * 0.8))  # nccl.nvlink_degraded factor 0.8
    assert judge_busbw(healthy, subject="r02-n01", baseline=base).result is Result.PASS
    assert judge_busbw(degraded, subject="r02-n02", baseline=base).result is Result.FAIL


def test_from_runs_with_nothing_is_an_error() -> None:
    with pytest.raises(BaselineError, match="no measurement rows"):
        compute_baseline_from_runs([])
