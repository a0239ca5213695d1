"""The drill's pods on a cluster: their specs (pure) and the evidence read back from the store."""

from __future__ import annotations

import json

from fleetval.ckpt import contract
from fleetval.ckpt.drill import DrillPlan
from fleetval.ckpt.judge import CORRUPT, KILL, SIGTERM
from fleetval.ckpt.probe import DrillTarget, StoredRun, drill_id, drill_specs, evidence, run_names
from fleetval.probes.pod import kpo_kwargs

TARGET = DrillTarget(node="r01-n01", claim="fleetval-ckpt-drill")


def test_every_pod_of_the_drill_is_on_one_node_and_claim_in_its_scenarios_directory() -> None:
    specs = drill_specs("checkpoint_resume_drill/manual__1", DrillPlan(), TARGET)
    assert list(specs) == run_names() and len(specs) == 11
    root = f"/ckpt/{drill_id('checkpoint_resume_drill/manual__1')}"
    assert {s.node for s in specs.values()} == {"r01-n01"} and {s.claim for s in specs.values()} == {
        TARGET.claim
    }
    assert specs["kill_in_save"].env[contract.ENV_PAUSE_IN_SAVE] == "100"
    assert specs["kill_in_save.resume"].env[contract.ENV_DIR] == f"{root}/kill_in_save"
    assert contract.ENV_PAUSE_IN_SAVE not in specs["kill_in_save.resume"].env
    assert specs["sigterm"].env[contract.ENV_HOLD_AT_STEP] == "75"
    assert specs["corrupt"].env[contract.ENV_STEPS] == "100"
    assert specs["corrupt.damage"].command == ("fleetval-ckpt-corrupt", f"{root}/corrupt")
    assert specs["sigterm.inspect"].command == ("fleetval-ckpt-inspect", f"{root}/sigterm")
    assert specs["reference"].command == ()  # the image's entrypoint
    pod = kpo_kwargs(specs["reference"])
    assert pod["volumes"][0].persistent_volume_claim.claim_name == TARGET.claim
    assert pod["volume_mounts"][0].mount_path == "/ckpt" and pod["security_context"].fs_group == 1000


def test_missing_outputs_are_harness_errors_in_the_evidence() -> None:
    listing = {"format": contract.LISTING_FORMAT, "latest": None, "checkpoints": []}
    stored = {
        "reference": StoredRun('{"step": 1, "loss": 0.5}\n', 0, None),
        "kill_in_save.inspect": StoredRun(json.dumps(listing), 0, None),
        "corrupt.damage": StoredRun("error: nothing to corrupt", 1, "exited 1"),
    }
    found = evidence(DrillPlan(), TARGET, stored, {KILL: {"landed": True, "at_step": 100}})
    assert found.subject == f"{contract.DRILL_IMAGE}@fleetval-ckpt-drill"
    assert [r.step for r in found.reference.log.steps] == [1]
    kill = found.scenarios[KILL]
    assert kill.interruption.at_step == 100 and kill.listing is not None
    assert kill.resumed.error == "its task left no output"
    assert found.scenarios[SIGTERM].listing_error == "the inspect pod left no output"
    assert not found.scenarios[CORRUPT].interruption.landed
