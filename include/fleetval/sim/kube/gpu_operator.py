"""The NVIDIA GPU Operator's driver upgrade controller, in the simulated cluster.

Facts from NVIDIA/gpu-operator (`controllers/upgrade_controller.go`, `deployments/gpu-operator/
values.yaml`, `cmd/gpu-operator/main.go`) and NVIDIA/k8s-operator-libs (`pkg/upgrade`):

- The ClusterPolicy's `spec.driver.upgradePolicy.autoUpgrade` switches the controller on. While it
  is false (or there is no ClusterPolicy), the controller manages nothing and removes the
  `nvidia.com/gpu-driver-upgrade-state` label from every node; cordons and annotations stay.
- With it on, every node running the driver (`nvidia.com/gpu.deploy.driver=true`) carries the
  state label. A node whose driver is in sync (here: its loaded driver is the ClusterPolicy's
  `spec.driver.version`; no version means every loaded driver is) and unlabelled becomes
  `upgrade-done` — so a fresh operator labels every node done. Out of sync, or annotated
  `nvidia.com/gpu-driver-upgrade-requested=true`, it becomes `upgrade-required`, and then, one
  state per pass (ApplyState works on a snapshot): `cordon-required` (at most
  `maxParallelUpgrades` nodes upgrading, 0 = no limit, and `maxUnavailable` of the managed nodes
  cordoned or not ready, default 25% rounded up; a node labelled
  `nvidia.com/gpu-driver-upgrade.skip=true` waits) → cordoned → `wait-for-jobs-required` (pods
  matching `waitForCompletion.podSelector` on the node must end, or its timeout pass) →
  `pod-deletion-required` (the operator deletes the node's Running/Pending pods that use
  `nvidia.com/gpu*`; a pod it may not delete — no controller without `gpuPodDeletion.force`,
  an emptyDir without `deleteEmptyDir` — sends the node to `drain-required` when draining is
  enabled, else `upgrade-failed`) → `drain-required` (disabled by default: straight on) →
  `pod-restart-required` (the driver pod restarts on the new version; the new driver is loaded
  DRIVER_RELOAD_S later and GFD's `nvidia.com/cuda.driver*` labels change) →
  `validation-required` (the operator-validator pods take VALIDATION_S) → `uncordon-required`
  → uncordoned → `upgrade-done`. A node already cordoned when its upgrade began is annotated
  `nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable` and skips the uncordon. An
  `upgrade-failed` node stays failed until its driver is in sync (here: someone sets the label
  back to `upgrade-required`).
- Each state change is a `GPUDriverUpgrade` event on the node ("Successfully updated node state
  label to <state>").

Durations are simulated seconds × the cluster's time_scale (instant at 0), and waits and timeouts
use the same clock; timers live in memory (a restarted server starts a pending wait anew). The
fleet spec's `op.upgrade_no_drain` fault makes the operator skip deleting the GPU pods of its node.
- With `spec.driver.useNvidiaDriverCRD` the driver's version and upgrade policy come from the
  NVIDIADriver objects (`nvidia.com/v1alpha1`), not the ClusterPolicy: pausing the ClusterPolicy then
  changes nothing. Modelled: the oldest NVIDIADriver drives every node (no per-pool nodeSelector).

Not modelled: NVIDIADriver node pools, the upgrade-requestor mode (a maintenance operator), safe
driver loading, the driver DaemonSet and its pods.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from fleetval.fleet.spec import FleetSpec
from fleetval.k8s.selectors import SelectorError, parse_label_selector
from fleetval.sim.kube.meta import TERMINAL, controller_uid, phase
from fleetval.sim.kube.nodes import driver_labels
from fleetval.sim.kube.resources import by_kind

if TYPE_CHECKING:
    from fleetval.sim.kube.cluster import SimKubeCluster

CLUSTER_POLICY: Final = "cluster-policy"
UPGRADE_STATE_LABEL: Final = "nvidia.com/gpu-driver-upgrade-state"
UPGRADE_SKIP_LABEL: Final = "nvidia.com/gpu-driver-upgrade.skip"
UPGRADE_REQUESTED_ANNOTATION: Final = "nvidia.com/gpu-driver-upgrade-requested"
INITIAL_STATE_ANNOTATION: Final = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
WAIT_START_ANNOTATION: Final = "nvidia.com/gpu-driver-upgrade-wait-for-pod-completion-start-time"
DRIVER_NODE_LABEL: Final = "nvidia.com/gpu.deploy.driver"
DRAIN_SKIP_LABEL: Final = "nvidia.com/gpu-driver-upgrade-drain.skip"
EVENT_REASON: Final = "GPUDriverUpgrade"
COMPONENT: Final = "gpu-operator"

UPGRADE_REQUIRED: Final = "upgrade-required"
CORDON_REQUIRED: Final = "cordon-required"
WAIT_FOR_JOBS_REQUIRED: Final = "wait-for-jobs-required"
POD_DELETION_REQUIRED: Final = "pod-deletion-required"
DRAIN_REQUIRED: Final = "drain-required"
POD_RESTART_REQUIRED: Final = "pod-restart-required"
VALIDATION_REQUIRED: Final = "validation-required"
UNCORDON_REQUIRED: Final = "uncordon-required"
UPGRADE_DONE: Final = "upgrade-done"
UPGRADE_FAILED: Final = "upgrade-failed"

# Nominal durations (simulated seconds): the driver container unloads the old kernel modules and
# installs and loads the new driver; the operator-validator pods rerun their checks.
DRIVER_RELOAD_S: Final = 240.0
VALIDATION_S: Final = 60.0
DRIVER_IMAGE: Final = "driver"
DRIVER_REPOSITORY: Final = "nvcr.io/nvidia"


def cluster_policy(spec: FleetSpec) -> dict[str, Any]:
    """The ClusterPolicy `cluster-policy` as the operator's Helm chart (values.yaml defaults) leaves
    it: auto-upgrade on, one node at a time, 25% unavailable, GPU pod deletion without force, no
    drain. `spec.driver.version` is the fleet's driver when all its profiles share one."""
    versions = {p.driver_version for p in spec.profiles.values()}
    driver: dict[str, Any] = {
        "enabled": True,
        "repository": DRIVER_REPOSITORY,
        "image": DRIVER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "upgradePolicy": {
            "autoUpgrade": True,
            "maxParallelUpgrades": 1,
            "maxUnavailable": "25%",
            "waitForCompletion": {"timeoutSeconds": 0, "podSelector": ""},
            "podDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
            "drain": {
                "enable": False,
                "force": False,
                "podSelector": "",
                "timeoutSeconds": 300,
                "deleteEmptyDir": False,
            },
        },
    }
    if len(versions) == 1:
        driver["version"] = versions.pop()
    # The pools' MIG strategy (the chart's default is single), and the mig-parted config the MIG
    # manager reads (the chart's default ConfigMap).
    strategies = {str((p or {}).get("mig_strategy", "single")) for p in spec.raw.get("profiles", {}).values()}
    return {
        "metadata": {"name": CLUSTER_POLICY},
        "spec": {
            "operator": {"defaultRuntime": "containerd"},
            "daemonsets": {"updateStrategy": "RollingUpdate"},
            "driver": driver,
            "toolkit": {"enabled": True},
            "devicePlugin": {"enabled": True},
            "dcgm": {"enabled": True},
            "dcgmExporter": {"enabled": True},
            "gfd": {"enabled": True},
            "nodeStatusExporter": {"enabled": False},
            "mig": {"strategy": strategies.pop() if len(strategies) == 1 else "mixed"},
            "migManager": {
                "enabled": True,
                "config": {"name": "default-mig-parted-config", "default": "all-disabled"},
            },
        },
        "status": {"state": "ready"},
    }


