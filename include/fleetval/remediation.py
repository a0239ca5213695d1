"""Turn policy actions into node operations, within the blast-radius budget, or only record them.

Every operation is applied to the node, then recorded as a node event in the store (idempotent
per run, node and operation; a failed patch raises and is never recorded as done): right after
its patch by `apply_actions`, or in the caller's single write with `take_actions`. In dry-run
(shadow) mode nothing touches the cluster and the events say `dry_run`. A disruptive action
past the ActionBudget is not carried out: an F-SAFE-01 alert verdict stands in its place.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fleetval.nodes import MAINTENANCE_TAINT, QUARANTINE_LABEL, NodeActions
from fleetval.policy import node_health as nh
from fleetval.policy.blast_radius import ActionBudget
from fleetval.records import Result, Verdict
from fleetval.store.repository import NodeEventIn, Store

HEALTH_LABEL: Final = "fleetval.io/health"
LAST_R2_LABEL: Final = "fleetval.io/last-r2"
R3_REQUESTED_LABEL: Final = "fleetval.io/r3-requested"


@dataclass(frozen=True, slots=True)
class PlannedAction:
    node: str
    rack: str
    action: str
    reason: str
    rule_id: str


# Policy action → operations, in order. ("label", key, value) with value None removes the label.
OPERATIONS: Final[dict[str, tuple[tuple[str | None, ...], ...]]] = {
    nh.NONE: (("label", HEALTH_LABEL, "ok"),),
    nh.FLAG: (("label", HEALTH_LABEL, "warn"),),
    nh.RERUN: (("label", HEALTH_LABEL, "rerun-needed"),),
    nh.QUARANTINE_AND_R3: (
        ("cordon",),
        ("label", QUARANTINE_LABEL, "dcgm-r2-fail"),
        ("taint", MAINTENANCE_TAINT, "quarantine", "NoSchedule"),
        ("label", R3_REQUESTED_LABEL, "true"),
        ("label", HEALTH_LABEL, "fail"),
    ),
    nh.QUARANTINE: (
        ("cordon",),
        ("label", QUARANTINE_LABEL, "dcgm-r3-fail"),
        ("taint", MAINTENANCE_TAINT, "quarantine", "NoSchedule"),
        ("label", HEALTH_LABEL, "fail"),
    ),
    nh.RETURN_TO_SERVICE: (
        ("untaint", MAINTENANCE_TAINT),
        ("label", QUARANTINE_LABEL, None),
        ("label", R3_REQUESTED_LABEL, None),
        ("label", HEALTH_LABEL, "ok"),
        ("uncordon",),
    ),
    nh.ADMIT: (("label", HEALTH_LABEL, "ok"), ("uncordon",)),
    nh.HOLD_FOR_APPROVAL: (("label", HEALTH_LABEL, "hold"),),
    nh.REJECT: (("label", HEALTH_LABEL, "fail"),),
}


# The node events the ActionBudget counts: a run's disruptive acts (each starts with a cordon).
BUDGET_EVENT_KIND: Final = "cordon"


@dataclass(frozen=True, slots=True)
class ActionsTaken:
    """What `take_actions` did: the node events to record (in dry-run, what it would have done)
    and the F-SAFE-01 alert verdicts for what the budget withheld."""

    events: list[NodeEventIn]
    alerts: list[Verdict]


def budget_taken(events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """node → rack of the run's `BUDGET_EVENT_KIND` node events (rows as `Store.node_events`)."""
    return {e["node"]: e["details"].get("rack", "") for e in events}


def apply_actions(
    planned: Sequence[PlannedAction],
    *,
    nodes: NodeActions,
    store: Store,
    run_id: int,
    run_key: str,
    budget: ActionBudget,
    fleet_size: int,
    rack_sizes: Mapping[str, int],
    dry_run: bool,
    as_of: dt.datetime,
) -> list[Verdict]:
    """Carry out (or record) `planned`; returns F-SAFE-01 alert verdicts for what the budget stopped.
    Each event is recorded right after its patch (`take_actions`)."""
    taken = budget_taken(store.node_events(run_id=run_id, kind=BUDGET_EVENT_KIND))

    return take_actions(
        planned,
        nodes=nodes,
        taken=taken,
        run_id=run_id,
        run_key=run_key,
        budget=budget,
        fleet_size=fleet_size,
        rack_sizes=rack_sizes,
        dry_run=dry_run,
        as_of=as_of,
        on_event=store.record_event,
    ).alerts


