"""The fleet spec (contract, docs/design.md "Fleet spec"): profiles, racks and declarative faults.

```yaml
name: demo
seed: 42
profiles:
  h100-sxm-ndr: {gpu_product: NVIDIA-H100-80GB-HBM3, gpus: 8, intra_busbw_gbps: 480,
                 inter_busbw_gbps: 370, fabric: ib}
racks:
  - {name: r01, profile: h100-sxm-ndr, nodes: 8}     # nodes r01-n01 .. r01-n08
faults:
  - {node: r01-n03, kind: dcgm.memory, gpu: 5}
  - {kind: kueue.no_reclaim}                          # cluster-level fault: no node
```

A bad spec (unknown fault kind, unknown node, unknown profile, a GPU index out of range, a
missing parameter) is a `SpecError` naming the offending entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from fleetval.errors import SpecError

# kind -> (layer, required parameters, optional parameters, node-level?)
FAULT_KINDS: Final[dict[str, tuple[str, frozenset[str], frozenset[str], bool]]] = {
    "dcgm.memory": ("device", frozenset({"gpu"}), frozenset(), True),
    "dcgm.pcie": ("device", frozenset({"gpu"}), frozenset(), True),
    "dcgm.nvlink": ("device", frozenset({"gpu"}), frozenset(), True),
    "dcgm.thermal_warn": ("device", frozenset({"gpu"}), frozenset(), True),
    "xid": ("device", frozenset({"code", "gpu"}), frozenset({"count"}), True),
    "nccl.nvlink_degraded": ("network", frozenset(), frozenset({"factor"}), True),
    "nccl.socket_fallback": ("network", frozenset(), frozenset(), True),
    "nccl.flaky": ("network", frozenset(), frozenset({"cv"}), True),
    "nccl.errors": ("network", frozenset(), frozenset(), True),
    "nccl.hang": ("network", frozenset(), frozenset(), True),
    "nccl.wrong": ("network", frozenset(), frozenset(), True),
    "mig.slow_advertise": ("sharing", frozenset(), frozenset({"minutes"}), True),
    "mig.bad_combo_accepted": ("sharing", frozenset(), frozenset(), True),
    "mig.memory_leak": ("sharing", frozenset(), frozenset(), True),
    "mig.process_visible": ("sharing", frozenset(), frozenset(), True),
    "mig.billing_as_gpu": ("sharing", frozenset(), frozenset(), True),
    "mig.reconfig_while_busy": ("sharing", frozenset(), frozenset(), True),
    "ts.undisclosed": ("sharing", frozenset(), frozenset(), True),
    "op.operand_down": ("operator", frozenset({"operand"}), frozenset(), True),
    "op.gpu_count_wrong": ("operator", frozenset({"advertised"}), frozenset(), True),
    "op.isolation_leak": ("operator", frozenset(), frozenset(), True),
    "op.upgrade_no_drain": ("operator", frozenset(), frozenset(), True),
    "kueue.no_reclaim": ("scheduling", frozenset(), frozenset(), False),
    "kueue.no_borrowing": ("scheduling", frozenset(), frozenset(), False),
    "kueue.partial_gang": ("scheduling", frozenset(), frozenset(), False),
    "kueue.wrong_reason": ("scheduling", frozenset(), frozenset(), False),
    "ckpt.non_atomic": ("job", frozenset(), frozenset(), False),
    "ckpt.missing_optimizer": ("job", frozenset(), frozenset(), False),
    "ckpt.skip_step": ("job", frozenset(), frozenset(), False),
    "ckpt.no_sigterm_save": ("job", frozenset(), frozenset(), False),
    "ckpt.slow_save": ("job", frozenset(), frozenset(), False),
    "ckpt.no_integrity_check": ("job", frozenset(), frozenset(), False),
}
FABRICS: Final = frozenset({"ib", "roce"})


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    gpu_product: str
    gpus: int
    intra_busbw_gbps: float
    inter_busbw_gbps: float
    fabric: str
    driver_version: str = "570.133.20"


@dataclass(frozen=True, slots=True)
class Rack:
    name: str
    profile: str
    nodes: int

    def node_names(self) -> list[str]:
        return [f"{self.name}-n{i:02d}" for i in range(1, self.nodes + 1)]


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    node: str | None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def layer(self) -> str:
        return FAULT_KINDS[self.kind][0]

    @property
    def gpu(self) -> int | None:
        gpu = self.params.get("gpu")
        return int(gpu) if gpu is not None else None


@dataclass(frozen=True, slots=True)
class FleetSpec:
    name: str
    seed: int
    profiles: dict[str, Profile]
    racks: tuple[Rack, ...]
    faults: tuple[Fault, ...]
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    # node → rack, built once: per-node lookups stay O(1) on fleets of thousands of nodes.
    rack_of: dict[str, Rack] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.rack_of:
            self.rack_of.update({n: rack for rack in self.racks for n in rack.node_names()})

    def nodes(self) -> list[tuple[str, Rack]]:
        return [(n, rack) for rack in self.racks for n in rack.node_names()]

    def profile_of(self, node: str) -> Profile:
        rack = self.rack_of.get(node)
        if rack is None:
            raise SpecError(f"unknown node {node!r} in fleet {self.name!r}")
        return self.profiles[rack.profile]

    def faults_on(self, node: str, layer: str | None = None) -> list[Fault]:
        return [f for f in self.faults if f.node == node and (layer is None or f.layer == layer)]

    def cluster_faults(self, layer: str | None = None) -> list[Fault]:
        return [f for f in self.faults if f.node is None and (layer is None or f.layer == layer)]


def load_fleet_spec(source: str | dict[str, Any]) -> FleetSpec:
    """Parse and validate a fleet spec from YAML text or an already-loaded mapping."""
    if isinstance(source, str):
        try:
            data = yaml.safe_load(source)
        except yaml.YAMLError as exc:
            raise SpecError(f"fleet spec is not valid YAML: {exc}") from None
    else:
        data = source
    if not isinstance(data, dict):
        raise SpecError("fleet spec must be a mapping with name, seed, profiles, racks, faults")
    name = _req(data, "name", str, "fleet spec")
    seed = _req(data, "seed", int, "fleet spec")
    profiles = _profiles(data.get("profiles"))
    racks = _racks(data.get("racks"), profiles)
    nodes = {n for rack in racks for n in rack.node_names()}
    faults = tuple(_fault(i, f, nodes, racks, profiles) for i, f in enumerate(data.get("faults") or []))
    return FleetSpec(name=name, seed=seed, profiles=profiles, racks=racks, faults=faults, raw=data)


def _req(data: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in data:
        raise SpecError(f"{where}: missing {key!r}")
    value = data[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise SpecError(f"{where}: {key!r} must be {kind.__name__}, got {value!r}")
    return value


def _profiles(data: Any) -> dict[str, Profile]:
    if not isinstance(data, dict) or not data:
        raise SpecError("fleet spec: 'profiles' must be a non-empty mapping")
    out: dict[str, Profile] = {}
    for name, p in data.items():
        where = f"profile {name!r}"
        if not isinstance(p, dict):
            raise SpecError(f"{where}: must be a mapping")
        fabric = _req(p, "fabric", str, where)
        if fabric not in FABRICS:
            raise SpecError(f"{where}: fabric must be one of {sorted(FABRICS)}, got {fabric!r}")
        gpus = _req(p, "gpus", int, where)
        if not 1 <= gpus <= 16:
            raise SpecError(f"{where}: gpus must be 1..16, got {gpus}")
        out[str(name)] = Profile(
            name=str(name),
            gpu_product=_req(p, "gpu_product", str, where),
            gpus=gpus,
            intra_busbw_gbps=_positive(_req(p, "intra_busbw_gbps", float, where), where),
            inter_busbw_gbps=_positive(_req(p, "inter_busbw_gbps", float, where), where),
            fabric=fabric,
            driver_version=str(p.get("driver_version", "570.133.20")),
        )
    return out


def _positive(value: float, where: str) -> float:
    if value <= 0:
        raise SpecError(f"{where}: bandwidths must be positive, got {value}")
    return value


def _racks(data: Any, profiles: dict[str, Profile]) -> tuple[Rack, ...]:
    if not isinstance(data, list) or not data:
        raise SpecError("fleet spec: 'racks' must be a non-empty list")
    racks: list[Rack] = []
    for i, r in enumerate(data):
        where = f"rack #{i + 1}"
        if not isinstance(r, dict):
            raise SpecError(f"{where}: must be a mapping")
        name = _req(r, "name", str, where)
        profile = _req(r, "profile", str, where)
        if profile not in profiles:
            raise SpecError(f"rack {name!r}: unknown profile {profile!r} (known: {sorted(profiles)})")
        nodes = _req(r, "nodes", int, where)
        if nodes < 1:
            raise SpecError(f"rack {name!r}: nodes must be >= 1")
        racks.append(Rack(name, profile, nodes))
    names = [r.name for r in racks]
    if len(set(names)) != len(names):
        raise SpecError(f"fleet spec: duplicate rack names in {names}")
    return tuple(racks)


def _fault(i: int, f: Any, nodes: set[str], racks: tuple[Rack, ...], profiles: dict[str, Profile]) -> Fault:
    where = f"fault #{i + 1}"
    if not isinstance(f, dict):
        raise SpecError(f"{where}: must be a mapping")
    kind = _req(f, "kind", str, where)
    if kind not in FAULT_KINDS:
        raise SpecError(f"{where}: unknown fault kind {kind!r} (known: {', '.join(sorted(FAULT_KINDS))})")
    _layer, required, optional, node_level = FAULT_KINDS[kind]
    node = f.get("node")
    if node_level:
        if not isinstance(node, str):
            raise SpecError(f"{where} ({kind}): needs a 'node'")
        if node not in nodes:
            raise SpecError(f"{where} ({kind}): unknown node {node!r}")
    elif node is not None:
        raise SpecError(f"{where} ({kind}): is a cluster-level fault and takes no 'node'")
    params = {k: v for k, v in f.items() if k not in ("kind", "node")}
    missing = required - params.keys()
    if missing:
        raise SpecError(f"{where} ({kind}): missing {sorted(missing)}")
    unknown = params.keys() - required - optional
    if unknown:
        raise SpecError(f"{where} ({kind}): unknown parameters {sorted(unknown)}")
    if "gpu" in params and node is not None:
        rack = next(r for r in racks if node in r.node_names())
        gpus = profiles[rack.profile].gpus
        if not isinstance(params["gpu"], int) or not 0 <= params["gpu"] < gpus:
            raise SpecError(f"{where} ({kind}): gpu must be 0..{gpus - 1} on {node}, got {params['gpu']!r}")
    return Fault(kind=kind, node=node, params=params)
