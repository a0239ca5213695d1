"""Kueue in the simulated cluster: its webhooks and controllers over the store, with admission
decided by `KueueModel` (quota, cohorts, borrowing and lending, flavors, preemption, StrictFIFO /
BestEffortFIFO, waitForPodsReady, requeue backoff; see kueue_model.py for what is modelled).

The integrations, as Kueue does them (kubernetes-sigs/kueue `pkg/controller/jobs/{pod,job,mpijob}`):

* a plain Pod labelled `kueue.x-k8s.io/queue-name` and not owned by a controller is gated at
  creation (scheduling gate `kueue.x-k8s.io/admission`, label `kueue.x-k8s.io/managed=true`);
  pods labelled `kueue.x-k8s.io/pod-group-name` with the annotation
  `kueue.x-k8s.io/pod-group-total-count` form one Workload (named after the group), created only
  once the whole group exists and admitted as a gang: every gate is removed together. A single
  pod's Workload is `pod-<pod>-<hash>`. On admission the flavor's nodeLabels are added to the
  pod's nodeSelector and its tolerations to the pod's. Every managed pod carries the finalizer
  `kueue.x-k8s.io/managed` (the webhook adds it), so a deleted pod stays, Failed once its grace
  period is over, until Kueue lets it go (pod_controller.go). A group is Finished when all its pods
  succeeded, or when none is active and one is annotated `kueue.x-k8s.io/retriable-in-group:
  "false"`; otherwise a group whose pods all failed (deleted ones too) keeps its Workload admitted,
  with its quota, and `WaitingForReplacementPods=True`; replacement pods join it and the failed
  pods they replace are let go. A single pod is Finished when it ends. On eviction (preemption,
  PodsReady timeout) the admitted pods are deleted with their grace period, and the quota is
  released only once none of them runs (`set_pods_active`); they stay until replaced. A Workload
  deleted by someone else (its namespace going) lets its pods go. When every pod of a Workload is
  gone and it is not waiting for replacements, it is deleted.
* a batch/v1 Job or an MPIJob labelled with a queue is suspended at creation (the webhook) and
  gets the Workload `job-<name>-<hash>` / `mpijob-<name>-<hash>` (pod sets `main`, or `launcher`
  and `worker`); admission unsuspends it with the flavor's nodeSelector, eviction suspends it,
  its Complete/Failed (Succeeded/Failed) condition finishes the Workload.

Workload objects are real objects of the API (validated against the CRD, watched, listed); their
status is the model's. Events are the model's, on the Workload, from `kueue-admission`.

The Kueue configuration is `KUEUE_CONFIG`: what deploy/kueue-manager-config.yaml sets (a test
keeps them equal), on Kueue v0.19 semantics. Cluster-level faults make it misbehave the way a
misconfigured or buggy platform does: `kueue.no_reclaim` (no ClusterQueue reclaims lent quota),
`kueue.no_borrowing` (borrowingLimit 0 everywhere), `kueue.partial_gang` (the pod-group labels
are ignored: each pod is admitted alone), `kueue.wrong_reason` (the pending events show a generic
text instead of the condition's message).

Simplified: the model's state lives in memory (a restarted `sim serve` resubmits what it finds);
a Finished plain-pod Workload carries the Job's "Reached expected number of succeeded pods"
message; Workloads carry no finalizer of their own (real Kueue's keeps a deleted namespace's
Workloads and pods a while longer).

`bootstrap_objects` is what `fleetval sim serve` creates on a fresh state so the product works
out of the box: Kueue's Deployment (stored only; its image tag says which Kueue this claims to
be), a ResourceFlavor, a ClusterQueue covering the fleet's CPUs, memory and GPUs, and
the LocalQueue `fleetval-validation` in the namespace `fleetval` (the product's default queue).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from fleetval.fleet.spec import FleetSpec
from fleetval.k8s.scheduling import parse_quantity
from fleetval.kueue.api import (
    ADMISSION_GATE,
    GROUP,
    JOB_UID_LABEL,
    MANAGED_FINALIZER,
    MANAGED_LABEL,
    PLURALS,
    POD_GROUP_COUNT,
    POD_GROUP_LABEL,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    RETRIABLE_IN_GROUP,
    VERSION,
)
from fleetval.sim.kube.kueue_model import (
    EVICTED,
    FINISHED,
    KueueConfig,
    KueueModel,
    PodSet,
    WaitForPodsReady,
    WorkloadSpec,
)
from fleetval.sim.kube.meta import controller_ref, parse_rfc3339
from fleetval.sim.kube.nodes import RDMA_HCA_MAX, RDMA_RESOURCE
from fleetval.sim.kube.resources import Resource, by_kind, find

WAITING_FOR_REPLACEMENT: Final = "WaitingForReplacementPods"
MSG_NEED_REPLACEMENT: Final = "Some Failed pods need replacement"  # pod_controller.go

if TYPE_CHECKING:
    from fleetval.sim.kube.cluster import SimKubeCluster

CLAIMED_VERSION: Final = "v0.19.2"  # the Kueue release whose behaviour the simulated one has
NAMESPACE: Final = "fleetval"
LOCAL_QUEUE: Final = "fleetval-validation"
CLUSTER_QUEUE: Final = "fleetval-cluster-queue"
RESOURCE_FLAVOR: Final = "default-flavor"
COMPONENT: Final = "kueue-admission"
WRONG_REASON_TEXT: Final = "Waiting for resources"

KUEUE_CONFIG: Final = KueueConfig.v0_19(
    wait_for_pods_ready=WaitForPodsReady(
        timeout_s=600,
        block_admission=True,
        recovery_timeout_s=180,
        backoff_base_s=60,
        backoff_max_s=1800,
        backoff_limit_count=5,
    )
)

_CONFIG_KINDS: Final = (
    "Namespace",
    "ResourceFlavor",
    "Cohort",
    "WorkloadPriorityClass",
    "ClusterQueue",
    "LocalQueue",
)


def bootstrap_objects(spec: FleetSpec) -> list[tuple[Resource, str, dict[str, Any]]]:
    """(resource, namespace, body) of the Kueue objects a fresh simulated cluster starts with."""
    nodes = spec.nodes()
    gpus = sum(spec.profiles[rack.profile].gpus for _, rack in nodes)
    quota = [
        {"name": "cpu", "nominalQuota": str(190 * len(nodes))},
        {"name": "memory", "nominalQuota": f"{2043735076 * len(nodes)}Ki"},
        {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
    ]
    rdma = [name for name, rack in nodes if spec.profiles[rack.profile].fabric]
    if rdma:  # the nodes' RDMA shared device pool (`nodes.RDMA_RESOURCE`): MPIJob workers request it
        quota.append({"name": RDMA_RESOURCE, "nominalQuota": str(RDMA_HCA_MAX * len(rdma))})
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
    manager = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "kueue-controller-manager", "namespace": "kueue-system"},
        "spec": {
            "selector": {"matchLabels": {"control-plane": "controller-manager"}},
            "template": {
                "metadata": {"labels": {"control-plane": "controller-manager"}},
                "spec": {
                    "containers": [
                        {"name": "manager", "image": f"registry.k8s.io/kueue/kueue:{CLAIMED_VERSION}"}
                    ]
                },
            },
        },
    }
    return [
        (by_kind("Deployment"), "kueue-system", manager),
        (_resource("resourceflavors"), "", flavor),
        (_resource("clusterqueues"), "", cluster_queue),
        (_resource("localqueues"), NAMESPACE, local_queue),
    ]


def _resource(plural: str) -> Resource:
    found = find(GROUP, VERSION, plural)
    assert found is not None, plural  # the CRDs in fleetval/k8s/crds serve it
    return found


# --- webhooks (at creation) ----------------------------------------------------------------------


def _queued(obj: dict[str, Any]) -> bool:
    """Labelled with a queue and not a controller's child (a child is queued with its parent)."""
    meta = obj.get("metadata") or {}
    owned = any(r.get("controller") for r in meta.get("ownerReferences") or [])
    return bool((meta.get("labels") or {}).get(QUEUE_LABEL)) and not owned


