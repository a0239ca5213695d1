"""End to end: `checkpoint_resume_drill` on a running Airflow 3 against the simulated cluster,
whose drill pods really run the reference job on a claim's directory. The kill and the
preemption are pod deletions through the API. (A faulty job through the simulated kubelet:
tests/fleetval/sim/test_kube_processes.py; every fault through the drill: tests/fleetval/ckpt.)"""

from __future__ import annotations

from typing import Any

import pytest

from fleetval.ckpt.local import job_available
from tests.paths import DEMO_FLEET

pytestmark = [
    pytest.mark.skipif(job_available() is not None, reason=str(job_available())),
    pytest.mark.e2e_long,  # about 100-200 s on 2 cores: make test-all
]
CONF = {"steps": 60}  # saves every 20 steps, 0.8 s of paced training apart


def _drill(env: Any) -> tuple[str, dict[str, dict[str, Any]]]:
    run_id = env.airflow.trigger("checkpoint_resume_drill", CONF)
    state = env.airflow.wait_run("checkpoint_resume_drill", run_id, timeout_s=600)
    verdicts = {
        v["criterion"]: v for v in env.kube.store.verdicts() if v["criterion"].startswith("D-JOB-CKPT")
    }
    return str(state), verdicts


def test_the_drill_runs_as_pods_and_judges_the_reference_job(e2e: Any) -> None:
    env = e2e(DEMO_FLEET)
    state, verdicts = _drill(env)
    results = {c: v["result"] for c, v in verdicts.items()}
    timing = verdicts.pop("D-JOB-CKPT-05")
    assert {c: r for c, r in results.items() if c in verdicts} == dict.fromkeys(verdicts, "pass"), verdicts
    # Save time is wall-clock (paced 40 ms steps: a few per cent on a quiet machine): held to its
    # own numbers and budget, and the judge task fails exactly when it fails.
    evidence, budget = timing["evidence"], timing["judged_against"]
    within = (
        evidence["save_share"] <= budget["max_save_share"] and evidence["max_save_s"] <= budget["max_save_s"]
    )
    assert timing["result"] == ("pass" if within else "fail"), timing
    assert state == ("success" if within else "failed")
    preemption = verdicts["D-JOB-CKPT-07"]["evidence"]["scenarios"]["sigterm"]
    assert preemption["signal_at_step"] == 30 and preemption["resumed_from"] == 30
    assert preemption["exit_code"] == 0 and preemption["seconds_to_exit"] < 30
    atomic = verdicts["D-JOB-CKPT-04"]["evidence"]["scenarios"]["kill_in_save"]
    assert atomic["latest"] == "step-00000020" and atomic["killed_at_step"] == 40
    pvc = env.kube.core.read_namespaced_persistent_volume_claim("fleetval-ckpt-drill", "fleetval")
    assert pvc.status.phase == "Bound"
