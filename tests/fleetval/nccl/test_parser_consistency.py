"""The parser holds every row, the unit row and the device list to nccl-tests' own arithmetic.

Each bad input is a real fixture (tests/fixtures/nccl, provenance in SOURCES.md) with one thing
changed; what changed is named in the test id. What nccl-tests prints (NVIDIA/nccl-tests
src/common.cu, src/util.cu, src/*.cu): size = max(send, recv) bytes and count = the per-rank
count, so size = count × sizeof(type) (× nranks for the per-rank collectives); algbw = size /
time; busbw = algbw × the collective's factor; the unit row `(B) (elements) (us) (GB/s) (GB/s)`
in every version; `nThread T nGpus G` per process, whose T × G ranks share its pid.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetval.nccl.judge import NcclBaseline, headline_busbw, judge_busbw, judge_errors
from fleetval.nccl.parser import NcclRun, parse_nccl
from fleetval.records import Result

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
_CURATOR_MARK = re.compile(r"^\[\.\.\. .*\]$")

A3MEGA = "all_reduce_perf-2node-h100-a3mega-16rank-mpirun-full.txt"
P5_SLURM = "all_reduce_perf-2node-p5-16gpu-efa-slurm-awsome.txt"
P5_EKS = "all_reduce_perf-2node-p5-mpijob-eks-excerpt-awsome.txt"
GB10 = "all_reduce_perf-2node-gb10-nccl-tests-2.20.0-header-dgx-spark-pr103-excerpt.txt"
ALLTOALL_1GPU = "alltoall_perf-1gpu-rtx5090-busbw0-inplace-NA-issue287.txt"
SOCKET_131 = "all_reduce_perf-2gpu-p2p-disabled-net-socket-nccl-warn-oob-50-failed-issue131-excerpt.txt"
OLD_ERROR = "all_reduce_perf-old-format-error-column-2x2080ti-nvlink-issue44-excerpt.txt"
CUDA_AFTER_16G = "nccl-tests-error-unhandled-cuda-error-after-16GB-issue322-excerpt.txt"


def load(name: str) -> str:
    """A fixture without the curator's `[... truncated ...]` cut markers (not tool output)."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return "".join(line for line in text.splitlines(keepends=True) if not _CURATOR_MARK.match(line.strip()))


def mutate(name: str, old: str, new: str) -> str:
    text = load(name)
    assert text.count(old) == 1, f"{old!r} must occur once in {name}"
    return text.replace(old, new)


def unreadable(run: NcclRun, kind: str) -> list[str]:
    return [f"{u.reason} | {u.excerpt}" for u in run.unreadable if u.kind == kind]


def assert_a3mega_never_passes(run: NcclRun) -> None:
    """The clean a3mega run passes both judges (checked below); a damaged copy may pass neither."""
    clean = parse_nccl(load(A3MEGA))
    gbps = headline_busbw(clean)
    assert gbps is not None
    base = NcclBaseline("t", 1, "h100", "inter-pair", gbps)
    assert judge_busbw(run, subject="t", baseline=base).result is not Result.PASS
    assert judge_errors(run, subject="t").result is not Result.PASS


def test_the_clean_a3mega_run_passes_both_judges() -> None:
    run = parse_nccl(load(A3MEGA))
    gbps = headline_busbw(run)
    assert gbps is not None
    base = NcclBaseline("t", 1, "h100", "inter-pair", gbps)
    assert judge_busbw(run, subject="t", baseline=base).result is Result.PASS
    assert judge_errors(run, subject="t").result is Result.PASS


# --- 1. every row, not only the headline ones, is nccl-tests' arithmetic -----------------------

# The a3mega 1 MiB row (all_reduce, 16 ranks: busbw = algbw × 1.875), far below the 1 GiB headline,
# up to its in-place #wrong.
_MIB_ROW = (
    "1048576        262144     float     sum      -1    203.2    5.16    9.68      0    207.2    5.06    9.49"
)


@pytest.mark.parametrize(
    "new",
    [
        _MIB_ROW.replace("5.16    9.68", "5.16   19.36"),  # out-of-place busbw is not algbw × 1.875
        _MIB_ROW.replace("203.2    5.16    9.68", "203.2   10.32   19.35"),  # algbw is not size / time
        _MIB_ROW.replace("203.2", "101.6"),  # time halved: algbw no longer size / time
        _MIB_ROW.replace("5.06    9.49", "5.06   18.98"),  # in-place busbw
        _MIB_ROW.replace("207.2    5.06", "414.4    5.06"),  # in-place time
        _MIB_ROW.replace("262144", "262145"),  # count is not size / sizeof(float)
        _MIB_ROW.replace("float", " half"),  # size is not count × sizeof(half)
    ],
    ids=["busbw", "algbw", "time", "inplace-busbw", "inplace-time", "count", "type"],
)
def test_an_inconsistent_row_below_the_headline_is_an_error(new: str) -> None:
    run = parse_nccl(mutate(A3MEGA, _MIB_ROW, new))
    problems = unreadable(run, "row")
    assert len(problems) == 1 and "1048576" in problems[0], problems
    assert len(run.rows) == 31  # the row is kept as read (its #wrong still counts), and flagged
    assert_a3mega_never_passes(run)


