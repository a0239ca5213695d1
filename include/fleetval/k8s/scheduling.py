"""The kube-scheduler filter predicates and FailedScheduling wording the simulated cluster needs.

A pod the simulator cannot place must stay Pending with the PodScheduled=False condition and the
FailedScheduling event a real kube-scheduler would write, because the KubernetesPodOperator and the
pipeline's judges read those messages. So resource quantities parse like resource.Quantity, pod
requests are computed like the scheduler computes them, the default filter plugins run in the
scheduler's order (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts,
NodeResourcesFit) with their reason strings, and the message is assembled like FitError.Error()
plus the PostFilter plugins' part (DynamicResources, then DefaultPreemption).

Only what these plugins look at is modelled: volumes, topology spread, inter-pod affinity and
dynamic resource claims are not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from decimal import ROUND_CEILING, Decimal
from typing import Any, Final

from fleetval.k8s.quantity import EXACT, parse_decimal
from fleetval.k8s.selectors import label_selector_from_set, node_selector_terms_match

# Filter reasons, worded as kube-scheduler words them.
UNSCHEDULABLE_NODE: Final = "node(s) were unschedulable"
NODE_NAME_MISMATCH: Final = "node(s) didn't match the requested node name"
# kube-scheduler names no taint since 1.35 (and 1.34 patch releases from late 2025); before, it
# wrote "node(s) had untolerated taint {<key>: <value>}".
UNTOLERATED_TAINT: Final = "node(s) had untolerated taint(s)"
NODE_AFFINITY_MISMATCH: Final = "node(s) didn't match Pod's node affinity/selector"
# The nodes a PreFilter's result leaves out (schedule_one.go findNodesThatFitPod:
# SetAbsentNodesStatus, UnschedulableAndUnresolvable); NodeAffinity is the default plugin that
# narrows, on `matchFields` metadata.name In.
NODE_AFFINITY_PREFILTERED: Final = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
# NodeAffinity's PreFilter when every term names nodes and they intersect to none (errReasonConflict).
NODE_AFFINITY_CONFLICT: Final = "pod affinity terms conflict"
NO_FREE_PORTS: Final = "node(s) didn't have free ports for the requested pod ports"
TOO_MANY_PODS: Final = "Too many pods"
# PostFilter wording.
NO_NODES_AVAILABLE: Final = "no nodes available to schedule pods"
PREEMPTION_NOT_HELPFUL: Final = "Preemption is not helpful for scheduling"
NO_PREEMPTION_VICTIMS: Final = "No preemption victims found for incoming pod"
PREEMPTION_NEVER: Final = "not eligible due to preemptionPolicy=Never."
NO_CLAIMS_TO_DEALLOCATE: Final = "no new claims to deallocate"

UNSCHEDULABLE_TAINT_KEY: Final = "node.kubernetes.io/unschedulable"
TERMINATED_PHASES: Final = frozenset({"Succeeded", "Failed"})


# --- resource.Quantity ------------------------------------------------------------------------------


def parse_quantity(text: str | int | float) -> Decimal:
    """The exact value of a Kubernetes quantity ("100m", "1.5", "2Gi", "1e3", "500Mi", "1k", "10n"...).

    Like resource.ParseQuantity: a value finer than a nano unit rounds up (away from zero) to one,
    and binary-suffixed values are capped at 2^63-1. Raises ValueError (QuantityError) with the API
    server's wording.
    """
    return parse_decimal(text)[0]


# --- pod requests -----------------------------------------------------------------------------------


def _container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
    """A container's requests after API defaulting: a resource with only a limit requests the limit."""
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = {**limits, **(resources.get("requests") or {})}
    return {name: parse_quantity(quantity) for name, quantity in requests.items()}


