"""NCCL judges on real fixtures (tests/fixtures/nccl) and on runs derived from them."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetval import criteria
from fleetval.errors import ParseError
from fleetval.nccl.judge import (
    EVIDENCE_LIMITS,
    NcclBaseline,
    busbw_criterion_for,
    headline_busbw,
    judge_busbw,
    judge_errors,
    judge_nccl_repeats,
    judge_nccl_run,
    judge_nccl_to_json,
    judge_transport,
)
from fleetval.nccl.parser import NcclRun, parse_nccl
from fleetval.records import Result

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
_CURATOR_MARK = re.compile(r"^\[\.\.\. .*\]$")

A3MEGA = "all_reduce_perf-2node-h100-a3mega-16rank-mpirun-full.txt"
P5_SLURM = "all_reduce_perf-2node-p5-16gpu-efa-slurm-awsome.txt"
GB10 = "all_reduce_perf-2node-gb10-nccl-tests-2.20.0-header-dgx-spark-pr103-excerpt.txt"
ALLTOALL_1GPU = "alltoall_perf-1gpu-rtx5090-busbw0-inplace-NA-issue287.txt"
SOCKET_291 = "nccl-debug-info-net-socket-single-node-rtx5090-issue291-excerpt.txt"
IB_CHANNELS = "nccl-debug-info-net-ib-p2p-channels-2node-issue1412-excerpt.txt"
NVLS = "nccl-debug-info-nvls-3node-h100-issue1453-excerpt.txt"
IB_COMPLETION = "nccl-warn-net-ib-completion-error4-vendor-err81-5node-h100-issue928-excerpt.log"
BOOTSTRAP_ABORT = "nccl-warn-bootstrap-socket-connect-abort-2x8-h100-issue1016-excerpt.log"
WATCHDOG = "pytorch-processgroupnccl-watchdog-collective-timeout-reducescatter-nccl-issue1111.log"
SYSTEM_ERROR = "nccl-tests-error-unhandled-system-error-2node-azure-issue36-excerpt.txt"
CUDA_AFTER_16G = "nccl-tests-error-unhandled-cuda-error-after-16GB-issue322-excerpt.txt"

# a3mega rows >= 1 GiB, out-of-place busbw: 297.86, 318.40, 330.58, 338.82
A3MEGA_HEADLINE = statistics.fmean([297.86, 318.40, 330.58, 338.82])


def parse(name: str) -> NcclRun:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return parse_nccl(
        "".join(ln for ln in text.splitlines(keepends=True) if not _CURATOR_MARK.match(ln.strip()))
    )


def baseline(gbps: float, **kw: object) -> NcclBaseline:
    fields = {
        "baseline_id": "h100-inter-pair",
        "version": 3,
        "profile": "h100-sxm-ndr",
        "scope": "inter-pair",
    }
    fields.update(kw)
    return NcclBaseline(busbw_gbps=gbps, **fields)  # type: ignore[arg-type]


def scaled(run: NcclRun, factor: float) -> NcclRun:
    """The same run `factor` times as fast: time, algbw and busbw move together, as they would in
    nccl-tests' output (a row whose busbw alone changed is not a row nccl-tests printed)."""

    def times(value: float | None, by: float) -> float | None:
        return None if value is None else value * by

    rows = tuple(
        dataclasses.replace(
            r,
            time_oop=times(r.time_oop, 1 / factor),
            algbw_oop=times(r.algbw_oop, factor),
            busbw_oop=times(r.busbw_oop, factor),
        )
        for r in run.rows
    )
    return dataclasses.replace(run, rows=rows)


# --- D-NET-NCCL-01 / -02 -----------------------------------------------------------------------


def test_headline_is_the_mean_of_large_out_of_place_rows() -> None:
    assert headline_busbw(parse(A3MEGA)) == pytest.approx(A3MEGA_HEADLINE)


