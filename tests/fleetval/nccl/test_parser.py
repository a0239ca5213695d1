"""nccl-tests parser against the real outputs in tests/fixtures/nccl (provenance in SOURCES.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fleetval.errors import ParseError
from fleetval.nccl.parser import (
    COLLECTIVES,
    NcclRun,
    bus_bandwidth,
    busbw_factor,
    normalize_collective,
    parse_nccl,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
_CURATOR_MARK = re.compile(r"^\[\.\.\. .*\]$")


def load(name: str) -> str:
    """A fixture without the curator's `[... truncated ...]` cut markers (not tool output)."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return "".join(line for line in text.splitlines(keepends=True) if not _CURATOR_MARK.match(line.strip()))


def parse(name: str) -> NcclRun:
    return parse_nccl(load(name))


A3MEGA = "all_reduce_perf-2node-h100-a3mega-16rank-mpirun-full.txt"
P5_SLURM = "all_reduce_perf-2node-p5-16gpu-efa-slurm-awsome.txt"
P5_EKS = "all_reduce_perf-2node-p5-mpijob-eks-excerpt-awsome.txt"
OLD_ERROR = "all_reduce_perf-old-format-error-column-2x2080ti-nvlink-issue44-excerpt.txt"
OLD_HEADER = "all_reduce_perf-old-format-header-error-column-8x-a100-mpirun-nccl-issue583-excerpt.txt"
GB10 = "all_reduce_perf-2node-gb10-nccl-tests-2.20.0-header-dgx-spark-pr103-excerpt.txt"
ALLTOALL_1GPU = "alltoall_perf-1gpu-rtx5090-busbw0-inplace-NA-issue287.txt"
SOCKET_291 = "nccl-debug-info-net-socket-single-node-rtx5090-issue291-excerpt.txt"
SOCKET_131 = "all_reduce_perf-2gpu-p2p-disabled-net-socket-nccl-warn-oob-50-failed-issue131-excerpt.txt"
IB_CHANNELS = "nccl-debug-info-net-ib-p2p-channels-2node-issue1412-excerpt.txt"
NVLS = "nccl-debug-info-nvls-3node-h100-issue1453-excerpt.txt"
IB_COMPLETION = "nccl-warn-net-ib-completion-error4-vendor-err81-5node-h100-issue928-excerpt.log"
BOOTSTRAP_ABORT = "nccl-warn-bootstrap-socket-connect-abort-2x8-h100-issue1016-excerpt.log"
BOOTSTRAP_HANG = "nccl-bootstrap-hang-using-network-ib-socket-in-progress-pytorch-issue131781-excerpt.log"
WATCHDOG = "pytorch-processgroupnccl-watchdog-collective-timeout-reducescatter-nccl-issue1111.log"
SYSTEM_ERROR = "nccl-tests-error-unhandled-system-error-2node-azure-issue36-excerpt.txt"
CUDA_AFTER_16G = "nccl-tests-error-unhandled-cuda-error-after-16GB-issue322-excerpt.txt"
CUDA_ORDINAL = "nccl-tests-error-test-cuda-failure-invalid-device-ordinal-issue289-excerpt.txt"
PERFORMANCE_MD = "nccl-tests-PERFORMANCE-busbw-formulas.reference.md"


# --- busbw arithmetic --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nranks", "algbw", "busbw"),
    [(8, 12.0, 21.0), (16, 9.0, 16.875)],
    ids=["8-ranks-algbw-12", "16-ranks-algbw-9"],
)
def test_all_reduce_worked_examples(nranks: int, algbw: float, busbw: float) -> None:
    assert bus_bandwidth("all_reduce", algbw, nranks) == pytest.approx(busbw)


@pytest.mark.parametrize(
    ("collective", "nranks", "factor"),
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 1, 0.0),
        ("reduce_scatter", 8, 0.875),
        ("all_gather", 16, 0.9375),
        ("alltoall", 1, 0.0),
        ("alltoall", 4, 0.75),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("sendrecv", 8, 1.0),
        ("gather", 8, 0.875),
        ("scatter", 8, 0.875),
        ("hypercube", 8, 1.0),
    ],
)
def test_busbw_factor_per_collective(collective: str, nranks: int, factor: float) -> None:
    assert busbw_factor(collective, nranks) == pytest.approx(factor)


