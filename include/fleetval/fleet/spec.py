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

A bad spec is a `SpecError` naming the offending entry by its path (`profiles.h100.gpus`,
`racks[0].nodes`, `faults[2].gpu`): an unknown fault kind, node, profile or key; a missing or
mistyped value (a count that is a string, a float, negative or `true`: YAML's booleans are
Python ints); a NaN or infinite bandwidth; an empty name; a key given twice. Size limits refuse an
absurd spec (10^7 nodes, a YAML alias bomb, a document nested a thousand deep) before anything is
allocated for it, so a spec is checked in milliseconds whatever it holds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from fleetval.errors import SpecError

# kind -> (layer, required parameters, optional parameters, node-level?)
FAULT_KINDS: Final[dict[str, tuple[str, frozenset[str], frozenset[str], bool]]] = {
    "dcgm.memory": ("device", frozenset({"gpu"}), frozenset(), True),
    "dcgm.pcie": ("device", frozenset({"gpu"}), frozenset(), True),
    "dcgm.nvlink": ("device", frozenset({"gpu"}), frozenset(), True),
    "dcgm.thermal_warn": ("device", frozenset({"gpu"}), frozenset(), True),
    # DCGM's profiling module busy while the node's dcgm-exporter runs (sim/images.py dcgm_report).
    "dcgm.exporter_contention": ("device", frozenset(), frozenset(), True),
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

# Limits. The largest fleet fleetval is sized for is 16,384 nodes; these leave room above it.
MAX_SPEC_CHARS: Final = 2 * 1024 * 1024
MAX_YAML_DEPTH: Final = 32  # the spec itself is four levels deep
MAX_YAML_NODES: Final = 500_000  # values after aliases are expanded
MAX_NODES: Final = 100_000
MAX_RACKS: Final = 10_000
MAX_PROFILES: Final = 1_000
MAX_FAULTS: Final = 100_000
MAX_GPUS: Final = 16
MAX_BUSBW_GBPS: Final = 100_000.0
MAX_SEED: Final = 2**31 - 1  # sim_fleets.seed is a 32-bit integer
XID_CODES: Final = range(1, 1000)
MAX_XID_COUNT: Final = 10_000

DEFAULT_DRIVER_VERSION: Final = "570.133.20"
TOP_KEYS: Final = frozenset({"name", "seed", "profiles", "racks", "faults", "mpi_operator"})
# The mpi-operator release the simulated cluster runs, read from the raw mapping by the simulator:
# one of those fleetval supports (fleetval.nccl.mpijob.MPI_OPERATOR_VERSIONS); v0.5 when left out.
MPI_OPERATORS: Final = ("v0.4", "v0.5")
RACK_KEYS: Final = frozenset({"name", "profile", "nodes"})
# What a profile may say; the simulator reads the optional ones from the spec's raw mapping.
PROFILE_REQUIRED: Final = frozenset({"gpu_product", "gpus", "intra_busbw_gbps", "inter_busbw_gbps", "fabric"})
PROFILE_OPTIONAL: Final = frozenset(
    {"driver_version", "dcgm_major", "nccl_version", "mig_strategy", "mig_config"}
)
MIG_STRATEGIES: Final = frozenset({"single", "mixed"})  # the GPU Operator's mig.strategy for the pool
# A Kubernetes label value (fleet, profile and product names, versions end up in labels) and a
# DNS label (a rack's name starts its nodes' names).
LABEL_VALUE: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
DNS_LABEL: Final = re.compile(r"[a-z0-9]([a-z0-9-]{0,50}[a-z0-9])?")


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
    # node (None: cluster-level) → its faults in spec order, built once: a fleet with a fault on
    # every 64th node would otherwise scan them all for each node (quadratic in the fleet).
    _faults_of: dict[str | None, tuple[Fault, ...]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if not self.rack_of:
            self.rack_of.update({n: rack for rack in self.racks for n in rack.node_names()})
        by_node: dict[str | None, list[Fault]] = {}
        for fault in self.faults:
            by_node.setdefault(fault.node, []).append(fault)
        self._faults_of.update({node: tuple(faults) for node, faults in by_node.items()})

    def nodes(self) -> list[tuple[str, Rack]]:
        return [(n, rack) for rack in self.racks for n in rack.node_names()]

    def profile_of(self, node: str) -> Profile:
        rack = self.rack_of.get(node)
        if rack is None:
            raise SpecError(f"unknown node {node!r} in fleet {self.name!r}")
        return self.profiles[rack.profile]

    def faults_on(self, node: str, layer: str | None = None) -> list[Fault]:
        return [f for f in self._faults_of.get(node, ()) if layer is None or f.layer == layer]

    def cluster_faults(self, layer: str | None = None) -> list[Fault]:
        return [f for f in self._faults_of.get(None, ()) if layer is None or f.layer == layer]


def load_fleet_spec(source: str | dict[str, Any]) -> FleetSpec:
    """Parse and validate a fleet spec from YAML text or an already-loaded mapping."""
    data = _load_yaml(source) if isinstance(source, str) else source
    if not isinstance(data, dict):
        raise SpecError("fleet spec must be a mapping with name, seed, profiles, racks, faults")
    _no_unknown_keys(data, TOP_KEYS, "")
    name = _label_value(_req(data, "name", ""), "name")
    seed = _int(_req(data, "seed", ""), "seed", 0, MAX_SEED)
    profiles = _profiles(data.get("profiles"))
    racks = _racks(data.get("racks"), profiles)
    nodes = {n: rack for rack in racks for n in rack.node_names()}
    faults_in = data.get("faults")
    if faults_in is None:
        faults_in = []
    if not isinstance(faults_in, list):
        raise SpecError(f"fleet spec: faults: must be a list, got {_show(faults_in)}")
    if len(faults_in) > MAX_FAULTS:
        raise SpecError(f"fleet spec: faults: at most {MAX_FAULTS} faults, got {len(faults_in)}")
    faults = tuple(_fault(f"faults[{i}]", f, nodes, profiles) for i, f in enumerate(faults_in))
    if "mpi_operator" in data and data["mpi_operator"] not in MPI_OPERATORS:
        raise SpecError(
            f"fleet spec: mpi_operator: must be one of {list(MPI_OPERATORS)}, "
            f"got {_show(data['mpi_operator'])}"
        )
    return FleetSpec(
        name=name, seed=seed, profiles=profiles, racks=racks, faults=faults, raw=data, rack_of=nodes
    )


# --- YAML, refused before it is expanded -----------------------------------------------------
class _SpecLoader(yaml.SafeLoader):
    """The safe loader, composing no deeper than MAX_YAML_DEPTH (PyYAML composes recursively:
    a deep document would otherwise end in RecursionError)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise SpecError(
                    f"fleet spec: nested deeper than {MAX_YAML_DEPTH} levels (line {mark.line + 1})"
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


_PLAIN_TAGS: Final = frozenset(
    "tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null", "map", "seq", "merge")
)


def _load_yaml(text: str) -> Any:
    if len(text) > MAX_SPEC_CHARS:
        raise SpecError(
            f"fleet spec: larger than {MAX_SPEC_CHARS // (1024 * 1024)} MiB ({len(text)} characters)"
        )
    try:
        loader = _SpecLoader(text)  # reading starts here: NUL and lone surrogates are refused
    except yaml.YAMLError as exc:
        raise SpecError(f"fleet spec is not valid YAML: {' '.join(str(exc).split())}") from None
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_yaml_graph(root)
        return loader.construct_document(root)
    except yaml.YAMLError as exc:
        raise SpecError(f"fleet spec is not valid YAML: {' '.join(str(exc).split())}") from None
    finally:
        loader.dispose()


def _check_yaml_graph(root: Node) -> None:
    """Before anything is constructed: at most MAX_YAML_NODES values once aliases are expanded
    (an alias bomb is a few lines that expand to billions), no alias inside itself, plain types
    only, string keys, no key twice in one mapping. Each distinct node is visited once."""
    expanded: dict[int, int] = {}  # node → its size with aliases expanded
    open_nodes: set[int] = set()  # the nodes whose children are being visited
    paths = {id(root): ""}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            expanded[key] = 1 + sum(expanded[id(c)] for c, _ in _children(node, paths[key]))
            if expanded[key] > MAX_YAML_NODES:
                raise SpecError(
                    f"fleet spec: {_where(paths[key])} expands to more than {MAX_YAML_NODES} values "
                    "(YAML aliases)"
                )
            continue
        if key in expanded:
            continue
        if key in open_nodes:
            raise SpecError(f"fleet spec: {_where(paths[key])} contains itself (a recursive YAML alias)")
        if node.tag not in _PLAIN_TAGS:
            raise SpecError(f"fleet spec: {_where(paths[key])}: unsupported YAML type {node.tag!r}")
        open_nodes.add(key)
        stack.append((node, True))
        for child, path in _children(node, paths[key]):
            paths.setdefault(id(child), path)
            if id(child) not in expanded:
                stack.append((child, False))


def _children(node: Node, path: str) -> Iterator[tuple[Node, str]]:
    if isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            yield item, f"{path}[{i}]"
    elif isinstance(node, MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                yield value_node, path
                continue
            if not isinstance(key_node, ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                shown = _show(key_node.value) if isinstance(key_node, ScalarNode) else "a collection"
                raise SpecError(
                    f"fleet spec: {_where(path)}: keys must be strings, got {shown} "
                    f"(line {key_node.start_mark.line + 1})"
                )
            name = str(key_node.value)
            here = f"{path}.{name}" if path else name
            if name in seen:
                raise SpecError(f"fleet spec: {here}: given twice (line {key_node.start_mark.line + 1})")
            seen.add(name)
            yield value_node, here


def _where(path: str) -> str:
    return path or "the document"


# --- values ----------------------------------------------------------------------------------
def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _req(data: dict[str, Any], key: str, path: str) -> Any:
    if key not in data:
        raise SpecError(f"fleet spec: {_where(path)}: missing {key!r}")
    return data[key]


def _no_unknown_keys(data: dict[Any, Any], known: frozenset[str], path: str) -> None:
    unknown = [k for k in data if k not in known]
    if unknown:
        raise SpecError(
            f"fleet spec: {_where(path)}: unknown key {_show(unknown[0])} (known: {', '.join(sorted(known))})"
        )


def _int(value: Any, path: str, low: int, high: int) -> int:
    # bool is an int in Python: `gpu: true` would be GPU 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError(f"fleet spec: {path}: must be an integer, got {_show(value)}")
    if not low <= value <= high:
        raise SpecError(f"fleet spec: {path}: must be {low}..{high}, got {value}")
    return value


def _number(value: Any, path: str, low: float, high: float, *, low_open: bool = False) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise SpecError(f"fleet spec: {path}: must be a number, got {_show(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise SpecError(f"fleet spec: {path}: must be a finite number, got {number}")
    if number > high or number < low or (low_open and number == low):
        bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise SpecError(f"fleet spec: {path}: must be in {bounds}, got {number:g}")
    return number


def _text(value: Any, path: str, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str):
        raise SpecError(f"fleet spec: {path}: must be a string, got {_show(value)}")
    if not value:
        raise SpecError(f"fleet spec: {path}: must not be empty")
    if not pattern.fullmatch(value):
        raise SpecError(f"fleet spec: {path}: {_show(value)} is not {what}")
    return value


def _label_value(value: Any, path: str) -> str:
    return _text(value, path, LABEL_VALUE, "a name of letters, digits, '.', '_', '-' (at most 63)")


# --- the sections ----------------------------------------------------------------------------
def _profiles(data: Any) -> dict[str, Profile]:
    if not isinstance(data, dict) or not data:
        raise SpecError(f"fleet spec: profiles: must be a non-empty mapping, got {_show(data)}")
    if len(data) > MAX_PROFILES:
        raise SpecError(f"fleet spec: profiles: at most {MAX_PROFILES} profiles, got {len(data)}")
    out: dict[str, Profile] = {}
    for name, p in data.items():
        where = f"profiles.{name}"
        _label_value(name, f"profiles: profile name {_show(name)}")
        if not isinstance(p, dict):
            raise SpecError(f"fleet spec: {where}: must be a mapping, got {_show(p)}")
        _no_unknown_keys(p, PROFILE_REQUIRED | PROFILE_OPTIONAL, where)
        fabric = _req(p, "fabric", where)
        if fabric not in FABRICS:
            raise SpecError(
                f"fleet spec: {where}.fabric: must be one of {sorted(FABRICS)}, got {_show(fabric)}"
            )
        if "dcgm_major" in p:
            _int(p["dcgm_major"], f"{where}.dcgm_major", 1, 99)
        if "nccl_version" in p:
            _label_value(p["nccl_version"], f"{where}.nccl_version")
        if "mig_strategy" in p and p["mig_strategy"] not in MIG_STRATEGIES:
            raise SpecError(
                f"fleet spec: {where}.mig_strategy: must be one of {sorted(MIG_STRATEGIES)}, "
                f"got {_show(p['mig_strategy'])}"
            )
        if "mig_config" in p:  # the nvidia.com/mig.config label the pool starts with
            _label_value(p["mig_config"], f"{where}.mig_config")
        out[name] = Profile(
            name=name,
            gpu_product=_label_value(_req(p, "gpu_product", where), f"{where}.gpu_product"),
            gpus=_int(_req(p, "gpus", where), f"{where}.gpus", 1, MAX_GPUS),
            intra_busbw_gbps=_busbw(_req(p, "intra_busbw_gbps", where), f"{where}.intra_busbw_gbps"),
            inter_busbw_gbps=_busbw(_req(p, "inter_busbw_gbps", where), f"{where}.inter_busbw_gbps"),
            fabric=fabric,
            driver_version=_label_value(
                p.get("driver_version", DEFAULT_DRIVER_VERSION), f"{where}.driver_version"
            ),
        )
    return out


def _busbw(value: Any, path: str) -> float:
    return _number(value, path, 0.0, MAX_BUSBW_GBPS, low_open=True)


def _racks(data: Any, profiles: dict[str, Profile]) -> tuple[Rack, ...]:
    if not isinstance(data, list) or not data:
        raise SpecError(f"fleet spec: racks: must be a non-empty list, got {_show(data)}")
    if len(data) > MAX_RACKS:
        raise SpecError(f"fleet spec: racks: at most {MAX_RACKS} racks, got {len(data)}")
    racks: list[Rack] = []
    names: set[str] = set()
    total = 0
    for i, r in enumerate(data):
        where = f"racks[{i}]"
        if not isinstance(r, dict):
            raise SpecError(f"fleet spec: {where}: must be a mapping, got {_show(r)}")
        _no_unknown_keys(r, RACK_KEYS, where)
        name = _text(
            _req(r, "name", where), f"{where}.name", DNS_LABEL, "lowercase letters, digits, '-' (a DNS label)"
        )
        if name in names:
            raise SpecError(f"fleet spec: {where}.name: rack {name!r} is given twice")
        names.add(name)
        profile = _req(r, "profile", where)
        if profile not in profiles:
            raise SpecError(
                f"fleet spec: {where}.profile: unknown profile {_show(profile)} (known: {sorted(profiles)})"
            )
        nodes = _int(_req(r, "nodes", where), f"{where}.nodes", 1, MAX_NODES)
        total += nodes
        if total > MAX_NODES:  # before a single node name is made
            raise SpecError(f"fleet spec: racks: more than {MAX_NODES} nodes in all (at {where})")
        racks.append(Rack(name, profile, nodes))
    return tuple(racks)


# Fault parameters: what each one must be. `gpu` is checked against the node's profile.
def _param(name: str, value: Any, path: str, node: str | None, gpus: int) -> Any:
    if name == "gpu":
        gpu = _int(value, path, 0, MAX_GPUS - 1)
        if gpu >= gpus:
            raise SpecError(f"fleet spec: {path}: must be 0..{gpus - 1} ({node} has {gpus} GPUs), got {gpu}")
        return gpu
    if name == "code":
        return _int(value, path, XID_CODES.start, XID_CODES.stop - 1)
    if name == "count":
        return _int(value, path, 1, MAX_XID_COUNT)
    if name == "advertised":
        return _int(value, path, 0, 4 * MAX_GPUS)
    # Numbers are kept as written (an int stays an int), as the spec's raw mapping has them.
    if name in ("factor", "cv"):  # a busbw factor of a degraded link; a coefficient of variation
        _number(value, path, 0.0, 1.0, low_open=True)
        return value
    if name == "minutes":
        _number(value, path, 0.0, 7 * 24 * 60)
        return value
    if name == "operand":
        return _label_value(value, path)
    raise SpecError(f"fleet spec: {path}: no rule for parameter {name!r}")  # a FAULT_KINDS typo


def _fault(where: str, f: Any, nodes: dict[str, Rack], profiles: dict[str, Profile]) -> Fault:
    if not isinstance(f, dict):
        raise SpecError(f"fleet spec: {where}: must be a mapping, got {_show(f)}")
    kind = _req(f, "kind", where)
    if not isinstance(kind, str) or kind not in FAULT_KINDS:
        known = ", ".join(sorted(FAULT_KINDS))
        raise SpecError(f"fleet spec: {where}.kind: unknown fault kind {_show(kind)} (known: {known})")
    _layer, required, optional, node_level = FAULT_KINDS[kind]
    node = f.get("node")
    if node_level:
        if "node" not in f:
            raise SpecError(f"fleet spec: {where} ({kind}): needs a 'node'")
        if not isinstance(node, str) or node not in nodes:
            raise SpecError(f"fleet spec: {where}.node: unknown node {_show(node)}")
    elif node is not None:
        raise SpecError(f"fleet spec: {where} ({kind}): is a cluster-level fault and takes no 'node'")
    params = {k: v for k, v in f.items() if k not in ("kind", "node")}
    missing = required - params.keys()
    if missing:
        raise SpecError(f"fleet spec: {where} ({kind}): missing {sorted(missing)}")
    unknown = params.keys() - required - optional
    if unknown:
        raise SpecError(f"fleet spec: {where} ({kind}): unknown parameters {sorted(map(str, unknown))}")
    gpus = profiles[nodes[node].profile].gpus if isinstance(node, str) else MAX_GPUS
    checked = {k: _param(k, v, f"{where}.{k}", node, gpus) for k, v in params.items()}
    return Fault(kind=kind, node=node, params=checked)