@pytest.mark.parametrize(
    ("ratio", "expected", "rule"),
    [
        (1.10, Result.PASS, "nccl.busbw.ok"),
        (1.00, Result.PASS, "nccl.busbw.ok"),
        (0.90, Result.PASS, "nccl.busbw.ok"),
        (0.8999, Result.FAIL, "nccl.busbw.below_baseline"),
        (0.50, Result.FAIL, "nccl.busbw.below_baseline"),
    ],
    ids=["above", "at-baseline", "at-threshold", "just-below", "collapsed"],
)
def test_busbw_ratio_edges(ratio: float, expected: Result, rule: str) -> None:
    v = judge_busbw(
        parse(A3MEGA), subject="a+b", baseline=baseline(A3MEGA_HEADLINE / ratio), criterion="D-NET-NCCL-02"
    )
    assert (v.result, v.rule_id) == (expected, rule)
    assert v.evidence["ratio"] == pytest.approx(ratio, abs=1e-4)
    assert v.evidence["busbw_values_gbps"] == [297.86, 318.4, 330.58, 338.82]
    assert v.judged_against["baseline_id"] == "h100-inter-pair"
    assert v.judged_against["baseline_version"] == 3
    assert v.evidence["min_ratio"] == criteria.get("D-NET-NCCL-02").parameters["min_ratio"]


def test_no_baseline_is_inconclusive_never_pass() -> None:
    v = judge_busbw(parse(A3MEGA), subject="a+b", baseline=None)
    assert (v.result, v.rule_id) == (Result.INCONCLUSIVE, "nccl.busbw.no_baseline")
    assert v.action == "rerun"


def test_no_rows_at_one_gib_is_inconclusive_never_pass() -> None:
    v = judge_busbw(parse(GB10), subject="spark", baseline=baseline(0.5))  # tiny baseline: would "pass"
    assert (v.result, v.rule_id) == (Result.INCONCLUSIVE, "nccl.busbw.no_large_sizes")
    assert v.evidence["largest_size"] == 65536


def test_incomplete_run_cannot_pass_but_can_fail() -> None:
    run = parse(P5_SLURM)  # table only, no footer
    good = judge_busbw(run, subject="p5", baseline=baseline(400.0), criterion="D-NET-NCCL-02")
    bad = judge_busbw(run, subject="p5", baseline=baseline(600.0), criterion="D-NET-NCCL-02")
    assert (good.result, good.rule_id) == (Result.INCONCLUSIVE, "nccl.busbw.incomplete")
    assert (bad.result, bad.rule_id) == (Result.FAIL, "nccl.busbw.below_baseline")


def test_single_rank_and_other_collective_are_inconclusive() -> None:
    run = parse(ALLTOALL_1GPU)
    other = judge_busbw(run, subject="genoa", baseline=baseline(100.0))
    single = judge_busbw(run, subject="genoa", baseline=baseline(100.0, collective="alltoall"))
    assert (other.result, other.rule_id) == (Result.INCONCLUSIVE, "nccl.busbw.other_collective")
    assert (single.result, single.rule_id) == (Result.INCONCLUSIVE, "nccl.busbw.single_rank")


def test_bad_criterion_or_baseline() -> None:
    with pytest.raises(ValueError, match="D-NET-NCCL-01 or D-NET-NCCL-02"):
        judge_busbw(parse(A3MEGA), subject="x", baseline=baseline(1.0), criterion="D-NET-NCCL-03")
    v = judge_busbw(parse(A3MEGA), subject="x", baseline=baseline(0.0))
    assert v.result is Result.INCONCLUSIVE


def test_in_network_reduction_is_noted() -> None:
    run = dataclasses.replace(parse(A3MEGA), transports=("IB", "NVLS"), in_network_reduction=True)
    v = judge_busbw(run, subject="x", baseline=baseline(A3MEGA_HEADLINE))
    assert v.result is Result.PASS
    assert v.evidence["in_network_reduction"] is True
    assert "NVLS" in v.evidence["note"]