def gate_new_pod(pod: dict[str, Any]) -> None:
    """The pod webhook: a queued pod no controller owns waits for admission, and Kueue holds it
    (its finalizer) until the group is done with it."""
    meta = pod["metadata"]
    if not _queued(pod):
        return
    meta.setdefault("labels", {})[MANAGED_LABEL] = "true"
    finalizers = meta.setdefault("finalizers", [])
    if MANAGED_FINALIZER not in finalizers:
        finalizers.append(MANAGED_FINALIZER)
    gates = pod["spec"].setdefault("schedulingGates", [])
    if not any(g.get("name") == ADMISSION_GATE for g in gates):
        gates.append({"name": ADMISSION_GATE})


def suspend_new_job(obj: dict[str, Any]) -> None:
    """The Job and MPIJob webhooks: a queued job starts suspended."""
    if not _queued(obj):
        return
    spec = obj.setdefault("spec", {})
    if obj.get("kind") == "MPIJob":
        spec.setdefault("runPolicy", {})["suspend"] = True
    else:
        spec["suspend"] = True


# --- the controller --------------------------------------------------------------------------------


@dataclass
class _Unit:
    """What one Workload stands for: a pod group, a single pod, a Job or an MPIJob."""

    kind: str  # "Pod" | "Job" | "MPIJob"
    namespace: str
    owner: str  # the group's or pod's or job's name
    workload: str
    owner_uid: str = ""
    pods: int = 0  # how many pods its pod sets hold (set at submission)


