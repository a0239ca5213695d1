"""A small fleet's history written through the store's own write paths (runs, verdicts, node
actions through `remediation.apply_actions`, baselines), for the metrics tests."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import sqlalchemy as sa

from fleetval.policy import node_health as nh
from fleetval.policy.blast_radius import ActionBudget
from fleetval.records import Result, Verdict
from fleetval.remediation import PlannedAction, apply_actions
from fleetval.store.repository import Store

RACKS = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2"}


class Nodes:
    """NodeActions that only record: the metrics read what the store says was done."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, ...]] = []

    def cordon(self, node: str) -> None:
        self.ops.append(("cordon", node))

    def uncordon(self, node: str) -> None:
        self.ops.append(("uncordon", node))

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self.ops.append(("label", node))

    def add_taint(self, node: str, key: str, value: str, effect: str) -> None:
        self.ops.append(("taint", node))

    def remove_taint(self, node: str, key: str) -> None:
        self.ops.append(("untaint", node))


def v(criterion: str, subject: str, result: str, **evidence: Any) -> Verdict:
    return Verdict(criterion, subject, Result(result), "none", "test.rule", f"{result} {subject}", evidence)


def backdate(store: Store, run_id: int, at: dt.datetime) -> None:
    """What happened then: the store stamps now."""
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE runs SET started_at = :at WHERE id = :r"), {"at": at, "r": run_id})
        conn.execute(
            sa.text("UPDATE verdicts SET judged_at = :at WHERE run_id = :r"), {"at": at, "r": run_id}
        )


def weekly_sweep(
    store: Store, key: str, results: dict[str, str], *, at: dt.datetime, racks: dict[str, str] = RACKS
) -> int:
    """A weekly r2 sweep: its plan (the inventory), a D-DEV-03 verdict and GPU records per node,
    and the node health policy's actions for a failed node (cordon, quarantine, r3 requested)."""
    plan = {"rack_of": dict(racks), "skipped": {}, "waves": [sorted(results)]}
    run_id = store.ensure_run(key, suite="weekly", backend="test", meta={"plan": plan})
    for node, result in sorted(results.items()):
        store.add_verdicts(
            run_id,
            [v("D-DEV-03", node, result), v("D-DEV-04", f"GPU-{node}-0", "pass")],
            node=node,
        )
    backdate(store, run_id, at)
    planned = [
        PlannedAction(node, racks[node], nh.QUARANTINE_AND_R3, "r2 failed", "dev.weekly.fail")
        for node, result in sorted(results.items())
        if result == "fail"
    ]
    alerts = apply_actions(
        planned,
        nodes=Nodes(),
        store=store,
        run_id=run_id,
        run_key=key,
        budget=ActionBudget(0.25, 0.5),  # one node of four: a second failure trips the breaker
        fleet_size=len(racks),
        rack_sizes=Counter(racks.values()),
        dry_run=False,
        as_of=at,
    )
    if alerts:
        store.add_verdicts(run_id, alerts)
        backdate(store, run_id, at)
    return run_id


def xid_cordon(store: Store, key: str, node: str, *, at: dt.datetime) -> int:
    """An Xid run's cordon, recorded as `xid.steps` records it (r3 to come)."""
    run_id = store.ensure_run(key, suite="xid", backend="test")
    for kind in ("cordon", "taint", "label"):
        store.record_node_event(
            f"{key}/{node}/{kind}",
            node=node,
            kind=kind,
            reason="Xid decision xid.79",
            dry_run=False,
            run_id=run_id,
            details={"rack": RACKS[node], "source": "xid", "rule_id": "xid.79"},
            at=at,
        )
    return run_id


def r3(store: Store, run_id: int, node: str, result: str, *, at: dt.datetime) -> None:
    """The r3 after the cordon, and the policy's action on it."""
    store.add_verdicts(run_id, [v("D-DEV-02", node, result)], node=node)
    backdate(store, run_id, at)
    action = nh.RETURN_TO_SERVICE if result == "pass" else nh.QUARANTINE
    apply_actions(
        [PlannedAction(node, RACKS[node], action, f"r3 {result}", "dev.r3")],
        nodes=Nodes(),
        store=store,
        run_id=run_id,
        run_key=f"{run_id}-r3",
        budget=ActionBudget(1.0, 1.0),
        fleet_size=len(RACKS),
        rack_sizes={"r1": 2, "r2": 2},
        dry_run=False,
        as_of=at,
    )


def shadow_quarantine(store: Store, key: str, node: str, *, at: dt.datetime) -> None:
    """A dry-run (shadow mode) quarantine: recorded, never applied."""
    run_id = store.ensure_run(key, suite="xid", backend="test")
    apply_actions(
        [PlannedAction(node, RACKS[node], nh.QUARANTINE, "r3 failed", "dev.r3")],
        nodes=Nodes(),
        store=store,
        run_id=run_id,
        run_key=key,
        budget=ActionBudget(1.0, 1.0),
        fleet_size=len(RACKS),
        rack_sizes={"r1": 2, "r2": 2},
        dry_run=True,
        as_of=at,
    )


def nccl_baselines(store: Store) -> None:
    """Two versions of the intra-node busbw baseline, the second promoted."""
    for value in (360.0, 372.5):
        baseline_id, _ = store.add_baseline_candidate(
            profile="h100-8x",
            metric="nccl.busbw",
            scope="intra-node",
            value=value,
            unit="GB/s",
            stats={},
            source={"test": True},
        )
        store.promote_baseline(baseline_id)


def kueue_run(store: Store, key: str, results: dict[tuple[str, str], str], *, at: dt.datetime) -> int:
    run_id = store.ensure_run(key, suite="kueue_contention", backend="test")
    store.add_verdicts(run_id, [v(c, f"kueue/{s}", r) for (s, c), r in sorted(results.items())])
    backdate(store, run_id, at)
    return run_id


def small_fleet(store: Store, now: dt.datetime) -> None:
    """Four nodes: n2 failed its weekly r2 (quarantined, r3 requested); n4 too, past the action
    budget (an F-SAFE-01 alert in rack r2 instead); n3 cordoned for an Xid, r3 to come; n1
    quarantined in shadow mode; an NCCL baseline promoted twice; one Kueue scenario failing."""
    day = dt.timedelta(days=1)
    weekly_sweep(store, "w1", {"n1": "pass", "n2": "pass", "n3": "pass", "n4": "pass"}, at=now - 8 * day)
    minute = dt.timedelta(minutes=1)
    weekly_sweep(store, "w2", {"n1": "pass", "n2": "fail", "n3": "pass", "n4": "fail"}, at=now - 20 * minute)
    xid_cordon(store, "x1", "n3", at=now - 10 * minute)
    shadow_quarantine(store, "x2", "n1", at=now - 5 * minute)
    nccl = store.ensure_run("nccl1", suite="post_upgrade_nccl", backend="test")
    store.add_verdicts(nccl, [v("D-NET-NCCL-01", "n1", "pass")], node="n1")
    backdate(store, nccl, now - 2 * day)
    nccl_baselines(store)
    kueue_run(
        store,
        "k1",
        {("d-sched-01-02-quota", "D-SCHED-01"): "pass", ("d-sched-05-preempt-resume", "D-SCHED-05"): "fail"},
        at=now - dt.timedelta(hours=3),
    )