# --- D-NET-NCCL-03 -----------------------------------------------------------------------------


def test_clean_complete_run_has_no_errors() -> None:
    v = judge_errors(parse(A3MEGA), subject="a+b")
    assert (v.result, v.rule_id, v.action) == (Result.PASS, "nccl.errors.none", "none")


@pytest.mark.parametrize(
    ("fixture", "rule"),
    [
        (IB_COMPLETION, "nccl.errors.nccl"),
        (BOOTSTRAP_ABORT, "nccl.errors.nccl"),
        (WATCHDOG, "nccl.errors.timeout"),
    ],
    ids=["ib-completion", "bootstrap", "watchdog-timeout"],
)
def test_nccl_errors_and_timeouts_fail(fixture: str, rule: str) -> None:
    v = judge_errors(parse(fixture), subject="n")
    assert (v.result, v.rule_id, v.action) == (Result.FAIL, rule, "hold")
    assert v.evidence["error_count"] >= 1


@pytest.mark.parametrize("fixture", [SYSTEM_ERROR, CUDA_AFTER_16G], ids=["system-error", "cuda-error"])
def test_harness_failure_is_error(fixture: str) -> None:
    v = judge_errors(parse(fixture), subject="n")
    assert (v.result, v.rule_id) == (Result.ERROR, "nccl.errors.harness")
    assert v.evidence["harness_failures"]


def test_wrong_elements_fail() -> None:
    run = parse(A3MEGA)
    rows = list(run.rows)
    rows[20] = dataclasses.replace(rows[20], wrong_oop=5)
    v = judge_errors(dataclasses.replace(run, rows=tuple(rows)), subject="n")
    assert (v.result, v.rule_id) == (Result.FAIL, "nccl.errors.wrong")
    assert v.evidence["wrong_sizes"] == [rows[20].size]


def test_out_of_bounds_failed_footer_fails() -> None:
    text = (
        (FIXTURES / A3MEGA)
        .read_text(encoding="utf-8")
        .replace("Out of bounds values : 0 OK", "Out of bounds values : 2 FAILED")
    )
    v = judge_errors(parse_nccl(text), subject="n")
    assert (v.result, v.rule_id) == (Result.FAIL, "nccl.errors.out_of_bounds")


def test_truncated_run_without_errors_is_inconclusive() -> None:
    v = judge_errors(parse(P5_SLURM), subject="n")
    assert (v.result, v.rule_id) == (Result.INCONCLUSIVE, "nccl.errors.incomplete")


# --- transport ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "fabric", "expected", "rule"),
    [
        (SOCKET_291, "ib", Result.FAIL, "nccl.transport.socket_fallback"),
        (SOCKET_291, "roce", Result.FAIL, "nccl.transport.socket_fallback"),
        (SOCKET_291, None, Result.INCONCLUSIVE, "nccl.transport.no_fabric_declared"),
        (IB_CHANNELS, "ib", Result.PASS, "nccl.transport.ok"),
        (IB_CHANNELS, "roce", Result.PASS, "nccl.transport.ok"),  # "IB" network, link layer not shown
        (A3MEGA, "ib", Result.INCONCLUSIVE, "nccl.transport.unknown"),
        (NVLS, "ib", Result.INCONCLUSIVE, "nccl.transport.unknown"),  # NVLS lines, no network line
    ],
    ids=["socket-ib", "socket-roce", "socket-undeclared", "ib-ib", "ib-roce", "no-debug-lines", "nvls-only"],
)
def test_transport(fixture: str, fabric: str | None, expected: Result, rule: str) -> None:
    v = judge_transport(parse(fixture), subject="n", expected_fabric=fabric)
    assert (v.result, v.rule_id) == (expected, rule)


