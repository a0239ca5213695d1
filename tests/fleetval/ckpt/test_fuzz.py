"""Checkpoint drill evidence under attack: a damaged run log or storage listing parses (or the
listing is a ParseError), the judges never crash, and a damaged resumed log never passes step or
loss continuity unless the steps and losses it carries are exactly the original's."""

from __future__ import annotations

import pytest
from hypothesis import given

from fleetval.ckpt.judge import KILL, DrillEvidence, Interruption, RunRecord, ScenarioEvidence, judge_drill
from fleetval.ckpt.parse import Listing, parse_listing, parse_run_log
from fleetval.errors import ParseError
from tests.fuzz import Mutant, fuzz_settings, mutants, record, timed
from tests.paths import FIXTURES

FAMILY = "ckpt"
SEED_DIR = FIXTURES / "ckpt"
REFERENCE = RunRecord(parse_run_log((SEED_DIR / "reference-run.log").read_text()), 0)
INTERRUPTED = (SEED_DIR / "kill-in-save-interrupted-run.log").read_text()
LISTING = (SEED_DIR / "kill-in-save-listing.json").read_text()
RESUMED = (SEED_DIR / "kill-in-save-resumed-run.log").read_text()
WORDS = ("step", "loss", "event", "start", "from_step", "checkpoint_saved", "save_paused", "latest", "sha256")


def judged(interrupted: str, listing: Listing, resumed: str) -> dict[str, dict[str, object]]:
    scenario = ScenarioEvidence(
        RunRecord(parse_run_log(interrupted), 137),
        Interruption(landed=True, at_step=100),
        listing,
        RunRecord(parse_run_log(resumed), 0),
    )
    verdicts = judge_drill(DrillEvidence("job", 150, REFERENCE, {KILL: scenario}))
    return {
        v.criterion: v.evidence.get("scenarios", {}).get(KILL, {"result": v.result.value}) for v in verdicts
    }


def test_the_seeds_pass_what_the_kill_scenario_judges() -> None:
    results = judged(INTERRUPTED, parse_listing(LISTING), RESUMED)
    for criterion in ("D-JOB-CKPT-01", "D-JOB-CKPT-02", "D-JOB-CKPT-03", "D-JOB-CKPT-04"):
        assert results[criterion]["result"] == "pass", (criterion, results[criterion])


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants([("resumed", RESUMED)], words=WORDS))
def test_a_damaged_resumed_log_never_passes_continuity_with_other_steps_or_losses(mutant: Mutant) -> None:
    with timed(FAMILY):
        results = judged(INTERRUPTED, parse_listing(LISTING), mutant.text)
    record(FAMILY, "parsed")
    if results["D-JOB-CKPT-01"]["result"] == "pass" and results["D-JOB-CKPT-03"]["result"] == "pass":
        carried = [(r.step, r.loss) for r in parse_run_log(mutant.text).steps]
        assert carried == [(r.step, r.loss) for r in parse_run_log(RESUMED).steps], mutant


@pytest.mark.fuzz
@fuzz_settings()
@given(mutants([("listing", LISTING)], words=WORDS))
def test_a_damaged_listing_is_read_or_refused_and_judged_without_a_crash(mutant: Mutant) -> None:
    with timed(FAMILY):
        try:
            listing = parse_listing(mutant.text)
        except ParseError:
            record(FAMILY, "parse_error")
            return
        results = judged(INTERRUPTED, listing, RESUMED)
    record(FAMILY, "parsed")
    if results["D-JOB-CKPT-04"]["result"] == "pass":
        assert listing.latest is not None
        assert not listing.checkpoints[listing.latest].integrity_problems()


@pytest.mark.parametrize(
    "text",
    ["{" * 5000, '{"step": 1, "loss": 1e999}', '{"step": 99999999999999999999, "loss": 0.1}', "\x00" * 1000],
)
def test_hostile_run_lines_are_read_quickly_and_never_pass(text: str) -> None:
    results = judged(INTERRUPTED, parse_listing(LISTING), text)
    assert results["D-JOB-CKPT-01"]["result"] != "pass"
    assert results["D-JOB-CKPT-03"]["result"] != "pass"