def test_an_inconsistent_row_in_a_headerless_table_is_an_error() -> None:
    """srun-prefixed table, collective and rank count read from the numbers (all_reduce, 16)."""
    row = "65536         16384     float     sum      -1    135.1    0.48    0.91"
    run = parse_nccl(mutate(P5_SLURM, row, row.replace("0.91", "1.91")))
    assert run.nranks == 16 and run.collective == "all_reduce"
    problems = unreadable(run, "row")
    assert len(problems) == 1 and "65536" in problems[0], problems


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("8388608     float    none", "8388600     float    none"),  # count is not size / (4 B × 1 rank)
        ("1715.44    0.00", "1715.44    5.00"),  # one rank: busbw = algbw × 0
        ("19.56  1715.44", "29.56  1715.44"),  # algbw is not size / time
    ],
    ids=["count", "busbw", "time"],
)
def test_alltoall_rows_follow_the_alltoall_arithmetic(old: str, new: str) -> None:
    run = parse_nccl(mutate(ALLTOALL_1GPU, old, new))
    assert run.collective == "alltoall"
    assert len(unreadable(run, "row")) == 1


def test_a_lost_rank_line_shows_in_every_precise_row() -> None:
    """15 device lines: all_reduce's 2(n-1)/n is 1.8667, not the 1.875 every row was printed with."""
    lines = load(A3MEGA).splitlines(keepends=True)
    text = "".join(ln for ln in lines if not ln.startswith("#  Rank 15 "))
    run = parse_nccl(text)
    assert run.nranks == 15
    assert unreadable(run, "row")
    assert_a3mega_never_passes(run)


def test_nccl_reporting_zero_ranks_is_no_rank_count() -> None:
    """The rank count comes from NCCL's `nRanks` line when there is no device list; a damaged one
    (0) is no count to divide by: the rows are held to every rank count, the parse does not raise."""
    nvls = "nccl-debug-info-nvls-3node-h100-issue1453-excerpt.txt"
    info = next(ln for ln in load(nvls).splitlines() if " nRanks 24 " in ln)
    info = info.replace(" nRanks 24 ", " nRanks 0 ")
    run = parse_nccl(info + "\n" + load(P5_SLURM))
    assert run.nranks == 0 and len(run.rows) == 32
    assert unreadable(run, "row") == []


@pytest.mark.parametrize(
    "name", [A3MEGA, P5_SLURM, P5_EKS, GB10, ALLTOALL_1GPU, OLD_ERROR, CUDA_AFTER_16G, SOCKET_131]
)
def test_every_real_table_is_consistent(name: str) -> None:
    assert parse_nccl(load(name)).unreadable == ()


@pytest.mark.parametrize(
    ("binary", "consistent"),
    [("all_gather_perf", True), ("all_reduce_perf", False)],
)
def test_the_2020_table_fits_all_gather_and_not_all_reduce(binary: str, consistent: bool) -> None:
    """nccl-tests #44's rows (2 ranks, June 2020) print size = 2 × count × 4 B and busbw = algbw
    = count × 4 B / time: all_gather's arithmetic before nccl-tests commit ec1b5e2 (`GetBw`
    counted the (n-1)/n received part in algbw, factor 1). Under all_reduce every row is wrong."""
    run = parse_nccl(f"$ ./build/{binary} -b 8 -e 128M -f 2 -g 2\n" + load(OLD_ERROR))
    assert len(run.rows) == 13
    rows = unreadable(run, "row")
    assert (rows == []) is consistent, rows
    if not consistent:
        assert len(rows) == 13


# --- 2. the unit row ----------------------------------------------------------------------------

# The a3mega unit row (without its trailing blanks).
_UNITS = (
    "#        (B)    (elements)                               "
    "(us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
)