def test_socket_fallback_fails_even_with_zero_errors_and_good_busbw() -> None:
    run = dataclasses.replace(parse(A3MEGA), transports=("Socket", "P2P"), networks=("Socket",))
    verdicts = judge_nccl_run(
        run,
        subject="a+b",
        baseline=baseline(A3MEGA_HEADLINE),
        expected_fabric="ib",
        criterion="D-NET-NCCL-02",
    )
    assert [v.result for v in verdicts] == [Result.PASS, Result.PASS, Result.FAIL]
    assert verdicts[2].rule_id == "nccl.transport.socket_fallback"


def test_roce_link_layer_when_ib_is_declared_fails() -> None:
    a3mega = parse(A3MEGA)
    run = dataclasses.replace(
        a3mega,
        transports=("RoCE",),
        networks=("IB",),
        net_devices=("mlx5_0:1/RoCE",),
        network_hosts=a3mega.hosts,  # as if every host had logged `Using network IB`
    )
    v = judge_transport(run, subject="n", expected_fabric="ib")
    assert (v.result, v.rule_id) == (Result.FAIL, "nccl.transport.mismatch")
    assert judge_transport(run, subject="n", expected_fabric="roce").result is Result.PASS


def test_unknown_fabric_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="expected_fabric"):
        judge_transport(parse(A3MEGA), subject="n", expected_fabric="ethernet")


# --- D-NET-NCCL-04 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("factors", "expected", "rule"),
    [
        ((1.0, 1.02, 0.98), Result.PASS, "nccl.repeats.stable"),
        ((1.0, 1.05, 0.95), Result.PASS, "nccl.repeats.stable"),  # CV exactly 5 %
        ((1.0, 1.06, 0.94), Result.FAIL, "nccl.repeats.noisy"),
        ((1.0, 1.2, 0.8, 1.0), Result.FAIL, "nccl.repeats.noisy"),
        ((1.0, 1.0), Result.INCONCLUSIVE, "nccl.repeats.too_few"),
    ],
    ids=["stable", "at-threshold", "just-noisy", "noisy-4", "two-repeats"],
)
def test_repeats_cv(factors: tuple[float, ...], expected: Result, rule: str) -> None:
    run = parse(A3MEGA)
    v = judge_nccl_repeats([scaled(run, f) for f in factors], subject="a+b")
    assert (v.result, v.rule_id) == (expected, rule)
    if expected is not Result.INCONCLUSIVE:
        values = [A3MEGA_HEADLINE * f for f in factors]
        assert v.evidence["cv"] == pytest.approx(
            statistics.stdev(values) / statistics.fmean(values), abs=1e-5
        )
        assert v.evidence["max_cv"] == criteria.get("D-NET-NCCL-04").parameters["max_cv"]


def test_repeats_without_large_sizes_do_not_count() -> None:
    runs = [parse(A3MEGA), parse(A3MEGA), parse(GB10)]
    v = judge_nccl_repeats(runs, subject="n")
    assert (v.result, v.evidence["usable_repeats"]) == (Result.INCONCLUSIVE, 2)


def test_repeats_of_different_shapes_are_not_comparable() -> None:
    run = parse(A3MEGA)
    v = judge_nccl_repeats([run, run, dataclasses.replace(run, nranks=8)], subject="n")
    assert (v.result, v.rule_id) == (Result.INCONCLUSIVE, "nccl.repeats.not_comparable")


# --- CLI payload -------------------------------------------------------------------------------


def test_judge_nccl_to_json_uses_the_cli_baseline() -> None:
    out = judge_nccl_to_json(parse(A3MEGA), A3MEGA_HEADLINE, None)
    json.dumps(out)
    busbw, errors, transport = out["verdicts"]
    assert busbw["criterion"] == "D-NET-NCCL-02"  # two nodes
    assert busbw["subject"] == "ztan-mig-235z+ztan-mig-gq73"
    assert (busbw["result"], errors["result"], transport["result"]) == ("pass", "pass", "inconclusive")
    assert busbw["judged_against"]["baseline_id"] == "cli"


