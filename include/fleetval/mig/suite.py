"""The MIG layer's checks as `mig_validation` (and, for a node set, `rack_onboarding`) runs them, on
any cluster through the kubernetes client (no Airflow here).

Reconfiguring MIG takes a node's GPUs away, so the suite works on few nodes at a time and gives
each back as it found it:

1. `plan`: the MIG-capable GPU nodes that are idle (no pod holding a GPU or MIG device), not
   cordoned or quarantined, their MIG manager deployed and settled (`success`), their GPU in the
   catalog; the ones a run takes are the first wave of the blast-radius budget (`DiagnosisBudget`,
   as the weekly sweep's), in an order that changes each week, so successive runs cover the pool;
   the rest are listed as deferred. For each node: the layouts to apply (the `layouts` param,
   mig-parted config names, checked against the catalog for that GPU), a config the catalog refuses
   (D-GPU-MIG-02), the profile the isolation probes use and the layout the busy test moves to.
   The mig-parted config is read from the ConfigMap the ClusterPolicy names. `dry_run` stops here.
2. `take`: each planned node is read again (still idle, not cordoned) and cordoned, with the label
   `fleetval.io/mig-validation=running` saying why.
3. `apply_layouts` (D-GPU-MIG-01, -05), the isolation probes (D-GPU-MIG-03, -04: baseline,
   `start_fill`, during, `stop_fill`, `judge_isolation`), `busy_reconfig` (D-GPU-MIG-06, while the
   node still holds the layout it was given), `refused_layout` (D-GPU-MIG-02).
4. `restore` (whatever happened before): the node's original `nvidia.com/mig.config`, waited for
   until `success` with the original resources advertised, then uncordoned. A node that does not
   come back stays cordoned, with an `error` verdict saying so.

Every layout change is stored as raw evidence (the Node snapshots the judges read) before it is
judged; the advertise time of D-GPU-MIG-01 is stored as a measurement.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes.client.exceptions import ApiException

from fleetval.errors import FleetvalError
from fleetval.k8s.cluster import GPU_NODE_SELECTOR, PAGE, gpu_pods_per_node, paged
from fleetval.mig import catalog as mig_catalog
from fleetval.mig import isolation, reconfig
from fleetval.nodes import QUARANTINE_LABEL, NodeActions, is_onboarding
from fleetval.policy.blast_radius import DiagnosisBudget, plan_waves
from fleetval.probes import outputs as probe_outputs
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Result, Verdict
from fleetval.store.repository import MeasurementIn, Store

SUITE: Final = "mig_validation"
DEFAULT_LAYOUTS: Final = ("all-balanced",)
DEFAULT_OPERATOR_NAMESPACE: Final = "gpu-operator"
DEFAULT_CONFIG_MAP: Final = "default-mig-parted-config"
VALIDATION_LABEL: Final = "fleetval.io/mig-validation"
DISABLED: Final = "all-disabled"
TOOL_CHANGE: Final = "mig-reconfig"
PATCH_WORKERS: Final = 16
ACTIONS: Final = {
    Result.ERROR: "look at the node: it may still be cordoned",
    Result.INCONCLUSIVE: "rerun mig_validation on this node",
}


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


# --- taking and giving back nodes -------------------------------------------------------------------


def take(
    store: Store, run_id: int, core: Any, actions: NodeActions, mig_plan: MigPlan, *, run_key: str
) -> list[str]:
    """Cordon each planned node that is still idle and uncordoned; returns the ones taken."""
    pods = gpu_pods_per_node(core)
    taken = []
    for planned in mig_plan.nodes:
        node = core.api_client.sanitize_for_serialization(core.read_node(planned.node))
        labels = (node.get("metadata") or {}).get("labels") or {}
        why = (
            "cordoned meanwhile"
            if (node.get("spec") or {}).get("unschedulable")
            else f"busy meanwhile ({pods[planned.node]} GPU pods)"
            if pods.get(planned.node)
            else None
            if labels.get(reconfig.STATE_LABEL) == "success"
            and labels.get(reconfig.CONFIG_LABEL) == planned.original
            else "its MIG layout changed meanwhile"
        )
        if why is not None:
            store.add_verdicts(run_id, [_not_run(planned.node, f"not taken: {why}")], node=planned.node)
            continue
        actions.cordon(planned.node)
        actions.set_labels(planned.node, {VALIDATION_LABEL: "running"})
        store.record_node_event(
            f"{run_key}/mig/{planned.node}/cordon",
            node=planned.node,
            kind="cordon",
            reason="mig_validation: MIG layouts are changed on this node",
            dry_run=False,
            run_id=run_id,
            details={"original": planned.original},
        )
        taken.append(planned.node)
    return taken


def _not_run(node: str, reason: str) -> Verdict:
    return Verdict(
        "D-GPU-MIG-01",
        node,
        Result.INCONCLUSIVE,
        ACTIONS[Result.INCONCLUSIVE],
        "mig-validation-node-not-taken-v1",
        reason,
    )


# --- changing a layout and watching the node ------------------------------------------------------------


Clock = Callable[[], float]
Sleep = Callable[[float], None]
# done(node, its snapshot now, every one since the change, the one before it): stop watching it?
Done = Callable[[str, reconfig.NodeSnapshot, list[reconfig.NodeSnapshot], reconfig.NodeSnapshot], bool]


def _moved(
    snap: reconfig.NodeSnapshot, seen: list[reconfig.NodeSnapshot], before: reconfig.NodeSnapshot
) -> bool:
    """The MIG manager acted on the change: it said pending, or the node advertises something else.
    (`success` alone may still be the old layout's, before the manager saw the new label.)"""
    return "pending" in {s.state for s in seen} or reconfig.advertised(snap) != reconfig.advertised(before)


def _snapshot(core: Any, node: str, clock: Clock) -> reconfig.NodeSnapshot:
    body = core.api_client.sanitize_for_serialization(core.read_node(node))
    return reconfig.node_snapshot(body, clock())


def _snapshots(core: Any, nodes: Iterable[str], clock: Clock) -> dict[str, reconfig.NodeSnapshot]:
    """The nodes now: one list of the nodes this suite holds (its label), not a read per node."""
    wanted = set(nodes)
    listed = paged(
        lambda token: core.list_node(
            label_selector=f"{VALIDATION_LABEL}=running", limit=PAGE, _continue=token
        )
    )
    at = clock()
    found = {}
    for node in listed:
        body = core.api_client.sanitize_for_serialization(node)
        if body["metadata"]["name"] in wanted:
            found[body["metadata"]["name"]] = reconfig.node_snapshot(body, at)
    for name in wanted - set(found):  # not (or no longer) labelled: read it
        found[name] = _snapshot(core, name, clock)
    return found


def change_layouts(
    core: Any,
    actions: NodeActions,
    targets: Mapping[str, str],
    *,
    done: Done,
    watch_s: float,
    poll_s: float,
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
    expected: Mapping[str, dict[str, int] | None] | None = None,
    refused_reasons: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, reconfig.Change]:
    """Set each node's `nvidia.com/mig.config` to its target and read the nodes every `poll_s`
    until `done` says so for each, or `watch_s` has passed."""
    before = _snapshots(core, targets, clock)
    started: dict[str, float] = {}

    def label(node: str) -> None:
        started[node] = clock()
        actions.set_labels(node, {reconfig.CONFIG_LABEL: targets[node]})

    # All at once (16 in flight), so that no node's clock runs while the others are being labelled.
    with ThreadPoolExecutor(max_workers=PATCH_WORKERS) as pool:
        list(pool.map(label, sorted(targets)))
    seen: dict[str, list[reconfig.NodeSnapshot]] = {node: [] for node in targets}
    open_nodes = set(targets)
    begin = clock()
    while open_nodes:
        for node, snap in sorted(_snapshots(core, open_nodes, clock).items()):
            seen[node].append(snap)
            if done(node, snap, seen[node], before[node]):
                open_nodes.discard(node)
        if not open_nodes or clock() - begin >= watch_s:
            break
        sleep(poll_s)
    return {
        node: reconfig.Change(
            node=node,
            config=config,
            requested_at=started[node],
            snapshots=tuple(seen[node]),
            before=before[node],
            expected=(expected or {}).get(node),
            refused_reasons=(refused_reasons or {}).get(node, ()),
            watch_s=min(watch_s, clock() - started[node]),
        )
        for node, config in targets.items()
    }


def _store_change(
    store: Store,
    run_id: int,
    change: reconfig.Change,
    *,
    run_key: str,
    step: str,
    verdicts: Sequence[Verdict],
    timed: Verdict | None = None,
) -> None:
    """The change's snapshots as the probe's raw output, then its verdicts and, from `timed` (its
    D-GPU-MIG-01 judgement), the advertise time as a measurement."""
    raw = json.dumps(
        {
            "config": change.config,
            "requested_at": change.requested_at,
            "before": change.before.to_json(),
            "snapshots": [s.to_json() for s in change.snapshots],
        },
        sort_keys=True,
    )
    spec = ProbeSpec(
        probe_key=f"{run_key}/{TOOL_CHANGE}/{step}/{change.node}",
        tool=TOOL_CHANGE,
        node=change.node,
        image="",
        command=(),
        params={"source": "PATCH and GET /api/v1/nodes", "config": change.config, "step": step},
    )
    now = time.time()
    probe_outputs.store_probe_outputs(
        store, run_id, [probe_outputs.probe_output(spec, raw, exit_code=0, error=None, finished_at=now)]
    )
    measurements = []
    if timed is not None and "seconds" in timed.evidence:
        seconds = float(timed.evidence["seconds"])
        measurements.append(
            MeasurementIn(
                change.node, "mig_advertise_seconds", seconds, unit="s", attrs={"config": change.config}
            )
        )
    store.attach_results(run_id, [(spec.probe_key, measurements, verdicts, change.node)])


def _combined(node: str, verdicts: Sequence[Verdict]) -> Verdict:
    """One D-GPU-MIG-01 verdict per node: the worst of its layout changes, each one's reason kept."""
    if len(verdicts) == 1:
        return verdicts[0]
    worst = max(verdicts, key=lambda v: v.result.severity)
    return Verdict(
        worst.criterion,
        node,
        worst.result,
        worst.action,
        worst.rule_id,
        "; ".join(v.reason for v in verdicts),
        {"changes": [v.evidence for v in verdicts]},
        worst.judged_against,
    )


def _layouts_on(
    mig_plan: MigPlan, node: str, config_name: str, config: Mapping[str, object]
) -> list[dict[str, int]]:
    planned = mig_plan.node(node)
    return mig_catalog.node_layouts(config, config_name, mig_catalog.catalog()[planned.gpu], planned.gpus)


def _settled(expected: Mapping[str, dict[str, int] | None]) -> Done:
    def done(
        node: str,
        snap: reconfig.NodeSnapshot,
        _seen: list[reconfig.NodeSnapshot],
        _before: reconfig.NodeSnapshot,
    ) -> bool:
        want = expected.get(node)
        if snap.state == "failed":
            return True
        return snap.state == "success" and want is not None and reconfig.advertises(snap, want)

    return done


def apply_layouts(
    store: Store,
    run_id: int,
    core: Any,
    actions: NodeActions,
    mig_plan: MigPlan,
    taken: Sequence[str],
    *,
    config: Mapping[str, object],
    run_key: str,
    max_s: float | None,
    watch_s: float,
    poll_s: float,
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> list[Verdict]:
    """D-GPU-MIG-01 for every layout of each taken node (all nodes step together), and D-GPU-MIG-05
    once each node holds its last layout."""
    verdicts: list[Verdict] = []
    timed: dict[str, list[Verdict]] = {n: [] for n in taken}
    steps = max((len(mig_plan.node(n).layouts) for n in taken), default=0)
    for index in range(steps):
        targets = {n: mig_plan.node(n).layouts[index] for n in taken if index < len(mig_plan.node(n).layouts)}
        expected = {
            n: reconfig.expected_resources(_layouts_on(mig_plan, n, cfg, config), mig_plan.node(n).strategy)
            for n, cfg in targets.items()
        }
        changes = change_layouts(
            core,
            actions,
            targets,
            done=_settled(expected),
            watch_s=watch_s,
            poll_s=poll_s,
            clock=clock,
            sleep=sleep,
            expected=expected,
        )
        for node, change in changes.items():
            v01 = reconfig.judge_advertised_in_time(change, max_s=max_s)
            timed[node].append(v01)
            judged = []
            if index == len(mig_plan.node(node).layouts) - 1 and change.snapshots:
                layouts = _layouts_on(mig_plan, node, change.config, config)
                if any(layout for layout in layouts):
                    judged.append(reconfig.judge_sold_as_profile(node, change.snapshots[-1], layouts))
            _store_change(
                store, run_id, change, run_key=run_key, step=f"apply-{index}", verdicts=judged, timed=v01
            )
            verdicts += judged
    for node, judged_01 in timed.items():
        if judged_01:
            combined = _combined(node, judged_01)
            store.add_verdicts(run_id, [combined], node=node)
            verdicts.append(combined)
    return verdicts


def refused_layout(
    store: Store,
    run_id: int,
    core: Any,
    actions: NodeActions,
    mig_plan: MigPlan,
    taken: Sequence[str],
    *,
    run_key: str,
    watch_s: float,
    poll_s: float,
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> list[Verdict]:
    """D-GPU-MIG-02: each taken node is asked for a layout the catalog refuses on its GPU."""
    verdicts = []
    targets = {n: p.refused for n in taken if (p := mig_plan.node(n)).refused}
    for node in taken:
        if node not in targets:
            why = "the mig-parted config has no layout this GPU cannot hold: nothing to refuse"
            verdict = Verdict(
                reconfig.CRITERION_REFUSE,
                node,
                Result.INCONCLUSIVE,
                ACTIONS[Result.INCONCLUSIVE],
                reconfig.RULE_REFUSE,
                why,
            )
            store.add_verdicts(run_id, [verdict], node=node)
            verdicts.append(verdict)

    def done(
        node: str,
        snap: reconfig.NodeSnapshot,
        seen: list[reconfig.NodeSnapshot],
        before: reconfig.NodeSnapshot,
    ) -> bool:
        return snap.state == "failed" or (snap.state == "success" and _moved(snap, seen, before))

    changes = change_layouts(
        core,
        actions,
        {n: str(t) for n, t in targets.items()},
        done=done,
        watch_s=watch_s,
        poll_s=poll_s,
        clock=clock,
        sleep=sleep,
        refused_reasons={n: mig_plan.node(n).refused_reasons for n in targets},
    )
    for change in changes.values():
        judged = [reconfig.judge_refused(change)]
        _store_change(store, run_id, change, run_key=run_key, step="refused", verdicts=judged)
        verdicts += judged
    return verdicts


# --- pods the suite runs itself (the filler, the busy test's work) ---------------------------------------


def _delete_pod(core: Any, name: str, namespace: str) -> None:
    try:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    except ApiException as exc:
        if exc.status != 404:  # gone already is what was wanted
            raise


def _pod_name(run_key: str, what: str, node: str) -> str:
    digest = hashlib.sha256(f"{run_key}/{what}/{node}".encode()).hexdigest()[:8]
    return f"fleetval-mig-{what}-{digest}"


def _logs(core: Any, name: str, namespace: str) -> str:
    """A pod's log as text (raw: the client's own decoding of a text/plain body is not the bytes)."""
    try:
        response = core.read_namespaced_pod_log(name, namespace, container="fill", _preload_content=False)
    except ApiException:
        return ""
    return bytes(response.data).decode("utf-8", errors="replace")


def _start_pods(
    core: Any,
    pods: Mapping[str, dict[str, Any]],
    namespace: str,
    *,
    timeout_s: float,
    poll_s: float,
    clock: Clock,
    sleep: Sleep,
) -> dict[str, str]:
    """Create each node's pod and wait until its log says every device is filled; the pods' names."""
    names = {}
    for node, body in pods.items():
        _delete_pod(core, body["metadata"]["name"], namespace)  # one a killed run left behind goes first
        core.create_namespaced_pod(namespace, body)
        names[node] = str(body["metadata"]["name"])
    begin = clock()
    waiting = set(names)
    while waiting and clock() - begin < timeout_s:
        for node in sorted(waiting):
            if "filled-all" in _logs(core, names[node], namespace):
                waiting.discard(node)
        if waiting:
            sleep(poll_s)
    return names


def start_fill(
    core: Any,
    mig_plan: MigPlan,
    taken: Sequence[str],
    *,
    run_key: str,
    namespace: str,
    image: str | None,
    timeout_s: float,
    poll_s: float,
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> dict[str, str]:
    """The filler on each taken node with a probe profile: every instance of it but one."""
    pods = {
        n: isolation.fill_pod(
            n,
            str(p.probe_profile),
            p.probe_instances - 1,
            name=_pod_name(run_key, "fill", n),
            namespace=namespace,
            image=image,
        )
        for n in taken
        if (p := mig_plan.node(n)).probe_profile and p.probe_instances >= 2
    }
    return _start_pods(core, pods, namespace, timeout_s=timeout_s, poll_s=poll_s, clock=clock, sleep=sleep)


def stop_fill(
    store: Store, run_id: int, core: Any, fills: Mapping[str, str], *, run_key: str, namespace: str
) -> None:
    """Store each filler's log as raw evidence, then delete the fillers."""
    now = time.time()
    outputs = []
    for node, name in sorted(fills.items()):
        raw = _logs(core, name, namespace)
        spec = ProbeSpec(
            probe_key=f"{run_key}/{isolation.FILL_TOOL}/{node}",
            tool=isolation.FILL_TOOL,
            node=node,
            image="",
            command=("python3", "-c", "<FILL_SCRIPT>"),
        )
        outputs.append(
            probe_outputs.probe_output(
                spec, raw, exit_code=None, error=None if raw else "no log from the filler", finished_at=now
            )
        )
    probe_outputs.store_probe_outputs(store, run_id, outputs)
    for name in fills.values():
        _delete_pod(core, name, namespace)


def probe_ready(core: Any, mig_plan: MigPlan, taken: Sequence[str]) -> dict[str, str]:
    """The taken nodes the isolation probes can run on (node -> "") and why not on the others: the
    node must advertise every instance of the probed profile (the filler asks for all but one)."""
    ready: dict[str, str] = {}
    for node in taken:
        planned = mig_plan.node(node)
        if not planned.probe_profile or planned.probe_instances < 2:
            ready[node] = "the layout holds no profile twice on one GPU: no neighbour to fill"
            continue
        resource = isolation.resource_name(planned.probe_profile)
        body = core.api_client.sanitize_for_serialization(core.read_node(node))
        have = str(((body.get("status") or {}).get("allocatable") or {}).get(resource, "0"))
        count = int(have) if have.isascii() and have.isdigit() else 0
        wanted = planned.probe_instances
        ready[node] = (
            "" if count >= wanted else f"the node advertises {resource}={have}, not the {wanted} made"
        )
    return ready


def isolation_probes(
    mig_plan: MigPlan, taken: Sequence[str], phase: str, *, run_key: str, image: str | None
) -> list[ProbeSpec]:
    return [
        isolation.workload_probe(n, str(p.probe_profile), phase, run_key=run_key, image=image)
        for n in taken
        if (p := mig_plan.node(n)).probe_profile and p.probe_instances >= 2
    ]


def judge_isolation(
    store: Store,
    run_id: int,
    mig_plan: MigPlan,
    taken: Sequence[str],
    *,
    run_key: str,
    not_probed: Mapping[str, str] | None = None,
) -> list[Verdict]:
    """D-GPU-MIG-03 and -04 per taken node from the stored probes and filler logs; a node in
    `not_probed` (node -> why) is inconclusive on both."""
    skip = {n: why for n, why in (not_probed or {}).items() if why}
    probed = [n for n in taken if n not in skip]
    baseline = isolation_probes(mig_plan, probed, "baseline", run_key=run_key, image=None)
    during = isolation_probes(mig_plan, probed, "during", run_key=run_key, image=None)
    probe_outputs.record_missing_probes(store, run_id, [*baseline, *during])
    keys = [s.probe_key for s in (*baseline, *during)] + [
        f"{run_key}/{isolation.FILL_TOOL}/{n}" for n in taken
    ]
    rows = {r["probe_key"]: r for r in store.probes(run_id, keys)}

    def evidence(key: str) -> isolation.Evidence | None:
        row = rows.get(key)
        if row is None:
            return None
        return isolation.Evidence(row["raw"], row["exit_code"], (row.get("spec") or {}).get("harness_error"))

    verdicts = []
    for node in taken:
        planned = mig_plan.node(node)
        if node in skip or not planned.probe_profile or planned.probe_instances < 2:
            why = skip.get(node) or "the layout holds no profile twice on one GPU: no neighbour to fill"
            judged = [
                Verdict(c, node, Result.INCONCLUSIVE, ACTIONS[Result.INCONCLUSIVE], r, why)
                for c, r in (
                    (isolation.CRITERION_FILL, isolation.RULE_FILL),
                    (isolation.CRITERION_VISIBILITY, isolation.RULE_VISIBILITY),
                )
            ]
        else:
            b = evidence(f"{run_key}/{isolation.TOOL}/baseline/{node}")
            d = evidence(f"{run_key}/{isolation.TOOL}/during/{node}")
            f = evidence(f"{run_key}/{isolation.FILL_TOOL}/{node}")
            judged = [isolation.judge_fill(node, b, d, f), isolation.judge_visibility(node, d)]
        row = rows.get(f"{run_key}/{isolation.TOOL}/during/{node}")
        store.add_verdicts(run_id, judged, probe_id=int(row["id"]) if row else None, node=node)
        verdicts += judged
    return verdicts


def busy_reconfig(
    store: Store,
    run_id: int,
    core: Any,
    actions: NodeActions,
    mig_plan: MigPlan,
    taken: Sequence[str],
    *,
    run_key: str,
    namespace: str,
    image: str | None,
    watch_s: float,
    poll_s: float,
    not_probed: Mapping[str, str] | None = None,
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> list[Verdict]:
    """D-GPU-MIG-06: a pod holding one instance (a CUDA context and its memory), then a layout change;
    not on the nodes in `not_probed` (they do not advertise the instances the pod asks for)."""
    verdicts: list[Verdict] = []
    skip = {n: why for n, why in (not_probed or {}).items() if why}
    able = [n for n in taken if mig_plan.node(n).probe_profile and n not in skip]
    for node in sorted(set(taken) - set(able)):
        why = skip.get(node) or "the node holds no MIG instance to run work on"
        verdict = Verdict(
            reconfig.CRITERION_BUSY,
            node,
            Result.INCONCLUSIVE,
            ACTIONS[Result.INCONCLUSIVE],
            reconfig.RULE_BUSY,
            why,
        )
        store.add_verdicts(run_id, [verdict], node=node)
        verdicts.append(verdict)
    pods = {
        n: isolation.fill_pod(
            n,
            str(mig_plan.node(n).probe_profile),
            1,
            name=_pod_name(run_key, "work", n),
            namespace=namespace,
            image=image,
        )
        for n in able
    }
    names = _start_pods(core, pods, namespace, timeout_s=watch_s, poll_s=poll_s, clock=clock, sleep=sleep)
    samples: dict[str, list[reconfig.PodSample]] = {n: [] for n in names}

    def sample(node: str) -> reconfig.PodSample:
        try:
            pod = core.api_client.sanitize_for_serialization(core.read_namespaced_pod(names[node], namespace))
        except ApiException as exc:
            if exc.status == 404:
                return reconfig.PodSample(clock(), None)
            raise
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
        return reconfig.PodSample(clock(), (pod.get("status") or {}).get("phase"), restarts)

    for node in names:
        samples[node].append(sample(node))

    def done(
        node: str,
        snap: reconfig.NodeSnapshot,
        seen: list[reconfig.NodeSnapshot],
        before: reconfig.NodeSnapshot,
    ) -> bool:
        samples[node].append(sample(node))
        if samples[node][-1].phase != "Running" or snap.state == "failed":
            return True
        return snap.state == "success" and _moved(snap, seen, before)

    changes = change_layouts(
        core,
        actions,
        {n: mig_plan.node(n).busy_target for n in names},
        done=done,
        watch_s=watch_s,
        poll_s=poll_s,
        clock=clock,
        sleep=sleep,
    )
    for node, change in changes.items():
        samples[node].append(sample(node))
        judged = [
            reconfig.judge_busy_reconfig(reconfig.BusyChange(change, names[node], tuple(samples[node])))
        ]
        _store_change(store, run_id, change, run_key=run_key, step="busy", verdicts=judged)
        verdicts += judged
    for name in names.values():
        _delete_pod(core, name, namespace)
    return verdicts


def restore(
    store: Store,
    run_id: int,
    core: Any,
    actions: NodeActions,
    mig_plan: MigPlan,
    taken: Sequence[str],
    *,
    config: Mapping[str, object],
    run_key: str,
    watch_s: float,
    poll_s: float,
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> dict[str, bool]:
    """Each taken node back on its original layout, then uncordoned; a node that does not come back
    stays cordoned with an `error` verdict."""
    expected = {
        n: reconfig.expected_resources(
            _layouts_on(mig_plan, n, mig_plan.node(n).original, config), mig_plan.node(n).strategy
        )
        for n in taken
    }
    changes = change_layouts(
        core,
        actions,
        {n: mig_plan.node(n).original for n in taken},
        done=_settled(expected),
        watch_s=watch_s,
        poll_s=poll_s,
        clock=clock,
        sleep=sleep,
        expected=expected,
    )
    back = {}
    for node, change in changes.items():
        last = change.snapshots[-1] if change.snapshots else change.before
        want = expected[node]
        ok = last.state == "success" and want is not None and reconfig.advertises(last, want)
        back[node] = ok
        if ok:
            actions.uncordon(node)
            actions.set_labels(node, {VALIDATION_LABEL: None})
            store.record_node_event(
                f"{run_key}/mig/{node}/uncordon",
                node=node,
                kind="uncordon",
                reason=f"mig_validation: restored {change.config}",
                dry_run=False,
                run_id=run_id,
            )
            judged: list[Verdict] = []
        else:
            actions.set_labels(node, {VALIDATION_LABEL: "restore-failed"})
            reason = (
                f"could not restore {change.config} within {watch_s:.0f} s (state {last.state or 'none'}): "
                "the node stays cordoned for a person to look at"
            )
            judged = [
                Verdict(
                    "D-GPU-MIG-01",
                    f"{node}/restore",
                    Result.ERROR,
                    ACTIONS[Result.ERROR],
                    "mig-validation-restore-v1",
                    reason,
                    change.evidence(),
                )
            ]
        _store_change(store, run_id, change, run_key=run_key, step="restore", verdicts=judged)
    return back


# What every taken node must get a verdict on (D-GPU-MIG-05 only once a MIG layout was advertised).
EXPECTED_CRITERIA: Final = ("D-GPU-MIG-01", "D-GPU-MIG-02", "D-GPU-MIG-03", "D-GPU-MIG-04", "D-GPU-MIG-06")


def missing_verdicts(store: Store, run_id: int, taken: Sequence[str]) -> list[Verdict]:
    """An `error` verdict for each criterion a taken node has none of (its step broke)."""
    have = {(v["criterion"], v["subject"]) for v in store.verdicts(run_id)}
    missing = [
        Verdict(
            c,
            node,
            Result.ERROR,
            ACTIONS[Result.ERROR],
            "mig-validation-step-v1",
            f"{c}: its step did not complete",
        )
        for node in taken
        for c in EXPECTED_CRITERIA
        if (c, node) not in have
    ]
    for verdict in missing:
        store.add_verdicts(run_id, [verdict], node=verdict.subject)
    return missing


def nothing_taken(store: Store, run_id: int, mig_plan: MigPlan, taken: Sequence[str]) -> Verdict | None:
    """An `inconclusive` verdict on the pool when it has MIG nodes and this run could check none of
    them (every one busy, cordoned, unsettled…): a week without MIG validation is said, not passed."""
    if taken or not mig_plan.fleet_size:
        return None
    why = Counter(mig_plan.skipped.values()).most_common(3)
    listed = ", ".join(f"{n} {reason}" for reason, n in why) or "none eligible"
    verdict = Verdict(
        "D-GPU-MIG-01",
        "mig-pool",
        Result.INCONCLUSIVE,
        ACTIONS[Result.INCONCLUSIVE],
        "mig-validation-node-not-taken-v1",
        f"none of the {mig_plan.fleet_size} MIG-capable nodes could be checked this run ({listed})",
        {"skipped": mig_plan.skipped, "deferred": list(mig_plan.deferred)},
    )
    store.add_verdicts(run_id, [verdict])
    return verdict
