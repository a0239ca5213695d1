"""The drill's judges on hand-made evidence: what garbage, a broken harness and edge cases give.
(Real runs are in test_drill.py; these cover what a real run rarely shows.)"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetval.ckpt.judge import (
    CORRUPT,
    KILL,
    SIGTERM,
    DrillEvidence,
    Interruption,
    RunRecord,
    ScenarioEvidence,
    judge_drill,
)
from fleetval.ckpt.parse import Listing, parse_listing, parse_run_log
from fleetval.errors import ParseError
from fleetval.records import Result


def steps_log(first: int, last: int, *events: dict[str, object], from_step: int = 0) -> str:
    lines = [json.dumps({"event": "start", "from_step": from_step, "save_every": 50, "deterministic": True})]
    lines += [
        json.dumps({"step": s, "loss": 1.0 / s, "seconds": 0.01, "state": {}}) for s in range(first, last + 1)
    ]
    lines += [json.dumps(e) for e in events]
    return "\n".join(lines)


REFERENCE = RunRecord(
    parse_run_log(steps_log(1, 10, {"event": "checkpoint_saved", "step": 5, "seconds": 0.01})), 0
)


def test_no_reference_run_makes_every_criterion_inconclusive_not_pass() -> None:
    evidence = DrillEvidence("job", 10, RunRecord(parse_run_log("Traceback: boom"), 1))
    verdicts = judge_drill(evidence)
    assert [v.criterion for v in verdicts] == [f"D-JOB-CKPT-0{i}" for i in range(1, 8)]
    assert {v.result for v in verdicts} == {Result.INCONCLUSIVE}


def test_a_harness_failure_is_an_error() -> None:
    broken = ScenarioEvidence(
        RunRecord(parse_run_log(""), None, "the pod never started"),
        Interruption(landed=False),
        None,
        RunRecord(parse_run_log(""), None, "not run"),
    )
    evidence = DrillEvidence("job", 10, REFERENCE, {KILL: broken, SIGTERM: broken, CORRUPT: broken})
    verdicts = {v.criterion: v for v in judge_drill(evidence)}
    for criterion in ("D-JOB-CKPT-01", "D-JOB-CKPT-04", "D-JOB-CKPT-06", "D-JOB-CKPT-07"):
        assert verdicts[criterion].result is Result.ERROR
        assert "the pod never started" in verdicts[criterion].reason


def test_scenarios_not_run_make_the_verdict_an_error_even_when_the_rest_passes() -> None:
    listing = Listing(latest=None, latest_present=False)
    resumed = RunRecord(parse_run_log(steps_log(1, 10)), 0)
    scenario = ScenarioEvidence(REFERENCE, Interruption(landed=True, at_step=7), listing, resumed)
    evidence = DrillEvidence("job", 10, REFERENCE, {KILL: scenario})
    verdicts = {v.criterion: v for v in judge_drill(evidence)}
    # Nothing on the storage: starting over is the right resume, but the other scenarios were not run.
    assert verdicts["D-JOB-CKPT-01"].result is Result.ERROR
    assert verdicts["D-JOB-CKPT-01"].reason == "sigterm: not run; corrupt: not run"
    assert verdicts["D-JOB-CKPT-01"].evidence["scenarios"]["kill_in_save"]["result"] == "pass"


def test_run_log_lines_that_are_not_contract_lines_are_counted_not_fatal() -> None:
    log = parse_run_log('epoch 1\n{"step": "x", "loss": 1}\n{"step": 1, "loss": 0.5}\n[1, 2]\n{"event": 3}\n')
    assert [r.step for r in log.steps] == [1]
    assert (log.other_lines, log.bad_lines) == (2, 2)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        '{"format": "other"}',
        '{"format": "fleetval-ckpt-listing/1", "checkpoints": 3}',
        '{"format": "fleetval-ckpt-listing/1", "checkpoints": [{"name": "step-1", "files": {}}]}',
        '{"format": "fleetval-ckpt-listing/1", '
        '"checkpoints": [{"name": "step-00000001", "files": {"a": {"bytes": "1"}}}]}',
    ],
)
def test_a_listing_that_is_not_the_inspect_tools_json_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_listing(text)


def test_a_checkpoint_is_intact_only_when_every_file_matches_its_manifest() -> None:
    files = {"model.pt": {"bytes": 3, "sha256": "aa"}}
    manifest = {"format": "fleetval-ckpt/1", "step": 5, "components": ["model"], "files": files}
    entry = {"name": "step-00000005", "files": files, "manifest": manifest, "manifest_error": None}
    good = parse_listing(
        json.dumps({"format": "fleetval-ckpt-listing/1", "latest": "step-00000005", "checkpoints": [entry]})
    )
    assert good.last_complete() == 5
    entry["files"] = {"model.pt": {"bytes": 3, "sha256": "bb"}}
    bad = parse_listing(json.dumps({"format": "fleetval-ckpt-listing/1", "checkpoints": [entry]}))
    assert bad.last_complete() == 0
    assert bad.checkpoints["step-00000005"].integrity_problems() == [
        "model.pt does not match its sha256 in the manifest"
    ]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.binary(max_size=200))
def test_garbage_in_any_run_never_passes(text: str, noise: bytes) -> None:
    garbage = RunRecord(parse_run_log(text + noise.decode("latin-1")), 0)
    listing = Listing(latest="step-00000005", latest_present=True)
    scenario = ScenarioEvidence(garbage, Interruption(landed=True, at_step=5), listing, garbage)
    evidence = DrillEvidence("job", 10, garbage, {KILL: scenario, SIGTERM: scenario, CORRUPT: scenario})
    assert all(v.result is not Result.PASS for v in judge_drill(evidence))