def _policy(cluster: SimKubeCluster) -> dict[str, Any] | None:
    """The active ClusterPolicy: the oldest, as the operator ignores any other."""
    policies = cluster.stored(by_kind("ClusterPolicy"))
    return min(policies, key=lambda p: str(p["metadata"].get("creationTimestamp", ""))) if policies else None


def _effective_policy(cluster: SimKubeCluster) -> dict[str, Any] | None:
    """The driver section the upgrade controller acts on: the ClusterPolicy's, or with
    `useNvidiaDriverCRD` the oldest NVIDIADriver's version and upgrade policy (autoUpgrade defaults
    to true in its CRD)."""
    policy = _policy(cluster)
    if policy is None or not ((policy.get("spec") or {}).get("driver") or {}).get("useNvidiaDriverCRD"):
        return policy
    drivers = cluster.stored(by_kind("NVIDIADriver"))
    if not drivers:
        return None
    oldest = min(drivers, key=lambda d: str(d["metadata"].get("creationTimestamp", "")))
    spec = oldest.get("spec") or {}
    upgrade = {"autoUpgrade": True, **(spec.get("upgradePolicy") or {})}
    return {"spec": {"driver": {"upgradePolicy": upgrade, "version": spec.get("version")}}}


def _max_unavailable(value: Any, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent, rounding up."""
    text = str(value if value is not None else "25%")
    if text.endswith("%"):
        try:
            return math.ceil(total * int(text[:-1]) / 100)
        except ValueError:
            return total
    try:
        return int(text)
    except ValueError:
        return total


def _uses_gpu(pod: Mapping[str, Any]) -> bool:
    """gpu-operator's gpuPodSpecFilter: a Running or Pending pod with an nvidia.com/gpu* (or
    nvidia.com/mig-*) request or limit."""
    if phase(pod) not in ("Running", "Pending"):
        return False
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for section in ("limits", "requests"):
            if any(
                str(k).startswith(("nvidia.com/gpu", "nvidia.com/mig-")) for k in resources.get(section) or {}
            ):
                return True
    return False


def _deletable(pod: Mapping[str, Any], policy: Mapping[str, Any]) -> bool:
    """The drain helper's checks: an unmanaged pod needs force, local storage deleteEmptyDir."""
    if controller_uid(pod) is None and not policy.get("force"):
        return False
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return not (any("emptyDir" in v for v in volumes) and not policy.get("deleteEmptyDir"))


