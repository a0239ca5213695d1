"""nccl-tests exit codes read by the version the output prints (`fleetval.nccl.exit_codes`): the
table against NVIDIA/nccl-tests' common.h/common.cu per tag, the version line of real outputs
(tests/fixtures/nccl), and what the MPIJob harness does with a current build's wrong results."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from fleetval.nccl import exit_codes
from fleetval.nccl.exit_codes import (
    EXIT_CODE_CONVENTIONS,
    VersionSeen,
    exit_code_problem,
    nccl_tests_version,
    read_exit_code,
)
from fleetval.nccl.probe import nccl_probe

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
HEADER_2_20 = FIXTURES / "all_reduce_perf-2node-gb10-nccl-tests-2.20.0-header-dgx-spark-pr103-excerpt.txt"
NO_VERSION = FIXTURES / "all_reduce_perf-2node-p5-mpijob-eks-excerpt-awsome.txt"


def header(version: str) -> str:
    # What an OpenMPI launcher log shows (tag-output prefix), as the MPIJob launcher stores it.
    return (
        f"[1,0]<stdout>:# nccl-tests version {version} (b4d5bee) nccl-headers=22803 nccl-library=22803\n"
        "[1,0]<stdout>:# Collective test starting: all_reduce_perf\n"
    )


def test_the_table_covers_every_version_once_in_order() -> None:
    rows = EXIT_CODE_CONVENTIONS
    assert rows[0].first is None and rows[-1].until is None
    for before, after in itertools.pairwise(rows):
        assert before.until == after.first  # contiguous, no overlap
    for probe in [(2, 13, 6), (2, 17, 2), (2, 17, 3), (2, 17, 6), (2, 17, 7), (2, 20, 0), (3, 0, 0)]:
        assert sum(r.covers(probe) for r in rows) == 1
    # every row reports success, NCCL errors and -T timeouts; wrong results move 1 → 6 → 7
    assert all({0, 3, 4} <= r.reported and 2 not in r.reported and 5 not in r.reported for r in rows)
    assert [sorted(r.reported - {0, 3, 4}) for r in rows] == [[1], [6], [7]]
    assert exit_codes.ANY_VERSION_REPORTED == (0, 1, 3, 4, 6, 7)


def test_the_version_line_of_real_and_launcher_prefixed_outputs() -> None:
    assert nccl_tests_version(HEADER_2_20.read_text()) == VersionSeen("2.20.0", (2, 20, 0))
    assert nccl_tests_version(NO_VERSION.read_text()) == VersionSeen(None, None)
    assert nccl_tests_version(header("2.17.5")).version == (2, 17, 5)
    assert nccl_tests_version(header("v2.18.3")).version == (2, 18, 3)
    assert nccl_tests_version(header("dev")) == VersionSeen("dev", None)


@pytest.mark.parametrize(
    ("code", "version", "reported", "meaning"),
    [
        # current builds (2.17.7+): 7 is wrong results, 1 an internal error, 6 a usage error
        (7, "2.20.0", True, "wrong results"),
        (7, "2.17.7", True, "wrong results"),
        (1, "2.20.0", False, "testInternalError"),
        (6, "2.19.6", False, "testInvalidUsage"),
        # 2.17.4-2.17.6 print the version and exit 6 for wrong results
        (6, "2.17.5", True, "wrong results"),
        (7, "2.17.5", False, "not an nccl-tests code"),
        (1, "2.17.4", False, "testInternalError"),
        # every version: NCCL error and -T timeout reported, CUDA error and 5 the harness
        (3, "2.20.0", True, "testNcclError"),
        (4, "2.20.0", True, "testTimeout"),
        (2, "2.20.0", False, "testCudaError"),
        (5, "2.20.0", False, "testNotImplemented"),
        (127, "2.20.0", False, "not an nccl-tests code"),
    ],
)
def test_a_code_is_read_by_the_printed_version(code: int, version: str, reported: bool, meaning: str) -> None:
    reading = read_exit_code(code, header(version))
    assert reading.reported is reported and meaning in reading.meaning
    assert (exit_code_problem(code, header(version)) is None) is reported


def test_without_a_version_line_only_the_safe_older_codes_report() -> None:
    """No version line: nccl-tests v2.17.3 or older (the pinned image's 2cbb968 is one). 1 is the
    older builds' wrong results (or, in v2.17.3, an argument error before any table: the judge
    passes nothing without a table), 6 is v2.17.3's wrong results; 7 no such build exits with."""
    raw = NO_VERSION.read_text()
    assert [c for c in range(9) if read_exit_code(c, raw).reported] == [0, 1, 3, 4, 6]
    problem = exit_code_problem(7, raw)
    assert problem is not None and "prints no version" in problem
    # An unreadable version line is still from 2.17.4 on (the line's first version): 1 is internal
    assert [c for c in range(9) if read_exit_code(c, header("dev")).reported] == [0, 3, 4, 6, 7]


def test_the_probe_declares_every_reporting_code_so_a_current_builds_wrong_results_are_output() -> None:
    """Wrong results from a current nccl-tests (exit 7) reach the judge as output, not as a
    retried harness error: the MPIJob launcher check lets 7 through with nccl-tests' banner."""
    from fleetval_airflow.mpijobs import launcher_failure

    spec = nccl_probe(["a", "b"], gpus_per_node=8, repeat=0, run_key="k")
    assert {1, 6, 7} <= set(spec.reported_exit_codes) and 2 not in spec.reported_exit_codes
    raw = HEADER_2_20.read_text()
    assert launcher_failure(7, spec, "Failed", "job", raw) is None
    assert launcher_failure(2, spec, "Failed", "job", raw) is not None
