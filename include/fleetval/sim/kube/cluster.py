"""The simulated cluster behind `fleetval sim serve`: an object store with the API server's
semantics (resourceVersion, conflicts, validation, selectors, paging, watch, garbage collection of
owned objects) and the controllers the product relies on — the scheduler, a kubelet per node
(containers run through the image catalog, so a probe prints what the real tool would print on
that node, faults included), the mpi-operator, the Job controller, Kueue (admission by
`kueue_model`) and the GPU Operator's driver upgrades (`fleetval.sim.kube.controllers`).

A fresh cluster starts with the fleet's nodes, the namespaces `DEFAULT_NAMESPACES`, a Kueue
LocalQueue `fleetval-validation` in `fleetval` (with its ClusterQueue and ResourceFlavor, and
Kueue's Deployment in `kueue-system`, which tells the version it claims) and the GPU Operator's
ClusterPolicy `cluster-policy` (driver auto-upgrade on) with its operand pods in `gpu-operator`
(`operands`).

Deleting an object deletes what it owns (ownerReferences), as the garbage collector does: in the
background by default, `Foreground` (the owner keeps a deletionTimestamp and the
`foregroundDeletion` finalizer until its dependents are gone) or `Orphan` (the dependents lose
the reference) when the request says so; a batch/v1 Job orphans its pods by default, as on a real
server.

Time: a container runs for its tool's nominal duration × `time_scale` (0 runs probes at once;
the demo uses a small scale so runs can be watched). State is written to the store
(`sim_objects`) and read back on start, so a restarted server continues the same cluster.
"""

from __future__ import annotations

import base64
import binascii
import collections
import contextlib
import copy
import hashlib
import json
import math
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sqlalchemy import Engine

from fleetval.fleet.spec import FleetSpec
from fleetval.k8s import scheduling
from fleetval.k8s.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from fleetval.k8s.selectors import SelectorError, parse_field_selector, parse_label_selector
from fleetval.k8s.validation import (
    ApiError,
    check_custom,
    invalid_error,
    load_crds,
    not_supported,
    status_body,
    validate_core,
)
from fleetval.sim.images import ContainerContext
from fleetval.sim.kube import gpu_operator, kueue, mig_manager, mig_parted_config, operands, processes
from fleetval.sim.kube.affinity import has_required_anti_affinity, inter_pod_affinity_reason
from fleetval.sim.kube.controllers import run_controllers
from fleetval.sim.kube.jobs import default_job, job_errors
from fleetval.sim.kube.meta import TERMINAL, rfc3339, truncate_event
from fleetval.sim.kube.mpi_operator import JOB_ROLE_LABEL
from fleetval.sim.kube.mpi_operator import served_crd as served_mpijob_crd
from fleetval.sim.kube.nodes import fleet_nodes, unhealthy_gpus
from fleetval.sim.kube.resources import Resource, by_kind
from fleetval.sim.kubelet.runtime import (
    Run,
    container_env,
    container_status,
    end_reason,
    gpu_request,
    mark_running,
    mark_terminated,
    pod_ip,
    shm_bytes,
    simulated_run,
)
from fleetval.store import sim_objects

DEFAULT_NAMESPACES: Final = (
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "fleetval",
    "kueue-system",
    "gpu-operator",
)
WATCH_LOG_SIZE: Final = 100_000
ENDED_LOGS_KEPT: Final = 256
MAX_EVENTS: Final = 50_000
GPU: Final = "nvidia.com/gpu"
PROPAGATION_POLICIES: Final = ("Foreground", "Background", "Orphan")
FOREGROUND_FINALIZER: Final = "foregroundDeletion"
UNKNOWN_FORMAT: Final = "the body of the request was in an unknown format - accepted media types include: "
POD_MUTABLE_SPEC: Final = frozenset({"activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"})

Key = tuple[str, str, str]  # (resource key, namespace, name)


def now_rfc3339(t: float | None = None) -> str:
    return rfc3339(time.time() if t is None else t)


@dataclass(slots=True)
class Change:
    rv: int
    resource: str
    namespace: str
    kind: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]


@dataclass(slots=True)
class ListOptions:
    label_selector: str = ""
    field_selector: str = ""
    limit: int = 0
    continue_token: str = ""


