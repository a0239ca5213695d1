"""Post-upgrade NCCL sweep, step 1 — the plan: which nodes, which pairs, which probes in which wave.

Every sweepable node (a GPU node, not quarantined, no GPU pods) gets an intra-node all_reduce over
all its GPUs, `repeats` times (3: D-NET-NCCL-04 needs three); nodes of one hardware profile are
paired so every node is in at least one pair (node i with node i + ⌊n/2⌋ of the rack-ordered
list, so pairs cross racks; an odd node out is paired with the first node), each pair `repeats`
times.

Probes run in **waves**. A wave is one repeat of one *batch*: a batch holds node-disjoint probes
(no node twice), so a wave never asks a node for its GPUs twice at once, and a node's repeats run
one after another. A wave is one run of the wave DAG (one mapped probe task per node or pair),
so a batch holds at most `max_wave_size` probes and there are at most `max_waves` waves of each
kind — both Airflow's `max_map_length` — however large the fleet.

Which nodes: the `nodes` param; else the nodes the driver-upgrade trigger announced; else every
node whose driver upgrade is done (`nvidia.com/gpu-driver-upgrade-state=upgrade-done`) and that
has not been swept on that driver (`fleetval.io/nccl-swept-driver`). The fabric a node's
transport must use is its `fleetval.io/fabric` label (ib | roce); without it the transport
verdict is inconclusive.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from fleetval.nccl.probe import (
    DEFAULT_LAYOUT,
    NCCL_TESTS_IMAGE,
    Layout,
    check_layout,
    layout_scope,
    nccl_probe,
)
from fleetval.nodes import NodeInfo
from fleetval.probes.pod import ProbeSpec

SUITE: Final = "post_upgrade_nccl"
DEFAULT_REPEATS: Final = 3
DEFAULT_MAX_MAP_LENGTH: Final = 1024  # Airflow's default [core] max_map_length

FABRIC_LABEL: Final = "fleetval.io/fabric"
FABRICS: Final = ("ib", "roce")
SWEPT_LABEL: Final = "fleetval.io/nccl-swept-driver"
UPGRADE_STATE_LABEL: Final = "nvidia.com/gpu-driver-upgrade-state"
UPGRADE_DONE: Final = "upgrade-done"
DRIVER_VERSION_LABEL: Final = "nvidia.com/cuda.driver-version.full"

Kind = Literal["intra", "pairs"]
KINDS: Final[tuple[Kind, ...]] = ("intra", "pairs")

_LABEL_VALUE: Final = re.compile(r"[^A-Za-z0-9._-]")


def intra_scope(gpus: int) -> str:
    return f"intra-{gpus}"


def inter_scope(gpus: int) -> str:
    return f"inter-2x{gpus}"


def label_value(text: str) -> str:
    """A valid Kubernetes label value (≤ 63 chars of [A-Za-z0-9._-], alphanumeric at both ends)."""
    value = _LABEL_VALUE.sub("-", text)[:63].strip("-_.")
    return value or "unknown"


def driver_generation(node: NodeInfo) -> str:
    """What an upgrade changed on the node: its driver version (GPU feature discovery's label)."""
    return label_value(node.labels.get(DRIVER_VERSION_LABEL, "unknown"))


def pending_upgrade_nodes(nodes: Iterable[NodeInfo]) -> dict[str, str]:
    """Nodes whose driver upgrade is done and that have not been swept on that driver yet:
    {node: driver generation}."""
    return {
        n.name: gen
        for n in nodes
        if n.labels.get(UPGRADE_STATE_LABEL) == UPGRADE_DONE
        and n.labels.get(SWEPT_LABEL) != (gen := driver_generation(n))
    }


def node_fabric(node: NodeInfo) -> str | None:
    """The fabric the node's `fleetval.io/fabric` label declares; None when absent or unknown."""
    label = node.labels.get(FABRIC_LABEL)
    return label if label in FABRICS else None


def why_not_sweepable(node: NodeInfo) -> str | None:
    if not node.is_gpu_node:
        return "no GPUs"
    if node.quarantined:
        return "quarantined"
    if node.onboarding:
        return "being onboarded (rack_onboarding)"
    if node.gpu_pods:
        return f"busy ({node.gpu_pods} GPU pods)"
    return None


@dataclass(frozen=True, slots=True)
class NodeFacts:
    profile: str
    gpus: int
    rack: str
    fabric: str | None
    generation: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class NcclPlan:
    """Nodes and their facts, node-disjoint batches of nodes and of pairs, and the repeats."""

    nodes: dict[str, NodeFacts]
    intra_batches: list[list[str]]
    pair_batches: list[list[list[str]]]
    skipped: dict[str, str]
    repeats: int
    layout: Layout = DEFAULT_LAYOUT  # how ranks map onto processes (fleetval.nccl.probe.LAYOUTS)

    @property
    def pairs(self) -> list[list[str]]:
        return [p for batch in self.pair_batches for p in batch]

    def groups(self, kind: Kind, batch: int) -> list[list[str]]:
        """The node groups of one batch: single nodes (intra) or pairs."""
        if kind == "intra":
            return [[n] for n in self.intra_batches[batch]]
        return [list(p) for p in self.pair_batches[batch]]

    def waves(self, kind: Kind) -> list[tuple[int, int]]:
        """(batch, repeat) of each wave of `kind`: every batch's repeat 0, then every batch's
        repeat 1, …, so a node's repeats are spread over the sweep, never concurrent."""
        batches = len(self.intra_batches if kind == "intra" else self.pair_batches)
        return [(b, r) for r in range(self.repeats) for b in range(batches)]

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": {n: f.to_json() for n, f in self.nodes.items()},
            "intra_batches": self.intra_batches,
            "pair_batches": self.pair_batches,
            "skipped": self.skipped,
            "repeats": self.repeats,
            "layout": self.layout,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NcclPlan:
        return cls(
            nodes={n: NodeFacts(**f) for n, f in data["nodes"].items()},
            intra_batches=[list(b) for b in data["intra_batches"]],
            pair_batches=[[list(p) for p in b] for b in data["pair_batches"]],
            skipped=dict(data["skipped"]),
            repeats=int(data["repeats"]),
            layout=check_layout(str(data.get("layout", DEFAULT_LAYOUT))),  # plans stored before layouts
        )


def pair_nodes(names: Sequence[str]) -> list[list[str]]:
    """Every node in at least one pair: i with i + ⌊n/2⌋ (disjoint pairs, far apart in the
    rack-ordered list); an odd node out is paired with the first node."""
    n = len(names)
    if n < 2:
        return []
    half = n // 2
    pairs = [[names[i], names[i + half]] for i in range(half)]
    if n % 2:
        pairs.append([names[-1], names[0]])
    return pairs


def _batches(items: Sequence[Any], *, size: int, max_batches: int, what: str) -> list[list[Any]]:
    if not items:
        return []
    count = math.ceil(len(items) / size)
    if count > max_batches:
        raise ValueError(
            f"{len(items)} {what} need {count} batches of at most {size}, more than {max_batches}: "
            "raise [core] max_map_length or sweep fewer nodes per run"
        )
    per = math.ceil(len(items) / count)  # even batches: the last wave is not a straggler
    return [list(items[i : i + per]) for i in range(0, len(items), per)]


def plan_sweep(
    nodes: Sequence[NodeInfo],
    *,
    repeats: int = DEFAULT_REPEATS,
    only: Sequence[str] | None = None,
    max_wave_size: int = DEFAULT_MAX_MAP_LENGTH,
    max_waves: int = DEFAULT_MAX_MAP_LENGTH,
    layout: str = DEFAULT_LAYOUT,
) -> NcclPlan:
    """Node batches and pair batches for the sweepable nodes (of `only`, when given); a batch holds
    at most `max_wave_size` probes and each kind has at most `max_waves` waves (see module doc)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    checked_layout = check_layout(layout)
    if max_wave_size < 1 or max_waves < repeats:
        raise ValueError(f"max_wave_size {max_wave_size} / max_waves {max_waves} leave no room for the waves")
    by_name = {n.name: n for n in nodes}
    skipped: dict[str, str] = {}
    if only is not None:
        wanted = list(dict.fromkeys(only))
        skipped.update({name: "unknown node" for name in wanted if name not in by_name})
        candidates = [by_name[name] for name in wanted if name in by_name]
    else:
        candidates = list(nodes)
    chosen: list[NodeInfo] = []
    for node in candidates:
        reason = why_not_sweepable(node)
        if reason is None:
            chosen.append(node)
        else:
            skipped[node.name] = reason
    chosen.sort(key=lambda n: (n.rack, n.name))
    facts = {
        n.name: NodeFacts(n.profile, n.gpus, n.rack, node_fabric(n), driver_generation(n)) for n in chosen
    }
    groups: dict[tuple[str, int], list[str]] = defaultdict(list)
    for n in chosen:
        groups[(n.profile, n.gpus)].append(n.name)
    disjoint: list[list[str]] = []
    odd: list[list[str]] = []
    for key in sorted(groups):
        pairs = pair_nodes(groups[key])
        if len(groups[key]) % 2 and pairs:
            odd.append(pairs.pop())  # shares a node with its profile's first pair
        disjoint.extend(pairs)
    batch_budget = max_waves // repeats
    # Odd pairs of different profiles share no node: together they are one more batch.
    odd_batches = _batches(odd, size=max_wave_size, max_batches=batch_budget, what="odd pairs")
    pair_batches = (
        _batches(disjoint, size=max_wave_size, max_batches=batch_budget - len(odd_batches), what="pairs")
        + odd_batches
    )
    intra = _batches([n.name for n in chosen], size=max_wave_size, max_batches=batch_budget, what="nodes")
    return NcclPlan(facts, intra, pair_batches, skipped, repeats, checked_layout)


def probe_specs(
    plan: NcclPlan,
    groups: Sequence[Sequence[str]],
    *,
    run_key: str,
    purpose: str,
    repeats: Iterable[int] | None = None,
    image: str | None = None,
) -> list[ProbeSpec]:
    """NCCL probes for each node group (one node, or a pair/group of one profile): every repeat of
    the plan, or only `repeats`. Profile, scope, expected fabric and purpose travel in the spec so
    a stored probe can be judged without the plan."""
    specs: list[ProbeSpec] = []
    wanted = list(range(plan.repeats) if repeats is None else repeats)
    for group in groups:
        facts = plan.nodes[group[0]]
        scope = layout_scope(
            intra_scope(facts.gpus) if len(group) == 1 else inter_scope(facts.gpus), plan.layout
        )
        specs.extend(
            nccl_probe(
                group,
                gpus_per_node=facts.gpus,
                repeat=r,
                run_key=run_key,
                image=image or NCCL_TESTS_IMAGE,
                profile=facts.profile,
                scope=scope,
                fabric=facts.fabric,
                purpose=purpose,
                layout=plan.layout,
            )
            for r in wanted
        )
    return specs


def wave_specs(
    plan: NcclPlan, kind: Kind, wave: int, *, run_key: str, image: str | None = None
) -> list[ProbeSpec]:
    """The probes of one wave: one per node (intra) or pair of its batch, at its repeat."""
    batch, repeat = plan.waves(kind)[wave]
    return probe_specs(
        plan, plan.groups(kind, batch), run_key=run_key, purpose="sweep", repeats=[repeat], image=image
    )


def sweep_specs(plan: NcclPlan, *, run_key: str, image: str | None = None) -> list[ProbeSpec]:
    """Every probe of the sweep (all waves of both kinds)."""
    return [
        spec
        for kind in KINDS
        for wave in range(len(plan.waves(kind)))
        for spec in wave_specs(plan, kind, wave, run_key=run_key, image=image)
    ]
