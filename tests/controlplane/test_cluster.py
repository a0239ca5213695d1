"""The real control plane on loopback (`fleetval cluster up | down`): every component built from its
Go module and running, the fleet's GPU nodes joined by the virtual kubelet, a probe's pod run
through the image catalog with the fleet's faults and its logs read through kube-apiserver's proxy
to the kubelet API, RBAC enforced by the real authorizer, deletion with the grace period a kubelet
gives, and nothing left running after `down`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from fleetval.dcgm.parser import parse_dcgm
from fleetval.kueue.job import FINISH_ANNOTATION, JobShape, pod_spec
from fleetval.sim.controlplane.binaries import find_binaries
from tests.paths import ROOT
from tests.realkube import binaries_or_fail, leftover_processes

MINI = ROOT / "include" / "fleetval" / "sim" / "fleets" / "mini.yaml"  # r01-n02: NVLink fault on GPU 6


def _dcgm_pod(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "serviceAccountName": "fleetval-probe",
            "containers": [
                {
                    "name": "base",
                    "image": "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
                    "command": ["/bin/bash", "-c"],
                    "args": ["nvidia-smi -L && nv-hostengine >/dev/null && exec dcgmi diag -r 2 -j"],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}},
                }
            ],
        },
    }


def _wait(predicate: Any, timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_nodes_pods_logs_and_rbac(real_kube: Any) -> None:
    kube = real_kube(MINI)
    assert kube.info["versions"] == find_binaries().versions
    assert set(kube.info["pids"]) == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kueue",
        "virtual-kubelet",
    }
    nodes = {n.metadata.name: n for n in kube.core.list_node().items}
    assert sorted(nodes) == ["r01-n01", "r01-n02", "r01-n03", "r01-n04"]
    for node in nodes.values():
        assert node.status.capacity["nvidia.com/gpu"] == "8"
        assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"

    # The runner (the product's identity) creates a probe pod; the real scheduler places it, the
    # virtual kubelet runs it with the node's fault, and its logs come through kube-apiserver.
    runner = client.CoreV1Api(config.new_client_from_config(config_file=str(kube.kubeconfig)))
    for name, node in (("dcgm-healthy", "r01-n01"), ("dcgm-faulty", "r01-n02")):
        runner.create_namespaced_pod("fleetval", _dcgm_pod(name, node))
    for name, node, overall, exit_codes in (
        ("dcgm-healthy", "r01-n01", "pass", {0}),
        ("dcgm-faulty", "r01-n02", "fail", {205, 226}),  # an NVLink failure is isolate-priority: 205
    ):
        pod = _wait(
            lambda name=name: (
                (p := runner.read_namespaced_pod(name, "fleetval")).status.phase in ("Succeeded", "Failed")
                and p
            ),
            what=f"{name} ended",
        )
        assert pod.spec.node_name == node
        assert pod.status.container_statuses[0].state.terminated.exit_code in exit_codes
        logs = runner.read_namespaced_pod_log(
            name, "fleetval", container="base", _preload_content=False
        ).data.decode()
        report = parse_dcgm(logs[logs.index("{") :])
        assert report.overall == overall
        failed = {gpu for t in report.tests for gpu, r in t.gpus.items() if r == "fail"}
        assert failed == ({"6"} if overall == "fail" else set())

    # RBAC is the real authorizer's: the runner may not read secrets outside its grants.
    with pytest.raises(ApiException) as refused:
        runner.list_namespaced_secret("kube-system")
    assert refused.value.status == 403

    # The nodes' leases are renewed (the node lifecycle controller marks a node NotReady 40 s
    # after its last renewal).
    leases = client.CoordinationV1Api(kube.api_client())
    first = leases.read_namespaced_lease("r01-n01", "kube-node-lease").spec.renew_time
    _wait(
        lambda: leases.read_namespaced_lease("r01-n01", "kube-node-lease").spec.renew_time > first,
        timeout=15,
        what="lease renewed",
    )


def test_deletion_waits_for_the_grace_period(real_kube: Any) -> None:
    """A PID 1 without a SIGTERM handler (busybox sleep) is killed when its grace period ends;
    until then the pod is still there (what Kueue waits for before releasing quota)."""
    kube = real_kube(MINI)
    kube.core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "sleeper"},
            "spec": {
                "terminationGracePeriodSeconds": 3,
                "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "infinity"]}],
            },
        },
    )
    _wait(
        lambda: kube.core.read_namespaced_pod("sleeper", "default").status.phase == "Running", what="running"
    )
    asked = time.monotonic()
    kube.core.delete_namespaced_pod("sleeper", "default")
    time.sleep(1.5)
    assert kube.core.read_namespaced_pod("sleeper", "default").metadata.deletion_timestamp is not None

    def gone() -> bool:
        try:
            kube.core.read_namespaced_pod("sleeper", "default")
        except ApiException as exc:
            return exc.status == 404
        return False

    _wait(gone, timeout=20, what="pod deleted")
    assert time.monotonic() - asked >= 2.5


def test_cli_up_prints_one_line_and_down_stops_everything(tmp_path: Path) -> None:
    binaries_or_fail()
    state = tmp_path / "cluster"
    up = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetval.cli",
            "cluster",
            "up",
            "--state-dir",
            str(state),
            "--fleet",
            str(MINI),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        assert up.returncode == 0, up.stderr
        [line] = up.stdout.splitlines()
        info = json.loads(line)
        assert Path(info["kubeconfig"]).is_file() and info["fleet"] == "mini"
        # A real kubectl works with the kubeconfig as printed.
        kubectl = find_binaries().path("kubectl")
        nodes = subprocess.run(
            [str(kubectl), "--kubeconfig", info["kubeconfig"], "get", "nodes", "-o", "name"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert nodes.stdout.split() == [f"node/r01-n0{i}" for i in range(1, 5)], nodes.stderr
        again = subprocess.run(
            [sys.executable, "-m", "fleetval.cli", "cluster", "up", "--state-dir", str(state)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (
            again.returncode == 1 and again.stderr.startswith("error: ") and "running cluster" in again.stderr
        )
    finally:
        down = subprocess.run(
            [sys.executable, "-m", "fleetval.cli", "cluster", "down", "--state-dir", str(state)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert down.returncode == 0, down.stderr
    assert set(json.loads(down.stdout)["stopped"]) == set(info["pids"])
    assert leftover_processes(state) == []


def test_a_running_pods_new_annotation_reaches_its_container(real_kube: Any) -> None:
    """How a Kueue scenario job is told to finish: the virtual kubelet rewrites the pod's
    downwardAPI file when kube-apiserver changes the annotation, and the container exits 0."""
    kube = real_kube(MINI)
    shape = JobShape(
        name="told",
        namespace="default",
        queue="",
        pods=1,
        gpus=0,
        resource="nvidia.com/gpu",
        cpu="100m",
        memory="64Mi",
        grace=5,
        save=0,
    )
    kube.core.create_namespaced_pod("default", {"metadata": {"name": "told"}, "spec": pod_spec(shape)})
    _wait(lambda: kube.core.read_namespaced_pod("told", "default").status.phase == "Running", what="running")
    time.sleep(2)  # a few turns of the container's loop with the file still empty
    assert kube.core.read_namespaced_pod("told", "default").status.phase == "Running"
    kube.core.patch_namespaced_pod("told", "default", {"metadata": {"annotations": {FINISH_ANNOTATION: "1"}}})

    def ended() -> Any:
        pod = kube.core.read_namespaced_pod("told", "default")
        return pod.status.phase in ("Succeeded", "Failed") and pod

    pod = _wait(ended, what="ended after the annotation")
    assert pod.status.phase == "Succeeded"
    logs = kube.core.read_namespaced_pod_log("told", "default", _preload_content=False).data.decode()
    assert logs.split() == ["started", "finished"]
