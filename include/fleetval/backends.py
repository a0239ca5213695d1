"""What a backend must provide: the node inventory, probe execution and node actions.

Two implementations: `sim` (fleetval.sim.cluster.SimCluster: the simulated fleet, state in the
fleetval database) and `k8s` (fleetval_airflow.k8s_backend: pods through the Kubernetes API,
node operations through the cncf.kubernetes provider's hook). Both take the same ProbeSpec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# Labels and taints fleetval writes carry its own prefix.
LABEL_PREFIX = "fleetval.io/"
MAINTENANCE_TAINT = "fleetval.io/maintenance"
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


class Backend(NodeActions, Protocol):
    name: str

    def list_nodes(self) -> list[NodeInfo]: ...
    def run_probes(self, specs: Sequence[Any]) -> list[ProbeOutput]: ...


@runtime_checkable
class DeclaresFabrics(Protocol):
    """Optional: a backend that knows the fabric each hardware profile declares (the simulator,
    from its fleet spec). On a cluster the `fleetval.io/fabric` node label says it instead."""

    def declared_fabric(self, profile: str) -> str | None: ...
