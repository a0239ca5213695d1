"""Which nodes a rack onboarding tests, which it refuses and why (pure).

A node is **in service** unless it carries the onboarding taint (`fleetval.io/onboarding`, effect
NoSchedule: value `pending` while it is tested, `held` when it was not admitted) or is cordoned:
without the taint it can receive work. New nodes should register with the taint (kubelet
`--register-with-taints=fleetval.io/onboarding=pending:NoSchedule`); a node that joined without
it counts as in service, and onboarding it takes it out of service, so it is refused unless the
request says to re-onboard nodes in service, and then only within the action budget (F-SAFE-01).

Also refused: a node in another rack, of another hardware profile than asked, quarantined, running
GPU workloads (a probe needs every GPU), or with a GPU the device plugin withdrew (r2 could not
cover every GPU: repair it first). A plan holds at most `max_nodes` nodes (Airflow's
max_map_length: one probe task per node and round); more is an error asking to narrow the request.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fleetval.errors import FleetvalError
from fleetval.k8s.selectors import parse_label_selector
from fleetval.nccl.plan import DRIVER_VERSION_LABEL, FABRIC_LABEL, node_fabric
from fleetval.nodes import ONBOARDING_TAINT, NodeInfo
from fleetval.onboarding.request import OnboardingRequest

TAINT_EFFECT: Final = "NoSchedule"
PENDING: Final = "pending"  # taint value while the node is tested
HELD: Final = "held"  # taint value when it was not admitted
IN_SERVICE_LABEL: Final = "fleetval.io/in-service"
STATE_LABEL: Final = "fleetval.io/onboarding"  # pending | passed | approved | held
MIG_CONFIG_LABEL: Final = "nvidia.com/mig.config"
MIG_DISABLED: Final = ("", "all-disabled")
MAX_REASONS_SHOWN: Final = 20


class PlanError(FleetvalError):
    """The request selects nothing that can be onboarded, or more than one run may hold."""


@dataclass(frozen=True, slots=True)
class PlannedNode:
    name: str
    rack: str
    profile: str
    gpus: int
    fabric: str | None = None
    driver: str = ""
    mig_config: str = ""
    was_in_service: bool = False
    assign_rack: bool = False  # the node had no rack label: onboarding gives it the request's

    @property
    def mig_pool(self) -> bool:
        """Whether the node is in a MIG pool (the MIG manager is asked for a MIG layout)."""
        return self.mig_config not in MIG_DISABLED


@dataclass(frozen=True, slots=True)
class OnboardingPlan:
    rack: str
    nodes: dict[str, PlannedNode]
    refused: dict[str, str]
    withheld: dict[str, str]  # in service, past the action budget (an F-SAFE-01 alert each)
    fleet_size: int
    rack_sizes: dict[str, int]
    max_nodes: int
    selected_by: str

    def to_json(self) -> dict[str, Any]:
        return {
            "rack": self.rack,
            "nodes": {n: dataclasses.asdict(p) for n, p in self.nodes.items()},
            "refused": self.refused,
            "withheld": self.withheld,
            "fleet_size": self.fleet_size,
            "rack_sizes": self.rack_sizes,
            "max_nodes": self.max_nodes,
            "selected_by": self.selected_by,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OnboardingPlan:
        return cls(
            rack=str(data["rack"]),
            nodes={n: PlannedNode(**p) for n, p in data["nodes"].items()},
            refused=dict(data["refused"]),
            withheld=dict(data["withheld"]),
            fleet_size=int(data["fleet_size"]),
            rack_sizes={k: int(v) for k, v in data["rack_sizes"].items()},
            max_nodes=int(data["max_nodes"]),
            selected_by=str(data["selected_by"]),
        )

    def profile_nodes(self, profile: str, among: Collection[str] | None = None) -> list[str]:
        names = self.nodes if among is None else among
        return sorted(n for n in names if n in self.nodes and self.nodes[n].profile == profile)


def onboarding_taint(node: NodeInfo) -> str | None:
    """The onboarding taint's value on the node, or None when it has none."""
    for taint in node.taints:
        if taint.get("key") == ONBOARDING_TAINT:
            return taint.get("value") or ""
    return None


def in_service(node: NodeInfo) -> bool:
    """Whether the node can receive work now: neither tainted for onboarding nor cordoned."""
    return onboarding_taint(node) is None and not node.unschedulable


def why_refused(node: NodeInfo, request: OnboardingRequest) -> str | None:
    """Why this node is not onboarded by `request` (None: it is)."""
    if node.rack and node.rack != request.rack:
        return f"in rack {node.rack!r}, not {request.rack!r}"
    if request.hardware_profile and node.profile != request.hardware_profile:
        return f"profile {node.profile or 'unknown'!r}, not {request.hardware_profile!r}"
    if node.quarantined:
        return "quarantined (fleetval.io/quarantine): remediation decides when it returns"
    if node.gpu_pods:
        return f"busy: {node.gpu_pods} pod(s) hold GPUs (a probe needs every GPU)"
    if node.allocatable_gpus is not None and node.allocatable_gpus < node.gpus:
        return (
            f"{node.gpus - node.allocatable_gpus} GPU(s) withdrawn by the device plugin: "
            "r2 cannot cover every GPU (repair, then onboard again)"
        )
    if in_service(node) and not request.include_in_service:
        return (
            "already in service (no onboarding taint): ask to re-onboard nodes in service "
            "to take it out and test it again"
        )
    return None