@pytest.mark.parametrize(("ranks", "expected"), [(8, "pass"), (2, "fail")])
def test_ranks_override_recomputes_busbw_from_algbw(ranks: int, expected: str) -> None:
    out = judge_nccl_to_json(parse(A3MEGA), 300.0, ranks)
    busbw = out["verdicts"][0]
    algbw = statistics.fmean([158.86, 169.81, 176.31, 180.71])
    factor = 2 * (ranks - 1) / ranks
    assert busbw["evidence"]["busbw_gbps"] == pytest.approx(algbw * factor, abs=1e-3)
    assert busbw["evidence"]["nranks"] == ranks
    assert busbw["result"] == expected


def test_busbw_criterion_by_topology() -> None:
    run = parse(A3MEGA)
    assert busbw_criterion_for(run) == "D-NET-NCCL-02"
    assert busbw_criterion_for(dataclasses.replace(run, nnodes=1, nranks=8)) == "D-NET-NCCL-01"
    assert busbw_criterion_for(dataclasses.replace(run, nnodes=None, nranks=16)) == "D-NET-NCCL-02"


# --- no silent pass: damaged evidence never passes ------------------------------------------------


def _a3mega_text() -> str:
    text = (FIXTURES / A3MEGA).read_text(encoding="utf-8")
    return "".join(ln for ln in text.splitlines(keepends=True) if not _CURATOR_MARK.match(ln.strip()))


def _judged(text: str) -> dict[str, tuple[Result, str]]:
    verdicts = judge_nccl_run(
        parse_nccl(text),
        subject="a+b",
        baseline=baseline(A3MEGA_HEADLINE),
        expected_fabric="ib",
        criterion="D-NET-NCCL-02",
    )
    return {v.criterion: (v.result, v.rule_id) for v in verdicts}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_a_baseline_that_is_not_a_positive_finite_number_is_refused(value: float) -> None:
    """`--baseline nan`: a NaN ratio slips past both comparisons and used to pass."""
    v = judge_busbw(parse(A3MEGA), subject="a+b", baseline=baseline(value), criterion="D-NET-NCCL-02")
    assert (v.result, v.rule_id) == (Result.INCONCLUSIVE, "nccl.busbw.bad_baseline")
    busbw = judge_nccl_to_json(parse(A3MEGA), value, None)["verdicts"][0]
    assert busbw["result"] == "inconclusive"


@pytest.mark.parametrize(
    ("cell", "rule"),
    [
        ("1e+308", "nccl.busbw.inconsistent_row"),
        ("1e308", "nccl.busbw.damaged_table"),
        ("400.00", "nccl.busbw.inconsistent_row"),
    ],
    ids=["printf-e", "no-sign", "plausible-but-not-algbw-x-factor"],
)
def test_a_damaged_headline_busbw_never_passes(cell: str, rule: str) -> None:
    """busbw 1e308 used to give a headline of 2.5e307 GB/s and pass."""
    text = _a3mega_text().replace("338.82", cell, 1)
    busbw = _judged(text)["D-NET-NCCL-02"]
    assert busbw == (Result.INCONCLUSIVE, rule)


def test_far_above_the_baseline_is_not_believed() -> None:
    v = judge_busbw(
        parse(A3MEGA), subject="a+b", baseline=baseline(A3MEGA_HEADLINE / 2), criterion="D-NET-NCCL-02"
    )
    assert (v.result, v.rule_id) == (Result.INCONCLUSIVE, "nccl.busbw.implausible")
    assert v.evidence["evidence_limits"]["limits_id"] == EVIDENCE_LIMITS.limits_id


