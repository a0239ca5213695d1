"""The cluster as fleetval reads and changes it, through the Kubernetes API: the GPU node
inventory, the node operations (cordon, labels, taints), and the pruning of failed probe pods.

One implementation for every cluster — a customer's, or the simulated one `fleetval sim serve`
serves — over the `kubernetes` client's CoreV1Api (the Airflow adapters hand in the provider
hook's client).

- Lists are paged (`limit`/`continue`): fleets have thousands of nodes.
- Cordon and labels are merge patches (idempotent). Taints are a list the API replaces whole,
  so a taint change reads the node and writes the list back with its `resourceVersion`: a
  concurrent writer makes that a 409 Conflict, and the change is retried on the fresh node
  instead of silently dropping the other writer's taint.
- The rack is a label (`fleetval.io/rack` unless configured otherwise), never the zone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Final

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from fleetval.errors import FleetvalError
from fleetval.nodes import NodeInfo

DEFAULT_RACK_LABEL: Final = "fleetval.io/rack"
GPU_NODE_SELECTOR: Final = "nvidia.com/gpu.present=true"
GPU_RESOURCE: Final = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
PAGE: Final = 500
CONFLICT_RETRIES: Final = 8
PROBE_POD_SELECTOR: Final = "app.kubernetes.io/part-of=fleetval,fleetval.io/probe"
KEEP_FAILED_PODS: Final = 50


def paged(fetch: Callable[[str | None], Any]) -> list[Any]:
    """Every item of a list call, `limit` at a time: `fetch(continue_token)` returns one page."""
    items: list[Any] = []
    token: str | None = None
    while True:
        page = fetch(token)
        items.extend(page.items)
        token = page.metadata._continue
        if not token:
            return items


class NodeUpdateError(FleetvalError):
    """A node operation that could not be applied (the node kept changing under us, or the API refused)."""


class KubeCluster:
    """Inventory and node operations over the Kubernetes API."""

    def __init__(self, core: CoreV1Api, *, rack_label: str = DEFAULT_RACK_LABEL) -> None:
        self.core = core
        self.rack_label = rack_label

    # --- inventory --------------------------------------------------------------------------
    def list_nodes(self) -> list[NodeInfo]:
        """Every GPU node (GFD's `nvidia.com/gpu.present=true`), with its GPU pods counted."""
        gpu_pods = self.gpu_pods_per_node()
        return [
            self._node_info(node, gpu_pods.get(node.metadata.name, 0))
            for node in paged(
                lambda token: self.core.list_node(
                    label_selector=GPU_NODE_SELECTOR, limit=PAGE, _continue=token
                )
            )
        ]

    def node_racks(self) -> dict[str, str]:
        """Every GPU node's rack, from the raw list (no pods, no client models): what the Xid
        breaker needs, in milliseconds where `list_nodes` takes seconds on a big fleet."""
        racks: dict[str, str] = {}
        token: str | None = None
        while True:
            response = self.core.list_node(
                label_selector=GPU_NODE_SELECTOR, limit=PAGE, _continue=token, _preload_content=False
            )
            page = json.loads(response.data)
            for node in page.get("items") or []:
                meta = node.get("metadata") or {}
                racks[meta["name"]] = (meta.get("labels") or {}).get(self.rack_label, "")
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return racks

    def node(self, name: str) -> NodeInfo | None:
        """One node and the workload GPU pods on it (fleetval's own probe pods not counted);
        None when the node is gone."""
        try:
            node = self.core.read_node(name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return self._node_info(node, self.workload_gpu_pods(name))

    def _node_info(self, node: Any, gpu_pods: int) -> NodeInfo:
        labels = dict(node.metadata.labels or {})
        capacity = node.status.capacity or {}
        allocatable = node.status.allocatable or {}
        return NodeInfo(
            name=node.metadata.name,
            rack=labels.get(self.rack_label, ""),
            profile=labels.get("nvidia.com/gpu.product", ""),
            gpus=int(capacity.get(GPU_RESOURCE, "0") or 0),
            labels=labels,
            taints=tuple(
                {"key": t.key, "value": t.value or "", "effect": t.effect} for t in (node.spec.taints or [])
            ),
            unschedulable=bool(node.spec.unschedulable),
            gpu_pods=gpu_pods,
            allocatable_gpus=int(allocatable.get(GPU_RESOURCE, "0") or 0),
        )

    def workload_gpu_pods(self, node: str) -> int:
        """Unfinished pods holding GPUs on `node`, fleetval's probe pods excepted (a retried probe
        finds its own earlier pod there)."""
        pods = paged(
            lambda token: self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed",
                label_selector="!fleetval.io/probe",
                limit=PAGE,
                _continue=token,
            )
        )
        return sum(1 for pod in pods if _holds_gpus(pod))

    def gpu_pods_per_node(self) -> dict[str, int]:
        """Pods holding GPUs on each node: bound and not finished (Pending on a node holds its GPUs too)."""
        return gpu_pods_per_node(self.core)

    def labelled_nodes(self, label_key: str) -> dict[str, dict[str, str]]:
        """name → labels of every node carrying `label_key` (the API filters: cheap on a big fleet)."""
        return {
            node.metadata.name: dict(node.metadata.labels or {})
            for node in paged(
                lambda token: self.core.list_node(label_selector=label_key, limit=PAGE, _continue=token)
            )
        }

    def nodes_running_pods(self, label_selector: str) -> set[str]:
        """The nodes where a not-finished pod matching `label_selector` is (any namespace)."""
        pods = paged(
            lambda token: self.core.list_pod_for_all_namespaces(
                label_selector=label_selector,
                field_selector="status.phase!=Succeeded,status.phase!=Failed",
                limit=PAGE,
                _continue=token,
            )
        )
        return {pod.spec.node_name for pod in pods if pod.spec is not None and pod.spec.node_name}

    # --- probe pods -----------------------------------------------------------------------------
    def prune_failed_probe_pods(self, namespace: str, *, keep: int = KEEP_FAILED_PODS) -> list[str]:
        """Delete all but the newest `keep` failed probe pods (kept for forensics, but bounded);
        returns the names deleted."""
        failed = paged(
            lambda token: self.core.list_namespaced_pod(
                namespace,
                label_selector=PROBE_POD_SELECTOR,
                field_selector="status.phase=Failed",
                limit=PAGE,
                _continue=token,
            )
        )
        failed.sort(
            key=lambda p: (p.metadata.creation_timestamp is None, p.metadata.creation_timestamp), reverse=True
        )
        doomed = [p.metadata.name for p in failed[keep:]]
        for name in doomed:
            try:
                self.core.delete_namespaced_pod(name, namespace)
            except ApiException as exc:
                if exc.status != 404:  # already gone is what we wanted
                    raise
        return doomed

    # --- node operations (idempotent) ---------------------------------------------------------
    def cordon(self, node: str) -> None:
        self.core.patch_node(node, {"spec": {"unschedulable": True}})

    def uncordon(self, node: str) -> None:
        self.core.patch_node(node, {"spec": {"unschedulable": None}})

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self.core.patch_node(node, {"metadata": {"labels": labels}})  # a null value removes the label

    def add_taint(self, node: str, key: str, value: str, effect: str) -> None:
        def change(taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
            kept = [t for t in taints if not (t["key"] == key and t.get("effect") == effect)]
            return [*kept, {"key": key, "value": value, "effect": effect}]

        self._update_taints(node, change)

    def remove_taint(self, node: str, key: str) -> None:
        self._update_taints(node, lambda taints: [t for t in taints if t["key"] != key])

    def cordon_and_taint(
        self, node: str, *, key: str, value: str, effect: str, labels: dict[str, str | None] | None = None
    ) -> None:
        """Cordon, taint and label in one patch (one read for the taints' resourceVersion, one
        write): the node is unschedulable and tainted at the same instant, never one without the
        other, and a burst costs two API calls per node instead of four."""

        def change(taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
            kept = [t for t in taints if not (t["key"] == key and t.get("effect") == effect)]
            return [*kept, {"key": key, "value": value, "effect": effect}]

        self._update_taints(node, change, cordon=True, labels=labels)

    def _update_taints(
        self,
        node: str,
        change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
        *,
        cordon: bool = False,
        labels: dict[str, str | None] | None = None,
    ) -> None:
        """Write `change(taints)` (and the cordon and labels) with the read's resourceVersion, so a
        concurrent writer's taint is never lost: a 409 reads again. Raw JSON both ways: building
        the client's models of a Node costs more than the calls."""
        for attempt in range(CONFLICT_RETRIES):
            current = json.loads(self.core.read_node(node, _preload_content=False).data)
            taints = [
                {k: t[k] for k in ("key", "value", "effect") if t.get(k) is not None}
                for t in (current.get("spec") or {}).get("taints") or []
            ]
            wanted = change(taints)
            if wanted == taints and not cordon and not labels:
                return
            metadata: dict[str, Any] = {"resourceVersion": current["metadata"]["resourceVersion"]}
            if labels:
                metadata["labels"] = labels  # a null value removes the label
            spec: dict[str, Any] = {"taints": wanted}
            if cordon:
                spec["unschedulable"] = True
            try:
                self.core.patch_node(node, {"metadata": metadata, "spec": spec}, _preload_content=False)
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise
                time.sleep(min(0.05 * 2**attempt, 1.0))
        raise NodeUpdateError(
            f"taints of node {node!r} kept changing: gave up after {CONFLICT_RETRIES} conflicts"
        )


def is_gpu_resource(name: str) -> bool:
    """A resource that hands a pod (part of) a GPU: `nvidia.com/gpu`, its time-sliced
    `nvidia.com/gpu.shared`, or a MIG device `nvidia.com/mig-<profile>` (mixed strategy)."""
    return name == GPU_RESOURCE or name.startswith((GPU_RESOURCE + ".", MIG_RESOURCE_PREFIX))


def _holds_gpus(pod: Any) -> bool:
    containers = [*(pod.spec.containers or []), *(pod.spec.init_containers or [])]
    for c in containers:
        resources = c.resources
        sections = (resources.limits, resources.requests) if resources else ()
        if any(is_gpu_resource(str(name)) for section in sections for name in section or {}):
            return True
    return False


def gpu_pods_per_node(core: Any) -> dict[str, int]:
    """Pods holding a GPU, a shared GPU or a MIG device on each node: bound and not finished
    (Pending on a node holds its GPUs too). A MIG node whose tenants asked for `nvidia.com/mig-*`
    is not idle."""
    counts: dict[str, int] = {}
    selector = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
    pages = paged(
        lambda token: core.list_pod_for_all_namespaces(field_selector=selector, limit=PAGE, _continue=token)
    )
    for pod in pages:
        if _holds_gpus(pod):
            counts[pod.spec.node_name] = counts.get(pod.spec.node_name, 0) + 1
    return counts