@dataclass
class SimKueue:
    model: KueueModel
    config_versions: dict[tuple[str, str, str], str] = field(default_factory=dict)
    units: dict[str, _Unit] = field(default_factory=dict)  # workload key -> unit
    events_seen: int = 0


def state_of(cluster: SimKubeCluster) -> SimKueue:
    if cluster.kueue is None:
        cluster.kueue = SimKueue(KueueModel(config=KUEUE_CONFIG, start=int(cluster.clock())))
    state: SimKueue = cluster.kueue
    return state


def reconcile_kueue(cluster: SimKubeCluster, now: float) -> float:
    """One pass: Kueue objects into the model, new Workloads, pod and job progress, time, then
    the model's answers back into the store. Returns when it next needs a pass."""
    state = state_of(cluster)
    faults = {f.kind for f in cluster.spec.cluster_faults("scheduling")}
    _sync_config(cluster, state, faults)
    _discover(cluster, state, faults)
    _feed_progress(cluster, state)
    state.model.advance_to(max(state.model.now, int(now)))
    _write_back(cluster, state, faults)
    due = state.model.next_deadline()
    return math.inf if due is None else float(due)


def _sync_config(cluster: SimKubeCluster, state: SimKueue, faults: set[str]) -> None:
    present: set[tuple[str, str, str]] = set()
    for kind in _CONFIG_KINDS:
        if kind == "Namespace":
            objects = cluster.stored(by_kind("Namespace"))
        else:
            objects = [o for res in _served(PLURALS[kind]) for o in cluster.stored(res)]
        for obj in objects:
            meta = obj["metadata"]
            key = (kind, str(meta.get("namespace") or ""), str(meta["name"]))
            present.add(key)
            if state.config_versions.get(key) == meta.get("resourceVersion"):
                continue
            state.config_versions[key] = str(meta.get("resourceVersion"))
            state.model.apply(_with_faults({**obj, "kind": kind}, faults))
    for key in [k for k in state.config_versions if k not in present]:
        del state.config_versions[key]
        kind, namespace, name = key
        state.model.remove(kind, name, namespace)


def _served(plural: str) -> list[Resource]:
    from fleetval.sim.kube.resources import all_resources

    return [r for r in all_resources() if (r.group, r.plural) == (GROUP, plural)]