@dataclass
class SimKubeCluster:
    spec: FleetSpec
    engine: Engine | None = None
    time_scale: float = 0.0
    clock: Callable[[], float] = time.time
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    runs: dict[Key, Run] = field(default_factory=dict)
    rv: int = 0
    changes: collections.deque[Change] = field(
        default_factory=lambda: collections.deque(maxlen=WATCH_LOG_SIZE)
    )
    lock: threading.Condition = field(default_factory=threading.Condition)
    _dirty: set[Key] = field(default_factory=set)
    _deleted: set[Key] = field(default_factory=set)
    _pending: set[Key] = field(default_factory=set)  # pods not yet bound to a node
    _active: set[Key] = field(default_factory=set)  # bound pods not yet terminal
    # Keys of each resource in creation order: lists, scheduling and event trimming touch one
    # resource, not every object of the cluster.
    _by_resource: dict[str, dict[Key, None]] = field(default_factory=lambda: collections.defaultdict(dict))
    _event_seq: int = 0
    _name_seq: int = 0
    # Controller state that is not API state: each node's loaded driver where an upgrade changed
    # it (kept with the node in the store), the upgrade controller's waits, Jobs' start times to
    # the sub-second, and events a controller reports once rather than on every pass.
    node_drivers: dict[str, str] = field(default_factory=dict)
    node_mig: dict[str, str] = field(default_factory=dict)  # the mig-parted config each node holds
    mig: Any = None  # the simulated MIG manager's in-memory state (sim/kube/mig_manager.py MigState)
    upgrade_timers: dict[tuple[str, str], float] = field(default_factory=dict)
    job_started: dict[str, float] = field(default_factory=dict)
    _emitted: set[tuple[str, str, str]] = field(default_factory=set)
    kueue: Any = None  # the simulated Kueue's in-memory state (sim/kube/kueue.py SimKueue)
    _gc_pending: bool = False
    _foreground: set[Key] = field(default_factory=set)  # owners waiting for their dependents
    _reconciling: bool = False
    _controllers_rv: int = -1
    _controllers_due: float = 0.0
    volume_root: Path | None = None  # where volumes of really-running containers live
    # This cluster's own pod directories: simulated clusters give the same pod uids.
    instance: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    _terminating: dict[Key, float] = field(default_factory=dict)  # pod → when its grace period ends
    # The last lines of really-running pods already deleted, for a `logs -f` that was following
    # them: a runtime delivers a container's last lines before the stream closes.
    _ended_logs: collections.OrderedDict[Key, list[tuple[float, str]]] = field(
        default_factory=collections.OrderedDict
    )

    # --- start ------------------------------------------------------------------------------
    def start(self) -> None:
        """Load the fleet (and any state a previous server left in the store)."""
        with self.lock:
            if self.engine is not None and self._load():
                return
            for ns in DEFAULT_NAMESPACES:
                self._put(by_kind("Namespace"), self._new_meta({"metadata": {"name": ns}}, "Namespace", ""))
            for node in fleet_nodes(self.spec):
                node["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
                self._put(by_kind("Node"), node)
            for res, namespace, body in [
                *kueue.bootstrap_objects(self.spec),
                (by_kind("ClusterPolicy"), "", gpu_operator.cluster_policy(self.spec)),
                (by_kind("ConfigMap"), operands.NAMESPACE, mig_parted_config.configmap(operands.NAMESPACE)),
            ]:
                self.insert(res, namespace, body)
            for pod in operands.operand_pods(self.spec):  # stored with their status; never run here
                status = pod["status"]
                self._default_pod(pod)
                pod["status"] = {**pod["status"], **status}
                self._put(by_kind("Pod"), self._new_meta(pod, "Pod", operands.NAMESPACE))
            self._flush()

    def reset(self) -> None:
        """Forget the state a previous server saved: the next start begins from the fleet spec."""
        if self.engine is not None:
            sim_objects.forget(self.engine, self.spec.name)

    def _load(self) -> bool:
        assert self.engine is not None
        rows = sim_objects.load(self.engine, self.spec.name)
        if not rows:
            return False
        for res_key, ns, name, body_text, sim_text in rows:
            key = (res_key, ns, name)
            body, sim = json.loads(body_text), json.loads(sim_text)
            self.objects[key] = body
            self._by_resource[res_key][key] = None
            self.rv = max(self.rv, int(body["metadata"].get("resourceVersion", "0")))
            if sim.get("run"):
                self.runs[key] = Run.from_json(sim["run"])
            if sim.get("driver"):
                self.node_drivers[name] = str(sim["driver"])
            if sim.get("mig"):
                self.node_mig[name] = str(sim["mig"])
            if FOREGROUND_FINALIZER in (body["metadata"].get("finalizers") or []):
                self._foreground.add(key)  # its dependents' deletion goes on
                self._gc_pending = True
            static = operands.SIM_STATIC in (body["metadata"].get("annotations") or {})
            if res_key == "v1/pods" and body["status"].get("phase") not in TERMINAL and not static:
                (self._active if body["spec"].get("nodeName") else self._pending).add(key)
        return True

    def flush(self) -> None:
        with self.lock:
            self._flush()

    def stop_containers(self) -> None:
        """The node's containers that are processes end with it (the server is stopping)."""
        with self.lock:
            for run in self.runs.values():
                if run.live is not None and run.live.exit_code() is None:
                    with contextlib.suppress(OSError):
                        run.live.send(signal.SIGKILL)

    def _flush(self) -> None:
        """Write changed objects to the store (events are not kept, as on a real cluster they expire)."""
        if self.engine is None or not (self._dirty or self._deleted):
            self._dirty.clear()
            self._deleted.clear()
            return
        dirty = [k for k in self._dirty if k in self.objects and k[0] != "v1/events"]
        changed = [
            sim_objects.SavedObject(*k, body=json.dumps(self.objects[k]), sim=json.dumps(self._sim_state(k)))
            for k in dirty
        ]
        sim_objects.save(self.engine, self.spec.name, changed, list(self._deleted))
        self._dirty.clear()
        self._deleted.clear()

    def _sim_state(self, key: Key) -> dict[str, Any]:
        state: dict[str, Any] = {}
        if key in self.runs:
            state["run"] = self.runs[key].to_json()
        if key[0] == "v1/nodes" and key[2] in self.node_drivers:
            state["driver"] = self.node_drivers[key[2]]
        if key[0] == "v1/nodes" and key[2] in self.node_mig:
            state["mig"] = self.node_mig[key[2]]
        return state

    # --- store primitives (lock held) ---------------------------------------------------------
    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _new_meta(self, obj: dict[str, Any], kind: str, namespace: str) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        if namespace:
            meta["namespace"] = namespace
        meta.setdefault("uid", self._uid(kind, namespace, meta.get("name", "")))
        meta.setdefault("creationTimestamp", now_rfc3339(self.clock()))
        return obj

    def _uid(self, *parts: str) -> str:
        digest = hashlib.sha256(f"{self.spec.seed}/{self.rv}/{'/'.join(parts)}".encode()).hexdigest()
        return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def _put(self, res: Resource, obj: dict[str, Any], *, kind: str = "") -> dict[str, Any]:
        meta = obj["metadata"]
        key = (res.key, meta.get("namespace", "") if res.namespaced else "", meta["name"])
        change = kind or ("MODIFIED" if key in self.objects else "ADDED")
        meta["resourceVersion"] = self._next_rv()
        obj["apiVersion"] = res.api_version
        obj["kind"] = res.kind
        self.objects[key] = obj
        self._by_resource[res.key][key] = None
        self._dirty.add(key)
        self._deleted.discard(key)
        self.changes.append(Change(self.rv, res.key, key[1], change, copy.deepcopy(obj)))
        self.lock.notify_all()
        return obj

    def _remove(self, res: Resource, key: Key) -> dict[str, Any]:
        obj = self.objects.pop(key)
        self._by_resource[key[0]].pop(key, None)
        run = self.runs.pop(key, None)
        if run is not None and run.live is not None:
            run.live.send(signal.SIGKILL)  # a pod removed by other means (GC, its namespace) stops now
            self._ended_logs[key] = run.lines()
            while len(self._ended_logs) > ENDED_LOGS_KEPT:
                self._ended_logs.popitem(last=False)
        self._terminating.pop(key, None)
        self._pending.discard(key)
        self._active.discard(key)
        self._foreground.discard(key)
        if key[0] != "v1/events":
            self._gc_pending = True  # what it owned, if anything, goes next
        self._dirty.discard(key)
        self._deleted.add(key)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self.changes.append(Change(self.rv, res.key, key[1], "DELETED", copy.deepcopy(obj)))
        self.lock.notify_all()
        return obj

    def _key(self, res: Resource, namespace: str, name: str) -> Key:
        return (res.key, namespace if res.namespaced else "", name)

    def _existing(self, res: Resource, namespace: str, name: str) -> tuple[Key, dict[str, Any]]:
        key = self._key(res, namespace, name)
        current = self.objects.get(key)
        if current is None:
            raise self._not_found(res, name)
        return key, current

    def _not_found(self, res: Resource, name: str) -> ApiError:
        return ApiError(
            404,
            status_body(
                404,
                "NotFound",
                f'{res.group_resource} "{name}" not found',
                kind=res.plural,
                name=name,
                group=res.group,
            ),
        )

    def _require_namespace(self, res: Resource, namespace: str) -> None:
        if not res.namespaced:
            return
        found = self.objects.get(("v1/namespaces", "", namespace))
        if found is None:
            raise ApiError(
                404,
                status_body(
                    404, "NotFound", f'namespaces "{namespace}" not found', kind="namespaces", name=namespace
                ),
            )
        if found["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                status_body(
                    403,
                    "Forbidden",
                    f'{res.plural} "" is forbidden: unable to create new content in namespace {namespace} '
                    "because it is being terminated",
                    kind=res.plural,
                ),
            )

    # --- API verbs --------------------------------------------------------------------------
    def get(self, res: Resource, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            self._reconcile()
            obj = self.objects.get(self._key(res, namespace, name))
            if obj is None:
                raise self._not_found(res, name)
            return copy.deepcopy(obj)

    def list_objects(self, res: Resource, namespace: str | None, opts: ListOptions) -> dict[str, Any]:
        try:
            labels = parse_label_selector(opts.label_selector)
            fields = parse_field_selector(opts.field_selector, res.kind)
        except SelectorError as exc:
            raise ApiError(400, status_body(400, "BadRequest", str(exc))) from None
        start_after = ""
        if opts.continue_token:
            try:
                start_after = json.loads(base64.urlsafe_b64decode(opts.continue_token))["start"]
            except (ValueError, KeyError, TypeError, binascii.Error):
                raise ApiError(
                    400,
                    status_body(
                        400,
                        "BadRequest",
                        "continue key is not valid: incorrect encoded start resourceVersion",
                    ),
                ) from None
        with self.lock:
            self._reconcile()
            items = []
            for key in sorted(self._by_resource[res.key]):
                _res_key, ns, name = key
                obj = self.objects[key]
                if namespace and ns != namespace:
                    continue
                if start_after and f"{ns}/{name}" <= start_after:
                    continue
                if labels.matches(obj["metadata"].get("labels")) and fields.matches(obj):
                    items.append(obj)
            meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
            if opts.limit and len(items) > opts.limit:
                last = items[opts.limit - 1]["metadata"]
                token = json.dumps({"start": f"{last.get('namespace', '')}/{last['name']}", "rv": self.rv})
                meta["continue"] = base64.urlsafe_b64encode(token.encode()).decode()
                meta["remainingItemCount"] = len(items) - opts.limit
                items = items[: opts.limit]
            return {
                "apiVersion": res.api_version,
                "kind": res.list_kind,
                "metadata": meta,
                "items": copy.deepcopy(items),
            }

    def create(
        self,
        res: Resource,
        namespace: str,
        body: dict[str, Any],
        *,
        field_validation: str = "Warn",
        dry_run: bool = False,
    ) -> tuple[dict[str, Any], list[str]]:
        obj, warnings = self._validated(res, self._named(body), field_validation)
        with self.lock:
            self._reconcile()
            if dry_run:
                return copy.deepcopy(self._insert(res, namespace, obj, dry_run=True)), warnings
            created = copy.deepcopy(self._insert(res, namespace, obj))
            self._reconcile()
            self._flush()
            # A pod comes back as the scheduler left it; anything else as it was stored.
            current = self.objects.get(self._key(res, namespace, created["metadata"]["name"]))
            return copy.deepcopy(current) if res.kind == "Pod" and current else created, warnings

    def _named(self, body: Any) -> Any:
        meta_in = body.get("metadata") if isinstance(body, dict) else None
        if isinstance(meta_in, dict) and not meta_in.get("name") and meta_in.get("generateName"):
            # The server names the object before validating it, so errors name it too.
            with self.lock:
                name = str(meta_in["generateName"]) + self._suffix()
            body = {**body, "metadata": {**meta_in, "name": name}}
        return body

    def _insert(
        self, res: Resource, namespace: str, obj: dict[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any]:
        """Store a validated new object (lock held): namespace and name checks, server-set metadata
        and defaults; `dry_run`: all that, then return it unstored."""
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(
                    400,
                    status_body(
                        400,
                        "BadRequest",
                        "the namespace of the provided object does not match the namespace sent on the "
                        "request",
                    ),
                )
            self._require_namespace(res, namespace)
        key = self._key(res, namespace, meta["name"])
        if key in self.objects:
            raise ApiError(
                409,
                status_body(
                    409,
                    "AlreadyExists",
                    f'{res.group_resource} "{meta["name"]}" already exists',
                    kind=res.plural,
                    name=meta["name"],
                    group=res.group,
                ),
            )
        meta.pop("resourceVersion", None)
        self._new_meta(obj, res.kind, namespace if res.namespaced else "")
        if res.kind == "Pod":
            self._default_pod(obj)
            kueue.gate_new_pod(obj)  # Kueue's pod webhook
        elif res.kind == "Job":
            kueue.suspend_new_job(obj)  # Kueue's job webhook
            default_job(obj)
        elif res.kind == "MPIJob":
            kueue.suspend_new_job(obj)
        elif res.kind == "PersistentVolumeClaim":
            _bind_claim(obj)
        elif res.kind == "Event" and not dry_run:
            self._trim_events()
        if dry_run:
            return obj
        created = self._put(res, obj)
        if res.kind == "Pod":
            self._pending.add(key)
        return created

    def replace(
        self,
        res: Resource,
        namespace: str,
        name: str,
        body: dict[str, Any],
        *,
        subresource: str = "",
        dry_run: bool = False,
    ) -> dict[str, Any]:
        obj, _ = self._validated(res, body, "Warn")
        with self.lock:
            self._reconcile()
            key, current = self._existing(res, namespace, name)
            return self._update(res, key, current, obj, subresource, dry_run=dry_run)

    def patch(
        self,
        res: Resource,
        namespace: str,
        name: str,
        patch: Any,
        content_type: str,
        *,
        subresource: str = "",
        dry_run: bool = False,
    ) -> dict[str, Any]:
        with self.lock:
            self._reconcile()
            key, current = self._existing(res, namespace, name)
            try:
                if content_type == "application/json-patch+json":
                    if not isinstance(patch, list):
                        raise PatchError(
                            "json: cannot unmarshal object into Go value of type jsonpatch.Patch", code=400
                        )
                    patched = json_patch(current, patch)
                elif content_type == "application/merge-patch+json":
                    patched = merge_patch(current, _mapping(patch))
                elif content_type == "application/strategic-merge-patch+json":
                    if not res.strategic:
                        raise ApiError(
                            415,
                            status_body(
                                415,
                                "UnsupportedMediaType",
                                f"{UNKNOWN_FORMAT}application/json-patch+json, application/merge-patch+json, "
                                "application/apply-patch+yaml",
                            ),
                        )
                    patched = strategic_merge_patch(current, _mapping(patch), res.kind)
                else:
                    raise ApiError(
                        415,
                        status_body(
                            415,
                            "UnsupportedMediaType",
                            f"{UNKNOWN_FORMAT}application/json-patch+json, application/merge-patch+json"
                            f"{', application/strategic-merge-patch+json' if res.strategic else ''}",
                        ),
                    )
            except PatchError as exc:
                code = getattr(exc, "code", 422)
                raise ApiError(
                    code, status_body(code, "BadRequest" if code == 400 else "Invalid", str(exc))
                ) from None
            obj, _ = self._validated(res, patched, "Warn")
            return self._update(res, key, current, obj, subresource, dry_run=dry_run)

    def delete(
        self,
        res: Resource,
        namespace: str,
        name: str,
        *,
        propagation: str | None = None,
        dry_run: bool = False,
        grace_period: int | None = None,
    ) -> dict[str, Any]:
        """Delete an object; what it owns goes by `propagation` (see the module doc). A pod whose
        container really runs gets its grace period: SIGTERM now, SIGKILL when it ends, and the pod
        stays (with a deletionTimestamp) until the process has exited."""
        if propagation is not None and propagation not in PROPAGATION_POLICIES:
            raise invalid_error(
                "DeleteOptions",
                "",
                [not_supported("propagationPolicy", propagation, PROPAGATION_POLICIES)],
                group="meta.k8s.io",
            )
        with self.lock:
            self._reconcile()
            key = self._key(res, namespace, name)
            obj = self.objects.get(key)
            if obj is None:
                raise self._not_found(res, name)
            if dry_run:
                return copy.deepcopy(obj)
            if res.kind == "Pod" and self._graceful(key, obj, grace_period):
                self._flush()
                return copy.deepcopy(self.objects[key])
            if _finalizers(obj):  # marked, and kept until whoever holds a finalizer lets go
                self._mark_deleted(res, key, 0)
                self._flush()
                return copy.deepcopy(self.objects[key])
            if res.kind == "Namespace":
                return self._terminate_namespace(key)
            # batch/v1 Jobs keep the old default of orphaning their pods (jobStrategy).
            policy = propagation or ("Orphan" if res.kind == "Job" else "Background")
            uid = str(obj["metadata"].get("uid") or "")
            if policy == "Orphan":
                for dependent_key in self._dependents(uid):
                    dependent = copy.deepcopy(self.objects[dependent_key])
                    refs = dependent["metadata"]["ownerReferences"]
                    dependent["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                    if not dependent["metadata"]["ownerReferences"]:
                        del dependent["metadata"]["ownerReferences"]
                    self._put(_resource_of(dependent_key[0]), dependent, kind="MODIFIED")
            elif policy == "Foreground" and self._dependents(uid):
                if key not in self._foreground:
                    marked = copy.deepcopy(obj)
                    marked["metadata"].setdefault("deletionTimestamp", now_rfc3339(self.clock()))
                    marked["metadata"].setdefault("deletionGracePeriodSeconds", 0)
                    finalizers = marked["metadata"].setdefault("finalizers", [])
                    if FOREGROUND_FINALIZER not in finalizers:
                        finalizers.append(FOREGROUND_FINALIZER)
                    self._put(res, marked, kind="MODIFIED")
                    self._foreground.add(key)
                    self._gc_pending = True
                self._flush()
                return copy.deepcopy(self.objects[key])
            removed = self._erase(res, key)
            self._collect_garbage()
            self._flush()
            return copy.deepcopy(removed)

    def _graceful(self, key: Key, pod: dict[str, Any], grace_period: int | None) -> bool:
        """Start a running container's termination (lock held); False when the pod goes at once.

        A real process gets SIGTERM, then SIGKILL when the grace period ends; a simulated one is a
        PID 1 without a SIGTERM handler (busybox `sleep`, a tool exec'd by `sh -c`): it runs on until
        it ends by itself or the grace period (real seconds, as a kubelet counts it) is over."""
        run = self.runs.get(key)
        if run is None or pod["status"].get("phase") in TERMINAL or key not in self._active:
            return False
        grace = pod["spec"].get("terminationGracePeriodSeconds", 30) if grace_period is None else grace_period
        now = self.clock()
        if grace <= 0:  # killed now; the caller deletes (or a finalizer keeps) the pod
            self._terminating.pop(key, None)
            if run.live is not None:
                run.live.send(signal.SIGKILL)
                return False
            code = run.exit_code if now >= run.ends else 137
            self._terminate(key, pod, min(now, run.ends), exit_code=code, reason=end_reason(code))
            return False
        deadline = now + float(grace)
        if key in self._terminating:  # a second delete can only shorten the grace period
            self._terminating[key] = min(self._terminating[key], deadline)
            return True
        if run.live is not None:
            run.live.send(signal.SIGTERM)
        self._terminating[key] = deadline
        marked = copy.deepcopy(pod)
        marked["metadata"]["deletionTimestamp"] = now_rfc3339(deadline)
        marked["metadata"]["deletionGracePeriodSeconds"] = int(grace)
        self._put(by_kind("Pod"), marked, kind="MODIFIED")
        self._event(
            marked,
            "Normal",
            "Killing",
            f"Stopping container {pod['spec']['containers'][0]['name']}",
            "kubelet",
            now,
        )
        return True

    def _mark_deleted(self, res: Resource, key: Key, grace: int) -> None:
        """Set the deletionTimestamp of an object that stays for now (lock held)."""
        obj = self.objects[key]
        if obj["metadata"].get("deletionTimestamp"):
            return
        marked = copy.deepcopy(obj)
        marked["metadata"]["deletionTimestamp"] = now_rfc3339(self.clock() + grace)
        marked["metadata"]["deletionGracePeriodSeconds"] = grace
        self._put(res, marked, kind="MODIFIED")

    def _settle(self, res: Resource, key: Key) -> None:
        """An object marked for deletion goes once no finalizer holds it and, for a pod, once its
        containers have ended (lock held)."""
        obj = self.objects.get(key)
        if obj is None or not obj["metadata"].get("deletionTimestamp") or _finalizers(obj):
            return
        if res.kind == "Pod" and key in self._active:
            return  # the kubelet deletes it when its container has stopped
        self._remove(res, key)
        self._collect_garbage()

    def _terminate_namespace(self, key: Key) -> dict[str, Any]:
        """The namespace controller: the namespace is Terminating, everything in it is deleted as a
        client's delete would be (grace periods, finalizers), and it goes once it is empty (lock held)."""
        namespace = key[2]
        current = self.objects[key]
        if not current["metadata"].get("deletionTimestamp"):
            marked = copy.deepcopy(current)
            marked["metadata"]["deletionTimestamp"] = now_rfc3339(self.clock())
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            marked.setdefault("status", {})["phase"] = "Terminating"
            self._put(by_kind("Namespace"), marked, kind="MODIFIED")
        for other in [k for k in self.objects if k[1] == namespace and k[0] != "v1/namespaces"]:
            if other in self.objects:
                self.delete_gracefully(_resource_of(other[0]), self.objects[other])
        gone = copy.deepcopy(self.objects[key])
        self._settle_namespaces()
        self._flush()
        return gone

    def _settle_namespaces(self) -> None:
        """A Terminating namespace with nothing but events left in it goes, with them (lock held)."""
        terminating = [
            k
            for k in self._by_resource["v1/namespaces"]
            if self.objects[k]["metadata"].get("deletionTimestamp")
        ]
        for key in terminating:
            inside = [
                k
                for r, keys in self._by_resource.items()
                if r != "v1/namespaces"
                for k in keys
                if k[1] == key[2]
            ]
            if all(k[0] == "v1/events" for k in inside):
                for event in inside:
                    self._remove(_resource_of(event[0]), event)
                self._remove(by_kind("Namespace"), key)

    def _erase(self, res: Resource, key: Key) -> dict[str, Any]:
        """Remove an object now (lock held); a namespace takes its objects along."""
        obj = self.objects[key]
        if res.kind == "Pod" and obj["status"].get("phase") not in TERMINAL:
            obj["metadata"]["deletionTimestamp"] = now_rfc3339(self.clock())
            obj["metadata"]["deletionGracePeriodSeconds"] = 0
        if res.kind == "Namespace":
            for other in [k for k in self.objects if k[1] == key[2]]:
                self._remove(_resource_of(other[0]), other)
        return self._remove(res, key)

    def _dependents(self, uid: str) -> list[Key]:
        """Keys of the objects with an owner reference to `uid` (events own nothing)."""
        return [
            key
            for res_key, keys in self._by_resource.items()
            if res_key != "v1/events"
            for key in keys
            if any(r.get("uid") == uid for r in self.objects[key]["metadata"].get("ownerReferences") or [])
        ]

    def _collect_garbage(self) -> None:
        """The garbage collector, after a deletion (lock held): an object whose owners are all gone
        (or being deleted in the foreground) is deleted, one with a live owner left loses the
        references to the others; a foreground-deleted owner goes once nothing it owns is left."""
        while self._gc_pending:
            self._gc_pending = False
            live = {
                str(self.objects[k]["metadata"].get("uid")): k
                for res_key, keys in self._by_resource.items()
                if res_key != "v1/events"
                for k in keys
            }
            for key in [k for r, keys in self._by_resource.items() if r != "v1/events" for k in keys]:
                obj = self.objects.get(key)
                refs = (obj or {}).get("metadata", {}).get("ownerReferences") or []
                gone = [r for r in refs if live.get(str(r.get("uid"))) in (None, *self._foreground)]
                if obj is None or not gone:
                    continue
                if len(gone) == len(refs):
                    self._erase(_resource_of(key[0]), key)
                    continue
                kept = copy.deepcopy(obj)
                kept["metadata"]["ownerReferences"] = [r for r in refs if r not in gone]
                self._put(_resource_of(key[0]), kept, kind="MODIFIED")
            for key in sorted(self._foreground):
                if key in self.objects and not self._dependents(
                    str(self.objects[key]["metadata"].get("uid"))
                ):
                    self._remove(_resource_of(key[0]), key)
        self._settle_namespaces()

    def _update(
        self,
        res: Resource,
        key: Key,
        current: dict[str, Any],
        obj: dict[str, Any],
        subresource: str,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        rv = meta.get("resourceVersion")
        name = key[2]
        if rv not in (None, "") and rv != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                status_body(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {res.group_resource} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    kind=res.plural,
                    name=name,
                    group=res.group,
                ),
            )
        if meta.get("name", name) != name:
            raise ApiError(
                400,
                status_body(
                    400,
                    "BadRequest",
                    f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                    f"({name})",
                ),
            )
        # Identity and server-set fields cannot change; status and spec go through their own endpoints.
        for field_name in (
            "uid",
            "creationTimestamp",
            "namespace",
            "name",
            "deletionTimestamp",
            "generateName",
        ):
            if field_name in current["metadata"]:
                meta[field_name] = current["metadata"][field_name]
        has_status = res.kind in ("Pod", "Node", "Namespace") or "status" in current
        if subresource == "status":
            obj = {**copy.deepcopy(current), "status": obj.get("status", {})}
            obj["metadata"] = copy.deepcopy(current["metadata"])
        elif has_status:
            obj["status"] = copy.deepcopy(current.get("status", {}))
        if res.kind == "Pod" and subresource != "status":
            self._check_pod_update(current, obj)
        if obj == current:
            return copy.deepcopy(current)  # a no-op update keeps the resourceVersion, as on a real server
        if dry_run:
            return copy.deepcopy(
                {
                    **obj,
                    "metadata": {
                        **obj["metadata"],
                        "resourceVersion": current["metadata"]["resourceVersion"],
                    },
                }
            )
        updated = copy.deepcopy(self._put(res, obj, kind="MODIFIED"))
        self._settle(res, key)
        self._reconcile()
        self._flush()
        return updated

    def _check_pod_update(self, current: dict[str, Any], new: dict[str, Any]) -> None:
        old_spec = {k: v for k, v in current["spec"].items() if k not in POD_MUTABLE_SPEC}
        new_spec = {k: v for k, v in new.get("spec", {}).items() if k not in POD_MUTABLE_SPEC}
        for spec in (old_spec, new_spec):
            spec["containers"] = [
                {k: v for k, v in c.items() if k != "image"} for c in spec.get("containers", [])
            ]
        if old_spec != new_spec:
            name = current["metadata"]["name"]
            message = (
                f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change fields other than '
                "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
                "`spec.tolerations` (only additions to existing tolerations),"
                "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
            )
            raise ApiError(
                422,
                status_body(
                    422,
                    "Invalid",
                    message,
                    kind="Pod",
                    name=name,
                    causes=(
                        {
                            "reason": "FieldValueForbidden",
                            "message": message.split(": ", 1)[1],
                            "field": "spec",
                        },
                    ),
                ),
            )

    def _validated(self, res: Resource, body: Any, field_validation: str) -> tuple[dict[str, Any], list[str]]:
        if not isinstance(body, dict):
            raise ApiError(
                400,
                status_body(400, "BadRequest", f"the body of the request could not be decoded as {res.kind}"),
            )
        body = copy.deepcopy(body)
        body.setdefault("apiVersion", res.api_version)
        body.setdefault("kind", res.kind)
        if body.get("kind") != res.kind or body.get("apiVersion") != res.api_version:
            raise ApiError(
                400,
                status_body(
                    400,
                    "BadRequest",
                    f"the API version in the data ({body.get('apiVersion')}) does not match the expected "
                    f"API version ({res.api_version})",
                ),
            )
        if res.builtin:
            obj, warnings = validate_core(body, field_validation=field_validation)
            if res.kind == "Job" and (errors := job_errors(obj)):
                name = str(obj["metadata"].get("name") or "")
                raise invalid_error("Job", name, errors, group="batch")
            return obj, warnings
        # The MPIJob CRD is that of the fleet's mpi-operator release (v0.4 lacks fields v0.5 has).
        crd = served_mpijob_crd(self.spec) if res.kind == "MPIJob" else load_crds()[(res.group, res.plural)]
        return check_custom(body, crd, res.version, field_validation=field_validation)

    def _suffix(self) -> str:
        self._name_seq += 1
        rng = random.Random(f"{self.spec.seed}/{self.rv}/{self._name_seq}")
        return "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))

    # --- pods: defaults, scheduler, kubelet ----------------------------------------------------
    def _default_pod(self, pod: dict[str, Any]) -> None:
        spec = pod.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("serviceAccountName", spec.get("serviceAccount", "default"))
        spec.setdefault("securityContext", {})
        for container in spec.get("containers", []):
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            image = str(container.get("image", ""))
            tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else "latest"
            container.setdefault("imagePullPolicy", "Always" if tag == "latest" else "IfNotPresent")
            container.setdefault("resources", {})
            limits = container["resources"].get("limits") or {}
            requests = container["resources"].setdefault("requests", {})
            for name, value in limits.items():
                requests.setdefault(name, value)
        pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}

    def reconcile(self) -> None:
        with self.lock:
            self._reconcile()
            self._flush()

    def _reconcile(self) -> None:
        if self._reconciling:
            return  # a write made by a controller during a reconcile does not start another
        self._reconciling = True
        try:
            now = self.clock()
            self._collect_garbage()
            # The controllers look again after any change, or when one of them has a wait ending.
            if self.rv != self._controllers_rv or now >= self._controllers_due:
                before = self.rv
                self._controllers_due = run_controllers(self, now)
                self._collect_garbage()
                self._controllers_rv = before
            if self._pending:
                self._schedule(now)
            # Workers before launchers: an MPIJob's mpirun reaches the workers started with it
            # (mpirun retries its ssh connections while they come up).
            for key in sorted(self._active, key=self._launchers_last):
                pod = self.objects.get(key)
                if pod is None:
                    self._active.discard(key)
                    continue
                if key not in self.runs:
                    self._start(key, pod, now)
                else:
                    self._progress(key, pod, now)
        finally:
            self._reconciling = False

    def _launchers_last(self, key: Key) -> tuple[bool, Key]:
        labels = (self.objects.get(key) or {}).get("metadata", {}).get("labels") or {}
        return labels.get(JOB_ROLE_LABEL) == "launcher", key

    # --- for the controllers (lock held) --------------------------------------------------------
    def stored(self, res: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        """The objects of `res` (in `namespace` when given), oldest first. They are the store's own:
        a controller changes a copy and hands it to `write`."""
        return [
            self.objects[k]
            for k in list(self._by_resource[res.key])
            if namespace is None or k[1] == namespace
        ]

    def lookup(self, res: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(self._key(res, namespace, name))

    def insert(self, res: Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create an object as a client's create would (validated, defaulted); raises ApiError."""
        obj, _ = self._validated(res, self._named(body), "Warn")
        return self._insert(res, namespace, obj)

    def write(self, res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a changed copy of an object (a no-op when nothing changed); returns what is stored."""
        meta = obj["metadata"]
        key = self._key(res, meta.get("namespace", ""), meta["name"])
        current = self.objects.get(key)
        if current is None:
            return obj  # deleted meanwhile: a controller's update would get 404 and drop it
        obj = {**obj, "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]}}
        if obj == current:
            return current
        stored = self._put(res, obj, kind="MODIFIED")
        self._settle(res, key)
        return stored

    def delete_gracefully(self, res: Resource, obj: dict[str, Any]) -> None:
        """Delete an object as a controller's API call does: a running pod gets its grace period,
        a finalizer keeps the object (where `erase` removes it at once)."""
        meta = obj["metadata"]
        key = self._key(res, meta.get("namespace", ""), meta["name"])
        current = self.objects.get(key)
        if current is None:
            return
        if res.kind == "Pod" and self._graceful(key, current, None):
            return
        if _finalizers(current):
            self._mark_deleted(res, key, 0)
            return
        self._erase(res, key)

    def erase(self, res: Resource, obj: dict[str, Any]) -> None:
        """Delete an object (and, through garbage collection, what it owns)."""
        meta = obj["metadata"]
        key = self._key(res, meta.get("namespace", ""), meta["name"])
        if key in self.objects:
            self._erase(res, key)

    def emit(
        self, obj: dict[str, Any], kind: str, reason: str, message: str, component: str, *, once: bool = False
    ) -> None:
        """An event about `obj` now; `once`: not again for the same object, reason and message (a
        controller retrying the same failure on every pass)."""
        if once:
            seen = (str(obj["metadata"].get("uid") or ""), reason, message)
            if seen in self._emitted:
                return
            self._emitted.add(seen)
        self._event(obj, kind, reason, truncate_event(message), component, self.clock())

    def node_driver(self, node: str) -> str:
        """The driver loaded on `node`: its profile's until an upgrade loads another ("" for a
        node the fleet spec does not have)."""
        if node in self.node_drivers:
            return self.node_drivers[node]
        rack = self.spec.rack_of.get(node)
        return self.spec.profiles[rack.profile].driver_version if rack else ""

    def set_node_driver(self, node: str, version: str) -> None:
        self.node_drivers[node] = version
        self._dirty.add(("v1/nodes", "", node))

    def set_node_mig(self, node: str, config: str) -> None:
        """The mig-parted config `node`'s GPUs now hold (the MIG manager applied it)."""
        self.node_mig[node] = config
        self._dirty.add(("v1/nodes", "", node))

    def _schedule(self, now: float) -> None:
        nodes = {k[2]: self.objects[k] for k in self._by_resource["v1/nodes"]}
        on_node = self._pods_by_node()
        anti = [(n, p) for n, pods in on_node.items() for p in pods if has_required_anti_affinity(p)]
        namespace_labels = {
            k[2]: {**(self.objects[k]["metadata"].get("labels") or {}), "kubernetes.io/metadata.name": k[2]}
            for k in self._by_resource["v1/namespaces"]
        }
        for key in sorted(self._pending):
            pod = self.objects.get(key)
            if pod is None:
                self._pending.discard(key)
                continue
            spec = pod["spec"]
            if spec.get("schedulingGates"):
                self._gated(pod, now)
                continue
            missing = [
                claim
                for v in spec.get("volumes") or []
                if (claim := (v.get("persistentVolumeClaim") or {}).get("claimName"))
                and ("v1/persistentvolumeclaims", key[1], claim) not in self.objects
            ]
            if missing:  # the VolumeBinding plugin's PreFilter: no node is even looked at
                message = (
                    f'0/{len(nodes)} nodes are available: persistentvolumeclaim "{missing[0]}" not found. '
                    + scheduling.preemption_message(len(nodes))
                )
                self._unschedulable(key, pod, len(nodes), collections.Counter(), now, message=message)
                continue
            pinned = spec.get("nodeName")
            allowed = None if pinned else scheduling.node_affinity_prefilter(pod)
            left_out_reason = scheduling.NODE_AFFINITY_MISMATCH
            if pinned:
                candidates = [pinned] if pinned in nodes else []
            elif allowed is not None:
                # NodeAffinity's PreFilter (matchFields metadata.name In): only the named nodes
                # are filtered; the rest are UnschedulableAndUnresolvable without a look.
                if not allowed:
                    message = scheduling.conflict_message(len(nodes))
                    self._unschedulable(key, pod, len(nodes), collections.Counter(), now, message=message)
                    continue
                candidates = sorted(n for n in allowed if n in nodes)
                left_out_reason = scheduling.NODE_AFFINITY_PREFILTERED
            else:
                # A shortcut, not a PreFilter: the hostname label is the kubelet's hostname, which
                # need not be the node's name, so it selects by label like any nodeSelector.
                hostname = (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
                candidates = sorted(
                    n
                    for n, node in nodes.items()
                    if hostname is None
                    or (node["metadata"].get("labels") or {}).get("kubernetes.io/hostname") == hostname
                )
            reasons: collections.Counter[str] = collections.Counter()
            chosen = None
            for name in candidates:
                why = scheduling.filter_node_reasons(pod, nodes[name], on_node.get(name, []))
                if not why:  # InterPodAffinity filters last
                    placed = inter_pod_affinity_reason(
                        pod, nodes[name], nodes, on_node, namespace_labels, anti
                    )
                    why = (placed,) if placed else ()
                if not why:
                    chosen = name
                    break
                reasons.update(why)
            unmatched = len(nodes) - len(candidates)
            if unmatched:
                reasons[left_out_reason] += unmatched
            if chosen is None:
                self._unschedulable(key, pod, len(nodes), reasons, now)
                continue
            self._bind(key, pod, chosen, now)
            on_node.setdefault(chosen, []).append(pod)
            if has_required_anti_affinity(pod):
                anti.append((chosen, pod))

    def _gated(self, pod: dict[str, Any], now: float) -> None:
        """A pod with scheduling gates is not considered; kube-scheduler says so once."""
        conditions = pod["status"].setdefault("conditions", [])
        if any(c["type"] == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in conditions):
            return
        pod["status"]["conditions"] = [c for c in conditions if c["type"] != "PodScheduled"] + [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(now),
            }
        ]
        self._put(by_kind("Pod"), pod)

    def _pods_by_node(self) -> dict[str, list[dict[str, Any]]]:
        by_node: dict[str, list[dict[str, Any]]] = {}
        for key in self._active:
            pod = self.objects.get(key)
            if pod is not None and pod["spec"].get("nodeName"):
                by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
        return by_node

    def _unschedulable(
        self,
        key: Key,
        pod: dict[str, Any],
        total: int,
        reasons: collections.Counter[str],
        now: float,
        *,
        message: str = "",
    ) -> None:
        message = message or scheduling.fit_error_message(total, dict(reasons))
        conditions = pod["status"].setdefault("conditions", [])
        current = next((c for c in conditions if c["type"] == "PodScheduled"), None)
        if current and current.get("message") == message:
            return
        pod["status"]["conditions"] = [c for c in conditions if c["type"] != "PodScheduled"] + [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(now),
            }
        ]
        self._put(by_kind("Pod"), pod)
        self._event(pod, "Warning", "FailedScheduling", message, "default-scheduler", now)

    def _bind(self, key: Key, pod: dict[str, Any], node: str, now: float) -> None:
        pod["spec"]["nodeName"] = node
        status = pod["status"]
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(now),
            }
        ]
        status["hostIP"] = self._node_ip(node)
        status["startTime"] = now_rfc3339(now)
        status["containerStatuses"] = [
            container_status(c, {"waiting": {"reason": "ContainerCreating"}})
            for c in pod["spec"]["containers"]
        ]
        self._pending.discard(key)
        self._active.add(key)
        self._put(by_kind("Pod"), pod)
        self._event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {key[1]}/{key[2]} to {node}",
            "default-scheduler",
            now,
        )

    def _node_ip(self, node: str) -> str:
        obj = self.objects.get(("v1/nodes", "", node), {})
        for address in obj.get("status", {}).get("addresses", []):
            if address["type"] == "InternalIP":
                return str(address["address"])
        return ""

    def _start(self, key: Key, pod: dict[str, Any], now: float) -> None:
        node = pod["spec"]["nodeName"]
        container = pod["spec"]["containers"][0]
        gpus = self._allocate_gpus(node, key, gpu_request(container))
        mig_view = mig_manager.container_view(self, node, key, container, self._active)
        if mig_view is not None:
            gpus = []  # MIG devices, not whole GPUs
        visible = gpus
        if (
            not gpus
            and mig_view is None
            and any(f.kind == "op.isolation_leak" for f in self.spec.faults_on(node))
        ):
            # A runtime that honours the image's NVIDIA_VISIBLE_DEVICES=all for a pod that asked
            # for no GPU (the toolkit's accept-nvidia-visible-devices-envvar-when-unprivileged).
            visible = list(range(self.spec.profile_of(node).gpus))
        ctx = ContainerContext(
            node=node,
            gpu_indices=tuple(visible),
            env=container_env(container),
            salt=pod["metadata"]["uid"],
            peers=self._peers(pod),
            shm_bytes=shm_bytes(pod, container),
            driver_version=self.node_driver(node),
            mig=mig_view,
            started_at=now,
            exporter_running=operands.exporter_running(
                self.spec,
                node,
                self.objects.get(("v1/nodes", "", node), {}).get("metadata", {}).get("labels") or {},
            ),
        )
        image = str(container.get("image", ""))
        command = ["" if a is None else str(a) for a in container.get("command") or []]
        args = ["" if a is None else str(a) for a in container.get("args") or []]
        mig_manager.container_started(self, key, command, args)
        if processes.runs_as_process(image):
            self.runs[key] = self._start_process(key, pod, container, command, args, node, gpus, now)
        else:
            self.runs[key] = simulated_run(self.spec, container, ctx, gpus, now, self.time_scale)
        for c in pod["spec"]["containers"]:
            self._event(
                pod,
                "Normal",
                "Pulled",
                f'Container image "{c.get("image")}" already present on machine',
                "kubelet",
                now,
                c["name"],
            )
            self._event(
                pod, "Normal", "Created", f"Created container: {c['name']}", "kubelet", now, c["name"]
            )
            self._event(pod, "Normal", "Started", f"Started container {c['name']}", "kubelet", now, c["name"])
        mark_running(pod, now, pod_ip(self.spec.seed, key))
        self.runs[key].started = now
        self._put(by_kind("Pod"), pod)
        self._progress(key, pod, now)

    def _start_process(
        self,
        key: Key,
        pod: dict[str, Any],
        container: dict[str, Any],
        command: list[str],
        args: list[str],
        node: str,
        gpus: list[int],
        now: float,
    ) -> Run:
        root = self.volume_root or processes.default_volume_root(self.spec.name)
        log_path = root / ".logs" / f"{pod['metadata']['uid']}.log"
        faults = tuple(f.kind for f in self.spec.cluster_faults("job"))
        started = processes.start(pod, container, command, args, root, log_path, faults, self.instance)
        if isinstance(started, processes.StartFailure):
            return Run(node, gpus, now, now, started.message + "\n", started.exit_code)
        return Run(node, gpus, now, math.inf, "", 0, live=started, stamped=[])

    def _pump(self, run: Run, now: float) -> int | None:
        """Read what a running process printed since the last look; its exit code once it ended."""
        code = run.live.exit_code()
        text = run.live.output()
        fresh = text[len(run.output) :]
        if code is None:
            fresh = fresh[: fresh.rfind("\n") + 1]  # a partial line waits for its end
        if fresh:
            run.output += fresh
            assert run.stamped is not None
            run.stamped.extend((now, line) for line in fresh.splitlines())
        return code  # type: ignore[no-any-return]

    def _peers(self, pod: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """For an MPIJob launcher: its workers' nodes and GPUs, in rank order."""
        labels = pod["metadata"].get("labels") or {}
        job = labels.get("training.kubeflow.org/job-name")
        if labels.get("training.kubeflow.org/job-role") != "launcher" or not job:
            return ()
        ns = pod["metadata"]["namespace"]
        workers = []
        for key in self._by_resource["v1/pods"]:
            other_labels = self.objects[key]["metadata"].get("labels") or {}
            if (
                key[1] == ns
                and other_labels.get("training.kubeflow.org/job-name") == job
                and other_labels.get("training.kubeflow.org/job-role") == "worker"
                and (run := self.runs.get(key)) is not None
            ):
                workers.append(
                    (
                        int(other_labels.get("training.kubeflow.org/replica-index", "0")),
                        run.node,
                        tuple(run.gpus),
                    )
                )
        return tuple((node, gpus) for _i, node, gpus in sorted(workers))

    def _allocate_gpus(self, node: str, key: Key, count: int) -> list[int]:
        """The device plugin hands out healthy GPUs not held by another running container."""
        if count <= 0:
            return []
        held = {
            g
            for k, run in self.runs.items()
            if k != key and run.node == node and k in self._active
            for g in run.gpus
        }
        bad = unhealthy_gpus(self.spec, node)
        free = [i for i in range(self.spec.profile_of(node).gpus) if i not in held and i not in bad]
        return free[:count]

    def _progress(self, key: Key, pod: dict[str, Any], now: float) -> None:
        run = self.runs[key]
        if run.live is not None and not math.isfinite(run.ends):
            root = self.volume_root or processes.default_volume_root(self.spec.name)
            processes.refresh_downward_api(pod, root, self.instance)
            code = self._pump(run, now)
            if code is not None:
                run.ends, run.exit_code = now, code
            elif key in self._terminating and now >= self._terminating[key]:
                run.live.send(signal.SIGKILL)  # the grace period is over
            if key in self._terminating and code is not None:
                self._terminating.pop(key)
                reason = "Completed" if code == 0 else "Error"
                self._terminate(key, pod, now, exit_code=code, reason=reason)
                self._kubelet_deleted(key)
                return
        if run.live is None and key in self._terminating:
            ends_by_itself = now >= run.ends
            if ends_by_itself or now >= self._terminating[key]:
                at = run.ends if ends_by_itself else self._terminating[key]
                code = run.exit_code if ends_by_itself else 137  # killed: 128 + SIGKILL
                self._terminating.pop(key)
                self._terminate(key, pod, min(at, now), exit_code=code, reason=end_reason(code))
                self._kubelet_deleted(key)
            return
        # activeDeadlineSeconds counts from the pod's start on its node, in simulated seconds: an
        # unscheduled pod has no start, so its deadline never fires (as on a real cluster).
        deadline = pod["spec"].get("activeDeadlineSeconds")
        if (
            deadline
            and self.time_scale > 0
            and now >= run.started + float(deadline) * self.time_scale
            and now < run.ends
        ):
            self._terminate(
                key,
                pod,
                now,
                exit_code=137,
                reason="Error",
                pod_reason="DeadlineExceeded",
                pod_message="Pod was active on the node longer than the specified deadline",
            )
            self._event(
                pod,
                "Normal",
                "DeadlineExceeded",
                "Pod was active on the node longer than the specified deadline",
                "kubelet",
                now,
            )
            return
        if now < run.ends:
            return
        restart = pod["spec"].get("restartPolicy", "Always")
        if restart == "Always" or (restart == "OnFailure" and run.exit_code != 0):
            return  # a long-running container: it keeps running until the pod is deleted
        self._terminate(key, pod, run.ends, exit_code=run.exit_code, reason=end_reason(run.exit_code))

    def _kubelet_deleted(self, key: Key) -> None:
        """The kubelet's delete with grace period 0 once a deleted pod's container stopped: the
        pod goes unless a finalizer keeps it (lock held)."""
        if key in self.objects and _finalizers(self.objects[key]):
            self._mark_deleted(by_kind("Pod"), key, 0)
            return
        if key in self.objects:
            self._remove(by_kind("Pod"), key)
            self._collect_garbage()

    def _terminate(
        self,
        key: Key,
        pod: dict[str, Any],
        at: float,
        *,
        exit_code: int,
        reason: str,
        pod_reason: str = "",
        pod_message: str = "",
    ) -> None:
        mark_terminated(
            pod,
            self.runs[key],
            at,
            exit_code=exit_code,
            reason=reason,
            pod_reason=pod_reason,
            pod_message=pod_message,
        )
        self._active.discard(key)
        self._put(by_kind("Pod"), pod)

    # --- logs ---------------------------------------------------------------------------------
    def log_lines(
        self, namespace: str, name: str, container: str | None
    ) -> tuple[list[tuple[float, str]], bool]:
        """The lines printed so far (with their times) and whether the container has ended."""
        with self.lock:
            self._reconcile()
            key = ("v1/pods", namespace, name)
            pod = self.objects.get(key)
            if pod is None:
                raise self._not_found(by_kind("Pod"), name)
            names = [c["name"] for c in pod["spec"]["containers"]]
            if container is None:
                if len(names) > 1:
                    raise ApiError(
                        400,
                        status_body(
                            400,
                            "BadRequest",
                            f"a container name must be specified for pod {name}, "
                            f"choose one of: [{' '.join(names)}]",
                        ),
                    )
                container = names[0]
            if container not in names:
                raise ApiError(
                    400, status_body(400, "BadRequest", f"container {container} is not valid for pod {name}")
                )
            run = self.runs.get(key)
            if run is None:
                reason = "ContainerCreating"
                raise ApiError(
                    400,
                    status_body(
                        400,
                        "BadRequest",
                        f'container "{container}" in pod "{name}" is waiting to start: {reason}',
                    ),
                )
            if container != names[0]:
                return [], pod["status"]["phase"] in TERMINAL
            now = self.clock()
            ended = pod["status"]["phase"] in TERMINAL or key not in self._active
            return [(t, line) for t, line in run.lines() if ended or t <= now], ended

    def ended_log_lines(self, namespace: str, name: str) -> list[tuple[float, str]]:
        """All lines of a really-running pod deleted since a follower last looked ([] if none)."""
        with self.lock:
            return list(self._ended_logs.get(("v1/pods", namespace, name), []))

    # --- events and watch -----------------------------------------------------------------------
    def _event(
        self,
        obj: dict[str, Any],
        kind: str,
        reason: str,
        message: str,
        component: str,
        now: float,
        container: str = "",
    ) -> None:
        meta = obj["metadata"]
        ns = meta.get("namespace") or "default"
        namespace = self.objects.get(("v1/namespaces", "", ns))
        if namespace is not None and namespace["metadata"].get("deletionTimestamp"):
            return  # no new content in a namespace being terminated
        self._event_seq += 1
        stamp = now_rfc3339(now)
        involved: dict[str, Any] = {
            "kind": obj["kind"],
            "namespace": meta.get("namespace", ""),
            "name": meta["name"],
            "uid": meta.get("uid", ""),
            "apiVersion": obj["apiVersion"],
            "resourceVersion": meta.get("resourceVersion", ""),
        }
        if container:
            involved["fieldPath"] = f"spec.containers{{{container}}}"
        event = {
            "metadata": {
                "name": f"{meta['name']}.{self._event_seq:016x}",
                "namespace": ns,
                "uid": self._uid("event", str(self._event_seq)),
                "creationTimestamp": stamp,
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "source": {
                "component": component,
                **({"host": obj["spec"].get("nodeName")} if component == "kubelet" else {}),
            },
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "type": kind,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": "",
        }
        self._trim_events()
        self._put(by_kind("Event"), event)

    def _trim_events(self) -> None:
        """Make room for one more event: the oldest go first, as events expire on a real cluster."""
        events = self._by_resource["v1/events"]
        while len(events) >= MAX_EVENTS:
            self._remove(by_kind("Event"), next(iter(events)))

    def watch(
        self, res: Resource, namespace: str | None, opts: ListOptions, resource_version: str, timeout_s: float
    ) -> Iterator[dict[str, Any]]:
        """Watch events (`{"type", "object"}`) until `timeout_s`; starts with ADDED for every
        matching object when no resourceVersion is given, as the API server does."""
        try:
            labels = parse_label_selector(opts.label_selector)
            fields = parse_field_selector(opts.field_selector, res.kind)
        except SelectorError as exc:
            raise ApiError(400, status_body(400, "BadRequest", str(exc))) from None

        def wanted(obj: dict[str, Any], ns: str) -> bool:
            return (
                (not namespace or ns == namespace)
                and labels.matches(obj["metadata"].get("labels"))
                and fields.matches(obj)
            )

        deadline = time.monotonic() + timeout_s
        with self.lock:
            self._reconcile()
            if resource_version in ("", "0"):
                since = self.rv
                initial = [
                    copy.deepcopy(self.objects[k])
                    for k in sorted(self._by_resource[res.key])
                    if wanted(self.objects[k], k[1])
                ]
            else:
                since = int(resource_version) if resource_version.isdigit() else -1
                oldest = self.changes[0].rv if self.changes else self.rv + 1
                if since < 0 or (since + 1 < oldest and since < self.rv):
                    initial = []
                    yield {
                        "type": "ERROR",
                        "object": status_body(
                            410, "Expired", f"too old resource version: {resource_version} ({oldest - 1})"
                        ),
                    }
                    return
                initial = []
        for obj in initial:
            yield {"type": "ADDED", "object": obj}
        while True:
            with self.lock:
                batch = [
                    c
                    for c in self.changes
                    if c.rv > since and c.resource == res.key and wanted(c.obj, c.namespace)
                ]
                if self.changes:
                    since = max(since, self.changes[-1].rv)
                if not batch:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    self.lock.wait(timeout=min(remaining, 0.2))
                    self._reconcile()
                    continue
            for change in batch:
                yield {"type": change.kind, "object": change.obj}


def _finalizers(obj: dict[str, Any]) -> list[str]:
    """The finalizers that keep an object after its deletion (foreground deletion is the GC's own)."""
    return [f for f in obj["metadata"].get("finalizers") or [] if f != FOREGROUND_FINALIZER]


def _mapping(patch: Any) -> dict[str, Any]:
    if not isinstance(patch, dict):
        raise PatchError("patch body must be a JSON object", code=400)
    return patch


def _resource_of(key: str) -> Resource:
    from fleetval.sim.kube.resources import all_resources

    return next(r for r in all_resources() if r.key == key)


def _bind_claim(claim: dict[str, Any]) -> None:
    """A claim is bound at once to a volume of the size it asks (a provisioner with Immediate
    binding); the volume is a directory the really-running containers share."""
    spec = claim.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    spec["volumeName"] = f"pvc-{claim['metadata']['uid']}"
    claim["status"] = {
        "phase": "Bound",
        "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
        "capacity": {
            "storage": str(((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi"))
        },
    }


def _qos_class(spec: dict[str, Any]) -> str:
    resources = [c.get("resources") or {} for c in spec.get("containers", [])]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"

    def pinned(r: dict[str, Any], name: str) -> bool:  # a limit, and a request (defaulting to it) equal to it
        limit = (r.get("limits") or {}).get(name)
        return limit is not None and (r.get("requests") or {}).get(name, limit) == limit

    guaranteed = all(pinned(r, name) for r in resources for name in ("cpu", "memory"))
    return "Guaranteed" if guaranteed else "Burstable"
