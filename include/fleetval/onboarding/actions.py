"""What onboarding does to nodes, applied then recorded (as `fleetval.remediation` does).

| phase | taint `fleetval.io/onboarding` | labels |
|---|---|---|
| start (the plan) | `pending` | `fleetval.io/onboarding=pending`, no in-service label, rack label |
| admit (pass, approved) | removed | `fleetval.io/in-service=true`, `fleetval.io/onboarding=passed/approved` |
| hold (anything else) | `held` | `fleetval.io/onboarding=held`, no in-service label |

(The taint's effect is NoSchedule; the rack label is set on a node that had none.)

Each operation is applied to the node, then recorded as a node event keyed by run, node, phase and
operation (a rerun repeats the idempotent patch and records nothing twice); the reason is recorded
with it. A dry run touches no node and records the events as `dry_run`. Admission does not uncordon:
a cordon is someone else's decision, and the report says the node is still cordoned.

The human's answer is stored with the verdicts: each offered node's D-DEV-01 verdict (the
criterion that holds a warned node for approval) keeps its result and gets the decision as its
action and the answer (who, when, what, or the timeout) in its evidence.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fleetval.nodes import ONBOARDING_TAINT, NodeActions
from fleetval.onboarding.approval import Answer, Decision
from fleetval.onboarding.plan import (
    HELD,
    IN_SERVICE_LABEL,
    PENDING,
    STATE_LABEL,
    TAINT_EFFECT,
    OnboardingPlan,
)
from fleetval.records import Result, Verdict
from fleetval.store.repository import Store

APPROVAL_CRITERION: Final = "D-DEV-01"
APPROVAL_SOURCE: Final = "operator answer (rack_onboarding approval)"


@dataclass(frozen=True, slots=True)
class NodeChange:
    """One node's operations in one phase: a taint value to set ("" removes the taint) and labels
    (None removes one)."""

    node: str
    taint: str | None
    labels: dict[str, str | None]
    reason: str


def start_changes(plan: OnboardingPlan, *, rack_label: str) -> list[NodeChange]:
    changes = []
    for node in plan.nodes.values():
        labels: dict[str, str | None] = {STATE_LABEL: PENDING, IN_SERVICE_LABEL: None}
        if node.assign_rack:
            labels[rack_label] = plan.rack
        why = "taken out of service to be onboarded again" if node.was_in_service else "onboarding started"
        changes.append(NodeChange(node.name, PENDING, labels, f"{why} (rack {plan.rack})"))
    return changes


def decision_change(decision: Decision) -> NodeChange:
    if decision.admit:
        labels: dict[str, str | None] = {IN_SERVICE_LABEL: "true", STATE_LABEL: decision.state}
        return NodeChange(decision.node, "", labels, decision.why)
    return NodeChange(decision.node, HELD, {STATE_LABEL: HELD, IN_SERVICE_LABEL: None}, decision.why)


def apply_changes(
    changes: Sequence[NodeChange],
    *,
    nodes: NodeActions,
    store: Store,
    run_id: int,
    run_key: str,
    phase: str,
    dry_run: bool,
    details: Mapping[str, Any] | None = None,
    at: dt.datetime | None = None,
) -> int:
    """Apply (unless `dry_run`) and record each change; returns the operations recorded."""
    recorded = 0
    for change in changes:
        operations: list[tuple[str, Any]] = []
        if change.taint == "":
            operations.append(("untaint", ONBOARDING_TAINT))
        elif change.taint is not None:
            operations.append(("taint", f"{ONBOARDING_TAINT}={change.taint}:{TAINT_EFFECT}"))
        if change.labels:
            operations.append(("label", change.labels))
        for kind, what in operations:
            # Apply, then record: the patches are idempotent, so a crash between the two repeats
            # the patch on the rerun instead of recording an operation that never happened.
            if not dry_run:
                if kind == "untaint":
                    nodes.remove_taint(change.node, ONBOARDING_TAINT)
                elif kind == "taint":
                    nodes.add_taint(change.node, ONBOARDING_TAINT, str(change.taint), TAINT_EFFECT)
                else:
                    nodes.set_labels(change.node, dict(change.labels))
            store.record_node_event(
                f"{run_key}/{change.node}/onboarding-{phase}/{kind}",
                node=change.node,
                kind=kind,
                reason=change.reason,
                dry_run=dry_run,
                run_id=run_id,
                details={
                    "phase": phase,
                    "op": what if kind != "label" else dict(change.labels),
                    **(details or {}),
                },
                at=at,
            )
            recorded += 1
    return recorded


def approval_verdicts(
    rows: Sequence[Mapping[str, Any]], answer: Answer
) -> list[tuple[Verdict, Mapping[str, Any]]]:
    """Each offered node's D-DEV-01 verdict with the answer in it (result unchanged; action: the
    decision; evidence: `approval`), paired with the row it replaces."""
    by_node = {
        str(r["subject"]): r
        for r in rows
        if r["criterion"] == APPROVAL_CRITERION and r["subject"] in answer.offered
    }
    out = []
    for node in answer.offered:
        row = by_node.get(node)
        if row is None:
            continue
        approved = node in answer.approved
        approval = {
            "decision": "admit" if approved else "hold",
            "answer": "approved"
            if approved
            else ("hold (default)" if answer.timed_out or not answer.received else "held"),
            "by": answer.by,
            "at": answer.at,
            "timed_out": answer.timed_out,
            "received": answer.received,
            "chosen": list(answer.chosen),
            "offered": len(answer.offered),
        }
        verdict = Verdict(
            str(row["criterion"]),
            node,
            Result(row["result"]),
            "admit_approved" if approved else "hold_not_approved",
            str(row["rule_id"]),
            f"{row['reason']}; {'approved' if approved else 'held'}: {answer.how}",
            {**(row.get("evidence") or {}), "approval": approval},
            {**(row.get("judged_against") or {}), "approval": APPROVAL_SOURCE},
        )
        out.append((verdict, row))
    return out


def store_approval(store: Store, run_id: int, rows: Sequence[Mapping[str, Any]], answer: Answer) -> int:
    """Write the answer into the offered nodes' D-DEV-01 verdicts (an upsert: the same row)."""
    written = 0
    for verdict, row in approval_verdicts(rows, answer):
        written += store.add_verdicts(run_id, [verdict], probe_id=row.get("probe_id"), node=verdict.subject)
    return written