def _add(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, quantity in more.items():
        total[name] = EXACT.add(total.get(name, Decimal(0)), quantity)


def _set_max(total: dict[str, Decimal], other: Mapping[str, Decimal]) -> None:
    for name, quantity in other.items():
        total[name] = max(total.get(name, Decimal(0)), quantity)


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """The pod's effective requests, as resourcehelper.PodRequests computes them for the scheduler.

    The regular containers run together, so their requests add up; init containers run one at a
    time, so each needs only its own requests (plus the sidecars, restartPolicy Always, started
    before it, which keep running and are also added to the regular containers); the pod needs the
    larger of the two, per resource, plus spec.overhead. Pod-level spec.resources requests, where
    given, replace the container sum for their resources. Always includes "pods": 1.
    """
    spec = pod.get("spec") or {}
    requests: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        _add(requests, _container_requests(container))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for container in spec.get("initContainers") or []:
        own = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(requests, own)
            _add(sidecars, own)
            running = dict(sidecars)
        else:
            running = dict(own)
            _add(running, sidecars)
        _set_max(init_peak, running)
    _set_max(requests, init_peak)
    pod_level = (spec.get("resources") or {}).get("requests") or {}
    for name in ("cpu", "memory"):
        if name in pod_level:
            requests[name] = parse_quantity(pod_level[name])
    _add(requests, {n: parse_quantity(q) for n, q in (spec.get("overhead") or {}).items()})
    requests["pods"] = Decimal(1)
    return requests


# --- the filter plugins -----------------------------------------------------------------------------


def tolerates(tolerations: Sequence[Mapping[str, Any]] | None, taint: Mapping[str, Any]) -> bool:
    """Whether any toleration tolerates the taint (Toleration.ToleratesTaint).

    An empty toleration effect matches every effect and an empty key (with Exists) every key;
    Exists matches any value, Equal (or no operator) needs the same value. The Gt/Lt operators
    sit behind a feature gate that is off by default, so they tolerate nothing.
    """
    for toleration in tolerations or []:
        effect = toleration.get("effect") or ""
        key = toleration.get("key") or ""
        if effect and effect != (taint.get("effect") or ""):
            continue
        if key and key != (taint.get("key") or ""):
            continue
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists":
            return True
        if operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _is_active(pod: Mapping[str, Any]) -> bool:
    # The scheduler's pod cache leaves out terminated pods; a deleting pod still holds its resources.
    return (pod.get("status") or {}).get("phase") not in TERMINATED_PHASES


def _node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def _untolerated_taint(pod: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    tolerations = (pod.get("spec") or {}).get("tolerations")
    taints: list[Mapping[str, Any]] = (node.get("spec") or {}).get("taints") or []
    for taint in taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return taint
    return None


def _matches_node_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    node_labels = (node.get("metadata") or {}).get("labels") or {}
    if spec.get("nodeSelector") and not label_selector_from_set(spec["nodeSelector"]).matches(node_labels):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    return node_selector_terms_match(required.get("nodeSelectorTerms"), node)


def node_name_affinity(*nodes: str) -> dict[str, Any]:
    """Required node affinity pinning a pod to one of `nodes` by the Node object's name, as the
    DaemonSet controller pins its pods (`matchFields` on `metadata.name`, the only field the API
    accepts there, one value per requirement, so one term per node). The `kubernetes.io/hostname`
    label is the kubelet's hostname, which need not be the node's name (`--hostname-override`,
    cloud nodes named by FQDN or instance id)."""
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]} for n in nodes]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def node_affinity_prefilter(pod: Mapping[str, Any]) -> frozenset[str] | None:
    """The NodeAffinity plugin's PreFilter result: the node names the pod's required terms allow by
    `matchFields` metadata.name In (None: every node — some term names none, the terms being ORed).
    Within a term the requirements intersect; across terms they unite. An empty set means the terms
    conflict: no node is examined (NODE_AFFINITY_CONFLICT)."""
    required = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return None
    names: set[str] = set()
    for term in terms:
        in_term: set[str] | None = None
        for requirement in (term or {}).get("matchFields") or []:
            if requirement.get("key") == "metadata.name" and requirement.get("operator") == "In":
                values = {str(v) for v in requirement.get("values") or []}
                in_term = values if in_term is None else in_term & values
        if in_term is None:
            return None
        names |= in_term
    return frozenset(names)


