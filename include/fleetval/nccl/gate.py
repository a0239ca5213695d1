"""Post-upgrade NCCL sweep, step 4 — the gate: a regression halts the driver rollout.

- **Decide** (`decide_gate`): any `fail` → the gate fails and the rollout is halted; otherwise any
  `inconclusive`/`error` → `inconclusive` (no automatic halt: rerun or establish a baseline);
  else `pass`.
- **Apply** (`apply_gate`): every judged node is labelled `fleetval.io/nccl-gate=pass|fail|
  inconclusive` (a node's own verdicts decide: intra-node and isolation). Halting the rollout on
  Kubernetes means pausing the GPU Operator's driver upgrade controller: ClusterPolicy
  `spec.driver.upgradePolicy.autoUpgrade=false` (the whole state machine pauses; nodes not yet
  upgraded stay on the old driver) — done by the Airflow adapter (`fleetval_airflow.k8s_gate`),
  recorded here as a node event.
  Pausing makes the operator remove `nvidia.com/gpu-driver-upgrade-state` from every node, so
  what the rollout had not finished (`upgrade_in_flight`, read just before the halt) is kept in the
  run and the halt event: after the halt no label says which nodes were mid-upgrade.
- **Mark swept** (`mark_swept`): each swept node gets `fleetval.io/nccl-swept-driver=<driver
  version>` so the upgrade trigger does not fire for it again until its driver changes.

Dry run: nothing is touched; the node events say what would have been done.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from fleetval.nccl.judge_stored import subject_results
from fleetval.nccl.plan import SWEPT_LABEL, UPGRADE_DONE, UPGRADE_STATE_LABEL, NcclPlan
from fleetval.nodes import NodeActions, NodeInfo
from fleetval.records import Result, worst
from fleetval.store.repository import Store

GATE_LABEL: Final = "fleetval.io/nccl-gate"
ROLLOUT_HALT_MECHANISM: Final = (
    "GPU Operator ClusterPolicy spec.driver.upgradePolicy.autoUpgrade=false (pauses the driver upgrade "
    "state machine); nodes labelled fleetval.io/nccl-gate=fail"
)


@dataclass(frozen=True, slots=True)
class GateDecision:
    result: Result
    halt_rollout: bool
    node_labels: dict[str, str]
    failed_subjects: list[str]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "result": self.result.value,
            "halt_rollout": self.halt_rollout,
            "node_labels": self.node_labels,
            "failed_subjects": self.failed_subjects,
            "reason": self.reason,
        }


def decide_gate(rows: Iterable[Mapping[str, Any]], plan: NcclPlan) -> GateDecision:
    """The post-upgrade gate from a run's verdicts (see module doc, step 4)."""
    results = subject_results(rows)
    failed_subjects = sorted(s for s, r in results.items() if r is Result.FAIL)
    labels: dict[str, str] = {}
    for node in plan.nodes:
        mine = results.get(node)  # the node's own subject: intra-node and isolation verdicts
        if mine is Result.FAIL:
            labels[node] = "fail"
        elif mine is Result.PASS:
            labels[node] = "pass"
        else:
            labels[node] = "inconclusive"
    if not results:
        result = Result.INCONCLUSIVE
    else:
        result = Result.FAIL if failed_subjects else worst(list(results.values()))
    if result is Result.FAIL:
        reason = f"{len(failed_subjects)} subject(s) failed: {', '.join(failed_subjects[:10])}"
    elif result is Result.PASS:
        reason = f"all {len(results)} subjects passed"
    else:
        reason = f"no failure, but not every subject passed (worst: {result.value})"
    return GateDecision(result, result is Result.FAIL, labels, failed_subjects, reason)


def upgrade_in_flight(nodes: Iterable[NodeInfo]) -> dict[str, list[str]]:
    """{upgrade state: nodes} for every node whose driver upgrade is not done."""
    states: dict[str, list[str]] = {}
    for node in nodes:
        state = node.labels.get(UPGRADE_STATE_LABEL)
        if state and state != UPGRADE_DONE:
            states.setdefault(state, []).append(node.name)
    return {state: sorted(names) for state, names in sorted(states.items())}


def apply_gate(
    store: Store,
    nodes: NodeActions,
    *,
    run_id: int,
    run_key: str,
    decision: GateDecision,
    dry_run: bool,
    in_flight: Mapping[str, list[str]] | None = None,
) -> list[str]:
    """Label every judged node with the gate's word on it and record the rollout halt; in dry-run
    nothing is touched and the events say so. Returns the nodes labelled `fail`."""
    for node, value in sorted(decision.node_labels.items()):
        if not dry_run:
            nodes.set_labels(node, {GATE_LABEL: value})
        store.record_node_event(
            f"{run_key}/nccl-gate/{node}",
            node=node,
            kind="label",
            reason=f"{GATE_LABEL}={value}",
            dry_run=dry_run,
            run_id=run_id,
            details={"label": GATE_LABEL, "value": value, "gate": decision.result.value},
        )
    if decision.halt_rollout:
        halted = sum(len(v) for v in (in_flight or {}).values())
        store.record_node_event(
            f"{run_key}/nccl-rollout-halt",
            node="cluster",
            kind="rollout_halt",
            reason=f"{decision.reason}; halted with {halted} node(s) not yet upgraded",
            dry_run=dry_run,
            run_id=run_id,
            details={
                "mechanism": ROLLOUT_HALT_MECHANISM,
                "failed_subjects": decision.failed_subjects[:50],
                "upgrade_in_flight": dict(in_flight or {}),
            },
        )
    return sorted(n for n, v in decision.node_labels.items() if v == "fail")


def mark_swept(nodes: NodeActions, plan: NcclPlan, swept: Iterable[str], *, dry_run: bool) -> dict[str, str]:
    """`fleetval.io/nccl-swept-driver=<driver generation>` on the swept nodes (not in dry-run)."""
    marked = {n: plan.nodes[n].generation for n in sorted(set(swept)) if n in plan.nodes}
    if not dry_run:
        for node, generation in marked.items():
            nodes.set_labels(node, {SWEPT_LABEL: generation})
    return marked


def swept_nodes(store: Store, run_id: int) -> list[str]:
    """Nodes with an intra-node probe in this run that ran to completion: a node whose probes all
    broke (harness errors) is not swept, and the upgrade trigger keeps asking for it."""
    return sorted(
        {
            p["nodes"][0]
            for p in store.probes(run_id, with_raw=False)
            if p["tool"] == "nccl" and len(p["nodes"]) == 1 and not (p["spec"] or {}).get("harness_error")
        }
    )