def test_rows_the_header_promised_and_that_are_missing_never_pass() -> None:
    """Rows above 1 GiB deleted while the header says maxBytes 8 GiB used to pass."""
    lines = _a3mega_text().split("\n")
    kept = [
        ln for ln in lines if not (ln.split() and ln.split()[0] in ("2147483648", "4294967296", "8589934592"))
    ]
    judged = _judged("\n".join(kept))
    assert judged["D-NET-NCCL-02"] == (Result.INCONCLUSIVE, "nccl.busbw.damaged_table")
    assert judged["D-NET-NCCL-03"] == (Result.INCONCLUSIVE, "nccl.errors.damaged_table")


def test_nccl_tests_reducing_maxbytes_changes_the_promise() -> None:
    lines = _a3mega_text().split("\n")
    kept = [ln for ln in lines if not (ln.split() and ln.split()[0] in ("4294967296", "8589934592"))]
    at = next(i for i, ln in enumerate(kept) if "nThread" in ln)
    kept[at + 1 : at + 1] = ["#", "# Reducing maxBytes to 2147483648 due to memory limitation"]
    judged = _judged("\n".join(kept))
    assert judged["D-NET-NCCL-03"] == (Result.PASS, "nccl.errors.none")


@pytest.mark.parametrize(
    "edit",
    ["duplicate", "swap", "size", "count", "type", "footer-count", "header-twice", "columns", "rank"],
)
def test_a_damaged_table_never_passes(edit: str) -> None:
    lines = _a3mega_text().split("\n")
    i = next(k for k, ln in enumerate(lines) if ln.split() and ln.split()[0] == "1048576")
    if edit == "duplicate":
        lines.insert(i, lines[i])
    elif edit == "swap":
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    elif edit == "size":
        lines[i] = lines[i].replace("1048576", "1048577", 1)
    elif edit == "count":
        lines[i] = lines[i].replace("262144", "262145", 1)
    elif edit == "type":
        lines[i] = lines[i].replace("float", "flaot", 1)
    elif edit == "footer-count":
        lines = [ln.replace("values : 0 OK", "values : 5 OK") for ln in lines]
    elif edit == "header-twice":
        lines.insert(1, next(ln for ln in lines if "nThread" in ln))
    elif edit == "columns":
        lines = [ln.replace("redop", "erdop") for ln in lines]
    else:
        lines = [ln for ln in lines if "Rank  3 " not in ln]
    judged = _judged("\n".join(lines))
    assert judged["D-NET-NCCL-02"][0] is not Result.PASS
    assert judged["D-NET-NCCL-03"][0] is not Result.PASS or edit == "rank"  # -03 does not read ranks


@pytest.mark.parametrize("bad", ["1x", "O", "1,000", "-3", "1e3", "5.0"])
def test_a_malformed_wrong_cell_never_passes_d_net_nccl_03(bad: str) -> None:
    """They used to drop the row (`1x`) or read as "unknown", i.e. no error (`-3`, `1e3`, `5.0`)."""
    text = _a3mega_text().replace("   0.00      0    123.5", f"   0.00    {bad}    123.5", 1)
    assert _judged(text)["D-NET-NCCL-03"] == (Result.INCONCLUSIVE, "nccl.errors.damaged_table")


def test_wrong_elements_printed_with_g_fail() -> None:
    text = (
        _a3mega_text()
        .replace("338.82      0", "338.82  1e+06", 1)
        .replace("values : 0 OK", "values : 1 FAILED")
    )
    assert _judged(text)["D-NET-NCCL-03"] == (Result.FAIL, "nccl.errors.wrong")


def test_no_data_check_is_no_evidence_for_d_net_nccl_03() -> None:
    """`-c 0` prints N/A in every #wrong cell: nothing was checked, so -03 cannot pass. In place
    alone, alltoall never checks (nccl-tests `reportErrors = in_place ? 0 : 1`): that passes."""
    na = re.sub(r"(?m)(\s)0(\s+\S+\s+\S+\s+\S+\s+)0$", r"\1N/A\2N/A", _a3mega_text())
    assert "N/A" in na
    assert _judged(na)["D-NET-NCCL-03"] == (Result.INCONCLUSIVE, "nccl.errors.not_checked")
    unvalidated = _a3mega_text().replace("validation: 1", "validation: 0")
    assert _judged(unvalidated)["D-NET-NCCL-03"] == (Result.INCONCLUSIVE, "nccl.errors.not_checked")
    assert judge_errors(parse(ALLTOALL_1GPU), subject="n").result is Result.PASS