def _selection(
    request: OnboardingRequest, inventory: Sequence[NodeInfo]
) -> tuple[list[NodeInfo], dict[str, str]]:
    """The nodes the request names, and the listed names that are not GPU nodes of the cluster or
    do not match the selector. With a selector and no list, matching nodes of other racks are out
    of scope (not refused one by one: the selector may match the whole fleet)."""
    by_name = {n.name: n for n in inventory}
    refused: dict[str, str] = {}
    selector = parse_label_selector(request.label_selector) if request.label_selector else None
    if request.nodes:
        picked = []
        for name in request.nodes:
            node = by_name.get(name)
            if node is None:
                refused[name] = "no GPU node of this name (nvidia.com/gpu.present=true)"
            elif selector is not None and not selector.matches(node.labels):
                refused[name] = f"does not match the label selector {request.label_selector!r}"
            else:
                picked.append(node)
        return picked, refused
    if selector is not None:
        return [n for n in inventory if selector.matches(n.labels) and n.rack in ("", request.rack)], refused
    return [n for n in inventory if n.rack == request.rack], refused


def describe_selection(request: OnboardingRequest) -> str:
    parts = []
    if request.nodes:
        parts.append(f"{len(request.nodes)} listed node(s)")
    if request.label_selector:
        parts.append(f"label selector {request.label_selector!r}")
    return " matching ".join(parts) if parts else f"every GPU node of rack {request.rack!r}"


def plan_onboarding(
    request: OnboardingRequest, inventory: Sequence[NodeInfo], *, max_nodes: int
) -> OnboardingPlan:
    """The nodes to onboard, the refused ones with their reason, and the in-service nodes the action
    budget withholds. Linear in the inventory. PlanError when nothing is left or too much is."""
    gpu_nodes = [n for n in inventory if n.is_gpu_node]
    picked, refused = _selection(request, gpu_nodes)
    rack_sizes = Counter(n.rack for n in gpu_nodes if n.rack)
    rack_sizes[request.rack] += sum(1 for n in picked if not n.rack)  # nodes the rack is given
    chosen: dict[str, PlannedNode] = {}
    withheld: dict[str, str] = {}
    taken: dict[str, str] = {}
    for node in sorted(picked, key=lambda n: n.name):
        reason = why_refused(node, request)
        if reason is not None:
            refused[node.name] = reason
            continue
        serving = in_service(node)
        if serving and not request.budget.allows(
            node.name, request.rack, taken=taken, fleet_size=len(gpu_nodes), rack_sizes=rack_sizes
        ):
            withheld[node.name] = (
                f"in service: taking it out would pass the action budget "
                f"({request.max_action_fraction:g} of the fleet, {request.max_rack_fraction:g} of a rack)"
            )
            continue
        if serving:
            taken[node.name] = request.rack
        chosen[node.name] = PlannedNode(
            name=node.name,
            rack=request.rack,
            profile=node.profile,
            gpus=node.gpus,
            fabric=node_fabric(node),
            driver=node.labels.get(DRIVER_VERSION_LABEL, ""),
            mig_config=node.labels.get(MIG_CONFIG_LABEL, ""),
            was_in_service=serving,
            assign_rack=not node.rack,
        )
    if len(chosen) > max_nodes:
        raise PlanError(
            f"{len(chosen)} nodes selected by {describe_selection(request)}; one run onboards at most "
            f"{max_nodes} (Airflow's max_map_length: a probe task per node): narrow it with a node list "
            "or a label selector"
        )
    if not chosen:
        known = sorted(rack_sizes)
        shown = "; ".join(f"{n}: {r}" for n, r in sorted({**refused, **withheld}.items())[:MAX_REASONS_SHOWN])
        raise PlanError(
            f"nothing to onboard in rack {request.rack!r} ({describe_selection(request)}): "
            + (
                shown
                or f"no GPU node is selected (racks the cluster reports: {', '.join(known[:50]) or 'none'})"
            )
        )
    return OnboardingPlan(
        rack=request.rack,
        nodes=chosen,
        refused=refused,
        withheld=withheld,
        fleet_size=len(gpu_nodes),
        rack_sizes=dict(rack_sizes),
        max_nodes=max_nodes,
        selected_by=describe_selection(request),
    )


def node_infos(plan: OnboardingPlan, names: Sequence[str]) -> list[NodeInfo]:
    """The planned nodes as the suites' planners read nodes (the facts the plan kept)."""
    infos = []
    for name in names:
        node = plan.nodes[name]
        labels = {DRIVER_VERSION_LABEL: node.driver, MIG_CONFIG_LABEL: node.mig_config}
        if node.fabric:
            labels[FABRIC_LABEL] = node.fabric
        infos.append(NodeInfo(name, node.rack, node.profile, node.gpus, labels=labels))
    return infos
