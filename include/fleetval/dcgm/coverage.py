"""Does a DCGM report cover what was asked: every test of the level, on every GPU of the node?

Pure. A report can pass a node only when it does; each gap names what is missing, so a verdict
can say why a run that found nothing wrong still proves nothing (`fleetval.dcgm.levels` holds the
level table and the reasons a test may be left out).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from fleetval.dcgm import levels
from fleetval.dcgm.parser import DcgmReport, DcgmTest

# Gap kinds: a test the level runs is absent / reported only Skip; a GPU of the node has no result
# in a test that reports per GPU; the report names a GPU the node does not have; the report says it
# ran on a different number of GPUs than the node has.
MISSING_TEST: Final = "missing_test"
SKIPPED_TEST: Final = "skipped_test"
MISSING_GPU: Final = "missing_gpu"
FOREIGN_GPU: Final = "foreign_gpu"
GPU_COUNT: Final = "gpu_count"


@dataclass(frozen=True, slots=True)
class CoverageGap:
    kind: str
    test_id: str | None
    gpus: tuple[str, ...] = ()
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "test_id": self.test_id, "gpus": list(self.gpus), "detail": self.detail}


def node_gpus(report: DcgmReport, expected_gpus: int | None) -> tuple[str, ...]:
    """The GPU indices the report must cover: 0..n-1 for the node's capacity (a pod's GPUs are
    numbered from 0 inside it); without it, the count the report states; else every GPU it names."""
    count = expected_gpus if expected_gpus is not None else report.gpu_count
    if count is not None:
        return tuple(str(i) for i in range(count))
    return tuple(sorted({g for t in report.tests for g in t.gpus}, key=_index))


def coverage_gaps(
    report: DcgmReport, *, level: int, expected_gpus: int | None = None
) -> tuple[CoverageGap, ...]:
    """What the report leaves out of a run at `level` on a node with `expected_gpus` GPUs."""
    gpus = node_gpus(report, expected_gpus)
    by_id: dict[str, list[DcgmTest]] = {}
    for test in report.tests:
        known = levels.diag_test(test.name)
        if known is not None:
            by_id.setdefault(known.test_id, []).append(test)

    gaps: list[CoverageGap] = []
    has_software = levels.SOFTWARE in by_id
    # 3.x prints the software checks as Deployment rows: they stand in for a `software` test and are
    # each required when it is absent (a report with neither lacks the software test, once).
    has_3x_rows = any(t.stands_for == levels.SOFTWARE and t.test_id in by_id for t in levels.DIAG_TESTS)
    for wanted in levels.required_tests(level):
        if wanted.stands_for is not None:
            if has_software or not has_3x_rows:
                continue
        elif wanted.test_id == levels.SOFTWARE and not has_software and has_3x_rows:
            continue
        gaps.extend(_test_gaps(wanted, by_id.get(wanted.test_id, []), gpus))

    node = set(gpus)
    foreign = sorted({g for t in report.tests for g in t.gpus if g not in node}, key=_index)
    if foreign:
        gaps.append(CoverageGap(FOREIGN_GPU, None, tuple(foreign), f"the node has GPUs 0..{len(gpus) - 1}"))
    if report.gpu_count is not None and report.gpu_count != len(gpus):
        gaps.append(
            CoverageGap(
                GPU_COUNT, None, (), f"the report ran on {report.gpu_count} GPUs, the node has {len(gpus)}"
            )
        )
    return tuple(gaps)


def _test_gaps(wanted: levels.DiagTest, found: Sequence[DcgmTest], gpus: Sequence[str]) -> list[CoverageGap]:
    if not found:
        return [
            CoverageGap(MISSING_TEST, wanted.test_id, (), f"r{wanted.level} runs it; the report has no row")
        ]
    if all(t.result == "skip" for t in found):
        if wanted.may_skip is not None:
            return []  # DCGM skips it on healthy hardware (see levels.SKIP_REASONS)
        return [CoverageGap(SKIPPED_TEST, wanted.test_id, (), "skipped, and no documented reason allows it")]
    if not wanted.per_gpu:
        return []
    covered = {g for t in found for g, result in t.gpus.items() if result != "skip"}
    if not covered:
        # E.g. 3.x text "Pass - All" when the report does not say which GPUs "All" were.
        return [CoverageGap(MISSING_GPU, wanted.test_id, tuple(gpus), "the test names no GPU it ran on")]
    missing = tuple(g for g in gpus if g not in covered)
    return [CoverageGap(MISSING_GPU, wanted.test_id, missing, "no result for these GPUs")] if missing else []


def uncovered_gpus(gaps: Sequence[CoverageGap], gpus: Sequence[str]) -> set[str]:
    """GPUs without the whole run's evidence: every one when a test is missing or skipped (it ran
    on none) or the run had another GPU count; else those a gap names (a GPU some test has no
    result for, or one the node does not have)."""
    if any(gap.kind in (MISSING_TEST, SKIPPED_TEST, GPU_COUNT) for gap in gaps):
        return {*gpus, *(g for gap in gaps for g in gap.gpus)}
    return {g for gap in gaps if gap.kind in (MISSING_GPU, FOREIGN_GPU) for g in gap.gpus}


def _index(gpu: str) -> tuple[int, str]:
    return (int(gpu), gpu) if gpu.isascii() and gpu.isdigit() else (1 << 30, gpu)
