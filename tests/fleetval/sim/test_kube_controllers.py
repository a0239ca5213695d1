"""The controllers of `fleetval sim serve`, seen through the real kubernetes client: the
mpi-operator runs the product's MPIJob (admitted by the Kueue placeholder) into worker pods and a
launcher whose log is nccl-tests across the workers' nodes, garbage collection follows owner
references, and the GPU Operator walks nodes through a driver upgrade — or stops and drops its
labels when autoUpgrade is switched off."""

from __future__ import annotations

import copy
import json
import pathlib
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from kubernetes.client.exceptions import ApiException

from fleetval.dcgm.parser import parse_dcgm
from fleetval.dcgm.probe import DCGM_IMAGE
from fleetval.k8s.scheduling import node_name_affinity
from fleetval.nccl.mpijob import job_state, mpijob_manifest
from fleetval.nccl.parser import parse_nccl
from fleetval.nccl.probe import nccl_probe
from fleetval.sim.kube import gpu_operator, kueue, mpi_operator
from tests.paths import DEMO_FLEET, ROOT
from tests.simkube import SimKube

NS = "fleetval"
NETLAB = ROOT / "include" / "fleetval" / "sim" / "fleets" / "netlab.yaml"
MPIJOBS = {"group": "kubeflow.org", "version": "v2beta1", "plural": "mpijobs"}
POLICY = {"group": "nvidia.com", "version": "v1", "plural": "clusterpolicies", "name": "cluster-policy"}
NEW_DRIVER = "580.82.07"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
T = TypeVar("T")