@pytest.mark.parametrize(
    ("edit", "rule"),
    [
        (
            lambda t: t.replace("NCCL INFO Using network Socket", "NCCL INFO Connected all rings"),
            "nccl.transport.socket_fallback",
        ),
        (lambda t: t.replace("Using network Socket", "Using network IBx"), "nccl.transport.socket_fallback"),
    ],
    ids=["net-socket-line-alone", "renamed-network"],
)
def test_socket_evidence_in_any_line_fails(edit: Callable[[str], str], rule: str) -> None:
    """One `NET/Socket : Using` line without `Using network Socket` used to pass."""
    text = edit((FIXTURES / SOCKET_291).read_text(encoding="utf-8"))
    v = judge_transport(parse_nccl(text), subject="n", expected_fabric="ib")
    assert (v.result, v.rule_id) == (Result.FAIL, rule)


def test_an_unknown_network_name_is_a_mismatch_and_a_host_without_a_network_line_is_unknown() -> None:
    info = "h1:1:2 [0] NCCL INFO Using network {}\nh2:3:4 [0] NCCL INFO Using network IB\n"
    renamed = judge_transport(parse_nccl(info.format("IBx")), subject="n", expected_fabric="ib")
    assert (renamed.result, renamed.rule_id) == (Result.FAIL, "nccl.transport.mismatch")
    both = judge_transport(parse_nccl(info.format("IB")), subject="n", expected_fabric="ib")
    assert both.result is Result.PASS
    devices = "".join(
        f"#  Rank  {r} Group  0 Pid {r} on h{r * 2 + 1} device  0 [0000:04:00] GPU\n" for r in (0, 1)
    )
    one_host = judge_transport(parse_nccl(devices + info.format("IB")), subject="n", expected_fabric="ib")
    assert (one_host.result, one_host.rule_id) == (Result.INCONCLUSIVE, "nccl.transport.host_unknown")


@pytest.mark.parametrize("text", ["", "\x00\x01\x02garbage\xff", "\ufffd" * 8])
def test_judge_nccl_to_json_names_the_parse_error(text: str) -> None:
    """Empty or binary input to `fleetval judge nccl` is inconclusive, not exit 1."""
    try:
        parse_nccl(text)
    except ParseError as exc:
        error = exc
    out = judge_nccl_to_json(error, 300.0, None)
    json.dumps(out)
    assert [v["criterion"] for v in out["verdicts"]] == [
        "D-NET-NCCL-01",
        "D-NET-NCCL-03",
        "D-NET-NCCL-TRANSPORT",
    ]
    for v in out["verdicts"]:
        assert (v["result"], v["rule_id"], v["action"]) == ("inconclusive", "nccl.unparseable", "rerun")
        assert str(error) in v["reason"]
    assert judge_nccl_to_json(error, 300.0, 16)["verdicts"][0]["criterion"] == "D-NET-NCCL-02"


def test_repeats_count_only_intact_complete_runs() -> None:
    run = parse(A3MEGA)
    damaged = parse_nccl(_a3mega_text().replace("338.82", "400.00", 1))
    cut = dataclasses.replace(run, complete=False)
    for odd in (damaged, cut):
        v = judge_nccl_repeats([run, run, odd], subject="a+b")
        assert (v.result, v.rule_id, v.evidence["usable_repeats"]) == (
            Result.INCONCLUSIVE,
            "nccl.repeats.too_few",
            2,
        )
