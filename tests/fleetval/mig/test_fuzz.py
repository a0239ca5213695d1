"""MIG evidence under attack: mutated `nvidia-smi` tables (the real R525 and R560 ones and the
simulator's), isolation probe outputs and filler logs never crash the parsers or the judges, and
nothing that lost evidence passes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from fleetval.errors import ParseError
from fleetval.mig import isolation
from fleetval.mig.parser import parse_mig
from fleetval.mig.smi import parse_smi
from fleetval.records import Result
from tests.fleetval.mig.test_isolation import BASELINE, DURING, FILL, ev
from tests.fleetval.mig.test_parser import A30, CGI_LGI_L, H100, L_MIXED, RTX_PRO
from tests.fleetval.mig.test_parser import read as read_mig
from tests.fleetval.mig.test_smi import AZURE, SCALEWAY, read, smi_part
from tests.fuzz import Mutant, fuzz_settings, mutants, record, timed

FAMILY = "mig"
SMI_SEEDS = (
    ("r560", smi_part(AZURE)),
    ("r525", read(SCALEWAY)),
    ("sim", DURING[DURING.index("--- nvidia-smi\n") :]),
)
PROBE_SEEDS = (("during", DURING),)
FILL_SEEDS = (("fill", FILL),)
WORDS = ("MIG", "MiB", "Enabled", "N/A", "GPU", "No", "ok", "done", "filled-all", "exit")
# `nvidia-smi mig -lgip/-lgipp/-lgi` and `nvidia-smi -L`, real ones (tests/fixtures/mig).
MIG_SEEDS = (
    ("h100-lgip-lgipp", H100),
    ("a30-lgip-lgipp-lgi", A30),
    ("cgi-lgi-L", CGI_LGI_L),
    ("L-mixed", L_MIXED),
    ("rtx-pro-partial-lgip", RTX_PRO),
    ("h200-lgipp", read_mig("nvidia-smi-mig-lgipp-h200-580.159.04.txt")),
)
MIG_WORDS = ("GPU", "MIG", "Profile", "ID", "Placements", "Placement", "UUID", "Device", "instances", "Name")
# Mutations that damage lines but remove none: whatever they hit, no row may go missing unnoticed.
IN_PLACE_OPS = ("status", "number", "byte", "garbage", "long_token", "line_endings")


def test_the_seeds_are_what_the_judges_expect() -> None:
    assert isolation.judge_fill("n", ev(BASELINE), ev(DURING), ev(FILL)).result is Result.PASS
    assert isolation.judge_visibility("n", ev(DURING)).result is Result.PASS
    assert all(parse_smi(text).tables for _, text in SMI_SEEDS)


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(SMI_SEEDS, words=WORDS))
def test_a_damaged_nvidia_smi_table_parses_or_is_refused(mutant: Mutant) -> None:
    with timed(FAMILY):
        try:
            report = parse_smi(mutant.text)
        except ParseError:
            record(FAMILY, "refused")
            return
    record(FAMILY, "parsed")
    for device in report.mig_devices:
        assert device.memory_used_mib <= device.memory_total_mib


def mig_shape(doc: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """How many records each part holds, and how many MIG devices `-L` lists."""
    shape = {part: len(records) for part, records in doc.items()}
    shape["mig devices"] = sum(len(gpu["devices"]) for gpu in doc.get("devices", []))
    return shape


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(MIG_SEEDS, words=MIG_WORDS))
def test_a_damaged_mig_output_parses_or_is_refused(mutant: Mutant) -> None:
    with timed(FAMILY):
        try:
            parse_mig(mutant.text)
        except ParseError:
            record(FAMILY, "refused")
            return
    record(FAMILY, "parsed")


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(MIG_SEEDS, words=MIG_WORDS, max_ops=1, ops=IN_PLACE_OPS))
def test_a_mig_output_damaged_in_place_is_refused_or_keeps_every_record(mutant: Mutant) -> None:
    """One line damaged (bytes, a word, a number, line ends): a refusal, or every part and record
    of the real output still there: never a table or placement list silently shorter."""
    with timed(FAMILY):
        try:
            doc = parse_mig(mutant.text)
        except ParseError:
            record(FAMILY, "refused")
            return
    record(FAMILY, "parsed")
    assert mig_shape(doc) == mig_shape(parse_mig(mutant.original)), mutant.ops


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(SMI_SEEDS, words=WORDS, max_ops=1, ops=IN_PLACE_OPS))
def test_an_nvidia_smi_table_damaged_in_place_is_refused_or_keeps_every_row(mutant: Mutant) -> None:
    """One line damaged: a refusal, or every GPU, MIG device and process of the real table."""
    with timed(FAMILY):
        try:
            report = parse_smi(mutant.text)
        except ParseError:
            record(FAMILY, "refused")
            return
    record(FAMILY, "parsed")
    real = parse_smi(mutant.original)
    assert (len(report.gpus), len(report.mig_devices), len(report.processes)) == (
        len(real.gpus),
        len(real.mig_devices),
        len(real.processes),
    ), mutant.ops


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(PROBE_SEEDS, words=WORDS))
def test_a_damaged_probe_output_is_judged_never_crashes_and_passes_only_whole(mutant: Mutant) -> None:
    with timed(FAMILY):
        seen = isolation.judge_visibility("n", ev(mutant.text))
        fill = isolation.judge_fill("n", ev(BASELINE), ev(mutant.text), ev(FILL))
    record(FAMILY, seen.result.value)
    if Result.PASS in (seen.result, fill.result):
        # Whatever was damaged, a pass still rests on the one MIG device listed in both tables,
        out = isolation.parse_workload(mutant.text)
        assert len(out.mig_uuids) == 1 and len(out.smi.mig_devices) == 1
    if fill.result is Result.PASS:  # and the fill check's on a workload that ran to its end.
        assert out.done and out.alloc_ok and out.matmul_tflops is not None


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants(FILL_SEEDS, words=WORDS))
def test_a_damaged_filler_log_never_makes_the_fill_check_pass_without_a_full_fill(mutant: Mutant) -> None:
    with timed(FAMILY):
        verdict = isolation.judge_fill("n", ev(BASELINE), ev(DURING), ev(mutant.text))
    record(FAMILY, verdict.result.value)
    if verdict.result is Result.PASS:
        out = isolation.parse_fill(mutant.text)
        assert out.complete and all(a >= isolation.FILLED_FRACTION * t for _, a, t in out.devices)