def eventually(probe: Callable[[], T | None], timeout: float = 20, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def deleted(read: Callable[[], Any], timeout: float = 5) -> None:
    """Wait until `read` answers 404."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            read()
        except ApiException as exc:
            if exc.status != 404:
                raise
            return
        time.sleep(0.05)
    raise AssertionError("still there")


def serve(sim_kube: Any, fleet: pathlib.Path = DEMO_FLEET, time_scale: float = 0.0) -> SimKube:
    return sim_kube(fleet, time_scale=time_scale)  # type: ignore[no-any-return]


def create_mpijob(kube: SimKube, nodes: list[str], **options: Any) -> dict[str, Any]:
    body = mpijob_manifest(nccl_probe(nodes, gpus_per_node=8, repeat=0, run_key="t"), **options)
    kube.custom.create_namespaced_custom_object(namespace=NS, body=body, **MPIJOBS)
    return body


def get_mpijob(kube: SimKube, name: str) -> dict[str, Any]:
    return kube.custom.get_namespaced_custom_object(namespace=NS, name=name, **MPIJOBS)  # type: ignore[no-any-return]


def finished(kube: SimKube, name: str) -> dict[str, Any] | None:
    job = get_mpijob(kube, name)
    return job if job_state(job) in ("Succeeded", "Failed") else None


def job_pods(kube: SimKube, name: str, role: str | None = None) -> list[Any]:
    selector = f"{mpi_operator.JOB_NAME_LABEL}={name}"
    if role:
        selector += f",{mpi_operator.JOB_ROLE_LABEL}={role}"
    return list(kube.core.list_namespaced_pod(NS, label_selector=selector).items)


def pod_log(kube: SimKube, name: str) -> str:
    response = kube.core.read_namespaced_pod_log(name, NS, _preload_content=False)
    return str(response.data.decode())


def events(kube: SimKube, name: str, namespace: str = NS) -> list[Any]:
    selector = f"involvedObject.name={name}"
    return list(kube.core.list_namespaced_event(namespace, field_selector=selector).items)


# --- mpi-operator + Kueue -----------------------------------------------------------------------


def test_a_fresh_cluster_has_the_product_queue_and_the_gpu_operator_policy(sim_kube: Any) -> None:
    kube = serve(sim_kube)
    kueue_api = ("kueue.x-k8s.io", "v1beta2")
    [local] = kube.custom.list_namespaced_custom_object(*kueue_api, NS, "localqueues")["items"]
    assert (local["metadata"]["name"], local["spec"]["clusterQueue"]) == (
        "fleetval-validation",
        kueue.CLUSTER_QUEUE,
    )
    [queue] = kube.custom.list_cluster_custom_object(*kueue_api, "clusterqueues")["items"]
    [group] = queue["spec"]["resourceGroups"]
    [flavor] = group["flavors"]
    assert flavor["name"] == kueue.RESOURCE_FLAVOR
    assert {r["name"]: r["nominalQuota"] for r in flavor["resources"]}["nvidia.com/gpu"] == "128"
    assert kube.custom.get_cluster_custom_object(*kueue_api, "resourceflavors", kueue.RESOURCE_FLAVOR)
    policy = kube.custom.get_cluster_custom_object(**POLICY)
    assert policy["status"]["state"] == "ready"
    assert policy["spec"]["driver"]["upgradePolicy"]["maxParallelUpgrades"] == 1


def test_an_mpijob_is_admitted_runs_across_its_nodes_and_cleans_up(sim_kube: Any) -> None:
    kube = serve(sim_kube)
    body = create_mpijob(kube, ["r01-n05", "r01-n06"])
    name = body["metadata"]["name"]
    done = eventually(lambda: finished(kube, name), what="the MPIJob to finish")

    assert job_state(done) == "Succeeded"
    conditions = {c["type"]: (c["status"], c["reason"]) for c in done["status"]["conditions"]}
    assert conditions["Created"] == ("True", "MPIJobCreated")
    assert conditions["Succeeded"] == ("True", "MPIJobSucceeded")
    assert conditions["Running"][0] == "False"  # a finished job is not running
    assert done["status"]["replicaStatuses"]["Launcher"] == {"succeeded": 1}
    assert done["status"]["startTime"] and done["status"]["completionTime"]
    admitted = [e.message for e in events(kube, name) if e.reason == "Started"]
    assert admitted == [f"Admitted by clusterQueue {kueue.CLUSTER_QUEUE}"]

    # One worker per node (required anti-affinity), then the launcher Job's pod ran mpirun over them.
    assigned = {
        e.involved_object.name: e.message.rsplit(" ", 1)[1]
        for e in kube.core.list_namespaced_event(NS, field_selector="reason=Scheduled").items
        if e.involved_object.name.startswith(f"{name}-worker-")
    }
    assert sorted(assigned.values()) == ["r01-n05", "r01-n06"]
    launcher_job = kube.batch.read_namespaced_job(f"{name}-launcher", NS)
    assert launcher_job.metadata.owner_references[0].name == name
    assert [c.type for c in launcher_job.status.conditions if c.status == "True"] == [
        "SuccessCriteriaMet",
        "Complete",
    ]
    [launcher] = job_pods(kube, name, "launcher")
    assert launcher.metadata.name.startswith(f"{name}-launcher-") and launcher.status.phase == "Succeeded"
    run = parse_nccl(pod_log(kube, name=launcher.metadata.name))
    assert (run.nranks, run.nnodes, set(run.hosts)) == (16, 2, {"r01-n05", "r01-n06"})
    # r01-n06's nccl.socket_fallback fault, as the fleet spec says: the nodes talk over TCP.
    assert "Socket" in run.transports and "IB" not in run.transports

    # cleanPodPolicy Running: the workers (sshd, still running) are deleted once the job is done.
    assert eventually(lambda: not job_pods(kube, name, "worker") or None, what="workers deleted")
    config = kube.core.read_namespaced_config_map(f"{name}-config", NS)
    assert config.data["hostfile"] == (
        f"{name}-worker-0.{name}.{NS}.svc slots=1\n{name}-worker-1.{name}.{NS}.svc slots=1\n"
    )
    assert kube.core.read_namespaced_secret(f"{name}-ssh", NS).type == "kubernetes.io/ssh-auth"


def test_a_failing_launcher_fails_the_mpijob_with_its_log_kept(sim_kube: Any) -> None:
    kube = serve(sim_kube, NETLAB)
    name = create_mpijob(kube, ["r02-n02", "r02-n03"])["metadata"]["name"]  # r02-n03: nccl.errors
    done = eventually(lambda: finished(kube, name), what="the MPIJob to finish")
    assert job_state(done) == "Failed"
    failed = next(c for c in done["status"]["conditions"] if c["type"] == "Failed")
    # backoffLimit 0: the launcher Job gave up; upstream appends the pod's reason and message.
    assert failed["reason"] == "BackoffLimitExceeded/"
    assert failed["message"] == "Job has reached the specified backoff limit: "
    assert done["status"]["replicaStatuses"]["Launcher"] == {"failed": 1}
    [launcher] = job_pods(kube, name, "launcher")
    assert launcher.status.container_statuses[0].state.terminated.exit_code == 3
    assert "status=12" in pod_log(kube, launcher.metadata.name)


def test_an_mpijob_past_its_active_deadline_fails_and_stops(sim_kube: Any) -> None:
    kube = serve(sim_kube, time_scale=0.01)
    body = mpijob_manifest(nccl_probe(["r01-n01", "r01-n02"], gpus_per_node=8, repeat=0, run_key="t"))
    body["spec"]["runPolicy"]["activeDeadlineSeconds"] = 20  # 0.2 s here; the launcher sleeps 36 s
    launcher = body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    launcher["containers"][0]["args"] = ["sleep 3600"]
    launcher["terminationGracePeriodSeconds"] = 1  # the Job controller's delete gives it its grace period
    kube.custom.create_namespaced_custom_object(namespace=NS, body=body, **MPIJOBS)
    name = body["metadata"]["name"]
    done = eventually(lambda: finished(kube, name), what="the MPIJob to finish")
    failed = next(c for c in done["status"]["conditions"] if c["type"] == "Failed")
    assert (failed["reason"], failed["message"]) == (
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )
    assert eventually(lambda: not job_pods(kube, name) or None, what="the launcher and workers stopped")


def test_without_its_local_queue_an_mpijob_stays_suspended_until_the_queue_exists(sim_kube: Any) -> None:
    kube = serve(sim_kube)
    name = create_mpijob(kube, ["r01-n01", "r01-n02"], queue_name="elsewhere")["metadata"]["name"]
    workload = eventually(lambda: workload_of(kube, name), what="the MPIJob's Workload")
    reserved = eventually(
        lambda: next(
            (
                c
                for c in (workload_of(kube, name) or {}).get("status", {}).get("conditions", [])
                if c["type"] == "QuotaReserved"
            ),
            None,
        ),
        what="the QuotaReserved condition",
    )
    # Kueue v0.19: a queue blocker is Inadmissible (not a granular reason), the message verbatim.
    assert (reserved["status"], reserved["reason"], reserved["message"]) == (
        "False",
        "Inadmissible",
        "LocalQueue elsewhere doesn't exist",
    )
    assert workload["metadata"]["name"].startswith(f"mpijob-{name}-")
    assert [s["name"] for s in workload["spec"]["podSets"]] == ["launcher", "worker"]
    time.sleep(0.3)
    job = get_mpijob(kube, name)
    assert job_state(job) == "Suspended" and job["spec"]["runPolicy"]["suspend"] is True
    assert not job_pods(kube, name)
    launcher_job = kube.batch.read_namespaced_job(f"{name}-launcher", NS)
    assert launcher_job.spec.suspend is True  # upstream creates the launcher Job, suspended

    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",  # the deprecated version still admits
        "kind": "LocalQueue",
        "metadata": {"name": "elsewhere"},
        "spec": {"clusterQueue": kueue.CLUSTER_QUEUE},
    }
    kube.custom.create_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta1", NS, "localqueues", queue, field_validation="Strict"
    )
    done = eventually(lambda: finished(kube, name), what="the MPIJob to finish")
    assert job_state(done) == "Succeeded"
    resumed = next(c for c in done["status"]["conditions"] if c["type"] == "Suspended")
    assert (resumed["status"], resumed["reason"]) == ("False", "MPIJobResumed")


def workload_of(kube: SimKube, job: str) -> dict[str, Any] | None:
    items = kube.custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", NS, "workloads")["items"]
    return next((w for w in items if w["metadata"]["name"].startswith(f"mpijob-{job}-")), None)


def test_a_suspended_mpijob_without_the_queue_label_is_left_alone(sim_kube: Any) -> None:
    kube = serve(sim_kube)
    body = mpijob_manifest(nccl_probe(["r01-n01", "r01-n02"], gpus_per_node=8, repeat=0, run_key="t"))
    del body["metadata"]["labels"][kueue.QUEUE_LABEL]
    kube.custom.create_namespaced_custom_object(namespace=NS, body=body, **MPIJOBS)
    name = body["metadata"]["name"]
    eventually(lambda: job_state(get_mpijob(kube, name)) == "Suspended", what="Suspended")
    time.sleep(0.3)
    assert job_state(get_mpijob(kube, name)) == "Suspended" and not job_pods(kube, name)
    assert not [e for e in events(kube, name) if e.reason in ("Pending", "Started")]


def test_deleting_an_mpijob_deletes_what_it_owns(sim_kube: Any) -> None:
    kube = serve(sim_kube, time_scale=1.0)  # nccl-tests takes its real time: the job is running
    pairs = (["r01-n01", "r01-n02"], ["r02-n01", "r02-n02"])
    names = [create_mpijob(kube, nodes)["metadata"]["name"] for nodes in pairs]
    for name in names:
        eventually(lambda name=name: job_state(get_mpijob(kube, name)) == "Running", what="Running")
        assert len(job_pods(kube, name)) == 3
    foreground, background = names
    answer = kube.custom.delete_namespaced_custom_object(
        namespace=NS, name=foreground, propagation_policy="Foreground", **MPIJOBS
    )
    # The owner waits, marked, for the garbage collector to delete what it owns.
    assert answer["metadata"]["deletionTimestamp"] and answer["metadata"]["finalizers"] == [
        "foregroundDeletion"
    ]
    kube.custom.delete_namespaced_custom_object(namespace=NS, name=background, **MPIJOBS)
    for name in names:
        deleted(lambda name=name: get_mpijob(kube, name))
        deleted(lambda name=name: kube.batch.read_namespaced_job(f"{name}-launcher", NS))
        deleted(lambda name=name: kube.core.read_namespaced_config_map(f"{name}-config", NS))
        deleted(lambda name=name: kube.core.read_namespaced_secret(f"{name}-ssh", NS))
        assert not job_pods(kube, name)


def test_a_deleted_job_orphans_its_pods_unless_asked_to_propagate(sim_kube: Any) -> None:
    kube = serve(sim_kube)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sleeper"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "infinity"]}],
                }
            }
        },
    }
    kube.batch.create_namespaced_job(NS, job)
    [pod] = eventually(lambda: kube.core.list_namespaced_pod(NS, label_selector="job-name=sleeper").items)
    assert pod.metadata.name.startswith("sleeper-") and pod.metadata.owner_references[0].kind == "Job"
    kube.batch.delete_namespaced_job("sleeper", NS)  # no propagationPolicy: batch/v1 orphans
    time.sleep(0.2)
    orphan = kube.core.read_namespaced_pod(pod.metadata.name, NS)
    assert orphan.metadata.owner_references is None and orphan.status.phase == "Running"

    kube.batch.create_namespaced_job(NS, {**job, "metadata": {"name": "sleeper2"}})
    eventually(lambda: kube.core.list_namespaced_pod(NS, label_selector="job-name=sleeper2").items)
    kube.batch.delete_namespaced_job("sleeper2", NS, propagation_policy="Background")
    eventually(
        lambda: not kube.core.list_namespaced_pod(NS, label_selector="job-name=sleeper2").items or None,
        what="the Job's pod deleted",
    )
    # A suspended Job in a Kueue queue is admitted like an MPIJob.
    queued = copy.deepcopy(job)
    queued["metadata"] = {"name": "queued", "labels": {kueue.QUEUE_LABEL: kueue.LOCAL_QUEUE}}
    queued["spec"]["suspend"] = True
    queued["spec"]["template"]["spec"]["containers"][0]["command"] = ["true"]
    kube.batch.create_namespaced_job(NS, queued)
    complete = eventually(
        lambda: [
            c
            for c in kube.batch.read_namespaced_job("queued", NS).status.conditions or []
            if c.type == "Complete"
        ]
    )
    assert complete[0].status == "True" and kube.batch.read_namespaced_job("queued", NS).spec.suspend is False
    assert [e.reason for e in events(kube, "queued") if e.reason in ("Started", "Completed")] == [
        "Started",
        "Completed",
    ]

    with pytest.raises(ApiException) as bad:
        kube.batch.delete_namespaced_job("nope", NS, propagation_policy="Sideways")
    assert bad.value.status == 422 and "propagationPolicy" in json.loads(bad.value.body)["message"]


def test_invalid_mpijobs_are_refused_or_reported(sim_kube: Any) -> None:
    kube = serve(sim_kube)
    body = mpijob_manifest(nccl_probe(["r01-n01", "r01-n02"], gpus_per_node=8, repeat=0, run_key="t"))
    wrong_type = copy.deepcopy(body)
    wrong_type["spec"]["runPolicy"]["backoffLimit"] = "zero"
    with pytest.raises(ApiException) as refused:
        kube.custom.create_namespaced_custom_object(namespace=NS, body=wrong_type, **MPIJOBS)
    assert refused.value.status == 422
    assert "spec.runPolicy.backoffLimit" in json.loads(refused.value.body)["message"]

    # Valid for the API server, not for the operator: a ValidationError event and no pods.
    no_workers = copy.deepcopy(body)
    no_workers["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 0
    kube.custom.create_namespaced_custom_object(namespace=NS, body=no_workers, **MPIJOBS)
    name = body["metadata"]["name"]
    [event] = eventually(lambda: [e for e in events(kube, name) if e.reason == "ValidationError"])
    assert event.type == "Warning" and event.message == (
        "Found validation errors: spec.mpiReplicaSpecs[Worker].replicas: Invalid value: 0: "
        "must be greater than or equal to 1"
    )
    time.sleep(0.2)
    assert not job_pods(kube, name)


def test_pod_anti_affinity_keeps_two_pods_off_one_node(sim_kube: Any) -> None:
    kube = serve(sim_kube)
    term = {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}

    def pod(name: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "labels": {"app": "spread"}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "r01-n04"},
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
                "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "infinity"]}],
            },
        }

    kube.core.create_namespaced_pod(NS, pod("first"))
    kube.core.create_namespaced_pod(NS, pod("second"))
    assert kube.core.read_namespaced_pod("first", NS).spec.node_name == "r01-n04"
    [failed] = eventually(lambda: [e for e in events(kube, "second") if e.reason == "FailedScheduling"])
    assert failed.message.startswith(
        "0/16 nodes are available: 1 node(s) didn't match pod anti-affinity rules, "
        "15 node(s) didn't match Pod's node affinity/selector."
    )
    kube.core.delete_namespaced_pod("first", NS, grace_period_seconds=0)  # its sleep ignores SIGTERM
    placed = eventually(lambda: kube.core.read_namespaced_pod("second", NS).spec.node_name)
    assert placed == "r01-n04"


def test_a_probe_lands_on_a_node_whose_hostname_label_is_not_its_name(sim_kube: Any) -> None:
    """The kubelet's `kubernetes.io/hostname` label need not be the Node's name (a cloud node named
    by FQDN, `--hostname-override`): the probe pod, as the probe operator renders it, is pinned by
    `matchFields` metadata.name and still lands; the simulated scheduler reads the label as a label."""
    from kubernetes.client import ApiClient

    from fleetval.dcgm.probe import dcgm_diag_probe
    from fleetval_airflow.probe_pod import ProbePodOperator

    kube = serve(sim_kube)
    kube.core.patch_node("r01-n03", {"metadata": {"labels": {"kubernetes.io/hostname": "gpu-host-3"}}})
    spec = dcgm_diag_probe("r01-n03", level=1, gpus=8, run_key="t")
    op = ProbePodOperator(task_id="probe", probe=spec.to_json(), fv_run=0, deferrable=False)
    manifest = ApiClient().sanitize_for_serialization(op.build_pod_request_obj(dry_run=False))
    manifest["metadata"]["name"] = "pinned"
    kube.core.create_namespaced_pod(NS, manifest)
    assert eventually(lambda: kube.core.read_namespaced_pod("pinned", NS).spec.node_name) == "r01-n03"

    def by_label(name: str, hostname: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": hostname},
                "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"]}],
            },
        }

    kube.core.create_namespaced_pod(NS, by_label("by-label", "gpu-host-3"))
    assert eventually(lambda: kube.core.read_namespaced_pod("by-label", NS).spec.node_name) == "r01-n03"
    kube.core.create_namespaced_pod(NS, by_label("by-name", "r01-n03"))  # the old pinning
    [failed] = eventually(lambda: [e for e in events(kube, "by-name") if e.reason == "FailedScheduling"])
    assert failed.message.startswith(
        "0/16 nodes are available: 16 node(s) didn't match Pod's node affinity/selector."
    )

    gone = {**manifest, "metadata": {**manifest["metadata"], "name": "gone"}}
    gone["spec"]["affinity"] = node_name_affinity("r09-n99")
    kube.core.create_namespaced_pod(NS, gone)
    [failed] = eventually(lambda: [e for e in events(kube, "gone") if e.reason == "FailedScheduling"])
    assert failed.message.startswith(
        "0/16 nodes are available: 16 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )


# --- GPU Operator driver upgrades -------------------------------------------------------------------


def node_labels(kube: SimKube) -> dict[str, dict[str, str]]:
    return {n.metadata.name: n.metadata.labels for n in kube.core.list_node().items}


def states(kube: SimKube) -> dict[str, str | None]:
    return {n: labels.get(gpu_operator.UPGRADE_STATE_LABEL) for n, labels in node_labels(kube).items()}


def patch_policy(kube: SimKube, body: dict[str, Any]) -> None:
    kube.custom.patch_cluster_custom_object(body=body, **POLICY)


def test_a_driver_upgrade_walks_each_node_to_upgrade_done_on_the_new_driver(sim_kube: Any) -> None:
    kube = serve(sim_kube)
    policy = kube.custom.get_cluster_custom_object(**POLICY)
    assert policy["spec"]["driver"]["upgradePolicy"]["autoUpgrade"] is True
    assert policy["spec"]["driver"]["version"] == "570.133.20"
    # A fresh operator labels upgrade-done every node whose driver is in sync.
    eventually(lambda: set(states(kube).values()) == {"upgrade-done"}, what="the operator's first labels")
    kube.core.patch_node("r01-n07", {"spec": {"unschedulable": True}})  # quarantined before the upgrade
    kube.core.patch_node("r01-n08", {"metadata": {"labels": {gpu_operator.UPGRADE_SKIP_LABEL: "true"}}})
    bare = {
        "metadata": {"name": "holds-gpus"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "r02-n01"},
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "command": ["sleep", "infinity"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    kube.core.create_namespaced_pod(NS, bare)

    upgrade = {"maxParallelUpgrades": 0, "maxUnavailable": "100%"}
    patch_policy(kube, {"spec": {"driver": {"version": NEW_DRIVER, "upgradePolicy": upgrade}}})

    def settled() -> dict[str, str | None] | None:
        current = states(kube)
        return (
            current
            if set(current.values()) <= {"upgrade-done", "upgrade-failed", "upgrade-required"}
            and (current["r01-n01"] == "upgrade-done" and current["r02-n01"] == "upgrade-failed")
            else None
        )

    final = eventually(settled, what="the upgrade to settle")
    assert final["r01-n08"] == "upgrade-required"  # skipped by label: still on the old driver
    labels = node_labels(kube)
    upgraded = [n for n, s in final.items() if s == "upgrade-done"]
    assert len(upgraded) == 14
    for node in upgraded:
        assert labels[node][DRIVER_LABEL] == NEW_DRIVER
        assert labels[node]["nvidia.com/cuda.driver-version.major"] == "580"
        assert labels[node]["nvidia.com/cuda.driver.rev"] == "07"
    for node in ("r01-n08", "r02-n01"):
        assert labels[node][DRIVER_LABEL] == "570.133.20"
    nodes = {n.metadata.name: n for n in kube.core.list_node().items}
    assert not nodes["r01-n01"].spec.unschedulable  # uncordoned after the upgrade
    assert nodes["r01-n07"].spec.unschedulable  # cordoned before it: stays cordoned
    assert nodes["r02-n01"].spec.unschedulable  # failed: cordoned, the unmanaged GPU pod kept
    assert kube.core.read_namespaced_pod("holds-gpus", NS).status.phase == "Running"

    walked = [
        e.message.rsplit(" ", 1)[1]
        for e in sorted(events(kube, "r01-n01", "default"), key=lambda e: int(e.metadata.resource_version))
        if e.reason == gpu_operator.EVENT_REASON
    ]
    assert walked == [
        "upgrade-done",
        "upgrade-required",
        "cordon-required",
        "wait-for-jobs-required",
        "pod-deletion-required",
        "pod-restart-required",
        "validation-required",
        "uncordon-required",
        "upgrade-done",
    ]
    failure = [e.message for e in events(kube, "r02-n01", "default") if e.type == "Warning"]
    assert failure == ["Failed to delete workload pods on the node for the driver upgrade"]

    # The loaded driver is what the node's tools report, and it survives a restart.
    kube.core.create_namespaced_pod(
        NS,
        {
            "metadata": {"name": "dcgm"},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {"kubernetes.io/hostname": "r01-n01"},
                "containers": [
                    {
                        "name": "c",
                        "image": DCGM_IMAGE,
                        "command": ["/bin/bash", "-c"],
                        "args": ["nv-hostengine >/dev/null && exec dcgmi diag -r 1 -j"],
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    }
                ],
            },
        },
    )
    eventually(lambda: kube.core.read_namespaced_pod("dcgm", NS).status.phase in ("Succeeded", "Failed"))
    assert parse_dcgm(pod_log(kube, "dcgm")).driver_version == NEW_DRIVER
    kube.server.stop()
    again = serve(sim_kube)
    assert again.server.cluster.node_driver("r01-n01") == NEW_DRIVER
    assert again.server.cluster.node_driver("r01-n08") == "570.133.20"


def test_auto_upgrade_false_pauses_the_rollout_and_removes_the_state_labels(sim_kube: Any) -> None:
    kube = serve(sim_kube, time_scale=0.01)  # a driver reload takes 2.4 s
    eventually(lambda: set(states(kube).values()) == {"upgrade-done"}, what="the operator's first labels")
    patch_policy(kube, {"spec": {"driver": {"version": NEW_DRIVER}}})

    # One node at a time (maxParallelUpgrades 1): pause once the first is done and the second is
    # reloading its driver.
    def rollout() -> tuple[list[str], list[str]] | None:
        labels = node_labels(kube)
        state = {n: node.get(gpu_operator.UPGRADE_STATE_LABEL) for n, node in labels.items()}
        done = [n for n, s in state.items() if s == "upgrade-done" and labels[n][DRIVER_LABEL] == NEW_DRIVER]
        reloading = [n for n, s in state.items() if s == "pod-restart-required"]
        return (done, reloading) if done and reloading else None

    first, second = eventually(rollout, what="one node upgraded and one reloading")
    assert len(first) == len(second) == 1
    pause = {"spec": {"driver": {"upgradePolicy": {"autoUpgrade": False}}}}
    answer = kube.custom.patch_cluster_custom_object(body=pause, dry_run="All", **POLICY)
    assert answer["spec"]["driver"]["upgradePolicy"]["autoUpgrade"] is False  # what it would be...
    policy = kube.custom.get_cluster_custom_object(**POLICY)
    assert policy["spec"]["driver"]["upgradePolicy"]["autoUpgrade"] is True  # ...but nothing changed
    assert states(kube)[second[0]] == "pod-restart-required"
    patch_policy(kube, pause)
    eventually(lambda: set(states(kube).values()) == {None}, what="the state labels removed")
    time.sleep(3)  # longer than a driver reload: nothing moves while paused
    assert set(states(kube).values()) == {None}
    assert [n for n, node in node_labels(kube).items() if node[DRIVER_LABEL] == NEW_DRIVER] == first
    # The node caught mid-upgrade keeps its cordon: the operator only drops the labels.
    assert [n.metadata.name for n in kube.core.list_node().items if n.spec.unschedulable] == second
    policy = kube.custom.get_cluster_custom_object(**POLICY)
    assert policy["spec"]["driver"]["upgradePolicy"]["autoUpgrade"] is False