def test_in_network_all_reduce_factor() -> None:
    assert busbw_factor("all_reduce", 8, in_network=True) == pytest.approx(7 / 9)


def test_factors_match_the_nccl_tests_performance_doc() -> None:
    """The Summary list in nccl-tests doc/PERFORMANCE.md, evaluated at n = 8 and n = 16."""
    doc = (FIXTURES / PERFORMANCE_MD).read_text(encoding="utf-8")
    summary = doc.split("### Summary", 1)[1]
    names = {
        "AllReduce": "all_reduce",
        "ReduceScatter": "reduce_scatter",
        "AllGather": "all_gather",
        "Broadcast": "broadcast",
        "Reduce": "reduce",
        "AlltoAll": "alltoall",
    }
    seen = set()
    for line in summary.splitlines():
        m = re.match(r"^\* (\w+)(?: \(In-Network Reduction\))?\s*:\s*(.+)$", line.strip())
        if not m or m.group(1) not in names:
            continue
        formula = m.group(2).replace("_n_", "n").replace("_", "")
        in_network = "In-Network" in line
        for n in (8, 16):
            expected = eval(formula, {"n": n})  # the doc's own arithmetic, e.g. 2*(n-1)/n
            assert busbw_factor(names[m.group(1)], n, in_network=in_network) == pytest.approx(expected), line
        seen.add((names[m.group(1)], in_network))
    assert len(seen) == 7


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("AllReduce", "all_reduce"),
        ("all_reduce_perf", "all_reduce"),
        ("allgather", "all_gather"),
        ("alltoall_perf", "alltoall"),
        ("send_recv", "sendrecv"),
    ],
)
def test_normalize_collective(raw: str, name: str) -> None:
    assert normalize_collective(raw) == name


def test_unknown_collective_and_bad_rank_count_are_errors() -> None:
    with pytest.raises(ValueError, match="unknown collective"):
        busbw_factor("all_reduce_v", 8)
    with pytest.raises(ValueError, match="nranks"):
        busbw_factor("all_reduce", 0)
    assert set(COLLECTIVES) >= {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "alltoall",
        "sendrecv",
    }


# --- tables ------------------------------------------------------------------------------------


def test_full_two_node_run_a3mega() -> None:
    run = parse(A3MEGA)
    assert run.nranks == 16
    assert run.nnodes == 2
    assert run.hosts == ("ztan-mig-235z", "ztan-mig-gq73")
    assert run.collective == "all_reduce"
    assert "collective" in run.inferred  # no command line or header names it; busbw/algbw = 1.875 does
    assert len(run.rows) == 31
    assert [r.size for r in run.rows] == [8 << i for i in range(31)]
    last = run.rows[-1]
    assert (last.size, last.count, last.type, last.redop, last.root) == (
        8589934592,
        2147483648,
        "float",
        "sum",
        -1,
    )
    assert (last.time_oop, last.algbw_oop, last.busbw_oop, last.wrong_oop) == (47535.0, 180.71, 338.82, 0)
    assert (last.time_ip, last.algbw_ip, last.busbw_ip, last.wrong_ip) == (47743.0, 179.92, 337.35, 0)
    assert run.avg_busbw == 70.742
    assert (run.oob_values, run.oob_failed) == (0, False)
    assert run.complete
    assert run.errors == ()
    assert run.transports == ()  # no NCCL_DEBUG=INFO in this output
    assert run.params["maxBytes"] == 8589934592
    for row in run.rows:
        if row.algbw_oop is not None and row.algbw_oop >= 10:
            assert row.busbw_oop == pytest.approx(bus_bandwidth("all_reduce", row.algbw_oop, 16), abs=0.02)