def _with_faults(obj: dict[str, Any], faults: set[str]) -> dict[str, Any]:
    """A ClusterQueue as a faulty platform applies it."""
    if obj.get("kind") != "ClusterQueue" or not faults & {"kueue.no_reclaim", "kueue.no_borrowing"}:
        return obj
    obj = copy.deepcopy(obj)
    spec = obj.setdefault("spec", {})
    if "kueue.no_reclaim" in faults:
        spec.setdefault("preemption", {})["reclaimWithinCohort"] = "Never"
    if "kueue.no_borrowing" in faults:
        for group in spec.get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for resource in flavor.get("resources") or []:
                    resource["borrowingLimit"] = "0"
    return obj


def _hash5(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:5]


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}


def _discover(cluster: SimKubeCluster, state: SimKueue, faults: set[str]) -> None:
    """New Workloads for pod groups that are complete, single pods, Jobs and MPIJobs."""
    known = {(u.kind, u.namespace, u.owner) for u in state.units.values()}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pod in cluster.stored(by_kind("Pod")):
        labels = _labels(pod)
        if labels.get(MANAGED_LABEL) != "true" or not labels.get(QUEUE_LABEL):
            continue
        group = labels.get(POD_GROUP_LABEL) if "kueue.partial_gang" not in faults else None
        groups.setdefault((pod["metadata"]["namespace"], group or "\0" + pod["metadata"]["name"]), []).append(
            pod
        )
    for (namespace, group), pods in groups.items():
        single = group.startswith("\0")
        owner = group.lstrip("\0")
        if ("Pod", namespace, owner) in known:
            continue
        if not single:
            wanted = _group_size(pods[0])
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            if wanted is None or len(live) < wanted:
                continue  # an incomplete group is never admitted
        name = owner if not single else f"pod-{owner}-{_hash5(pods[0]['metadata']['uid'])}"
        _submit(cluster, state, _Unit("Pod", namespace, owner, name), pods[0], _pod_sets(pods, single))
    for kind in ("Job", "MPIJob"):
        for job in cluster.stored(by_kind(kind)):
            meta = job["metadata"]
            if not _queued(job) or (kind, meta["namespace"], meta["name"]) in known:
                continue
            if meta.get("deletionTimestamp") or _job_finished(job):
                continue
            name = f"{kind.lower()}-{meta['name']}-{_hash5(meta['uid'])}"
            unit = _Unit(kind, meta["namespace"], meta["name"], name, str(meta["uid"]))
            _submit(cluster, state, unit, job, _job_pod_sets(job))


def _group_size(pod: dict[str, Any]) -> int | None:
    raw = (pod["metadata"].get("annotations") or {}).get(POD_GROUP_COUNT, "")
    return int(raw) if raw.isascii() and raw.isdigit() and 0 < int(raw) <= 10_000 else None


def _requests(template_spec: dict[str, Any]) -> dict[str, str]:
    totals: dict[str, float] = {}
    for container in template_spec.get("containers") or []:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in merged.items():
            totals[name] = totals.get(name, 0.0) + float(parse_quantity(str(value)))
    return {k: _quantity(v) for k, v in totals.items()}


def _quantity(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{round(value * 1000)}m"


def _pod_set(name: str, count: int, template_spec: dict[str, Any]) -> PodSet:
    return PodSet(
        name,
        count,
        _requests(template_spec),
        dict(template_spec.get("nodeSelector") or {}),
        tuple(template_spec.get("tolerations") or ()),
    )


def _pod_sets(pods: list[dict[str, Any]], single: bool) -> tuple[PodSet, ...]:
    if single:
        return (_pod_set("main", 1, pods[0]["spec"]),)
    shapes: dict[str, tuple[dict[str, Any], int]] = {}
    for pod in pods:
        spec = {k: pod["spec"].get(k) for k in ("containers", "nodeSelector", "tolerations")}
        role = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:8]
        shapes[role] = (pod["spec"], shapes.get(role, (pod["spec"], 0))[1] + 1)
    return tuple(_pod_set(role, count, spec) for role, (spec, count) in sorted(shapes.items()))


