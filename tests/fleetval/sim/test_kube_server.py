"""`fleetval sim serve` behaves like the Kubernetes API server where the product depends on it,
seen through the real kubernetes client: nodes as GFD and the device plugin leave them, paging,
selectors, validation (422/400 with Status bodies), resourceVersion conflicts, pod scheduling and
lifecycle, the image catalog, logs, events, watch, and state across a restart."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from fleetval.dcgm.probe import DCGM_IMAGE
from fleetval.k8s.cluster import KubeCluster
from fleetval.nccl.probe import NCCL_TESTS_IMAGE
from tests.paths import DEMO_FLEET
from tests.simkube import SimKube

NS = "fleetval"


def pod(
    name: str,
    node: str | None,
    *,
    image: str = "busybox:1.36",
    args: list[str] | None = None,
    gpus: int = 0,
    deadline: int | None = None,
    command: list[str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "base",
        "image": image,
        "command": command or ["/bin/sh", "-c"],
        "args": args or ["sleep infinity"],
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never"}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if deadline:
        spec["activeDeadlineSeconds"] = deadline
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "t"}},
        "spec": spec,
    }


def wait_phase(core: client.CoreV1Api, name: str, phases: set[str], timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = core.read_namespaced_pod(name, NS)
        if current.status.phase in phases:
            return current
        time.sleep(0.05)
    raise AssertionError(f"pod {name} stayed {current.status.phase}")


def log(core: client.CoreV1Api, name: str, **kwargs: Any) -> str:
    """A pod's log as the product reads it (the client's own str conversion mangles plain text)."""
    response = core.read_namespaced_pod_log(name, NS, container="base", _preload_content=False, **kwargs)
    return str(response.data.decode())


@pytest.fixture
def kube(sim_kube: Any) -> SimKube:
    return sim_kube(DEMO_FLEET)  # type: ignore[no-any-return]


def test_nodes_look_like_gpu_operator_nodes(kube: SimKube) -> None:
    nodes = kube.core.list_node(label_selector="nvidia.com/gpu.present=true").items
    assert len(nodes) == 16
    n = next(x for x in nodes if x.metadata.name == "r01-n01")
    assert n.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert n.metadata.labels["fleetval.io/rack"] == "r01"
    assert n.metadata.labels["topology.kubernetes.io/zone"] != "r01"  # racks are not zones
    assert n.status.capacity["nvidia.com/gpu"] == "8" == n.status.allocatable["nvidia.com/gpu"]
    # r02-n08 raised Xid 79 on GPU 2: the device plugin withdrew it from allocatable, not capacity.
    bad = kube.node("r02-n08")
    assert bad.status.capacity["nvidia.com/gpu"] == "8"
    assert bad.status.allocatable["nvidia.com/gpu"] == "7"


def test_paging_and_selectors(kube: SimKube) -> None:
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = kube.core.list_node(limit=5, _continue=token)
        seen += [n.metadata.name for n in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
    assert pages == 4 and len(seen) == len(set(seen)) == 16
    r01 = kube.core.list_node(label_selector="fleetval.io/rack in (r01),!fleetval.io/quarantine").items
    assert {n.metadata.name for n in r01} == {f"r01-n{i:02d}" for i in range(1, 9)}
    with pytest.raises(ApiException) as bad:
        kube.core.list_node(field_selector="spec.nodeName=x")
    assert bad.value.status == 400
    with pytest.raises(ApiException) as bad_token:
        kube.core.list_node(limit=2, _continue="not-a-token")
    assert bad_token.value.status == 400


def test_api_server_rejects_what_a_real_one_would(kube: SimKube) -> None:
    bad = pod("no-image", "r01-n01")
    del bad["spec"]["containers"][0]["image"]
    with pytest.raises(ApiException) as missing:
        kube.core.create_namespaced_pod(NS, bad)
    assert missing.value.status == 422
    status = json.loads(missing.value.body)
    assert status["kind"] == "Status" and status["reason"] == "Invalid"
    assert any("image" in c["field"] for c in status["details"]["causes"])

    unknown = pod("unknown-field", "r01-n01")
    unknown["spec"]["containers"][0]["gpuCount"] = 8
    with pytest.raises(ApiException) as strict:
        kube.core.create_namespaced_pod(NS, unknown, field_validation="Strict")
    assert strict.value.status == 400 and "unknown field" in json.loads(strict.value.body)["message"]
    # The server default (Warn) drops the field and creates the pod, as a real one does.
    created = kube.core.create_namespaced_pod(NS, unknown)
    assert created.metadata.name == "unknown-field"

    mpijob = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "bad-job"},
        "spec": {
            "slotsPerWorker": "eight",
            "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {"spec": {"containers": []}}}},
        },
    }
    with pytest.raises(ApiException) as typed:
        kube.custom.create_namespaced_custom_object("kubeflow.org", "v2beta1", NS, "mpijobs", mpijob)
    assert typed.value.status == 422
    assert "slotsPerWorker" in json.loads(typed.value.body)["message"]

    with pytest.raises(ApiException) as no_ns:
        kube.core.create_namespaced_pod("nowhere", pod("x", "r01-n01"))
    assert no_ns.value.status == 404


def test_pod_lifecycle_logs_and_events(kube: SimKube) -> None:
    core = kube.core
    core.create_namespaced_pod(NS, pod("hello", "r01-n02", args=["echo hello; echo world"]))
    done = wait_phase(core, "hello", {"Succeeded", "Failed"})
    assert done.status.phase == "Succeeded" and done.spec.node_name == "r01-n02"
    assert done.status.container_statuses[0].state.terminated.exit_code == 0
    assert log(core, "hello") == "hello\nworld\n"
    stamped = log(core, "hello", timestamps=True)
    assert all(line.split(" ", 1)[0].endswith("Z") for line in stamped.splitlines())
    reasons = [
        e.reason for e in core.list_namespaced_event(NS, field_selector="involvedObject.name=hello").items
    ]
    assert reasons[:2] == ["Scheduled", "Pulled"] and "Started" in reasons
    core.delete_namespaced_pod("hello", NS)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("hello", NS)
    assert gone.value.status == 404


def test_a_command_the_image_lacks_fails_as_it_would(kube: SimKube) -> None:
    core = kube.core
    core.create_namespaced_pod(
        NS,
        pod(
            "nccl-bare",
            "r01-n03",
            image=NCCL_TESTS_IMAGE,
            gpus=8,
            command=["/bin/bash", "-c"],
            args=["all_reduce_perf -b 8 -e 8G -f 2 -g 8"],
        ),
    )
    failed = wait_phase(core, "nccl-bare", {"Succeeded", "Failed"})
    assert failed.status.phase == "Failed"
    assert failed.status.container_statuses[0].state.terminated.exit_code == 127
    assert "command not found" in log(core, "nccl-bare")


def test_dcgm_probe_prints_the_nodes_faults(kube: SimKube) -> None:
    from fleetval.dcgm.parser import parse_dcgm
    from fleetval.nvidia_smi.parser import split_gpu_list

    core = kube.core
    script = "nvidia-smi -L && nv-hostengine >/dev/null && exec dcgmi diag -r 2 -j"
    core.create_namespaced_pod(NS, pod("dcgm", "r01-n03", image=DCGM_IMAGE, gpus=8, args=[script]))
    done = wait_phase(core, "dcgm", {"Succeeded", "Failed"})
    uuids, report_text = split_gpu_list(log(core, "dcgm"))
    assert len(uuids) == 8
    report = parse_dcgm(report_text)
    assert any(result == "fail" for test in report.tests for g, result in test.gpus.items() if g == "5")
    assert done.status.container_statuses[0].state.terminated.exit_code != 127


def test_scheduling_honours_allocatable_cordon_and_taints(kube: SimKube) -> None:
    core = kube.core
    # All 8 GPUs of a node whose GPU 2 was withdrawn: never scheduled, Pending with the reason.
    core.create_namespaced_pod(NS, pod("want8", "r02-n08", gpus=8))
    time.sleep(0.3)
    pending = core.read_namespaced_pod("want8", NS)
    assert pending.status.phase == "Pending" and pending.spec.node_name is None
    assert pending.status.start_time is None
    events = core.list_namespaced_event(NS, field_selector="involvedObject.name=want8").items
    assert any(e.reason == "FailedScheduling" and "Insufficient nvidia.com/gpu" in e.message for e in events)
    # A cordoned node takes no new pod; a tainted one only pods that tolerate the taint.
    KubeCluster(core).cordon("r01-n04")
    core.create_namespaced_pod(NS, pod("on-cordoned", "r01-n04"))
    KubeCluster(core).add_taint("r01-n05", "fleetval.io/maintenance", "quarantine", "NoSchedule")
    core.create_namespaced_pod(NS, pod("on-tainted", "r01-n05"))
    time.sleep(0.3)
    assert core.read_namespaced_pod("on-cordoned", NS).status.phase == "Pending"
    assert core.read_namespaced_pod("on-tainted", NS).status.phase == "Pending"
    tolerant = pod("tolerant", "r01-n05")
    tolerant["spec"]["tolerations"] = [{"key": "fleetval.io/maintenance", "operator": "Exists"}]
    core.create_namespaced_pod(NS, tolerant)
    assert wait_phase(core, "tolerant", {"Running"}).spec.node_name == "r01-n05"


def test_active_deadline_fires_only_once_the_pod_started(sim_kube: Any) -> None:
    kube = sim_kube(DEMO_FLEET, time_scale=0.001)
    core = kube.core
    core.create_namespaced_pod(NS, pod("slow", "r01-n01", args=["sleep 100000"], deadline=60))
    killed = wait_phase(core, "slow", {"Failed"}, timeout=15)
    assert killed.status.reason == "DeadlineExceeded"


def test_taint_lost_update_is_a_conflict_and_kubecluster_retries(kube: SimKube) -> None:
    core = kube.core
    node = core.read_node("r01-n06")
    core.patch_node("r01-n06", {"metadata": {"labels": {"other-writer": "yes"}}})
    stale = {"metadata": {"resourceVersion": node.metadata.resource_version}, "spec": {"taints": []}}
    with pytest.raises(ApiException) as conflict:
        core.patch_node("r01-n06", stale)
    assert conflict.value.status == 409

    # Another writer adds its taint between KubeCluster's read and its write: both taints survive.
    cluster = KubeCluster(core)
    original = core.read_node
    raced = threading.Event()

    def read_then_race(name: str, **kw: Any) -> Any:
        current = original(name, **kw)
        if not raced.is_set():
            raced.set()
            fresh = original(name)
            taints = [*(fresh.spec.taints or []), client.V1Taint(key="other", value="x", effect="NoSchedule")]
            core.patch_node(
                name, {"spec": {"taints": [client.ApiClient().sanitize_for_serialization(t) for t in taints]}}
            )
        return current

    cluster.core.read_node = read_then_race  # type: ignore[method-assign]
    cluster.add_taint("r01-n06", "fleetval.io/maintenance", "quarantine", "NoSchedule")
    keys = {t.key for t in core.read_node("r01-n06").spec.taints}
    assert keys == {"other", "fleetval.io/maintenance"}


def test_inventory_reads_racks_from_the_rack_label(kube: SimKube) -> None:
    core = kube.core
    core.create_namespaced_pod(NS, pod("busy", "r01-n01", gpus=2))
    wait_phase(core, "busy", {"Running"})
    nodes = {n.name: n for n in KubeCluster(core).list_nodes()}
    assert nodes["r01-n01"].rack == "r01" and nodes["r02-n01"].rack == "r02"
    assert nodes["r01-n01"].gpu_pods == 1 and nodes["r01-n02"].gpu_pods == 0
    assert nodes["r02-n08"].gpus == 8  # capacity: a withdrawn GPU still counts as the node's
    by_zone = KubeCluster(core, rack_label="topology.kubernetes.io/zone").list_nodes()
    assert len({n.rack for n in by_zone}) == 1  # the zone is one "rack" for the whole fleet


def test_watch_streams_changes(kube: SimKube) -> None:
    core = kube.core
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    seen: list[tuple[str, str]] = []
    w = watch.Watch()

    def consume() -> None:
        for event in w.stream(core.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=5):
            seen.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                w.stop()

    reader = threading.Thread(target=consume)
    reader.start()
    core.create_namespaced_pod(NS, pod("watched", "r01-n07", args=["true"]))
    wait_phase(core, "watched", {"Succeeded"})
    core.delete_namespaced_pod("watched", NS)
    reader.join(timeout=10)
    assert seen[0] == ("ADDED", "watched") and seen[-1] == ("DELETED", "watched")
    assert ("MODIFIED", "watched") in seen


def test_state_survives_a_restart(sim_kube: Any) -> None:
    first = sim_kube(DEMO_FLEET)
    KubeCluster(first.core).cordon("r01-n02")
    first.core.patch_node("r01-n02", {"metadata": {"labels": {"fleetval.io/quarantine": "dcgm-r2-fail"}}})
    first.server.stop()
    second = sim_kube(DEMO_FLEET)
    node = second.node("r01-n02")
    assert node.spec.unschedulable is True
    assert node.metadata.labels["fleetval.io/quarantine"] == "dcgm-r2-fail"


def test_unauthenticated_requests_are_refused(kube: SimKube) -> None:
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(f"{kube.server.url}/api/v1/nodes")
    assert denied.value.code == 401
    with urllib.request.urlopen(f"{kube.server.url}/version") as response:
        assert json.loads(response.read())["major"] == "1"


def test_failed_probe_pods_are_kept_but_bounded(kube: SimKube) -> None:
    core = kube.core
    for i in range(5):
        body = pod(f"probe-{i}", "r01-n08", args=["exit 3"])
        body["metadata"]["labels"] = {"app.kubernetes.io/part-of": "fleetval", "fleetval.io/probe": f"p{i}"}
        core.create_namespaced_pod(NS, body)
        wait_phase(core, f"probe-{i}", {"Failed"})
        time.sleep(1.01)  # creationTimestamp has second resolution
    core.create_namespaced_pod(NS, pod("not-a-probe", "r01-n08", args=["exit 3"]))
    wait_phase(core, "not-a-probe", {"Failed"})
    pruned = KubeCluster(core).prune_failed_probe_pods(NS, keep=2)
    assert sorted(pruned) == ["probe-0", "probe-1", "probe-2"]
    left = {p.metadata.name for p in core.list_namespaced_pod(NS).items}
    assert left == {"probe-3", "probe-4", "not-a-probe"}
