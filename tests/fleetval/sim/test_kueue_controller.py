"""The simulated cluster's Kueue integrations: the pod webhook's gate, pod groups admitted whole,
Workload objects as the API serves them, a queued Job suspended then admitted with its flavor."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from fleetval.sim.kube import kueue
from tests.simkube import SimKube

T = TypeVar("T")
NS = "fleetval"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"

pytestmark = pytest.mark.postgres


def eventually(probe: Callable[[], T | None], what: str, timeout: float = 10) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := probe():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def queued_pod(name: str, gpus: int, *, group: str = "", size: int = 0) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {kueue.QUEUE_LABEL: kueue.LOCAL_QUEUE}}
    if group:
        meta["labels"][kueue.POD_GROUP_LABEL] = group
        meta["annotations"] = {kueue.POD_GROUP_COUNT: str(size)}
    return {
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sleep", "infinity"],
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def workloads(kube: SimKube) -> dict[str, Any]:
    items = kube.custom.list_namespaced_custom_object(GROUP, VERSION, NS, "workloads")["items"]
    return {w["metadata"]["name"]: w for w in items}


def test_a_queued_pod_is_gated_until_its_workload_is_admitted(sim_kube: Any) -> None:
    kube = sim_kube()
    stuck = queued_pod("stuck", 2)
    stuck["metadata"]["labels"][kueue.QUEUE_LABEL] = "no-such-queue"
    created = kube.core.create_namespaced_pod(NS, stuck)
    assert [g.name for g in created.spec.scheduling_gates] == [kueue.ADMISSION_GATE]
    assert created.metadata.labels[kueue.MANAGED_LABEL] == "true"
    assert [(c.type, c.reason) for c in created.status.conditions] == [("PodScheduled", "SchedulingGated")]
    [held] = [w for n, w in workloads(kube).items() if n.startswith("pod-stuck-")]
    reserved = next(c for c in held["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert (reserved["status"], reserved["reason"], reserved["message"]) == (
        "False",
        "Inadmissible",
        "LocalQueue no-such-queue doesn't exist",
    )

    kube.core.create_namespaced_pod(NS, queued_pod("solo", 2))
    pod = eventually(
        lambda: (p := kube.core.read_namespaced_pod("solo", NS)).status.phase == "Running" and p,
        "solo running",
    )
    assert not pod.spec.scheduling_gates
    [name] = [n for n in workloads(kube) if n.startswith("pod-solo-")]
    workload = workloads(kube)[name]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in workload["status"]["conditions"]}
    assert conditions["Admitted"] == ("True", "Admitted")
    assert workload["status"]["admission"]["clusterQueue"] == kueue.CLUSTER_QUEUE
    events = kube.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items
    assert {e.reason for e in events} >= {"QuotaReserved", "Admitted"}
    assert {e.source.component for e in events} == {kueue.COMPONENT}


def test_an_incomplete_group_gets_no_workload_and_a_complete_one_starts_whole(sim_kube: Any) -> None:
    kube = sim_kube()
    kube.core.create_namespaced_pod(NS, queued_pod("g-0", 4, group="g", size=2))
    time.sleep(0.3)
    kube.core.read_namespaced_pod("g-0", NS)  # a read runs the controllers
    assert "g" not in workloads(kube)
    pod = kube.core.read_namespaced_pod("g-0", NS)
    assert pod.status.phase == "Pending"
    assert [(c.type, c.reason) for c in pod.status.conditions] == [("PodScheduled", "SchedulingGated")]
    kube.core.create_namespaced_pod(NS, queued_pod("g-1", 4, group="g", size=2))
    eventually(
        lambda: all(kube.core.read_namespaced_pod(f"g-{i}", NS).status.phase == "Running" for i in (0, 1)),
        "both members running",
    )
    [pod_set] = workloads(kube)["g"]["spec"]["podSets"]
    assert pod_set["count"] == 2 and len(pod_set["name"]) == 8  # one pod set per shape, named by its hash


def test_a_queued_job_is_suspended_then_admitted_with_its_flavor_node_labels(sim_kube: Any) -> None:
    kube = sim_kube()
    flavor = kube.custom.get_cluster_custom_object(GROUP, VERSION, "resourceflavors", kueue.RESOURCE_FLAVOR)
    flavor["spec"] = {"nodeLabels": {"nvidia.com/gpu.present": "true"}}
    kube.custom.replace_cluster_custom_object(
        GROUP, VERSION, "resourceflavors", kueue.RESOURCE_FLAVOR, flavor
    )
    job = {
        "metadata": {"name": "train", "labels": {kueue.QUEUE_LABEL: kueue.LOCAL_QUEUE}},
        "spec": {"parallelism": 2, "completions": 2, "template": queued_pod("x", 1) | {"metadata": {}}},
    }
    job["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    created = kube.batch.create_namespaced_job(NS, job)
    assert created.spec.suspend is True  # the webhook, although the manifest did not ask
    admitted = eventually(
        lambda: (j := kube.batch.read_namespaced_job("train", NS)).spec.suspend is False and j, "unsuspended"
    )
    assert admitted.spec.template.spec.node_selector == {"nvidia.com/gpu.present": "true"}
    [name] = [n for n in workloads(kube) if n.startswith("job-train-")]
    [pod_set] = workloads(kube)[name]["spec"]["podSets"]
    assert (pod_set["name"], pod_set["count"]) == ("main", 2)
    started = kube.core.list_namespaced_event(
        NS, field_selector="involvedObject.name=train,reason=Started"
    ).items
    assert [e.message for e in started] == [f"Admitted by clusterQueue {kueue.CLUSTER_QUEUE}"]