def take_actions(
    planned: Sequence[PlannedAction],
    *,
    nodes: NodeActions,
    taken: Mapping[str, str],
    run_id: int,
    run_key: str,
    budget: ActionBudget,
    fleet_size: int,
    rack_sizes: Mapping[str, int],
    dry_run: bool,
    as_of: dt.datetime,
    on_event: Callable[[NodeEventIn], object] | None = None,
) -> ActionsTaken:
    """Patch the nodes for `planned` (not in dry-run) within `budget`, given `taken` (node → rack
    already acted on in this run, `budget_taken`); records nothing itself. `on_event` is called
    with each event as soon as its patch succeeded; a failed patch raises and yields no event."""
    taken = dict(taken)
    events: list[NodeEventIn] = []
    alerts: list[Verdict] = []

    def happened(event: NodeEventIn) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event)

    for item in planned:
        operations = OPERATIONS[item.action]
        disruptive = item.action in nh.DISRUPTIVE_ACTIONS
        if disruptive and not budget.allows(
            item.node, item.rack, taken=taken, fleet_size=fleet_size, rack_sizes=rack_sizes
        ):
            alerts.append(
                Verdict(
                    "F-SAFE-01",
                    item.node,
                    Result.FAIL,
                    "alert_operator",
                    "safety.action_budget.exceeded",
                    f"{item.action} on {item.node} withheld: blast-radius budget exhausted",
                    {
                        "withheld_action": item.action,
                        "rack": item.rack,
                        "already_acted": len(taken),
                        "fleet_size": fleet_size,
                        "decided_by": item.rule_id,
                    },
                    {
                        "budget": {
                            "max_fleet_fraction": budget.max_fleet_fraction,
                            "max_rack_fraction": budget.max_rack_fraction,
                        }
                    },
                )
            )
            happened(
                NodeEventIn(
                    f"{run_key}/{item.node}/withheld",
                    node=item.node,
                    kind="withheld",
                    reason=item.reason,
                    dry_run=dry_run,
                    run_id=run_id,
                    details={"rack": item.rack, "action": item.action},
                    at=as_of,
                )
            )
            continue
        if disruptive:
            taken[item.node] = item.rack
        for op in operations:
            kind, detail = _describe(op)
            # Apply, then record: the patches are idempotent, so a crash between the two repeats
            # the patch on the rerun instead of leaving a recorded operation that never happened.
            if not dry_run:
                _apply(nodes, item.node, op)
            happened(
                NodeEventIn(
                    f"{run_key}/{item.node}/{kind}/{detail}",
                    node=item.node,
                    kind=kind,
                    reason=item.reason,
                    dry_run=dry_run,
                    run_id=run_id,
                    details={
                        "rack": item.rack,
                        "action": item.action,
                        "rule_id": item.rule_id,
                        "op": list(op),
                    },
                    at=as_of,
                )
            )
    return ActionsTaken(events, alerts)


def _describe(op: tuple[str | None, ...]) -> tuple[str, str]:
    kind = str(op[0])
    if kind == "label":
        return ("label" if op[2] is not None else "unlabel"), str(op[1])
    if kind in ("taint", "untaint"):
        return kind, str(op[1])
    return kind, "node"


def _apply(nodes: NodeActions, node: str, op: tuple[str | None, ...]) -> None:
    kind = op[0]
    if kind == "cordon":
        nodes.cordon(node)
    elif kind == "uncordon":
        nodes.uncordon(node)
    elif kind == "label":
        nodes.set_labels(node, {str(op[1]): op[2]})
    elif kind == "taint":
        nodes.add_taint(node, str(op[1]), str(op[2]), str(op[3]))
    elif kind == "untaint":
        nodes.remove_taint(node, str(op[1]))
    else:  # pragma: no cover - OPERATIONS is closed
        raise ValueError(f"unknown node operation {op!r}")
