"""A placeholder for Kueue in the simulated cluster: admission without quota. The Kueue layer of the
simulator (Workloads, ClusterQueue quota, gang admission, preemption, the `kueue.*` faults) will
replace this module; until then it only does what the product needs to run an MPIJob.

What it does: a suspended MPIJob (`spec.runPolicy.suspend`) or batch/v1 Job (`spec.suspend`)
labelled `kueue.x-k8s.io/queue-name` is admitted — unsuspended, with the `Started` event
"Admitted by clusterQueue <name>" Kueue's job reconciler writes — when a LocalQueue of that name
exists in its namespace (either served version), is active (`stopPolicy` None) and points to an
existing, active ClusterQueue. Otherwise it stays suspended, with one `Pending` warning event on
the job giving the reason Kueue puts in its Workload's `QuotaReserved=False` condition
("LocalQueue <name> doesn't exist", "ClusterQueue <name> doesn't exist", "... is inactive";
kubernetes-sigs/kueue `pkg/controller/core/workload_controller.go` getQueueBlocker). A job
without the label is left alone, suspended or not.

Not modelled (yet): Workload objects, quota and flavors (every queued job fits), the webhook
that suspends a queued job created unsuspended, node selectors injected from a flavor,
preemption, requeueing, deactivation.

`bootstrap_objects` is what `fleetval sim serve` creates on a fresh state so the product works
out of the box: a ResourceFlavor, a ClusterQueue covering the fleet's CPUs, memory and GPUs, and
the LocalQueue `fleetval-validation` in the namespace `fleetval` (the product's default queue).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Final

from fleetval.fleet.spec import FleetSpec
from fleetval.sim.kube.resources import Resource, all_resources, by_kind, find

if TYPE_CHECKING:
    from fleetval.sim.kube.cluster import SimKubeCluster

GROUP: Final = "kueue.x-k8s.io"
VERSION: Final = "v1beta2"  # the CRDs' storage version (v1beta1 is served too, deprecated)
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
NAMESPACE: Final = "fleetval"
LOCAL_QUEUE: Final = "fleetval-validation"
CLUSTER_QUEUE: Final = "fleetval-cluster-queue"
RESOURCE_FLAVOR: Final = "default-flavor"
COMPONENT: Final = "kueue-admission"


def _served(plural: str) -> list[Resource]:
    return [r for r in all_resources() if (r.group, r.plural) == (GROUP, plural)]


def bootstrap_objects(spec: FleetSpec) -> list[tuple[Resource, str, dict[str, Any]]]:
    """(resource, namespace, body) of the Kueue objects a fresh simulated cluster starts with."""
    nodes = spec.nodes()
    gpus = sum(spec.profiles[rack.profile].gpus for _, rack in nodes)
    quota = [
        {"name": "cpu", "nominalQuota": str(190 * len(nodes))},
        {"name": "memory", "nominalQuota": f"{2043735076 * len(nodes)}Ki"},
        {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
    ]
    flavor = {"metadata": {"name": RESOURCE_FLAVOR}}
    cluster_queue = {
        "metadata": {"name": CLUSTER_QUEUE},
        "spec": {
            "namespaceSelector": {},  # every namespace may point a LocalQueue at it
            "resourceGroups": [
                {
                    "coveredResources": [q["name"] for q in quota],
                    "flavors": [{"name": RESOURCE_FLAVOR, "resources": quota}],
                }
            ],
        },
    }
    local_queue = {
        "metadata": {"name": LOCAL_QUEUE, "namespace": NAMESPACE},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }
    return [
        (_resource("resourceflavors"), "", flavor),
        (_resource("clusterqueues"), "", cluster_queue),
        (_resource("localqueues"), NAMESPACE, local_queue),
    ]


def _resource(plural: str) -> Resource:
    found = find(GROUP, VERSION, plural)
    assert found is not None, plural  # the CRDs in fleetval/k8s/crds serve it
    return found


def _find(cluster: SimKubeCluster, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
    for res in _served(plural):
        found = cluster.lookup(res, namespace, name)
        if found is not None:
            return found
    return None


def _blocker(cluster: SimKubeCluster, namespace: str, queue: str) -> tuple[str, str]:
    """(clusterQueue, "") when a job queued in `queue` is admissible, else ("", why not)."""
    local = _find(cluster, "localqueues", namespace, queue)
    if local is None:
        return "", f"LocalQueue {queue} doesn't exist"
    if (local.get("spec") or {}).get("stopPolicy", "None") != "None":
        return "", f"LocalQueue {queue} is inactive"
    name = str((local.get("spec") or {}).get("clusterQueue") or "")
    cluster_queue = _find(cluster, "clusterqueues", "", name)
    if cluster_queue is None:
        return "", f"ClusterQueue {name} doesn't exist"
    if (cluster_queue.get("spec") or {}).get("stopPolicy", "None") != "None":
        return "", f"ClusterQueue {name} is inactive"
    return name, ""


def admit(cluster: SimKubeCluster) -> None:
    """One pass: admit every suspended, queued job whose queue can take it (see module doc)."""
    for res, suspend_path in ((by_kind("MPIJob"), ("runPolicy",)), (by_kind("Job"), ())):
        for job in cluster.stored(res):
            meta = job["metadata"]
            queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
            holder = job.get("spec") or {}
            for key in suspend_path:
                holder = holder.get(key) or {}
            if not queue or not holder.get("suspend") or meta.get("deletionTimestamp"):
                continue
            cluster_queue, why = _blocker(cluster, meta["namespace"], queue)
            if why:
                cluster.emit(job, "Warning", "Pending", why, COMPONENT, once=True)
                continue
            admitted = copy.deepcopy(job)
            target = admitted["spec"]
            for key in suspend_path:
                target = target[key]
            target["suspend"] = False
            cluster.write(res, admitted)
            cluster.emit(job, "Normal", "Started", f"Admitted by clusterQueue {cluster_queue}", COMPONENT)