def test_srun_prefixed_table_without_header_or_footer() -> None:
    run = parse(P5_SLURM)
    assert len(run.rows) == 32
    assert run.rows[-1].size == 17179869184
    assert run.rows[-1].busbw_oop == 487.09
    assert run.nranks == 16
    assert run.inferred == ("nranks", "collective")  # from busbw/algbw, not stated in the output
    assert not run.complete  # no footer: the table may have been cut


def test_openmpi_prefixed_excerpt_with_footer() -> None:
    run = parse(P5_EKS)
    assert [r.size for r in run.rows][:2] == [0, 67108864]  # the author's "..." line is skipped
    assert run.rows[-1].busbw_oop == 437.79
    assert run.avg_busbw == 52.9753
    assert run.oob_failed is False
    assert run.complete


def test_old_format_error_column() -> None:
    run = parse(OLD_ERROR)
    assert len(run.rows) == 13
    row = run.rows[0]
    assert (row.size, row.count, row.type, row.redop, row.root) == (32768, 4096, "float", None, None)
    assert (row.error_oop, row.error_ip) == (0.0, 0.0)
    assert (row.wrong_oop, row.wrong_ip) == (None, None)  # a max error is not a count of wrong elements
    assert run.oob_failed is False
    assert run.complete
    assert run.collective is None  # 2 ranks: factor 1 fits several collectives


def test_old_header_without_hash_prefixes() -> None:
    run = parse(OLD_HEADER)
    assert run.nranks == 8
    assert run.nnodes == 1
    assert run.hosts == ("AI-A100-Beethoven01",)
    assert run.collective == "all_reduce"  # from the mpirun command line
    assert run.devices[7].name == "NVIDIA A100-SXM4-40GB"
    assert run.params["minBytes"] == 32
    assert run.rows == ()
    assert not run.complete


def test_newest_header_format_2_20() -> None:
    run = parse(GB10)
    assert run.tests_version == "2.20.0 (b4d5bee)"
    assert run.nccl_version == "2.31.2"  # nccl-library=23102 = 2*10000 + 31*100 + 2
    assert run.collective == "all_reduce"
    assert run.inferred == ()
    assert run.params["unalign"] == 0
    assert [r.busbw_oop for r in run.rows] == [0.23, 0.52, 0.83, 0.96]
    assert all(r.wrong_oop == 0 and r.wrong_ip == 0 for r in run.rows)
    assert run.hosts == ("spark-d708", "spark-dbf4")
    assert not run.complete  # excerpt ends mid-table


def test_single_rank_alltoall_busbw_zero_and_inplace_na() -> None:
    run = parse(ALLTOALL_1GPU)
    assert run.collective == "alltoall"
    assert run.nranks == 1
    (row,) = run.rows
    assert (row.busbw_oop, row.busbw_ip) == (0.0, 0.0)
    assert row.algbw_ip == 43046.1
    assert (row.wrong_oop, row.wrong_ip) == (0, None)  # N/A
    assert row.redop == "none"
    assert run.avg_busbw == 0.0
    assert run.complete


# --- NCCL_DEBUG=INFO ---------------------------------------------------------------------------


def test_socket_network_single_node() -> None:
    run = parse(SOCKET_291)
    assert run.nccl_version == "2.25.1"
    assert run.cuda_version == "12.4"
    assert run.transports == ("Socket",)
    assert run.networks == ("Socket",)
    assert run.nranks == 1
    assert run.collective == "alltoall"
    assert run.nccl_info_seen


