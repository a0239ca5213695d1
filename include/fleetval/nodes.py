"""Nodes as the suites see them: what a node is (NodeInfo), what can be done to it (NodeActions),
the cluster that answers both (`Cluster`: fleetval.k8s.cluster.KubeCluster, over the Kubernetes
API of a real cluster or of `fleetval sim serve`), and what a probe left (ProbeOutput)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

# Labels and taints fleetval writes carry its own prefix.
LABEL_PREFIX = "fleetval.io/"
MAINTENANCE_TAINT = "fleetval.io/maintenance"
# New nodes carry it (kubelet --register-with-taints, or rack_onboarding) until onboarding admits them.
ONBOARDING_TAINT = "fleetval.io/onboarding"
QUARANTINE_LABEL = "fleetval.io/quarantine"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    rack: str
    profile: str
    gpus: int
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()
    unschedulable: bool = False
    gpu_pods: int = 0
    allocatable_gpus: int | None = None  # None: every GPU allocatable (the device plugin withdrew none)

    @property
    def is_gpu_node(self) -> bool:
        return self.gpus > 0

    @property
    def quarantined(self) -> bool:
        return QUARANTINE_LABEL in self.labels

    @property
    def onboarding(self) -> bool:
        """Still being onboarded (rack_onboarding owns it until it admits or holds it)."""
        return is_onboarding(self.taints)


def is_onboarding(taints: Iterable[Mapping[str, Any]] | None) -> bool:
    """Whether a node's taints (as NodeInfo or the API's Node spec lists them) hold the onboarding taint."""
    return any(t.get("key") == ONBOARDING_TAINT for t in taints or ())


@dataclass(frozen=True, slots=True)
class ProbeOutput:
    probe_key: str
    node: str
    tool: str
    raw: str
    exit_code: int | None
    started_at: float
    finished_at: float
    error: str | None = None  # harness failure (pod never ran, timeout): becomes an `error` verdict
    spec: dict[str, Any] = field(default_factory=dict)


class NodeActions(Protocol):
    def cordon(self, node: str) -> None: ...
    def uncordon(self, node: str) -> None: ...
    def set_labels(self, node: str, labels: dict[str, str | None]) -> None: ...
    def add_taint(self, node: str, key: str, value: str, effect: str) -> None: ...
    def remove_taint(self, node: str, key: str) -> None: ...
    # cordon + add_taint + set_labels as one write (the Xid cordon path: a burst of nodes at once)
    def cordon_and_taint(
        self, node: str, *, key: str, value: str, effect: str, labels: dict[str, str | None] | None = None
    ) -> None: ...


class Cluster(NodeActions, Protocol):
    """The node inventory and node operations (fleetval.k8s.cluster.KubeCluster)."""

    def list_nodes(self) -> list[NodeInfo]: ...
    def node_racks(self) -> dict[str, str]: ...  # name → rack of every GPU node, cheaply
    def node(self, name: str) -> NodeInfo | None: ...