def _job_pod_sets(job: dict[str, Any]) -> tuple[PodSet, ...]:
    spec = job.get("spec") or {}
    if job["kind"] == "Job":
        count = min(
            int(spec.get("parallelism", 1)), int(spec.get("completions") or spec.get("parallelism", 1))
        )
        return (_pod_set("main", max(count, 1), (spec.get("template") or {}).get("spec") or {}),)
    sets = []
    for role, default in (("Launcher", 1), ("Worker", 1)):
        replica = (spec.get("mpiReplicaSpecs") or {}).get(role)
        if replica:
            template = (replica.get("template") or {}).get("spec") or {}
            sets.append(_pod_set(role.lower(), int(replica.get("replicas", default)), template))
    return tuple(sets) or (PodSet(),)


def _submit(
    cluster: SimKubeCluster, state: SimKueue, unit: _Unit, owner: dict[str, Any], pod_sets: tuple[PodSet, ...]
) -> None:
    labels = _labels(owner)
    created = parse_rfc3339(owner["metadata"].get("creationTimestamp") or "")
    spec = WorkloadSpec(
        namespace=unit.namespace,
        name=unit.workload,
        queue=labels[QUEUE_LABEL],
        pod_sets=pod_sets,
        priority_class=labels.get(PRIORITY_CLASS_LABEL) or None,
        job_uid=unit.owner_uid or str(owner["metadata"]["uid"]),
        created=int(created) if created is not None else None,
    )
    try:
        key = state.model.submit(spec)
    except ValueError as exc:  # e.g. a WorkloadPriorityClass that does not exist
        cluster.emit(owner, "Warning", "ErrCreatingWorkload", str(exc), COMPONENT, once=True)
        return
    body = state.model.workload(key)
    body["metadata"] = {
        "name": unit.workload,
        "namespace": unit.namespace,
        "labels": {JOB_UID_LABEL: spec.job_uid or ""},
    }
    if unit.kind != "Pod":
        body["metadata"]["ownerReferences"] = [controller_ref(owner)]
    status = body.pop("status")
    stored = cluster.insert(_resource("workloads"), unit.namespace, body)
    stored = copy.deepcopy(stored)
    stored["status"] = status
    cluster.write(_resource("workloads"), stored)
    unit.pods = sum(ps.count for ps in pod_sets)
    state.units[key] = unit
    cluster.emit(
        owner, "Normal", "CreatedWorkload", f"Created Workload: {key}", f"{unit.kind.lower()}-controller"
    )