@pytest.mark.parametrize(
    "new",
    [
        _UNITS.replace("(GB/s)", "(MB/s)"),
        _UNITS.replace("(GB/s)  (GB/s)", "(GB/s)  (Gb/s)", 1),
        _UNITS.replace("(us)", "(ms)"),
        _UNITS.replace("(B)", "(KB)"),
        _UNITS.replace("(elements)", "(bytes)"),
        _UNITS.replace("(GB/s)            (us)", "(GiB/s)           (us)"),
        _UNITS.replace("  (GB/s)            (us)  (GB/s)  (GB/s)", ""),  # units of the in-place half lost
    ],
    ids=["MB/s", "Gb/s-busbw", "ms", "KB", "bytes", "GiB/s", "short"],
)
def test_a_unit_row_nccl_tests_does_not_print_is_an_error(new: str) -> None:
    run = parse_nccl(mutate(A3MEGA, _UNITS, new))
    problems = unreadable(run, "header")
    assert len(problems) == 1 and "unit" in problems[0], problems
    assert_a3mega_never_passes(run)


def test_a_unit_row_behind_a_launcher_tag_is_read() -> None:
    run = parse_nccl(mutate(P5_SLURM, "(us)  (GB/s)  (GB/s)       \n", "(us)  (MB/s)  (MB/s)       \n"))
    assert len(unreadable(run, "header")) == 1


def test_a_table_without_its_unit_row_is_an_error() -> None:
    run = parse_nccl(mutate(A3MEGA, _UNITS + "       \n", ""))
    assert len(run.rows) == 31
    problems = unreadable(run, "header")
    assert len(problems) == 1 and "unit" in problems[0], problems
    assert_a3mega_never_passes(run)


@pytest.mark.parametrize(
    "name", sorted(p.name for p in FIXTURES.iterdir() if "(elements)" in p.read_text(encoding="utf-8"))
)
def test_every_unit_row_in_the_real_outputs_is_accepted(name: str) -> None:
    assert unreadable(parse_nccl(load(name)), "header") == []


# --- 3. nThread × nGpus per process against the device list ------------------------------------


@pytest.mark.parametrize(
    ("name", "old", "new"),
    [
        (A3MEGA, "nThread 1 nGpus 1 ", "nThread 1 nGpus 2 "),  # 16 pids: one rank per process
        (A3MEGA, "nThread 1 nGpus 1 ", "nThread 1 nGpus 3 "),  # 16 ranks are not n × 3
        (A3MEGA, "nThread 1 nGpus 1 ", "nThread 2 nGpus 1 "),  # threads share their process's pid
        (A3MEGA, "nThread 1 nGpus 1 ", "nThread 1 nGpus 0 "),
        (GB10, "nThread 1 nGpus 1 ", "nThread 1 nGpus 2 "),  # two hosts cannot be one process
        (SOCKET_131, "nThread 1 nGpus 2 ", "nThread 1 nGpus 1 "),  # one pid, one host: one process
        (SOCKET_131, "nThread 1 nGpus 2 ", "nThread 1 nGpus 4 "),  # 2 device lines for 4 GPUs
    ],
    ids=["a3mega-g2", "a3mega-g3", "a3mega-t2", "a3mega-g0", "gb10-g2", "socket131-g1", "socket131-g4"],
)
def test_ngpus_contradicting_the_device_lines_is_an_error(name: str, old: str, new: str) -> None:
    run = parse_nccl(mutate(name, old, new))
    problems = unreadable(run, "header")
    assert len(problems) == 1 and "nGpus" in problems[0], problems
    if name == A3MEGA:
        assert_a3mega_never_passes(run)


def test_one_process_per_node_driving_eight_gpus_is_consistent() -> None:
    """`mpirun -np 2 ... -g 8`: each process prints its 8 ranks under one pid (the a3mega device
    list with one pid per node and the header's nGpus 8)."""
    text = load(A3MEGA).replace("nThread 1 nGpus 1 ", "nThread 1 nGpus 8 ")
    text = re.sub(r"Pid   \d{4} on ztan-mig-235z", "Pid   6899 on ztan-mig-235z", text)
    text = re.sub(r"Pid   \d{4} on ztan-mig-gq73", "Pid   6733 on ztan-mig-gq73", text)
    run = parse_nccl(text)
    assert run.params["nGpus"] == 8 and run.nranks == 16
    assert run.unreadable == ()


def test_a_process_split_across_pids_is_an_error() -> None:
    """nGpus 8 but the second node's ranks come from two processes."""
    text = load(A3MEGA).replace("nThread 1 nGpus 1 ", "nThread 1 nGpus 8 ")
    text = re.sub(r"Pid   \d{4} on ztan-mig-235z", "Pid   6899 on ztan-mig-235z", text)
    text = re.sub(r"Pid   \d{4} on ztan-mig-gq73", "Pid   6733 on ztan-mig-gq73", text, count=7)
    run = parse_nccl(text)
    problems = unreadable(run, "header")
    assert len(problems) == 1 and "nGpus" in problems[0], problems
