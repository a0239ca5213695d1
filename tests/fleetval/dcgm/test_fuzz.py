"""No silent pass, DCGM: mutated `dcgmi diag` output never crashes the parser or judge, never hangs,
and never passes a node on evidence that was lost or damaged.

Seeds: every real fixture in tests/fixtures/dcgm (see SOURCES.md there) and the simulator's output
(`render_dcgm`) for DCGM 3.x and 4.x, JSON and text: passing runs at r1..r4, memory / PCIe / NVLink
failures, a thermal warning and a mixed run. The simulator renders no internal error, so the
internal-error seed is the real DCGM 4.2.3 paste (NVIDIA/DCGM issue #253).

The oracle, per mutant (the mutators are shared: tests/fuzz.py):

- the parse returns a report or raises `ParseError`; the judge never raises (anything else: a crash);
- a seed whose clean judgement is not `pass` (fail, warn, inconclusive): no changed copy passes;
- a passing seed: a changed copy may pass only if it still carries exactly the clean report's
  evidence (every test's result and every per-GPU result, and the run level), and it is not the
  report cut short. A mutation that touched only what the judgement does not read (a version
  string, a serial number, a duplicated line) may pass; a deleted test row, a garbled status, a
  truncated table, relabelled entities or removed GPUs change that evidence and may not;
- a GPU that fails or warns in the clean report never gets a `pass` record from a changed copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given

from fleetval.dcgm.judge import DcgmJudgement, judge_dcgm
from fleetval.dcgm.parser import DcgmReport, parse_dcgm
from fleetval.dcgm.simulated import DcgmFault, render_dcgm
from fleetval.errors import ParseError
from fleetval.records import Result
from tests.fuzz import Mutant, fuzz_settings, mutants, record, timed

FIXTURES = Path(__file__).parents[2] / "fixtures" / "dcgm"
FAMILY = "dcgm"
NODE = "fuzz-node"

# Words whose corruption damages what the judgement reads: status words, the JSON keys that carry
# results and entities, the text table's labels, and the test names (3.x and 4.x spellings).
WORDS = (
    "Pass",
    "PASS",
    "Fail",
    "Warn",
    "Skip",
    "Warning",
    "GPU",
    "GPUs",
    "All",
    "status",
    "entity_id",
    "entity_group",
    "gpu_ids",
    "gpu_id",
    "results",
    "tests",
    "name",
    "warnings",
    "error_severity",
    "test_summary",
    "Metadata",
    "Deployment",
    "software",
    "memory",
    "pcie",
    "diagnostic",
    "targeted_stress",
    "targeted_power",
    "memory_bandwidth",
    "memtest",
    "pulse_test",
    "GPU Memory",
    "PCIe",
    "Diagnostic",
    "Targeted Stress",
    "Targeted Power",
    "Memory Bandwidth",
    "Memtest",
    "Pulse Test",
    "Denylist",
    "NVML Library",
    "Inforom",
    "Persistence Mode",
    "Error",
)


@dataclass(frozen=True, slots=True)
class Seed:
    name: str
    text: str
    gate: str
    level: int | None  # the level the probe asked for
    gpus: int  # the node's GPU capacity (what the pipeline passes as expected_gpus)
    expect: Result  # the clean judgement


# fixture file → (gate, level asked, GPUs on the node, clean judgement). GPU counts are what each
# sample shows (its GPU lines, device IDs or GPU ids); where a fragment shows none, 8.
_REAL: dict[str, tuple[str, int | None, int, Result]] = {
    "dcgm4.2.3-r2-text-pcie-fail-internal-error-issue253.txt": ("weekly", 2, 4, Result.INCONCLUSIVE),
    "dcgm-r2-text-fragment-gpu-memory-fail-thermal-mlengineering.txt": ("weekly", 2, 8, Result.FAIL),
    "dcgm-r3-text-fragment-deployment-error-row-remap-pending-mlengineering.txt": (
        "post-xid",
        3,
        8,
        Result.FAIL,
    ),
    "dcgm3-r2-pass-json-virtualclient.json": ("weekly", 2, 1, Result.PASS),
    "dcgm3.1.0-nvvs-json-8gpu-pass-deployment-nulls-dcgm-unittest.txt": ("weekly", 1, 8, Result.INCONCLUSIVE),
    "dcgm3-r3-json-t400-all-skip-issue139-fragment.txt": ("post-xid", 3, 1, Result.INCONCLUSIVE),
    "dcgm4-r4-json-fragment-issue215.json": ("post-xid", 4, 8, Result.INCONCLUSIVE),
    "dcgm4-diag-json-schema.reference.json": ("weekly", 2, 8, Result.INCONCLUSIVE),
    "dcgm3.0.4-r3-text-header-deployment-pass-issue55-fragment.txt": ("post-xid", 3, 1, Result.INCONCLUSIVE),
    "dcgm3.3.1-r2-text-header-metadata-deployment-go-dcgm-issue52-fragment.txt": (
        "weekly",
        2,
        1,
        Result.INCONCLUSIVE,
    ),
}

# name → (gate, level, GPUs, faults, clean judgement); rendered for DCGM 3.x and 4.x, JSON and text.
_SIM: dict[str, tuple[str, int, int, tuple[DcgmFault, ...], Result]] = {
    "pass-r1": ("weekly", 1, 8, (), Result.INCONCLUSIVE),  # r1 is below every gate's level
    "pass-r2": ("weekly", 2, 8, (), Result.PASS),
    "pass-r3": ("post-xid", 3, 4, (), Result.PASS),
    "pass-r4": ("post-xid", 4, 2, (), Result.PASS),
    "fail-memory-r2": ("weekly", 2, 8, (DcgmFault(5, "memory"),), Result.FAIL),
    "fail-pcie-r2": ("onboarding", 2, 8, (DcgmFault(2, "pcie"),), Result.FAIL),
    "fail-nvlink-r3": ("post-xid", 3, 4, (DcgmFault(1, "nvlink"),), Result.FAIL),
    "warn-thermal-r2": ("weekly", 2, 8, (DcgmFault(3, "thermal_warn"),), Result.WARN),
    "mixed-r3": (
        "post-xid",
        3,
        8,
        (DcgmFault(1, "memory"), DcgmFault(3, "thermal_warn"), DcgmFault(6, "nvlink")),
        Result.FAIL,
    ),
}


def _seeds() -> list[Seed]:
    seeds = [
        Seed(f"real:{name}", (FIXTURES / name).read_bytes().decode("utf-8"), gate, level, gpus, expect)
        for name, (gate, level, gpus, expect) in _REAL.items()
    ]
    for major in (3, 4):
        for fmt in ("json", "text"):
            for label, (gate, level, gpus, faults, expect) in _SIM.items():
                text = render_dcgm(
                    level=level,
                    gpu_count=gpus,
                    gpu_uuids=[f"GPU-fuzz-{g}" for g in range(gpus)],
                    driver_version="570.148.08",
                    faults=faults,
                    dcgm_major=major,
                    fmt=fmt,
                )
                seeds.append(Seed(f"sim:dcgm{major}-{fmt}-{label}", text, gate, level, gpus, expect))
    return seeds


SEEDS: dict[str, Seed] = {s.name: s for s in _seeds()}
PAIRS = [(s.name, s.text) for s in SEEDS.values()]
PASSING = [(s.name, s.text) for s in SEEDS.values() if s.expect is Result.PASS]
FAILING = [(s.name, s.text) for s in SEEDS.values() if s.expect in (Result.FAIL, Result.WARN)]
STRUCTURAL_OPS = ("status", "number", "delete_line", "swap_lines", "join_lines", "truncate", "duplicate_line")


def judge_text(
    text: str, seed: Seed, *, capacity: bool = True
) -> tuple[DcgmReport | ParseError, DcgmJudgement]:
    """Parse and judge as the pipeline does (the node's capacity known), or as `fleetval judge dcgm`
    does without `--gpus` (`capacity=False`: the report's own GPU count stands in)."""
    report: DcgmReport | ParseError
    try:
        report = parse_dcgm(text)
    except ParseError as exc:
        report = exc
    expected = seed.gpus if capacity else None
    judgement = judge_dcgm(report, gate=seed.gate, node=NODE, level=seed.level, expected_gpus=expected)
    return report, judgement


CLEAN = {
    (name, capacity): judge_text(seed.text, seed, capacity=capacity)
    for name, seed in SEEDS.items()
    for capacity in (True, False)
}


def evidence(report: DcgmReport | ParseError) -> frozenset[tuple[str, str, str]]:
    """What a judgement rests on: each test's result, each per-GPU result, the run level."""
    if isinstance(report, ParseError):
        return frozenset()
    tests = {("test", t.name, t.result) for t in report.tests}
    gpus = {(t.name, gpu, result) for t in report.tests for gpu, result in t.gpus.items()}
    return frozenset({*tests, *gpus, ("level", "", str(report.level))})


def gpu_records(judgement: DcgmJudgement) -> dict[str, Result]:
    return {
        str(v.evidence["gpu_index"]): v.result
        for v in judgement.verdicts
        if v.criterion == "D-DEV-04" and "gpu_index" in v.evidence
    }


def _cut_short(mutant: Mutant) -> bool:
    kept, whole = mutant.text.rstrip(), mutant.original.rstrip()
    return len(kept) < len(whole) and whole.startswith(kept)


def problem(mutant: Mutant, *, capacity: bool = True) -> tuple[str, str] | None:
    """(outcome, why) when the mutant breaks the oracle: "crashes" or "passes"; None when it holds."""
    seed = SEEDS[mutant.seed]
    with timed(FAMILY):  # a hang fails here, counted as one (not as a crash)
        try:
            report, judgement = judge_text(mutant.text, seed, capacity=capacity)
        except Exception as exc:  # a crash is what this suite counts, whatever its type
            return "crashes", f"{type(exc).__name__}: {str(exc)[:200]}"
    if not mutant.changed:
        return None
    clean_report, clean = CLEAN[seed.name, capacity]
    if judgement.result is Result.PASS and clean.result is not Result.PASS:
        return "passes", f"a changed copy of a report judged {clean.result.value} passed"
    for gpu, result in gpu_records(clean).items():
        if result in (Result.FAIL, Result.WARN) and gpu_records(judgement).get(gpu) is Result.PASS:
            return "passes", f"GPU {gpu} ({result.value} in the clean report) got a pass record"
    if judgement.result is not Result.PASS:
        return None
    if _cut_short(mutant):
        return "passes", "a report cut short passed"
    if evidence(report) != evidence(clean_report):
        lost = sorted(evidence(clean_report) - evidence(report))[:4]
        gained = sorted(evidence(report) - evidence(clean_report))[:4]
        return "passes", f"passed on changed evidence: lost {lost}, gained {gained}"
    return None


def check(mutant: Mutant, *, capacity: bool = True) -> None:
    found = problem(mutant, capacity=capacity)
    if found is None:
        return
    outcome, why = found
    record(FAMILY, outcome)
    raise AssertionError(
        f"{outcome}: {why}; seed {mutant.seed}, ops {mutant.ops}, text {mutant.text[:300]!r}"
    )


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(PAIRS, words=WORDS))
def test_any_mutant_parses_or_raises_parse_error_and_never_passes_damage(mutant: Mutant) -> None:
    check(mutant)


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(PASSING, words=WORDS, ops=STRUCTURAL_OPS))
def test_a_passing_report_damaged_in_its_structure_does_not_pass(mutant: Mutant) -> None:
    check(mutant)


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(FAILING, words=WORDS, ops=STRUCTURAL_OPS, max_ops=2))
def test_a_failing_report_damaged_never_passes_the_node_or_its_bad_gpu(mutant: Mutant) -> None:
    check(mutant)


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(PAIRS, words=WORDS))
def test_without_the_nodes_capacity_the_reports_own_gpu_count_still_guards_a_pass(mutant: Mutant) -> None:
    check(mutant, capacity=False)


@pytest.mark.parametrize("name", list(SEEDS))
def test_each_seed_is_judged_as_expected_before_mutation(name: str) -> None:
    # The oracle leans on the clean judgement; pin it so a change there is seen here first.
    assert CLEAN[name, True][1].result is SEEDS[name].expect
    assert CLEAN[name, False][1].result is SEEDS[name].expect  # every seed covers its whole node