def _job_finished(job: dict[str, Any]) -> str | None:
    """ "Succeeded" / "Failed" when the job ended, else None."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Succeeded"):
            return "Succeeded"
        if condition.get("status") == "True" and condition.get("type") == "Failed":
            return "Failed"
    return None


def _unit_pods(cluster: SimKubeCluster, unit: _Unit) -> list[dict[str, Any]]:
    pods = cluster.stored(by_kind("Pod"), unit.namespace)
    if unit.kind == "Pod":
        return [
            p
            for p in pods
            if _labels(p).get(MANAGED_LABEL) == "true"
            and (_labels(p).get(POD_GROUP_LABEL) == unit.owner or p["metadata"]["name"] == unit.owner)
        ]
    label = "batch.kubernetes.io/job-name" if unit.kind == "Job" else "training.kubeflow.org/job-name"
    return [p for p in pods if _labels(p).get(label) == unit.owner]


def _owner(cluster: SimKubeCluster, unit: _Unit) -> dict[str, Any] | None:
    return cluster.lookup(by_kind(unit.kind), unit.namespace, unit.owner) if unit.kind != "Pod" else None


def _feed_progress(cluster: SimKubeCluster, state: SimKueue) -> None:
    """What the pods and jobs did since the last pass: ready, ended, gone."""
    model = state.model
    for key, unit in list(state.units.items()):
        conditions = model.conditions(key)
        if FINISHED in conditions and conditions[FINISHED].true:
            continue
        pods = _unit_pods(cluster, unit)
        if unit.kind == "Pod":
            if cluster.lookup(_resource("workloads"), unit.namespace, unit.workload) is None:
                _let_go(cluster, pods)  # its Workload was deleted (its namespace is going)
                _forget(cluster, state, key)
                continue
            if not pods:
                evicted = EVICTED in conditions and conditions[EVICTED].true
                if not evicted:
                    _forget(cluster, state, key)
                continue
            if _pod_group_progress(cluster, state, key, unit, pods):
                continue
        else:
            owner = _owner(cluster, unit)
            if owner is None:
                _forget(cluster, state, key)
                continue
            ended = _job_finished(owner)
            if ended:
                model.finish(key, reason=ended)
                continue
        running = [p for p in pods if p["status"].get("phase") in ("Running", "Succeeded")]
        wanted = unit.pods
        if model.is_admitted(key) and running and (unit.kind != "Pod" or len(running) >= wanted):
            model.mark_pods_ready(key)


def _pod_group_progress(
    cluster: SimKubeCluster, state: SimKueue, key: str, unit: _Unit, pods: list[dict[str, Any]]
) -> bool:
    """A pod group's or single pod's end, by Kueue's pod_controller rules; True when it finished."""
    model = state.model
    phases = [p["status"].get("phase") for p in pods]
    model.set_pods_active(key, "Running" in phases)
    live = [p for p, ph in zip(pods, phases, strict=True) if ph not in ("Succeeded", "Failed")]
    failed = [p for p, ph in zip(pods, phases, strict=True) if ph == "Failed"]
    single = not any(_labels(p).get(POD_GROUP_LABEL) for p in pods)
    if single or phases.count("Succeeded") >= unit.pods:
        if live:
            return False
        model.finish(key, reason="Failed" if failed else "Succeeded")
        _let_go(cluster, pods)
        return True
    if not live and any(
        (p["metadata"].get("annotations") or {}).get(RETRIABLE_IN_GROUP) == "false" for p in pods
    ):
        model.finish(key, reason="Failed")
        _let_go(cluster, pods)
        return True
    if failed and len(pods) - len(failed) >= unit.pods:
        _let_go(cluster, failed)  # replaced: the failed pods are not needed any more
    elif failed and not live and model.is_admitted(key):
        model.set_job_condition(key, WAITING_FOR_REPLACEMENT, True, "PodsFailed", MSG_NEED_REPLACEMENT)
    return False


def _let_go(cluster: SimKubeCluster, pods: list[dict[str, Any]]) -> None:
    """Kueue removes its finalizer: a deleted pod then goes."""
    for pod in pods:
        finalizers = pod["metadata"].get("finalizers") or []
        if MANAGED_FINALIZER in finalizers:
            changed = copy.deepcopy(pod)
            changed["metadata"]["finalizers"] = [f for f in finalizers if f != MANAGED_FINALIZER]
            cluster.write(by_kind("Pod"), changed)


def _forget(cluster: SimKubeCluster, state: SimKueue, key: str) -> None:
    unit = state.units.pop(key)
    state.model.delete(key)
    workload = cluster.lookup(_resource("workloads"), unit.namespace, unit.workload)
    if workload is not None:
        cluster.erase(_resource("workloads"), workload)


def _write_back(cluster: SimKubeCluster, state: SimKueue, faults: set[str]) -> None:
    model = state.model
    res = _resource("workloads")
    for key, unit in state.units.items():
        stored = cluster.lookup(res, unit.namespace, unit.workload)
        if stored is None:
            continue
        status = model.workload(key)["status"]
        if stored.get("status") != status:
            cluster.write(res, {**copy.deepcopy(stored), "status": status})
        admission = model.admission(key)
        conditions = model.conditions(key)
        finished = FINISHED in conditions and conditions[FINISHED].true
        # An evicted job is stopped at once; its quota goes only once it is no longer active.
        if not finished and EVICTED in conditions and conditions[EVICTED].true:
            _stop(cluster, unit, conditions[EVICTED].message)
        elif model.is_admitted(key) and admission is not None:
            _admit(cluster, unit, admission)
    events = model.events
    for event in events[state.events_seen :]:
        subject = state.units.get(event.object)
        stored = cluster.lookup(res, subject.namespace, subject.workload) if subject else None
        if stored is None:
            continue
        message = event.message
        if "kueue.wrong_reason" in faults and event.type == "Warning":
            message = WRONG_REASON_TEXT
        cluster.emit(stored, event.type, event.reason, message, COMPONENT)
    state.events_seen = len(events)