class _Pass:
    """One ApplyState over a snapshot of the managed nodes' states."""

    def __init__(self, cluster: SimKubeCluster, policy: dict[str, Any], now: float) -> None:
        self.cluster = cluster
        self.now = now
        driver = (policy.get("spec") or {}).get("driver") or {}
        self.upgrade = driver.get("upgradePolicy") or {}
        self.version = str(driver.get("version") or "")
        self.due = math.inf
        self.nodes = [
            n
            for n in cluster.stored(by_kind("Node"))
            if (n["metadata"].get("labels") or {}).get(DRIVER_NODE_LABEL) == "true"
        ]

    # --- node facts ---------------------------------------------------------------------------
    def in_sync(self, node: Mapping[str, Any]) -> bool:
        return not self.version or self.cluster.node_driver(node["metadata"]["name"]) == self.version

    @staticmethod
    def state(node: Mapping[str, Any]) -> str:
        return str((node["metadata"].get("labels") or {}).get(UPGRADE_STATE_LABEL, ""))

    @staticmethod
    def cordoned(node: Mapping[str, Any]) -> bool:
        return bool((node.get("spec") or {}).get("unschedulable"))

    @staticmethod
    def ready(node: Mapping[str, Any]) -> bool:
        conditions = (node.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def pods_on(self, node: Mapping[str, Any]) -> list[dict[str, Any]]:
        name = node["metadata"]["name"]
        return [
            p
            for p in self.cluster.stored(by_kind("Pod"))
            if (p.get("spec") or {}).get("nodeName") == name and phase(p) not in TERMINAL
        ]

    def timer(self, node: Mapping[str, Any], what: str, seconds: float) -> bool:
        """True once `seconds` (simulated) have passed since this node first asked about `what`."""
        key = (node["metadata"]["name"], what)
        started = self.cluster.upgrade_timers.setdefault(key, self.now)
        ends = started + seconds * self.cluster.time_scale
        if self.now >= ends:
            del self.cluster.upgrade_timers[key]
            return True
        self.due = min(self.due, ends)
        return False

    # --- writes -------------------------------------------------------------------------------
    def change(
        self,
        node: dict[str, Any],
        state: str | None,
        *,
        unschedulable: bool | None = None,
        annotations: Mapping[str, str | None] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        new = copy.deepcopy(node)
        meta = new["metadata"]
        node_labels = meta.setdefault("labels", {})
        if state is None:
            node_labels.pop(UPGRADE_STATE_LABEL, None)
        else:
            node_labels[UPGRADE_STATE_LABEL] = state
        node_labels.update(labels or {})
        for key, value in (annotations or {}).items():
            if value is None:
                (meta.get("annotations") or {}).pop(key, None)
            else:
                meta.setdefault("annotations", {})[key] = value
        if unschedulable is not None:
            if unschedulable:
                new.setdefault("spec", {})["unschedulable"] = True
            else:
                new.setdefault("spec", {}).pop("unschedulable", None)
        self.cluster.write(by_kind("Node"), new)
        if state is not None and state != self.state(node):
            message = f"Successfully updated node state label to {state}"
            self.cluster.emit(node, "Normal", EVENT_REASON, message, COMPONENT)

    def done_or_uncordon(self, node: dict[str, Any]) -> None:
        """updateNodeToUncordonOrDoneState."""
        if INITIAL_STATE_ANNOTATION in (node["metadata"].get("annotations") or {}):
            self.change(node, UPGRADE_DONE, annotations={INITIAL_STATE_ANNOTATION: None})
        else:
            self.change(node, UNCORDON_REQUIRED)

    # --- the states ---------------------------------------------------------------------------
    def run(self) -> None:
        by_state: dict[str, list[dict[str, Any]]] = {}
        for node in self.nodes:
            by_state.setdefault(self.state(node), []).append(node)
        total = len(self.nodes)
        for node in by_state.get("", []) + by_state.get(UPGRADE_DONE, []):
            requested = (node["metadata"].get("annotations") or {}).get(
                UPGRADE_REQUESTED_ANNOTATION
            ) == "true"
            if not self.in_sync(node) or requested:
                keep = {INITIAL_STATE_ANNOTATION: "true"} if self.cordoned(node) else None
                self.change(node, UPGRADE_REQUIRED, annotations=keep)
            elif not self.state(node):
                self.change(node, UPGRADE_DONE)
        self.upgrade_required(by_state.get(UPGRADE_REQUIRED, []), by_state, total)
        for node in by_state.get(CORDON_REQUIRED, []):
            self.change(node, WAIT_FOR_JOBS_REQUIRED, unschedulable=True)
        for node in by_state.get(WAIT_FOR_JOBS_REQUIRED, []):
            self.wait_for_jobs(node)
        for node in by_state.get(POD_DELETION_REQUIRED, []):
            self.delete_gpu_pods(node)
        for node in by_state.get(DRAIN_REQUIRED, []):
            self.drain(node)
        for node in by_state.get(POD_RESTART_REQUIRED, []):
            self.restart_driver(node)
        for node in by_state.get(UPGRADE_FAILED, []):
            if self.in_sync(node):
                self.done_or_uncordon(node)
        for node in by_state.get(VALIDATION_REQUIRED, []):
            if self.timer(node, "validation", VALIDATION_S):
                self.done_or_uncordon(node)
        for node in by_state.get(UNCORDON_REQUIRED, []):
            self.change(node, UPGRADE_DONE, unschedulable=False)

    def upgrade_required(
        self, nodes: list[dict[str, Any]], by_state: Mapping[str, list[dict[str, Any]]], total: int
    ) -> None:
        """InplaceNodeStateManager.ProcessUpgradeRequiredNodes with GetUpgradesAvailable."""
        idle = len(by_state.get("", [])) + len(by_state.get(UPGRADE_DONE, [])) + len(nodes)
        in_progress = total - idle
        max_unavailable = _max_unavailable(self.upgrade.get("maxUnavailable"), total)
        parallel = int(self.upgrade.get("maxParallelUpgrades", 1))
        available = len(nodes) if parallel == 0 else parallel - in_progress
        unavailable = sum(self.cordoned(n) or not self.ready(n) for n in self.nodes)
        unavailable += len(by_state.get(CORDON_REQUIRED, []))
        available = min(available, max_unavailable)
        if unavailable >= max_unavailable:
            available = 0
        elif max_unavailable < total and unavailable + available > max_unavailable:
            available = max_unavailable - unavailable
        for node in nodes:
            annotations = node["metadata"].get("annotations") or {}
            requested = (
                {UPGRADE_REQUESTED_ANNOTATION: None} if UPGRADE_REQUESTED_ANNOTATION in annotations else {}
            )
            if (node["metadata"].get("labels") or {}).get(UPGRADE_SKIP_LABEL) == "true":
                if requested:
                    self.change(node, UPGRADE_REQUIRED, annotations=requested)
                continue
            if available <= 0 and not self.cordoned(node):
                if requested:
                    self.change(node, UPGRADE_REQUIRED, annotations=requested)
                continue
            self.change(node, CORDON_REQUIRED, annotations=requested)
            available -= 1

    def wait_for_jobs(self, node: dict[str, Any]) -> None:
        wait = self.upgrade.get("waitForCompletion") or {}
        selector_text = str(wait.get("podSelector") or "")
        if not selector_text:
            self.change(node, POD_DELETION_REQUIRED)
            return
        try:
            selector = parse_label_selector(selector_text)
        except SelectorError:
            return  # the operator logs the error and retries; so does the simulator
        busy = any(selector.matches(p["metadata"].get("labels")) for p in self.pods_on(node))
        timeout = int(wait.get("timeoutSeconds") or 0)
        if not busy or (
            timeout and self.cluster.time_scale > 0 and self.timer(node, "wait-for-jobs", timeout)
        ):
            self.cluster.upgrade_timers.pop((node["metadata"]["name"], "wait-for-jobs"), None)
            self.change(node, POD_DELETION_REQUIRED, annotations={WAIT_START_ANNOTATION: None})
        elif timeout and WAIT_START_ANNOTATION not in (node["metadata"].get("annotations") or {}):
            self.change(node, WAIT_FOR_JOBS_REQUIRED, annotations={WAIT_START_ANNOTATION: str(int(self.now))})

    def _evict(self, node: dict[str, Any], pods: list[dict[str, Any]], policy: Mapping[str, Any]) -> bool:
        """Delete `pods` if the drain helper may delete every one; False when it may not."""
        if not all(_deletable(p, policy) for p in pods):
            return False
        for pod in pods:
            self.cluster.erase(by_kind("Pod"), pod)
        return True

    def _stuck(self, node: dict[str, Any], why: str) -> None:
        drain = self.upgrade.get("drain") or {}
        self.cluster.emit(node, "Warning", EVENT_REASON, why, COMPONENT)
        self.change(node, DRAIN_REQUIRED if drain.get("enable") else UPGRADE_FAILED)

    def delete_gpu_pods(self, node: dict[str, Any]) -> None:
        gpu_pods = [p for p in self.pods_on(node) if _uses_gpu(p)]
        faults = self.cluster.spec.faults_on(node["metadata"]["name"], "operator")
        if any(f.kind == "op.upgrade_no_drain" for f in faults):
            gpu_pods = []  # the fault: the driver is swapped under running GPU pods
        if not gpu_pods:
            self.change(node, POD_RESTART_REQUIRED)
        elif self._evict(node, gpu_pods, self.upgrade.get("podDeletion") or {}):
            self.cluster.emit(
                node,
                "Normal",
                EVENT_REASON,
                "Deleted workload pods on the node for the driver upgrade",
                COMPONENT,
            )
            self.change(node, POD_RESTART_REQUIRED)
        else:
            self._stuck(node, "Failed to delete workload pods on the node for the driver upgrade")

    def drain(self, node: dict[str, Any]) -> None:
        drain = self.upgrade.get("drain") or {}
        if not drain.get("enable"):
            self.change(node, POD_RESTART_REQUIRED)
            return
        try:
            selector = parse_label_selector(str(drain.get("podSelector") or ""))
        except SelectorError:
            return
        pods = [
            p
            for p in self.pods_on(node)
            if selector.matches(labels := p["metadata"].get("labels") or {})
            and labels.get(DRAIN_SKIP_LABEL) != "true"  # the operator adds `<this>!=true`
        ]
        if self._evict(node, pods, drain):
            self.change(node, POD_RESTART_REQUIRED)
        else:
            self.cluster.emit(node, "Warning", EVENT_REASON, "Failed to drain the node", COMPONENT)
            self.change(node, UPGRADE_FAILED)

    def restart_driver(self, node: dict[str, Any]) -> None:
        """The driver pod restarts on the new version; once the new driver is loaded (and GFD has
        relabelled the node) the node moves on to validation."""
        if self.in_sync(node) and (node["metadata"]["name"], "driver") not in self.cluster.upgrade_timers:
            self.change(node, VALIDATION_REQUIRED)
            return
        if self.timer(node, "driver", DRIVER_RELOAD_S):
            name = node["metadata"]["name"]
            version = self.version or self.cluster.node_driver(name)
            self.cluster.set_node_driver(name, version)
            self.change(node, POD_RESTART_REQUIRED, labels=driver_labels(version))


def reconcile_driver_upgrades(cluster: SimKubeCluster, now: float) -> float:
    """One pass of the upgrade controller; returns when a wait ends (inf: nothing pending)."""
    policy = _effective_policy(cluster)
    upgrade = (((policy or {}).get("spec") or {}).get("driver") or {}).get("upgradePolicy") or {}
    if policy is None or not upgrade.get("autoUpgrade"):
        for node in cluster.stored(by_kind("Node")):
            if UPGRADE_STATE_LABEL in (node["metadata"].get("labels") or {}):
                new = copy.deepcopy(node)
                del new["metadata"]["labels"][UPGRADE_STATE_LABEL]
                cluster.write(by_kind("Node"), new)
        cluster.upgrade_timers.clear()
        return math.inf
    upgrade_pass = _Pass(cluster, policy, now)
    upgrade_pass.run()
    return upgrade_pass.due
