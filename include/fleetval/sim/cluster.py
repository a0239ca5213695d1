"""The simulated cluster: node state in the fleetval database, probes answered with outputs in
the real tools' formats, faults from the fleet spec.

State lives in `sim_fleets` / `sim_nodes`, so tasks in separate processes (Airflow workers) see
one cluster. Deterministic: GPU UUIDs, PCI addresses and measurement noise derive from the
fleet's seed and the node name only.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import Engine, delete, insert, select, update

from fleetval.backends import NodeInfo, ProbeOutput
from fleetval.errors import SpecError
from fleetval.k8s.specs import ProbeSpec
from fleetval.sim.images import dcgm_report
from fleetval.sim.nccl_probe import nccl_output
from fleetval.sim.spec import FleetSpec, load_fleet_spec
from fleetval.store.models import SimFleet, SimNode

# PCI bus ids of the eight GPUs of an HGX H100 baseboard as the driver prints them.
HGX_PCI_BUSES: Final = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")


def gpu_uuid(seed: int, node: str, index: int) -> str:
    digest = hashlib.sha256(f"{seed}/{node}/{index}".encode()).digest()
    return f"GPU-{uuid.UUID(bytes=digest[:16])}"


def gpu_pci(index: int) -> str:
    bus = HGX_PCI_BUSES[index] if index < len(HGX_PCI_BUSES) else f"{0xE0 + index:02x}"
    return f"00000000:{bus.upper()}:00.0"


class SimCluster:
    """One simulated fleet, loaded from a fleet spec into the database."""

    name = "sim"

    def __init__(self, engine: Engine, fleet: str) -> None:
        self.engine = engine
        self.fleet = fleet
        with engine.connect() as conn:
            row = conn.execute(select(SimFleet.spec).where(SimFleet.name == fleet)).scalar_one_or_none()
        if row is None:
            raise SpecError(
                f"simulated fleet {fleet!r} is not loaded; run `fleetval sim load` or `sim run` first"
            )
        self.spec: FleetSpec = load_fleet_spec(row)

    @classmethod
    def load(cls, engine: Engine, spec: FleetSpec, *, reset: bool = False) -> SimCluster:
        """Load `spec` into the database. Loading the same spec again keeps the cluster's state
        (cordons, labels) unless `reset`; a changed spec replaces the fleet."""
        with engine.begin() as conn:
            existing = conn.execute(
                select(SimFleet.spec).where(SimFleet.name == spec.name)
            ).scalar_one_or_none()
            if existing is not None and existing == spec.raw and not reset:
                return cls(engine, spec.name)
            if existing is not None:
                conn.execute(delete(SimNode).where(SimNode.fleet == spec.name))
                conn.execute(delete(SimFleet).where(SimFleet.name == spec.name))
            conn.execute(insert(SimFleet).values(name=spec.name, seed=spec.seed, spec=spec.raw))
            rows = []
            for node, rack in spec.nodes():
                profile = spec.profiles[rack.profile]
                rows.append(
                    {
                        "fleet": spec.name,
                        "name": node,
                        "rack": rack.name,
                        "profile": profile.name,
                        "labels": {
                            "kubernetes.io/hostname": node,
                            "nvidia.com/gpu.present": "true",
                            "nvidia.com/gpu.product": profile.gpu_product,
                            "nvidia.com/gpu.count": str(profile.gpus),
                            "topology.kubernetes.io/zone": rack.name,
                        },
                        "taints": [],
                        "unschedulable": False,
                        "gpu_pods": 0,
                    }
                )
            for start in range(0, len(rows), 2000):
                conn.execute(insert(SimNode), rows[start : start + 2000])
        return cls(engine, spec.name)

    # --- inventory --------------------------------------------------------------------------
    def list_nodes(self) -> list[NodeInfo]:
        return self._nodes()

    def node(self, name: str) -> NodeInfo:
        found = self._nodes(name)
        if not found:
            raise SpecError(f"unknown node {name!r} in simulated fleet {self.fleet!r}")
        return found[0]

    def _nodes(self, name: str | None = None) -> list[NodeInfo]:
        # One row for a node action, not the fleet: node actions stay O(1) on large fleets.
        query = select(*SimNode.__table__.c).where(SimNode.fleet == self.fleet).order_by(SimNode.name)
        if name is not None:
            query = query.where(SimNode.name == name)
        with self.engine.connect() as conn:
            return [
                NodeInfo(
                    name=r.name,
                    rack=r.rack,
                    profile=r.profile,
                    gpus=self.spec.profiles[r.profile].gpus,
                    labels=dict(r.labels),
                    taints=tuple(r.taints),
                    unschedulable=r.unschedulable,
                    gpu_pods=r.gpu_pods,
                )
                for r in conn.execute(query)
            ]

    def declared_fabric(self, profile: str) -> str | None:
        """The fabric the fleet spec declares for `profile` (DeclaresFabrics); None if unknown."""
        found = self.spec.profiles.get(profile)
        return found.fabric if found is not None else None

    def gpu_uuids(self, node: str) -> list[str]:
        profile = self.spec.profile_of(node)
        return [gpu_uuid(self.spec.seed, node, i) for i in range(profile.gpus)]

    def set_gpu_pods(self, node: str, count: int) -> None:
        """Simulate GPU workloads on a node (a busy node is not idle for the weekly sweep)."""
        self._update(node, gpu_pods=count)

    # --- probes -----------------------------------------------------------------------------
    def run_probes(self, specs: Sequence[ProbeSpec]) -> list[ProbeOutput]:
        return [self.run_probe(spec) for spec in specs]

    def run_probe(self, spec: ProbeSpec) -> ProbeOutput:
        started = time.time()
        if spec.tool == "dcgm":
            raw = self.dcgm_output(spec.node, level=int(spec.params["level"]))
        elif spec.tool == "nccl":
            raw = nccl_output(self.spec, spec, seed_salt=spec.probe_key)
        else:
            raise SpecError(f"the simulator has no probe for tool {spec.tool!r}")
        return ProbeOutput(
            spec.probe_key, spec.node, spec.tool, raw, 0, started, time.time(), spec=spec.to_json()
        )

    def dcgm_output(self, node: str, *, level: int) -> str:
        """`dcgmi diag -r <level> -j` on all of `node`'s GPUs (the pure function the simulated
        container runtime uses, which also renders a container's subset of GPUs)."""
        return dcgm_report(self.spec, node, level)

    # --- node actions (NodeActions) ---------------------------------------------------------
    def cordon(self, node: str) -> None:
        self._update(node, unschedulable=True)

    def uncordon(self, node: str) -> None:
        self._update(node, unschedulable=False)

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        current = dict(self.node(node).labels)
        for key, value in labels.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        self._update(node, labels=current)

    def add_taint(self, node: str, key: str, value: str, effect: str) -> None:
        taints = [t for t in self.node(node).taints if t.get("key") != key]
        taints.append({"key": key, "value": value, "effect": effect})
        self._update(node, taints=taints)

    def remove_taint(self, node: str, key: str) -> None:
        self._update(node, taints=[t for t in self.node(node).taints if t.get("key") != key])

    def _update(self, node: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            result = conn.execute(
                update(SimNode).where(SimNode.fleet == self.fleet, SimNode.name == node).values(**values)
            )
            if result.rowcount == 0:
                raise SpecError(f"unknown node {node!r} in simulated fleet {self.fleet!r}")
