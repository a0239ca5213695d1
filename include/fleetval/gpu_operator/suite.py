"""The GPU Operator layer's checks as `gpu_operator_validation` runs them, on any cluster through
the kubernetes client (no Airflow here).

- D-OP-01 (`check_operands`): the operand pods in the operator's namespace, per GPU node;
- D-OP-02 and D-GPU-TS-01 (`check_advertised`): each GPU node's advertised resources against
  GFD's count, and shared GPUs disclosed as shared;
- D-OP-03 (`isolation_probes`, then `judge_isolation_probes`): one no-GPU probe pod per node class;
- D-OP-04 (`check_upgrade_policy`): a driver rollout in progress, sampled until it ends, against the
  upgrade policy in force.

Whatever the API answered is stored as the probe's raw output before it is judged (a PodList per
node, the node's `nvidia.com/` labels and resources), so a verdict can be re-judged later.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from fleetval.gpu_operator.advertised import judge_advertised, node_facts
from fleetval.gpu_operator.isolation import TOOL as ISOLATION_TOOL
from fleetval.gpu_operator.isolation import isolation_probe, judge_isolation
from fleetval.gpu_operator.judge import judge_operands
from fleetval.gpu_operator.parse import parse_operand_pods
from fleetval.gpu_operator.upgrade_policy import (
    STATE_LABEL,
    SUBJECT,
    UPGRADING,
    NodeState,
    Snapshot,
    judge_rollout,
    policy_in_force,
)
from fleetval.k8s.cluster import GPU_NODE_SELECTOR, PAGE, paged
from fleetval.mig.sharing import judge_time_slicing
from fleetval.nodes import NodeInfo
from fleetval.probes import outputs as probe_outputs
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Verdict
from fleetval.store.repository import Store

SUITE: Final = "gpu_operator_validation"
DEFAULT_OPERATOR_NAMESPACE: Final = "gpu-operator"
ROLLOUT_TOOL: Final = "driver-rollout"


def _api_probe(run_key: str, tool: str, node: str, source: str) -> ProbeSpec:
    """A probe whose evidence is an API read, not a pod's output."""
    return ProbeSpec(
        probe_key=f"{run_key}/{tool}/{node}",
        tool=tool,
        node=node,
        image="",
        command=(),
        params={"source": source},
    )


def _store_and_judge(
    store: Store,
    run_id: int,
    evidence: Iterable[tuple[ProbeSpec, str]],
    judge: Callable[[str, str], Verdict | list[Verdict]],
) -> list[Verdict]:
    """Raw first, then the verdicts of each node."""
    items = list(evidence)
    now = time.time()
    probe_outputs.store_probe_outputs(
        store,
        run_id,
        [probe_outputs.probe_output(s, raw, exit_code=0, error=None, finished_at=now) for s, raw in items],
    )
    verdicts = []
    for spec, raw in items:
        judged = judge(spec.node, raw)
        judged = judged if isinstance(judged, list) else [judged]
        store.add_verdicts(run_id, judged, node=spec.node)
        verdicts.extend(judged)
    return verdicts


def gpu_nodes(core: Any) -> list[dict[str, Any]]:
    """Every GPU node as the API returns it (a dict)."""
    nodes = paged(lambda token: core.list_node(label_selector=GPU_NODE_SELECTOR, limit=PAGE, _continue=token))
    return [core.api_client.sanitize_for_serialization(n) for n in nodes]


def check_operands(
    store: Store, run_id: int, core: Any, *, run_key: str, nodes: Sequence[str], namespace: str
) -> list[Verdict]:
    """D-OP-01 per GPU node, from the operand pods the API lists on it."""
    pods = paged(lambda token: core.list_namespaced_pod(namespace, limit=PAGE, _continue=token))
    by_node: dict[str, list[Any]] = {n: [] for n in nodes}
    for pod in pods:
        if pod.spec.node_name in by_node:
            by_node[pod.spec.node_name].append(core.api_client.sanitize_for_serialization(pod))
    source = f"GET /api/v1/namespaces/{namespace}/pods"
    evidence = [
        (_api_probe(run_key, "gpu-operator", node, source), json.dumps({"kind": "PodList", "items": items}))
        for node, items in sorted(by_node.items())
    ]
    return _store_and_judge(
        store, run_id, evidence, lambda node, raw: judge_operands(node, parse_operand_pods(raw))
    )


def _judge_resources(node: str, raw: str) -> list[Verdict]:
    facts = json.loads(raw)
    return [
        judge_advertised(node, facts),
        judge_time_slicing(node, facts.get("labels") or {}, facts.get("capacity") or {}),
    ]


def check_advertised(
    store: Store, run_id: int, nodes: Sequence[dict[str, Any]], *, run_key: str
) -> list[Verdict]:
    """D-OP-02 and D-GPU-TS-01 per GPU node, from its Node object."""
    evidence = [
        (
            _api_probe(run_key, "node-resources", n["metadata"]["name"], "GET /api/v1/nodes"),
            json.dumps(node_facts(n), sort_keys=True),
        )
        for n in sorted(nodes, key=lambda n: str(n["metadata"]["name"]))
    ]
    return _store_and_judge(store, run_id, evidence, _judge_resources)