def _host_ports(pod: Mapping[str, Any]) -> Iterable[tuple[str, str, int]]:
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or [])
    containers += [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for container in containers:
        for port in container.get("ports") or []:
            host_port = int(port.get("hostPort") or 0)
            if host_port > 0:
                yield (port.get("hostIP") or "0.0.0.0", port.get("protocol") or "TCP", host_port)


def _ports_conflict(pod: Mapping[str, Any], others: Sequence[Mapping[str, Any]]) -> bool:
    used = {port for other in others for port in _host_ports(other)}
    for ip, protocol, port in _host_ports(pod):
        if ip == "0.0.0.0":
            if any(p == protocol and n == port for _, p, n in used):
                return True
        elif (ip, protocol, port) in used or ("0.0.0.0", protocol, port) in used:
            return True
    return False


def _is_scalar_resource(name: str) -> bool:
    """schedutil.IsScalarResourceName: extended resources (nvidia.com/gpu), hugepages-*,
    attachable-volumes-* and resources in the kubernetes.io domain other than the core four."""
    if name.startswith(("hugepages-", "attachable-volumes-")) or "kubernetes.io/" in name:
        return True
    return "/" in name and not name.startswith("requests.")


def _scheduler_units(name: str, quantity: Decimal) -> int:
    # The scheduler counts CPU in millicores and everything else in whole units, rounding up.
    scaled = quantity * 1000 if name == "cpu" else quantity
    return int(scaled.to_integral_value(rounding=ROUND_CEILING, context=EXACT))


def _allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {name: _scheduler_units(name, parse_quantity(q)) for name, q in allocatable.items()}


def _insufficient_resources(
    pod: Mapping[str, Any], node: Mapping[str, Any], others: Sequence[Mapping[str, Any]]
) -> tuple[list[str], bool]:
    """NodeResourcesFit: the reasons, and whether one is unresolvable (the pod asks for more than
    the node's whole allocatable, so evicting pods cannot help)."""
    allocatable = _allocatable(node)
    wanted = {n: _scheduler_units(n, q) for n, q in pod_requests(pod).items()}
    used: Counter[str] = Counter()
    for other in others:
        used.update({n: _scheduler_units(n, q) for n, q in pod_requests(other).items()})
    reasons: list[str] = []
    unresolvable = False
    if len(others) + 1 > allocatable.get("pods", 0):
        reasons.append(TOO_MANY_PODS)
    scalars = sorted(n for n in wanted if _is_scalar_resource(n) and wanted[n] > 0)
    for name in ["cpu", "memory", "ephemeral-storage", *scalars]:
        request = wanted.get(name, 0)
        if request > 0 and request > allocatable.get(name, 0) - used[name]:
            reasons.append(f"Insufficient {name}")
            unresolvable = unresolvable or request > allocatable.get(name, 0)
    return reasons, unresolvable


def _run_filters(
    pod: Mapping[str, Any], node: Mapping[str, Any], pods_on_node: Sequence[Mapping[str, Any]]
) -> tuple[tuple[str, ...], bool]:
    """The reasons of the first filter plugin that rejects the node, and whether evicting pods from
    the node could ever help (Unschedulable) or not (UnschedulableAndUnresolvable)."""
    spec = pod.get("spec") or {}
    others = [p for p in pods_on_node if _is_active(p)]
    if (node.get("spec") or {}).get("unschedulable") and not tolerates(
        spec.get("tolerations"), {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"}
    ):
        return (UNSCHEDULABLE_NODE,), False
    if spec.get("nodeName") and spec["nodeName"] != _node_name(node):
        return (NODE_NAME_MISMATCH,), False
    if _untolerated_taint(pod, node) is not None:
        return (UNTOLERATED_TAINT,), False
    if not _matches_node_affinity(pod, node):
        return (NODE_AFFINITY_MISMATCH,), False
    if _ports_conflict(pod, others):
        return (NO_FREE_PORTS,), True
    reasons, unresolvable = _insufficient_resources(pod, node, others)
    return tuple(reasons), not unresolvable


def filter_node_reasons(
    pod: Mapping[str, Any], node: Mapping[str, Any], pods_on_node: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """Every reason the scheduler gives for not placing `pod` on `node` (empty when it fits).

    Only the first rejecting plugin speaks, but NodeResourcesFit names each short resource, and
    FailedScheduling counts each reason. `pods_on_node` are the pods bound to the node; terminated
    ones are ignored.
    """
    return _run_filters(pod, node, pods_on_node)[0]


def filter_node(
    pod: Mapping[str, Any], node: Mapping[str, Any], pods_on_node: Sequence[Mapping[str, Any]]
) -> str | None:
    """None when `pod` fits `node`, else the scheduler's (first) reason for that node."""
    reasons = filter_node_reasons(pod, node, pods_on_node)
    return reasons[0] if reasons else None


def _priority(pod: Mapping[str, Any]) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


def preemption_reasons(
    pod: Mapping[str, Any], node: Mapping[str, Any], pods_on_node: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """What DefaultPreemption records for a node the pod does not fit; empty when evicting the
    node's lower-priority pods would make room (the node is a preemption candidate)."""
    reasons, resolvable = _run_filters(pod, node, pods_on_node)
    if not reasons:
        return ()
    if not resolvable:
        return (PREEMPTION_NOT_HELPFUL,)
    active = [p for p in pods_on_node if _is_active(p)]
    survivors = [p for p in active if _priority(p) >= _priority(pod)]
    if len(survivors) == len(active):
        return (NO_PREEMPTION_VICTIMS,)
    return _run_filters(pod, node, survivors)[0]


# --- FailedScheduling -------------------------------------------------------------------------------


def nodes_available_message(total_nodes: int, reasons: Mapping[str, int]) -> str:
    """FitError's "0/N nodes are available: <count> <reason>, ...." part.

    The entries are sorted as whole "<count> <reason>" strings, as kube-scheduler sorts them.
    """
    if total_nodes == 0:
        return NO_NODES_AVAILABLE
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items() if count)
    message = f"0/{total_nodes} nodes are available:"
    return message + (f" {', '.join(histogram)}." if histogram else "")


def preemption_message(
    total_nodes: int, reasons: Mapping[str, int] | None = None, *, preemption_policy: str | None = None
) -> str:
    """DefaultPreemption's PostFilter message when it finds no candidate node.

    `reasons` counts what preemption_reasons() gave for the nodes it examined; every other node
    counts as "Preemption is not helpful for scheduling" (all of them when `reasons` is None).
    """
    if preemption_policy == "Never":
        return f"preemption: {PREEMPTION_NEVER}"
    counts = Counter({r: c for r, c in (reasons or {}).items() if r != PREEMPTION_NOT_HELPFUL})
    examined = sum(counts.values())
    counts[PREEMPTION_NOT_HELPFUL] += max(total_nodes - examined, 0)
    return "preemption: " + nodes_available_message(total_nodes, counts)


def fit_error_message(
    total_nodes: int,
    reasons: Mapping[str, int],
    *,
    preemption_reasons: Mapping[str, int] | None = None,
    preemption_policy: str | None = None,
    dynamic_resources: bool = True,
) -> str:
    """The FailedScheduling message (and PodScheduled condition message) of a pod no node fits,
    e.g. "0/16 nodes are available: 1 Insufficient nvidia.com/gpu, 15 node(s) didn't match Pod's
    node affinity/selector. no new claims to deallocate, preemption: 0/16 nodes are available:
    16 Preemption is not helpful for scheduling."

    `reasons` counts filter reasons over the nodes (filter_node_reasons). The DynamicResources
    PostFilter (on by default since Kubernetes 1.34) adds "no new claims to deallocate" for a pod
    without resource claims; pass dynamic_resources=False for an older scheduler.
    """
    message = nodes_available_message(total_nodes, reasons)
    if total_nodes == 0:
        return message
    postfilter = [NO_CLAIMS_TO_DEALLOCATE] if dynamic_resources else []
    postfilter.append(
        preemption_message(total_nodes, preemption_reasons, preemption_policy=preemption_policy)
    )
    return f"{message} {', '.join(postfilter)}"


def conflict_message(
    total_nodes: int, *, preemption_policy: str | None = None, dynamic_resources: bool = True
) -> str:
    """The FailedScheduling message when NodeAffinity's PreFilter rejects the pod (its terms name
    nodes that intersect to none): FitError's PreFilterMsg instead of a per-node histogram."""
    postfilter = [NO_CLAIMS_TO_DEALLOCATE] if dynamic_resources else []
    postfilter.append(preemption_message(total_nodes, preemption_policy=preemption_policy))
    return f"0/{total_nodes} nodes are available: {NODE_AFFINITY_CONFLICT}. {', '.join(postfilter)}"


def failed_scheduling_message(
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    pods_by_node: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    dynamic_resources: bool = True,
) -> str | None:
    """The whole scheduling attempt: None when some node fits the pod, else the FailedScheduling
    message. `pods_by_node` maps node names to the pods bound there.

    When evicting lower-priority pods would make room, kube-scheduler preempts them and its
    message carries no PostFilter part; the simulator does not evict, it only reports.
    """
    reasons: Counter[str] = Counter()
    examined: Counter[str] = Counter()
    candidate = False
    policy = (pod.get("spec") or {}).get("preemptionPolicy")
    allowed = node_affinity_prefilter(pod)
    if allowed is not None and not allowed:
        return conflict_message(len(nodes), preemption_policy=policy, dynamic_resources=dynamic_resources)
    if allowed is not None:  # the nodes PreFilter left out are not filtered, nor preemption candidates
        left_out = [n for n in nodes if _node_name(n) not in allowed]
        if left_out:
            reasons[NODE_AFFINITY_PREFILTERED] += len(left_out)
        nodes_examined = [n for n in nodes if _node_name(n) in allowed]
    else:
        nodes_examined = list(nodes)
    for node in nodes_examined:
        on_node = pods_by_node.get(_node_name(node), ())
        node_reasons = filter_node_reasons(pod, node, on_node)
        if not node_reasons:
            return None
        reasons.update(node_reasons)
        if policy != "Never":
            found = preemption_reasons(pod, node, on_node)
            candidate = candidate or not found
            examined.update(found)
    if candidate and policy != "Never":
        return nodes_available_message(len(nodes), reasons)
    return fit_error_message(
        len(nodes),
        reasons,
        preemption_reasons=examined,
        preemption_policy=policy,
        dynamic_resources=dynamic_resources,
    )
