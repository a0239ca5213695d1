"""The suite's plan, made before anything is changed (`dry_run` stops after it).

The MIG-capable GPU nodes that are idle (no pod holding a GPU or MIG device), not cordoned or
quarantined, their MIG manager deployed and settled (`success`), their GPU in the catalog; the ones
a run takes are the first wave of the blast-radius budget (`DiagnosisBudget`, as the weekly
sweep's), in an order that changes each week, so successive runs cover the pool; the rest are
listed as deferred. For each node: the layouts to apply (the `layouts` param, mig-parted config
names, checked against the catalog for that GPU), a config the catalog refuses (D-GPU-MIG-02), the
profile the isolation probes use and the layout the busy test moves to. The mig-parted config is
read from the ConfigMap the ClusterPolicy names.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes.client.exceptions import ApiException

from fleetval.errors import FleetvalError
from fleetval.k8s.cluster import GPU_NODE_SELECTOR, PAGE, paged
from fleetval.mig import catalog as mig_catalog
from fleetval.mig import reconfig
from fleetval.nodes import QUARANTINE_LABEL, is_onboarding
from fleetval.policy.blast_radius import DiagnosisBudget, plan_waves

DEFAULT_LAYOUTS: Final = ("all-balanced",)
DEFAULT_OPERATOR_NAMESPACE: Final = "gpu-operator"
DEFAULT_CONFIG_MAP: Final = "default-mig-parted-config"
DISABLED: Final = "all-disabled"


class MigSuiteError(FleetvalError):
    """The cluster cannot be validated this way (no mig-parted config to read)."""


# --- the mig-parted config in force -------------------------------------------------------------------


def read_config(core: Any, custom: Any, namespace: str) -> tuple[str, dict[str, object]]:
    """The ConfigMap the ClusterPolicy's `spec.migManager.config.name` names (the chart's default
    when unset), in the operator's namespace, and the mig-parted config it holds."""
    policies = custom.list_cluster_custom_object(group="nvidia.com", version="v1", plural="clusterpolicies")
    items = policies.get("items") or []
    policy = (
        min(items, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", ""))) if items else {}
    )
    name = (((policy.get("spec") or {}).get("migManager") or {}).get("config") or {}).get(
        "name"
    ) or DEFAULT_CONFIG_MAP
    try:
        configmap = core.read_namespaced_config_map(name, namespace)
    except ApiException as exc:
        raise MigSuiteError(
            f"cannot read ConfigMap {namespace}/{name} (the MIG manager's config): {exc.reason}"
        ) from None
    text = (configmap.data or {}).get("config.yaml")
    if not isinstance(text, str):
        raise MigSuiteError(f"ConfigMap {namespace}/{name} has no config.yaml")
    try:
        return f"{namespace}/{name}", mig_catalog.read_mig_parted_config(text)
    except mig_catalog.MigError as exc:
        raise MigSuiteError(f"ConfigMap {namespace}/{name}: {exc}") from None


# --- the plan ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodePlan:
    node: str
    rack: str
    gpu: str  # the catalog's GPU
    gpus: int
    strategy: str
    original: str  # the mig.config the node had: what it is given back
    layouts: tuple[str, ...]  # applied in order (D-GPU-MIG-01)
    refused: str | None  # a config the catalog refuses on this GPU (D-GPU-MIG-02)
    refused_reasons: tuple[str, ...]
    probe_profile: str | None  # the isolation probes' profile, >= 2 instances on one GPU
    probe_instances: int  # instances of it on the node in the last layout
    busy_target: str  # what D-GPU-MIG-06 asks while a pod runs

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "rack": self.rack,
            "gpu": self.gpu,
            "gpus": self.gpus,
            "strategy": self.strategy,
            "original": self.original,
            "layouts": list(self.layouts),
            "refused": self.refused,
            "refused_reasons": list(self.refused_reasons),
            "probe_profile": self.probe_profile,
            "probe_instances": self.probe_instances,
            "busy_target": self.busy_target,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodePlan:
        return cls(
            node=str(data["node"]),
            rack=str(data["rack"]),
            gpu=str(data["gpu"]),
            gpus=int(data["gpus"]),
            strategy=str(data["strategy"]),
            original=str(data["original"]),
            layouts=tuple(data["layouts"]),
            refused=data.get("refused"),
            refused_reasons=tuple(data.get("refused_reasons") or ()),
            probe_profile=data.get("probe_profile"),
            probe_instances=int(data.get("probe_instances") or 0),
            busy_target=str(data["busy_target"]),
        )


@dataclass(frozen=True, slots=True)
class MigPlan:
    config_source: str
    nodes: tuple[NodePlan, ...]
    skipped: dict[str, str]  # node -> why it is not validated
    deferred: tuple[str, ...]  # eligible, left to a later run by the budget
    fleet_size: int
    rack_sizes: dict[str, int] = field(default_factory=dict)

    def node(self, name: str) -> NodePlan:
        return next(n for n in self.nodes if n.node == name)

    def to_json(self) -> dict[str, Any]:
        return {
            "config_source": self.config_source,
            "nodes": [n.to_json() for n in self.nodes],
            "skipped": self.skipped,
            "deferred": list(self.deferred),
            "fleet_size": self.fleet_size,
            "rack_sizes": self.rack_sizes,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MigPlan:
        return cls(
            str(data["config_source"]),
            tuple(NodePlan.from_json(n) for n in data["nodes"]),
            dict(data["skipped"]),
            tuple(data["deferred"]),
            int(data["fleet_size"]),
            dict(data.get("rack_sizes") or {}),
        )


def gpu_nodes(core: Any) -> list[dict[str, Any]]:
    nodes = paged(lambda token: core.list_node(label_selector=GPU_NODE_SELECTOR, limit=PAGE, _continue=token))
    return [core.api_client.sanitize_for_serialization(n) for n in nodes]


def _physical_gpus(labels: Mapping[str, str], config: Mapping[str, object], gpu: mig_catalog.GpuMig) -> int:
    """GFD's GPU count is MIG devices with the single strategy and MIG on: divide it back."""
    count = int(labels.get("nvidia.com/gpu.count", "0") or 0)
    if labels.get(reconfig.STRATEGY_LABEL) == "single" and "-MIG-" in labels.get(reconfig.PRODUCT_LABEL, ""):
        try:
            per_gpu = sum(
                mig_catalog.mig_parted_layout(
                    config, labels.get(reconfig.CONFIG_LABEL, ""), gpu, device_index=0
                ).values()
            )
        except mig_catalog.MigError:
            return 0
        return count // per_gpu if per_gpu else 0
    return count


def _week_order(node: str, week: str) -> str:
    return hashlib.sha256(f"{week}/{node}".encode()).hexdigest()


def _node_plan(
    node: Mapping[str, Any],
    config: Mapping[str, object],
    layouts: Sequence[str],
    refused: str | None,
    rack: str,
) -> NodePlan | str:
    """What a run does on one node, or why it cannot."""
    meta = node.get("metadata") or {}
    name = str(meta["name"])
    labels: dict[str, str] = dict(meta.get("labels") or {})
    try:
        gpu = mig_catalog.gpu_for(labels.get(reconfig.PRODUCT_LABEL, ""))
    except mig_catalog.MigError:
        return f"GPU {labels.get(reconfig.PRODUCT_LABEL, '?')} not in the MIG catalog"
    strategy = labels.get(reconfig.STRATEGY_LABEL, "")
    original = labels.get(reconfig.CONFIG_LABEL, "")
    gpus = _physical_gpus(labels, config, gpu)
    configs = config.get("mig-configs")
    if not isinstance(configs, Mapping) or gpus < 1:
        return "GPU count or mig-parted config unreadable"
    if original not in configs:
        return (
            f"its mig.config {original or '(none)'} is not in the mig-parted config: it could not be restored"
        )

    def usable(name_: str) -> str | None:
        if name_ not in configs:
            return f"{name_} is not in the mig-parted config"
        try:
            check = mig_catalog.check_node(config, name_, gpu, gpus)
            made = mig_catalog.node_layouts(config, name_, gpu, gpus)
        except mig_catalog.MigError as exc:
            return str(exc)
        if not check.allowed:
            return f"{name_}: " + "; ".join(check.reasons)
        if reconfig.expected_resources(made, strategy) is None:
            return f"{name_}: the {strategy} strategy cannot advertise it"
        return None

    sequence = [x for x in layouts if usable(x) is None]
    if not sequence:
        return "no layout to try fits: " + "; ".join(filter(None, (usable(x) for x in layouts)))
    if sequence[0] == original:
        sequence = [DISABLED, *sequence] if DISABLED in configs else sequence[1:]
    if not sequence:
        return f"the node already holds {original}: nothing to apply"
    last = mig_catalog.node_layouts(config, sequence[-1], gpu, gpus)
    per_gpu = Counter({p: c for p, c in last[0].items() if c})
    probe = min((p for p, c in per_gpu.items() if c >= 2), key=lambda p: (-per_gpu[p], p), default=None)
    instances = sum(layout.get(probe, 0) for layout in last) if probe else 0
    refusal, reasons = _refused(config, gpu, gpus, refused)
    # The busy test's target: a real change from the layout the node then holds, and not the
    # original, so that the restore after it is a label change the MIG manager acts on.
    busy = next(
        (
            n
            for n in [*layouts, *(str(k) for k in configs)]
            if n not in (original, sequence[-1])
            and usable(n) is None
            and any(_instances(config, n, gpu, gpus))
        ),
        None,
    )
    if busy is None:
        return "no second layout with MIG instances to move to while work runs"
    return NodePlan(
        node=name,
        rack=rack,
        gpu=gpu.name,
        gpus=gpus,
        strategy=strategy,
        original=original,
        layouts=tuple(sequence),
        refused=refusal,
        refused_reasons=reasons,
        probe_profile=probe,
        probe_instances=instances,
        busy_target=busy,
    )


def _instances(config: Mapping[str, object], name: str, gpu: mig_catalog.GpuMig, gpus: int) -> list[int]:
    return [sum(layout.values()) for layout in mig_catalog.node_layouts(config, name, gpu, gpus)]


def _refused(
    config: Mapping[str, object], gpu: mig_catalog.GpuMig, gpus: int, wanted: str | None
) -> tuple[str | None, tuple[str, ...]]:
    """A config the catalog refuses on this GPU: `wanted` if given, else the config's first one
    whose profiles all exist here (a combination refused), else its first with a foreign profile."""
    configs = config.get("mig-configs")
    assert isinstance(configs, Mapping)
    names = [wanted] if wanted else [str(n) for n in configs]
    foreign: tuple[str, tuple[str, ...]] | None = None
    for name in names:
        try:
            check = mig_catalog.check_node(config, name, gpu, gpus)
            made = mig_catalog.node_layouts(config, name, gpu, gpus)
        except mig_catalog.MigError:
            continue
        if check.allowed:
            continue
        if all(gpu.profile(p) for layout in made for p in layout):
            return name, check.reasons
        foreign = foreign or (name, check.reasons)
    return foreign if foreign else (None, ())


def plan(
    nodes: Sequence[Mapping[str, Any]],
    gpu_pods: Mapping[str, int],
    config_source: str,
    config: Mapping[str, object],
    *,
    budget: DiagnosisBudget,
    wanted: Sequence[str] = (),
    layouts: Sequence[str] = DEFAULT_LAYOUTS,
    refused: str | None = None,
    week: str = "",
    max_nodes: int | None = None,
    rack_label: str = "fleetval.io/rack",
    include_onboarding: bool = False,
) -> MigPlan:
    """Which nodes a run takes and what it does on each (pure; see the module doc). Nodes still
    being onboarded are rack_onboarding's, unless it is the caller (`include_onboarding`)."""
    skipped: dict[str, str] = {}
    eligible: dict[str, NodePlan] = {}
    rack_of: dict[str, str] = {}
    mig_nodes = 0
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name"))
        labels = meta.get("labels") or {}
        if wanted and name not in wanted:
            continue
        if labels.get("nvidia.com/mig.capable") != "true":
            skipped[name] = "not MIG-capable"
            continue
        mig_nodes += 1
        rack_of[name] = str(labels.get(rack_label, ""))
        why = None
        if QUARANTINE_LABEL in labels:
            why = "quarantined"
        elif not include_onboarding and is_onboarding((node.get("spec") or {}).get("taints")):
            why = "being onboarded (rack_onboarding)"
        elif (node.get("spec") or {}).get("unschedulable"):
            why = "cordoned"
        elif gpu_pods.get(name):
            why = f"busy ({gpu_pods[name]} GPU pods)"
        elif labels.get("nvidia.com/gpu.deploy.mig-manager") != "true":
            why = "no MIG manager on the node"
        elif labels.get(reconfig.STATE_LABEL) != "success":
            why = f"MIG manager state {labels.get(reconfig.STATE_LABEL) or 'absent'}, not success"
        if why is not None:
            skipped[name] = why
            continue
        planned = _node_plan(node, config, layouts, refused, rack_of[name])
        if isinstance(planned, str):
            skipped[name] = planned
        else:
            eligible[name] = planned
    for name in wanted:
        if name not in skipped and name not in eligible:
            skipped[name] = "not a GPU node"
    rack_sizes = dict(Counter(rack_of.values()))
    order = sorted(eligible, key=lambda n: _week_order(n, week))
    waves = plan_waves(
        order,
        {n: rack_of[n] for n in order},
        fleet_size=max(mig_nodes, 1),
        rack_sizes=rack_sizes,
        budget=budget,
        max_wave_size=max_nodes,
    )
    first = waves[0] if waves else []
    deferred = tuple(n for n in order if n not in first)
    return MigPlan(
        config_source, tuple(eligible[n] for n in sorted(first)), skipped, deferred, mig_nodes, rack_sizes
    )