def test_socket_fallback_with_env_and_benign_warning() -> None:
    run = parse(SOCKET_131)
    assert run.nccl_version == "2.16.5"  # the bare `NCCL version 2.16.5+cuda11.8` line
    assert run.cuda_version == "11.8"
    assert run.transports == ("Socket",)
    assert run.nccl_env == {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1", "NCCL_P2P_LEVEL": "LOC"}
    assert any("Could not find a path for pattern 4" in w for w in run.warnings)
    assert run.errors == ()  # a graph-search warning is not an NCCL error
    assert run.nranks == 2
    assert run.oob_values is None  # the "50 FAILED" tail is not in the excerpt


def test_ib_and_p2p_channel_transports() -> None:
    run = parse(IB_CHANNELS)
    assert run.transports == ("IB", "P2P")
    assert run.hosts == ("swat1-04",)


def test_nvls_is_recorded_as_in_network_reduction() -> None:
    run = parse(NVLS)  # every line carries mpirun's "[0] " tag
    assert run.nranks == 24
    assert run.nnodes == 3
    assert "NVLS" in run.transports
    assert run.in_network_reduction
    assert run.nccl_env == {"NCCL_CROSS_NIC": "2"}


def test_ib_completion_errors_older_format() -> None:
    run = parse(IB_COMPLETION)
    completions = [e for e in run.errors if e.kind == "ib_completion"]
    assert [e.host for e in completions] == ["H100-2", "H100-1"]
    assert "with error 4" in completions[0].message
    assert "vendor err 81" in completions[0].message


def test_bootstrap_connect_abort() -> None:
    run = parse(BOOTSTRAP_ABORT)
    kinds = {e.kind for e in run.errors}
    assert "bootstrap" in kinds
    assert any("socketStartConnect" in e.message for e in run.errors)
    assert run.nccl_env == {"NCCL_SOCKET_IFNAME": "net1"}


def test_bootstrap_hang_propagation_chain() -> None:
    run = parse(BOOTSTRAP_HANG)
    assert run.networks == ("IB",)
    assert "bootstrap" in {e.kind for e in run.errors}
    assert not run.complete


def test_pytorch_watchdog_timeouts() -> None:
    run = parse(WATCHDOG)
    assert [e.kind for e in run.errors] == ["timeout"] * 5
    assert "Timeout(ms)=1800000" in run.errors[0].message


# --- harness failures --------------------------------------------------------------------------


def test_unhandled_system_error_on_two_nodes() -> None:
    run = parse(SYSTEM_ERROR)
    assert [(h.host, h.message) for h in run.harness_failures] == [
        ("pkb-aa8dbd1b-1", "Test NCCL failure common.cu:345 'unhandled system error'"),
        ("pkb-aa8dbd1b-0", "Test NCCL failure common.cu:345 'unhandled system error'"),
    ]
    assert not run.complete


def test_rows_then_unhandled_cuda_error() -> None:
    run = parse(CUDA_AFTER_16G)
    assert len(run.rows) == 5
    assert run.rows[-1].busbw_oop == 367.29
    assert len(run.harness_failures) == 4
    assert {h.host for h in run.harness_failures} == {"HCA-128", "HCA-108", "HCA-107"}
    assert not run.complete


def test_cuda_failure_invalid_device_ordinal() -> None:
    run = parse(CUDA_ORDINAL)
    assert run.collective == "hypercube"
    assert "Test CUDA failure common.cu:986 'invalid device ordinal'" in [
        h.message for h in run.harness_failures
    ]
    assert run.nccl_version == "2.25.1"
    assert run.nranks == 2


# --- launcher prefixes injected mid-line (derived from the a3mega fixture) ----------------------


def _a3mega_lines() -> list[str]:
    return load(A3MEGA).splitlines()


def _row_line(lines: list[str], size: int) -> int:
    return next(i for i, line in enumerate(lines) if line.split() and line.split()[0] == str(size))


def test_openmpi_tag_injected_mid_row_splits_it_across_lines() -> None:
    lines = _a3mega_lines()
    i = _row_line(lines, 1 << 30)
    row = lines[i]
    lines[i : i + 1] = [
        "[1,0]<stdout>:"
        + row[:62]
        + "[1,3]<stderr>:ztan-mig-235z:6902:6950 [3] NCCL INFO Connected all trees",
        "[1,0]<stdout>:" + row[62:],
    ]
    run = parse_nccl("\n".join("[1,0]<stdout>:" + ln if not ln.startswith("[1,") else ln for ln in lines))
    reference = parse(A3MEGA)
    assert run.rows == reference.rows
    assert run.complete


def test_mpich_tag_injected_mid_row() -> None:
    lines = _a3mega_lines()
    i = _row_line(lines, 1 << 31)
    row = lines[i]
    lines[i] = row[:50] + " [0] " + row[50:]
    run = parse_nccl("\n".join("[0] " + ln for ln in lines))
    assert run.rows == parse(A3MEGA).rows


def test_srun_label_injected_mid_row() -> None:
    lines = _a3mega_lines()
    i = _row_line(lines, 1 << 32)
    row = lines[i]
    lines[i] = row[:50] + " 0: " + row[50:]
    run = parse_nccl("\n".join("0: " + ln for ln in lines))
    assert run.rows == parse(A3MEGA).rows


def test_timeout_glued_to_the_interrupted_row() -> None:
    """nccl-tests prints a row's parameters before timing it; a failure then lands on that line."""
    lines = _a3mega_lines()
    i = _row_line(lines, 1 << 31)
    m = re.match(r"\s*(?:\S+\s+){4}\S+", lines[i])  # size count type redop root
    assert m is not None
    params = m.group(0)
    text = "\n".join(
        [
            *lines[:i],
            params + "ztan-mig-235z: Test timeout (600s) common.cu:378",
            " .. ztan-mig-235z pid 6899: Test failure common.cu:586",
        ]
    )
    run = parse_nccl(text)
    assert run.interrupted_at_size == 1 << 31
    assert [e.kind for e in run.errors] == ["timeout"]
    assert run.errors[0].host == "ztan-mig-235z"
    assert len(run.rows) == 28
    assert not run.complete


# --- contract and garbage ----------------------------------------------------------------------


def test_to_json_contract() -> None:
    data = parse(A3MEGA).to_json()
    json.dumps(data)
    assert {
        "collective",
        "nranks",
        "nccl_version",
        "rows",
        "avg_busbw",
        "transports",
        "errors",
    } <= data.keys()
    assert data["nccl_version"] is None  # missing values are null, not guessed
    assert set(data["rows"][0]) >= {
        "size",
        "count",
        "type",
        "time_oop",
        "algbw_oop",
        "busbw_oop",
        "wrong_oop",
        "time_ip",
        "algbw_ip",
        "busbw_ip",
        "wrong_ip",
    }
    assert set(parse(NVLS).to_json()["transports"]) <= {
        "IB",
        "RoCE",
        "Socket",
        "P2P",
        "SHM",
        "NVLS",
        "CollNet",
    }


@pytest.mark.parametrize(
    "text",
    ["", "   \n\t\n", "hello world\nthis is not nccl-tests\n", "\x00\x01\x02garbage\xff", '{"json": true}'],
    ids=["empty", "blank", "prose", "binary", "json"],
)
def test_garbage_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_nccl(text)
    assert info.value.tool == "nccl-tests"


def test_topology_probe_return_codes_are_not_errors() -> None:
    """`graph/...cc:N -> 2` chains happen in healthy runs; bootstrap/init chains do not."""
    base = load(BOOTSTRAP_HANG)
    benign = "\n".join(
        ln.replace("misc/socket.cc", "graph/xml.cc")
        .replace("bootstrap.cc", "graph/topo.cc")
        .replace("init.cc", "graph/paths.cc")
        .replace("group.cc", "graph/search.cc")
        for ln in base.splitlines()
    )
    assert parse_nccl(benign).errors == ()
    assert {e.kind for e in parse_nccl(base).errors} >= {"bootstrap"}


# --- no silent pass: the attacker's findings, each as a functional test -------------------------
# (No timing is asserted: each input here took 5-60 s before the patterns were made linear; the
# suite's own timeout is what would catch a regression, and tests/fleetval/nccl/test_fuzz.py
# counts hangs.)


@pytest.mark.parametrize(
    ("line", "check"),
    [
        # `_HARNESS`: `\S+: Test` searched on a long token
        ("x" * 15_000 + ": Test NCCL failure common.cu:1 'boom'", "harness"),
        ("y" * 15_000, "ignored"),
        # `_TEST_TIMEOUT`
        ("z" * 15_000 + ": Test timeout (60s) common.cu:378", "timeout"),
        # `_NCCL_LINE`: `[^\s:]+:` on `a:a:a:...`
        ("a:" * 7_500, "ignored"),
        ("a " * 7_000 + "h:1:2 [0] NCCL INFO Using network IB", "network"),
        # `_PROPAGATION`: `[\w/]+\.cc` restarted inside a long path-like token
        ("h:1:2 [0] NCCL INFO " + "a/" * 7_000 + " init.cc:12 -> 2", "propagation"),
        ("h:1:2 [0] NCCL INFO " + "a/" * 7_400, "ignored"),
    ],
    ids=["harness", "long-token", "timeout", "colons", "nccl-line", "propagation", "path-token"],
)
def test_long_tokens_under_the_line_bound_are_read(line: str, check: str) -> None:
    run = parse_nccl(load(A3MEGA) + line + "\n")
    assert len(run.rows) == 31
    if check == "harness":
        assert run.harness_failures[0].message == "Test NCCL failure common.cu:1 'boom'"
    elif check == "timeout":
        assert [e.kind for e in run.errors] == ["timeout"]
    elif check == "network":
        assert run.networks == ("IB",)
    elif check == "propagation":
        assert [e.message for e in run.errors] == ["init.cc:12 -> 2"]
    else:
        assert run.errors == () and run.unreadable == ()


def test_a_line_longer_than_any_tool_line_is_not_read_and_blocks_a_pass() -> None:
    from fleetval.nccl.parser import MAX_LINE_CHARS

    one_mb_of_tags = "[0] " + "1 [0] " * 170_000  # MPICH tag splitting used to re-search the prefix per tag
    run = parse_nccl(load(A3MEGA) + one_mb_of_tags + "\n")
    assert len(one_mb_of_tags) > MAX_LINE_CHARS
    assert [u.kind for u in run.unreadable] == ["line"]
    assert len(run.rows) == 31  # the rest is read


def test_mpich_tags_are_split_in_one_pass() -> None:
    from fleetval.nccl.parser import _chunks

    pieces = _chunks("[0] " + "1 [0] " * 2_000 + "tail")
    assert len(pieces) == 2_001 and pieces[-1].strip() == "tail"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("maxBytes 8589934592", "maxBytes " + "9" * 5_000),  # int() refuses > 4,300 digits
        ("maxBytes 8589934592", "maxBytes \u00b2"),  # SUPERSCRIPT TWO: isdigit() but not int()
        ("  8589934592    2147483648", "  \u0663589934592    2147483648"),  # ARABIC-INDIC THREE
        ("  8589934592    2147483648", "  " + "9" * 5_000 + "    2147483648"),
        ("Out of bounds values : 0 OK", "Out of bounds values : " + "9" * 5_000 + " OK"),
        ("#  Rank 15", "#  Rank " + "9" * 5_000),
        ("#  Rank 15", "#  Rank \u00b2"),
        ("338.82      0", "338.82      \u0663"),
        ("338.82      0", "338.82      " + "9" * 5_000),
    ],
    ids=[
        "max-digits",
        "max-superscript",
        "size-arabic",
        "size-digits",
        "oob",
        "rank",
        "rank-sup",
        "wrong-ar",
        "wrong-9s",
    ],
)
def test_numbers_python_cannot_convert_are_unreadable_never_an_exception(old: str, new: str) -> None:
    text = load(A3MEGA)
    assert old in text
    try:
        run = parse_nccl(text.replace(old, new, 1))
    except ParseError:
        return
    assert run.unreadable or len(run.rows) < 31 or run.oob_values is None


