"""Simulator nccl-tests output: byte format against the real fixtures, and render → parse → judge."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

from fleetval.nccl.judge import NcclBaseline, headline_busbw, judge_nccl_repeats, judge_nccl_run
from fleetval.nccl.parser import busbw_factor, parse_nccl
from fleetval.nccl.simulated import render_nccl_tests
from fleetval.records import Result

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
GB10 = FIXTURES / "all_reduce_perf-2node-gb10-nccl-tests-2.20.0-header-dgx-spark-pr103-excerpt.txt"
GIB = 1 << 30
PAIR = ["r01-n01", "r01-n02"]
INTER_TRUTH = 370.0
INTRA_TRUTH = 480.0


def pair(**kw: object) -> str:
    args: dict[str, object] = {
        "nranks": 16,
        "nnodes": 2,
        "busbw_gbps": INTER_TRUTH,
        "seed": 1,
        "transport": "IB",
        "hosts": PAIR,
    }
    args.update(kw)
    return render_nccl_tests(**args)  # type: ignore[arg-type]


def node(**kw: object) -> str:
    args: dict[str, object] = {
        "nranks": 8,
        "nnodes": 1,
        "busbw_gbps": INTRA_TRUTH,
        "seed": 1,
        "transport": "NVLink",
        "hosts": ["r01-n01"],
    }
    args.update(kw)
    return render_nccl_tests(**args)  # type: ignore[arg-type]


def inter_baseline() -> NcclBaseline:
    return NcclBaseline(
        baseline_id="h100-inter-pair",
        version=1,
        profile="h100-sxm-ndr",
        scope="inter-pair",
        busbw_gbps=INTER_TRUTH,
    )


def intra_baseline() -> NcclBaseline:
    return NcclBaseline(
        baseline_id="h100-intra-8",
        version=1,
        profile="h100-sxm-ndr",
        scope="intra-8gpu",
        busbw_gbps=INTRA_TRUTH,
    )


def results(
    text: str,
    *,
    fabric: str | None = "ib",
    baseline: NcclBaseline | None = None,
    criterion: str = "D-NET-NCCL-02",
) -> dict[str, Result]:
    run = parse_nccl(text)
    verdicts = judge_nccl_run(
        run, subject="s", baseline=baseline or inter_baseline(), expected_fabric=fabric, criterion=criterion
    )
    return {v.criterion: v.result for v in verdicts}


# --- format ------------------------------------------------------------------------------------


def test_table_header_and_row_layout_match_nccl_tests_2_20() -> None:
    real = GB10.read_text(encoding="utf-8").splitlines()
    real_header = real[7:10]
    real_row = real[10]
    text = pair(min_bytes=8192).splitlines()
    start = text.index(real_header[1])
    assert text[start - 1 : start + 2] == real_header
    ours = text[start + 2]
    assert len(ours) == len(real_row)
    # every column ends where the real build's column ends
    assert [m.end() for m in re.finditer(r"\S+", ours)] == [m.end() for m in re.finditer(r"\S+", real_row)]
    assert text[0].startswith("# nccl-tests version 2.20.0 (b4d5bee) nccl-headers=22105 nccl-library=22105")
    assert text[1] == "# Collective test starting: all_reduce_perf"


def test_healthy_intra_node_run_parses_completely() -> None:
    run = parse_nccl(node())
    assert (run.nranks, run.nnodes, run.collective, run.nccl_version) == (8, 1, "all_reduce", "2.21.5")
    assert run.complete
    assert [r.size for r in run.rows] == [8 << i for i in range(31)]  # 8 B .. 8 GiB doubling
    assert run.rows[-1].size == 8 * GIB
    assert "P2P" in run.transports and "IB" in run.transports
    assert run.nccl_env == {"NCCL_SOCKET_IFNAME": "eth0"}
    factor = busbw_factor("all_reduce", 8)
    for row in run.rows:  # both printed with 2 decimals
        assert row.algbw_oop is not None
        assert row.busbw_oop == pytest.approx(row.algbw_oop * factor, abs=0.005 * (1 + factor) + 1e-9)
    # small sizes are latency bound: 8 B and 1 KiB take about the same time
    t8, t1k = run.rows[0].time_oop, run.rows[7].time_oop
    assert t8 is not None and t1k is not None and abs(t1k - t8) / t8 < 0.1
    assert run.avg_busbw == pytest.approx(
        statistics.fmean([b for r in run.rows for b in (r.busbw_oop, r.busbw_ip) if b is not None]), abs=0.02
    )


def test_deterministic_per_seed() -> None:
    assert pair(seed=5) == pair(seed=5)
    assert pair(seed=5) != pair(seed=6)


def test_newer_nccl_prints_the_version_as_an_info_line() -> None:
    text = pair(nccl_version="2.25.1")
    assert re.search(r"^r01-n01:\d+:\d+ \[0\] NCCL INFO NCCL version 2\.25\.1\+cuda12\.4$", text, re.M)
    assert parse_nccl(text).nccl_version == "2.25.1"


@pytest.mark.parametrize(
    "collective", ["all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv"]
)
def test_other_collectives_use_their_busbw_factor(collective: str) -> None:
    run = parse_nccl(node(collective=collective))
    assert run.collective == collective
    big = [r for r in run.rows if r.size >= GIB]
    factor = busbw_factor(collective, 8)
    for row in big:
        assert row.algbw_oop is not None
        assert row.busbw_oop == pytest.approx(row.algbw_oop * factor, abs=0.005 * (1 + factor) + 1e-9)
    assert headline_busbw(run) == pytest.approx(INTRA_TRUTH, rel=0.05)


@pytest.mark.parametrize("render", [node, pair], ids=["node", "pair"])
def test_hypercube_rows_follow_its_own_arithmetic(render: object) -> None:
    """nccl-tests hypercube: size = count x sizeof x nranks, algbw = size x (n-1)/n / time,
    busbw = algbw: a rendered run parses with no row held against the arithmetic."""
    text = render(collective="hypercube")  # type: ignore[operator]
    run = parse_nccl(text)
    assert run.collective == "hypercube" and run.rows
    assert not [u for u in run.unreadable if "arithmetic" in str(u)]
    assert not run.unreadable
    n = run.nranks
    assert n is not None and n > 1
    for row in run.rows:
        assert row.size == row.count * 4 * n
        assert row.time_oop is not None and row.algbw_oop is not None
        assert row.algbw_oop == pytest.approx(
            row.size * (n - 1) / n / (row.time_oop * 1e3), rel=0.01, abs=0.01
        )
        assert row.busbw_oop == row.algbw_oop
    truth = INTRA_TRUTH if render is node else INTER_TRUTH
    assert headline_busbw(run) == pytest.approx(truth, rel=0.05)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"nranks": 7}, "multiple of nnodes"),
        ({"hosts": ["a", "b", "c"]}, "hosts given"),
        ({"transport": "carrier-pigeon"}, "unknown transport"),
        ({"errors": "meteor"}, "unknown errors"),
        ({"busbw_gbps": 0.0}, "busbw_gbps"),
        ({"transport": "NVLink", "network": "Myrinet"}, "unknown network"),
    ],
    ids=["ranks-not-multiple", "hosts-count", "transport", "errors", "zero-busbw", "network"],
)
def test_invalid_arguments(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pair(**kw)


# --- round trips -------------------------------------------------------------------------------


def test_healthy_pair_passes_against_the_simulator_truth() -> None:
    for seed in range(5):
        assert results(pair(seed=seed)) == {
            "D-NET-NCCL-02": Result.PASS,
            "D-NET-NCCL-03": Result.PASS,
            "D-NET-NCCL-TRANSPORT": Result.PASS,
        }


def test_healthy_node_passes_against_the_simulator_truth() -> None:
    assert results(node(), baseline=intra_baseline(), criterion="D-NET-NCCL-01") == {
        "D-NET-NCCL-01": Result.PASS,
        "D-NET-NCCL-03": Result.PASS,
        "D-NET-NCCL-TRANSPORT": Result.PASS,
    }


def test_socket_fallback_fails_the_transport_criterion_only() -> None:
    # the silent defect: no errors, numbers accepted by the busbw check
    verdicts = results(pair(transport="Socket"))
    assert verdicts == {
        "D-NET-NCCL-02": Result.PASS,
        "D-NET-NCCL-03": Result.PASS,
        "D-NET-NCCL-TRANSPORT": Result.FAIL,
    }
    slow = results(pair(transport="Socket", busbw_gbps=INTER_TRUTH / 8))
    assert slow["D-NET-NCCL-02"] is Result.FAIL


def test_degraded_nvlink_fails_busbw() -> None:
    verdicts = results(
        node(busbw_gbps=INTRA_TRUTH * 0.8), baseline=intra_baseline(), criterion="D-NET-NCCL-01"
    )
    assert verdicts["D-NET-NCCL-01"] is Result.FAIL
    assert verdicts["D-NET-NCCL-03"] is Result.PASS


def test_ib_completion_errors_fail_and_never_pass_busbw() -> None:
    text = pair(errors="ib_completion")
    assert re.search(r"NCCL WARN NET/IB : Got completion from peer \S+ with status=12 ", text)
    assert re.search(r"^\s*\d+ .*-1r01-n01: Test NCCL failure common\.cu:\d+ '", text, re.M)
    run = parse_nccl(text)
    assert {"ib_completion", "harness"} <= {e.kind for e in run.errors}
    verdicts = results(text)
    assert verdicts["D-NET-NCCL-03"] is Result.FAIL
    assert verdicts["D-NET-NCCL-02"] is not Result.PASS
    assert verdicts["D-NET-NCCL-TRANSPORT"] is Result.PASS


def test_hang_is_cut_mid_table_with_a_timeout() -> None:
    text = pair(errors="hang")
    assert "# Out of bounds values" not in text
    assert re.search(r": Test timeout \(600s\) common\.cu:\d+$", text, re.M)
    run = parse_nccl(text)
    assert not run.complete
    assert run.interrupted_at_size is not None and run.interrupted_at_size >= 64 << 20
    verdicts = results(text)
    assert verdicts["D-NET-NCCL-03"] is Result.FAIL
    assert verdicts["D-NET-NCCL-02"] is not Result.PASS


def test_wrong_results_fail_with_out_of_bounds() -> None:
    text = pair(errors="wrong")
    run = parse_nccl(text)
    assert run.oob_failed is True
    assert run.oob_values == sum(1 for r in run.rows if (r.wrong_oop or 0) > 0)
    assert run.oob_values >= 1
    assert results(text)["D-NET-NCCL-03"] is Result.FAIL


def test_roce_fabric() -> None:
    text = pair(transport="RoCE")
    assert "mlx5_0:1/RoCE" in text
    assert results(text, fabric="roce")["D-NET-NCCL-TRANSPORT"] is Result.PASS
    assert results(text, fabric="ib")["D-NET-NCCL-TRANSPORT"] is Result.FAIL


def test_nvls_is_recorded() -> None:
    run = parse_nccl(node(transport="NVLS"))
    assert "NVLS" in run.transports
    assert run.in_network_reduction


def test_repeats_stable_and_flaky() -> None:
    healthy = [parse_nccl(pair(seed=s)) for s in (11, 12, 13)]
    flaky = [parse_nccl(pair(seed=s, cv=0.15)) for s in (11, 12, 13)]
    assert judge_nccl_repeats(healthy, subject="pair").result is Result.PASS
    v = judge_nccl_repeats(flaky, subject="pair")
    assert v.result is Result.FAIL
    assert v.evidence["cv"] > 0.05