def isolation_probes(nodes: Sequence[NodeInfo], *, run_key: str, image: str | None = None) -> list[ProbeSpec]:
    """One D-OP-03 probe per node class (hardware profile), on its first node by name that is not
    quarantined (a quarantined node runs nothing of a tenant's)."""
    chosen: dict[str, NodeInfo] = {}
    for node in sorted(nodes, key=lambda n: (n.quarantined, n.name)):
        if node.is_gpu_node:
            chosen.setdefault(node.profile, node)
    return [
        isolation_probe(n.name, profile, run_key=run_key, image=image)
        for profile, n in sorted(chosen.items())
    ]


def judge_isolation_probes(store: Store, run_id: int, specs: Sequence[ProbeSpec]) -> list[Verdict]:
    """D-OP-03 for each stored probe; a probe that left nothing is a harness `error`, never a pass."""
    probe_outputs.record_missing_probes(store, run_id, specs)
    verdicts = []
    for row in store.probes(run_id, [s.probe_key for s in specs]):
        if row["tool"] != ISOLATION_TOOL:
            continue
        node = row["nodes"][0]
        error = (row.get("spec") or {}).get("harness_error")
        verdict = judge_isolation(node, row["raw"], exit_code=row["exit_code"], error=error)
        store.add_verdicts(run_id, [verdict], probe_id=int(row["id"]), node=node)
        verdicts.append(verdict)
    return verdicts


def _uses_gpu(pod: Any) -> bool:
    for container in pod.spec.containers or []:
        resources = container.resources
        for section in (resources.limits, resources.requests) if resources else ():
            if any(str(k).startswith(("nvidia.com/gpu", "nvidia.com/mig-")) for k in section or {}):
                return True
    return False


def rollout_snapshot(core: Any, *, at: float) -> Snapshot:
    """Every GPU node's upgrade state, cordon and running GPU pods, now."""
    nodes = paged(lambda token: core.list_node(label_selector=GPU_NODE_SELECTOR, limit=PAGE, _continue=token))
    running = paged(
        lambda token: core.list_pod_for_all_namespaces(
            field_selector="status.phase=Running", limit=PAGE, _continue=token
        )
    )
    gpu_pods: dict[str, list[dict[str, Any]]] = {}
    for pod in running:
        if pod.spec.node_name and _uses_gpu(pod):
            name = f"{pod.metadata.namespace}/{pod.metadata.name}"
            gpu_pods.setdefault(pod.spec.node_name, []).append(
                {"name": name, "labels": pod.metadata.labels or {}}
            )
    return Snapshot(
        at,
        {
            n.metadata.name: NodeState(
                (n.metadata.labels or {}).get(STATE_LABEL, ""),
                bool(n.spec.unschedulable),
                tuple(gpu_pods.get(n.metadata.name, ())),
            )
            for n in nodes
        },
    )


def _rolling(snapshot: Snapshot) -> bool:
    return any(s.state in UPGRADING or s.state == "upgrade-required" for s in snapshot.nodes.values())


def observe_rollout(
    core: Any,
    *,
    max_s: float,
    interval_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> list[Snapshot]:
    """Snapshots every `interval_s` while a rollout is in progress, until it ends or `max_s`; one
    snapshot when none is."""
    start = clock()
    snapshots = [rollout_snapshot(core, at=start)]
    while _rolling(snapshots[-1]) and clock() - start < max_s:
        sleep(interval_s)
        snapshots.append(rollout_snapshot(core, at=clock()))
    return snapshots


def check_upgrade_policy(
    store: Store,
    run_id: int,
    core: Any,
    custom: Any,
    *,
    run_key: str,
    max_s: float,
    interval_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> Verdict | None:
    """D-OP-04 over a rollout in progress (None, and nothing stored, when none is). The policy is
    read when the observation starts; the policy and the snapshots are the raw evidence."""
    policies = custom.list_cluster_custom_object(group="nvidia.com", version="v1", plural="clusterpolicies")
    cluster_policy = min(
        policies.get("items") or [{}],
        key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", "")),
    )
    drivers: list[dict[str, Any]] = []
    if ((cluster_policy.get("spec") or {}).get("driver") or {}).get("useNvidiaDriverCRD"):
        listed = custom.list_cluster_custom_object(
            group="nvidia.com", version="v1alpha1", plural="nvidiadrivers"
        )
        drivers = list(listed.get("items") or [])
    source, policy = policy_in_force(cluster_policy, drivers)
    snapshots = observe_rollout(core, max_s=max_s, interval_s=interval_s, sleep=sleep)
    if len(snapshots) == 1 and not _rolling(snapshots[0]):
        return None
    raw = json.dumps(
        {"policy_source": source, "upgradePolicy": policy, "snapshots": [s.to_json() for s in snapshots]}
    )
    spec = _api_probe(run_key, ROLLOUT_TOOL, SUBJECT, "GET nodes, pods, clusterpolicies, nvidiadrivers")
    [verdict] = _store_and_judge(
        store,
        run_id,
        [(spec, raw)],
        lambda _s, text: judge_rollout(source, policy, snapshots, interval_s=interval_s),
    )
    return verdict
