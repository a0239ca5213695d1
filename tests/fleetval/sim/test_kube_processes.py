"""Pods of the checkpoint drill image really run (the reference job as a local process), through
the real kubernetes client: their volume is a claim's directory, their log is the job's stdout,
and deleting them signals the process as the kubelet would — SIGTERM and the grace period, or an
immediate kill."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from fleetval.ckpt import contract
from fleetval.ckpt.local import job_available
from fleetval.ckpt.parse import parse_listing, parse_run_log
from tests.simkube import SimKube

pytestmark = pytest.mark.skipif(job_available() is not None, reason=str(job_available()))
NS = "fleetval"
CLAIM = "ckpt-drill"


def claim(sim: SimKube) -> None:
    sim.core.create_namespaced_persistent_volume_claim(
        NS,
        {
            "metadata": {"name": CLAIM},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )


def drill_pod(sim: SimKube, name: str, env: dict[str, str], command: list[str] | None = None) -> None:
    container: dict[str, Any] = {
        "name": "base",
        "image": contract.DRILL_IMAGE,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
    }
    if command:
        container["command"] = command
    sim.core.create_namespaced_pod(
        NS,
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 20,
                "containers": [container],
                "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": CLAIM}}],
            },
        },
    )


def until(probe: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := probe():
            return value
        time.sleep(0.1)
    raise AssertionError("timed out")


def log(sim: SimKube, name: str) -> str:
    return bytes(sim.core.read_namespaced_pod_log(name, NS, _preload_content=False).data).decode()


def follow(sim: SimKube, name: str) -> Callable[[], str]:
    """Follow the pod's log until its container ends (as `kubectl logs -f`); returns a getter."""
    response = sim.core.read_namespaced_pod_log(name, NS, follow=True, _preload_content=False)
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(response.stream(1024)), daemon=True)
    reader.start()

    def result() -> str:
        reader.join(60)
        return b"".join(chunks).decode()

    return result


def phase(sim: SimKube, name: str) -> str | None:
    try:
        return str(sim.core.read_namespaced_pod(name, NS).status.phase)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


ENV = {contract.ENV_DIR: "/ckpt/run", contract.ENV_STEPS: "30", contract.ENV_SAVE_EVERY: "10"}


def test_a_drill_pod_trains_on_its_claim_and_saves_on_sigterm_within_the_grace_period(
    sim_kube: Callable[..., SimKube],
) -> None:
    sim = sim_kube()
    claim(sim)
    assert sim.core.read_namespaced_persistent_volume_claim(CLAIM, NS).status.phase == "Bound"
    drill_pod(sim, "train", {**ENV, contract.ENV_HOLD_AT_STEP: "15"})
    until(lambda: '"holding"' in log(sim, "train"))
    stream = follow(sim, "train")
    deleted = sim.core.delete_namespaced_pod("train", NS, grace_period_seconds=20)
    # Terminating: the pod stays while the job saves (its log can be followed to the end), then goes.
    assert (
        deleted.metadata.deletion_timestamp is not None
        and deleted.metadata.deletion_grace_period_seconds == 20
    )
    until(lambda: phase(sim, "train") is None)
    events = parse_run_log(stream())
    assert events.of("exit") == [{"event": "exit", "reason": "sigterm", "step": 15}]
    assert [e["step"] for e in events.of("checkpoint_saved")] == [10, 15]
    assert events.of("checkpoint_saved")[-1]["reason"] == "sigterm"
    # Another pod on the same claim sees what the first one wrote.
    drill_pod(sim, "inspect", {}, command=[contract.INSPECT_COMMAND[0], "/ckpt/run"])
    until(lambda: phase(sim, "inspect") == "Succeeded")
    listing = parse_listing(log(sim, "inspect"))
    assert listing.latest == "step-00000015" and listing.last_complete() == 15


def test_deleting_with_no_grace_period_kills_the_job_inside_its_save(
    sim_kube: Callable[..., SimKube],
) -> None:
    sim = sim_kube()
    claim(sim)
    drill_pod(sim, "train", {**ENV, contract.ENV_PAUSE_IN_SAVE: "20"})
    until(lambda: '"save_paused"' in log(sim, "train"))
    sim.core.delete_namespaced_pod("train", NS, grace_period_seconds=0)
    assert phase(sim, "train") is None
    drill_pod(sim, "inspect", {}, command=[contract.INSPECT_COMMAND[0], "/ckpt/run"])
    until(lambda: phase(sim, "inspect") == "Succeeded")
    listing = json.loads(log(sim, "inspect"))
    assert listing["latest"] == "step-00000010"
    assert [t for t in listing["temporary"] if t.startswith(".tmp-step-00000020")]  # the interrupted write


def test_a_pod_on_a_missing_claim_stays_pending_with_the_schedulers_reason(
    sim_kube: Callable[..., SimKube],
) -> None:
    sim = sim_kube()
    drill_pod(sim, "train", ENV)
    condition = until(
        lambda: next(
            (
                c
                for c in sim.core.read_namespaced_pod("train", NS).status.conditions or []
                if c.type == "PodScheduled"
            ),
            None,
        )
    )
    assert condition.reason == "Unschedulable"
    assert condition.message.startswith(
        '0/16 nodes are available: persistentvolumeclaim "ckpt-drill" not found.'
    )


def test_a_command_the_image_does_not_have_fails_to_start_as_runc_says(
    sim_kube: Callable[..., SimKube],
) -> None:
    sim = sim_kube()
    claim(sim)
    drill_pod(sim, "bad", {}, command=["python3", "train.py"])
    until(lambda: phase(sim, "bad") == "Failed")
    state = sim.core.read_namespaced_pod("bad", NS).status.container_statuses[0].state.terminated
    assert state.exit_code == 128 and state.reason == "StartError"
    assert 'exec: "python3": executable file not found in $PATH' in log(sim, "bad")


def test_the_fleet_specs_job_faults_break_the_job_the_drill_pods_run(
    sim_kube: Callable[..., SimKube], tmp_path: Any
) -> None:
    """`ckpt.*` faults in the fleet spec reach the reference job as its flags: here it no longer
    saves on SIGTERM, so the pod dies on the signal (143) with nothing saved after step 10."""
    import yaml

    from tests.paths import DEMO_FLEET

    fleet = yaml.safe_load(DEMO_FLEET.read_text())
    fleet["faults"] = [{"kind": "ckpt.no_sigterm_save"}]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    sim = sim_kube(path)
    claim(sim)
    drill_pod(sim, "train", {**ENV, contract.ENV_HOLD_AT_STEP: "15"})
    until(lambda: '"holding"' in log(sim, "train"))
    stream = follow(sim, "train")
    sim.core.delete_namespaced_pod("train", NS, grace_period_seconds=20)
    until(lambda: phase(sim, "train") is None)
    events = parse_run_log(stream())
    assert [e["step"] for e in events.of("checkpoint_saved")] == [10]
    assert events.of("sigterm") == [] and events.of("exit") == []
