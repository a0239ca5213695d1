"""The DaemonSet controller of the GPU Operator's operands, in the simulated cluster: each operand's
pod is on a GPU node exactly while the node's `nvidia.com/gpu.deploy.<operand>` label says "true".

In NVIDIA/gpu-operator every operand DaemonSet (`assets/state-*`) has the nodeSelector
`nvidia.com/gpu.deploy.<operand>: "true"` (`operator-validator` for the validator). Setting the label
to anything else takes the pod off the node, which is how the MIG manager pauses the device plugin,
GFD and the exporters (`paused-for-mig-change`) and how fleetval pauses dcgm-exporter under a
diagnostic (`paused-for-fleetval-diag`); "true" again brings the pod back. A label that is absent
counts as "true" (`operands.deployed`).

The operand pods are stored, never run (`operands`, annotation SIM_STATIC): a pod taken off its
node is removed at once (it has no container to stop), and one brought back is the pod the fleet
started with, under the same name, Running from now (or crash-looping / waiting under
`op.operand_down`, as at load). The cluster's validator pod (`nvidia-cuda-validator`) is no
DaemonSet's and stays as it is.

Cost: a pass skips every node whose resourceVersion it has seen, and acts only where the operands a
node's labels select changed since; then it finds the node's operand pods in the store by their
deterministic names (`operands.operand_pod_name`), without listing pods. Its memory (what it last
saw of each node) is not API state: a new cluster object, as a restarted server makes, starts
without it and looks at every node once, against the pods and labels loaded from the store, so it
carries on where it stopped. A pod deleted by hand comes back the next time its node's labels change
(a real DaemonSet would recreate it at once).
"""

from __future__ import annotations

import functools
import weakref
from typing import TYPE_CHECKING, Any, Final

from fleetval.fleet.spec import MAX_NODES
from fleetval.sim.kube import operands
from fleetval.sim.kube.meta import rfc3339
from fleetval.sim.kube.resources import by_kind

if TYPE_CHECKING:
    from fleetval.sim.kube.cluster import SimKubeCluster

NODE: Final = by_kind("Node")
POD: Final = by_kind("Pod")


def reconcile_operand_daemonsets(cluster: SimKubeCluster, now: float) -> None:
    """One pass: remove the operand pods whose node no longer selects them, recreate the ones whose
    node selects them again."""
    spec = cluster.spec
    seen = _memory(cluster)
    for node in cluster.stored(NODE):
        meta = node["metadata"]
        name = meta["name"]
        version = meta.get("resourceVersion")
        last = seen.get(name)
        if last is not None and last[0] == version:
            continue  # the node has not changed since it was last looked at
        rack = spec.rack_of.get(name)
        if rack is None or spec.profiles[rack.profile].gpus < 1:
            seen[name] = (version, ())  # no operands: not a GPU node of the fleet
            continue
        if meta.get("deletionTimestamp"):
            continue
        labels = meta.get("labels") or {}
        selected = tuple(labels.get(label, "true") == "true" for label in _LABELS)
        if last is None or last[1] != selected:
            _follow(cluster, name, selected, now)
        seen[name] = (version, selected)


def _follow(cluster: SimKubeCluster, node: str, selected: tuple[bool, ...], now: float) -> None:
    """Make `node`'s operand pods the ones its labels select (`selected`, in OPERANDS order)."""
    spec = cluster.spec
    for operand, wanted, key in zip(operands.OPERANDS, selected, _pod_keys(spec.name, node), strict=True):
        pod = cluster.objects.get(key)
        if wanted == (pod is not None):
            continue
        if pod is not None:
            cluster.erase(POD, pod)
            continue
        down = operands.down_operands(spec, node)
        _recreate(cluster, operands.operand_pod(spec, node, operand, down=down, started_at=rfc3339(now)))


_LABELS: Final = tuple(operands.DEPLOY_LABELS[o] for o in operands.OPERANDS)
# cluster (its `instance`) -> node -> (its resourceVersion, the operands its labels selected) when
# last looked at. Memory, not API state: a new cluster object (a restarted server) starts empty and
# so looks at every node once.
_SEEN: dict[str, dict[str, tuple[Any, tuple[bool, ...]]]] = {}


def _memory(cluster: SimKubeCluster) -> dict[str, tuple[Any, tuple[bool, ...]]]:
    seen = _SEEN.get(cluster.instance)
    if seen is None:
        seen = _SEEN[cluster.instance] = {}
        weakref.finalize(cluster, _SEEN.pop, cluster.instance, None)  # forgotten with its cluster
    return seen


@functools.lru_cache(maxsize=MAX_NODES)  # a whole fleet: a smaller cache would miss on every pass
def _pod_keys(fleet: str, node: str) -> tuple[tuple[str, str, str], ...]:
    """The store keys of `node`'s operand pods, in OPERANDS order (made once per node: a pass
    over thousands of nodes would spend most of its time hashing names)."""
    return tuple(
        (POD.key, operands.NAMESPACE, operands.pod_name(fleet, node, daemonset))
        for daemonset, _, _ in operands.OPERANDS.values()
    )


def _recreate(cluster: SimKubeCluster, pod: dict[str, Any]) -> None:
    """Store a static operand pod as the cluster stored it at load: the API server's defaults, the
    status the operand's kubelet reports, not scheduled (it is bound) nor run (SIM_STATIC)."""
    status = pod["status"]
    # The store's own primitives, as its bootstrap (`SimKubeCluster.start`) uses them: a client's
    # create would queue the pod for the scheduler and the simulated kubelet.
    cluster._default_pod(pod)
    pod["status"] = {**pod["status"], **status}
    cluster._put(POD, cluster._new_meta(pod, "Pod", operands.NAMESPACE))