@pytest.mark.parametrize("bad", ["1x", "O", "1,000", "-3", "1e3", "5.0", "0x10", "nan", "\u0663"])
def test_a_malformed_wrong_cell_is_an_unreadable_row(bad: str) -> None:
    text = load(A3MEGA).replace("338.82      0", f"338.82      {bad}", 1)
    run = parse_nccl(text)
    assert len(run.rows) == 30
    (unreadable,) = run.unreadable
    assert unreadable.kind == "row" and "8589934592" in unreadable.excerpt


def test_wrong_counts_print_like_printf_g() -> None:
    """nccl-tests prints #wrong with %g: a million wrong elements is `1e+06`."""
    text = load(A3MEGA).replace("338.82      0", "338.82  1e+06", 1)
    assert parse_nccl(text).rows[-1].wrong_oop == 1_000_000


def test_launcher_tags_before_every_field_group_read_like_the_plain_table() -> None:
    """Some mpirun set-ups tag every write: a row arrives as three tagged pieces on one line."""
    plain = parse(A3MEGA)
    lines = load(A3MEGA).split("\n")

    def tagged(tag: str, sep: str) -> str:
        out = []
        for ln in lines:
            if ln.split() and ln.split()[0].isdigit():
                out.append(tag + ln[:52] + sep + tag + ln[52:85] + sep + tag + ln[85:])
            else:
                out.append(tag + ln)
        return "\n".join(out)

    for tag, sep in (("[1,0]<stdout>:", ""), ("[0]", ""), ("[0] ", ""), ("[0] ", " ")):
        run = parse_nccl(tagged(tag, sep))
        assert run.rows == plain.rows, (tag, sep)
        assert run.complete and run.unreadable == (), (tag, sep)