def _flavor_directives(
    cluster: SimKubeCluster, admission: dict[str, Any]
) -> tuple[dict[str, str], list[Any]]:
    selector: dict[str, str] = {}
    tolerations: list[Any] = []
    for assignment in admission.get("podSetAssignments") or []:
        for flavor_name in set((assignment.get("flavors") or {}).values()):
            flavor = next(
                (f for r in _served("resourceflavors") if (f := cluster.lookup(r, "", flavor_name))), None
            )
            spec = (flavor or {}).get("spec") or {}
            selector.update(spec.get("nodeLabels") or {})
            tolerations += [t for t in spec.get("tolerations") or [] if t not in tolerations]
    return selector, tolerations


def _admit(cluster: SimKubeCluster, unit: _Unit, admission: dict[str, Any]) -> None:
    selector, tolerations = _flavor_directives(cluster, admission)
    if unit.kind == "Pod":
        for pod in _unit_pods(cluster, unit):
            gates = pod["spec"].get("schedulingGates") or []
            if not any(g.get("name") == ADMISSION_GATE for g in gates):
                continue
            changed = copy.deepcopy(pod)
            rest = [g for g in gates if g.get("name") != ADMISSION_GATE]
            if rest:
                changed["spec"]["schedulingGates"] = rest
            else:
                changed["spec"].pop("schedulingGates", None)
            if selector:
                changed["spec"]["nodeSelector"] = {**(changed["spec"].get("nodeSelector") or {}), **selector}
            if tolerations:
                changed["spec"]["tolerations"] = [*(changed["spec"].get("tolerations") or []), *tolerations]
            cluster.write(by_kind("Pod"), changed)
        return
    owner = _owner(cluster, unit)
    if owner is None or not _suspended(owner):
        return
    changed = copy.deepcopy(owner)
    _set_suspend(changed, False)
    for template in _templates(changed):
        spec = template.setdefault("spec", {})
        if selector:
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **selector}
        if tolerations:
            spec["tolerations"] = [*(spec.get("tolerations") or []), *tolerations]
    cluster.write(by_kind(unit.kind), changed)
    cq = admission.get("clusterQueue", "")
    cluster.emit(owner, "Normal", "Started", f"Admitted by clusterQueue {cq}", COMPONENT)


def _stop(cluster: SimKubeCluster, unit: _Unit, why: str) -> None:
    """Eviction: admitted pods are deleted (gated replacements wait), a job is suspended."""
    if unit.kind == "Pod":
        for pod in _unit_pods(cluster, unit):
            gated = any(g.get("name") == ADMISSION_GATE for g in pod["spec"].get("schedulingGates") or [])
            if not gated:
                cluster.delete_gracefully(by_kind("Pod"), pod)  # its grace period; the finalizer keeps it
        return
    owner = _owner(cluster, unit)
    if owner is None or _suspended(owner):
        return
    changed = copy.deepcopy(owner)
    _set_suspend(changed, True)
    cluster.write(by_kind(unit.kind), changed)
    cluster.emit(owner, "Normal", "Stopped", why, COMPONENT)


def _suspended(job: dict[str, Any]) -> bool:
    spec = job.get("spec") or {}
    holder = spec.get("runPolicy") or {} if job.get("kind") == "MPIJob" else spec
    return bool(holder.get("suspend"))


def _set_suspend(job: dict[str, Any], value: bool) -> None:
    spec = job.setdefault("spec", {})
    if job.get("kind") == "MPIJob":
        spec.setdefault("runPolicy", {})["suspend"] = value
    else:
        spec["suspend"] = value


def _templates(job: dict[str, Any]) -> list[dict[str, Any]]:
    spec = job.get("spec") or {}
    if job.get("kind") == "MPIJob":
        return [r.setdefault("template", {}) for r in (spec.get("mpiReplicaSpecs") or {}).values()]
    return [spec.setdefault("template", {})]