def test_a_row_cut_by_a_line_break_is_not_rejoined_from_the_next_line() -> None:
    """Only a launcher tag or an injected message may split a row; a bare line break mid-row is
    a damaged row (the run stopped there, or the output was mangled)."""
    params = "2147483648     536870912     float     sum      -1"
    text = load(A3MEGA)
    assert params in text
    run = parse_nccl(text.replace(params, params + "\n", 1))
    assert run.interrupted_at_size == 2147483648
    assert not run.complete


@pytest.mark.parametrize(
    ("version_line", "count", "collnet"),
    [
        ("", 8, True),  # version unknown: trust the count
        ("NCCL version 2.20.5+cuda12.3", 8, True),  # 2.20 prints comm->collNetChannels
        ("NCCL version 2.20.5+cuda12.3", 0, False),
        ("NCCL version 2.21.5+cuda12.4", 24, False),  # 2.21+ prints the coll channel count there
    ],
)
def test_collnet_channels_mean_collnet_where_nccl_prints_them(
    version_line: str, count: int, collnet: bool
) -> None:
    text = "\n".join(
        [
            version_line,
            "h:1:2 [0] NCCL INFO Using network IB",
            f"h:1:2 [0] NCCL INFO 24 coll channels, {count} collnet channels, 0 nvls channels, "
            "32 p2p channels, 32 p2p channels per peer",
        ]
    )
    run = parse_nccl(text)
    assert ("CollNet" in run.transports) is collnet
    assert run.in_network_reduction is collnet


def test_net_socket_alone_is_the_socket_network() -> None:
    """NCCL initialises its socket network only when it uses it (IB comes first)."""
    text = load(SOCKET_291).replace("NCCL INFO Using network Socket", "NCCL INFO Connected all rings")
    run = parse_nccl(text)
    assert "Socket" in run.transports


def test_unknown_and_damaged_network_names_are_kept_as_read() -> None:
    text = (
        load(IB_CHANNELS).replace("via NET/IB/3", "via NET/IX/3", 1)
        + "\nh:1:2 [0] NCCL INFO Using network IBx\n"
    )
    run = parse_nccl(text)
    assert run.networks == ("IBx",) and "IX" in run.via_networks


def test_a_damaged_ib_device_list_is_unreadable() -> None:
    line = "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IX [RO]; OOB eth0:10.0.0.1<0>"
    run = parse_nccl(line + "\nh:1:2 [0] NCCL INFO Using network IB\n")
    assert [u.kind for u in run.unreadable] == ["transport"]
    assert run.net_devices == ("mlx5_0:1/IB",)
