"""Evaluations against a real store (PostgreSQL and SQLite), the fleet written through the store's
own write paths (verdicts, `remediation.apply_actions`): the ledger it records reads back as the
pure plan left it, a storm is one pending notice per channel, a flapping node one incident row,
shadow mode leaves nothing to send, held-back notices are marked reported."""

from __future__ import annotations

import dataclasses
import datetime as dt

from fleetval.notify import evaluation
from fleetval.notify.events import Kind
from fleetval.notify.payloads import render
from fleetval.notify.policy import DEFAULT_POLICY, Channel, NotificationPolicy
from fleetval.policy import node_health as nh
from fleetval.store import notifications as ledger_store
from fleetval.store.repository import Store
from tests.fleetval.notify.store_fleet import NODES, act, sweep

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
MIN = dt.timedelta(minutes=1)


def evaluate(store: Store, at: dt.datetime, policy: NotificationPolicy = DEFAULT_POLICY) -> list[dict]:  # type: ignore[type-arg]
    """One evaluation; the notices it recorded."""
    before = len(ledger_store.notices(store.engine))
    evaluation.evaluate(store.engine, policy, tuple(Channel), at)
    return ledger_store.notices(store.engine)[before:]


def test_a_storm_is_one_pending_notice_per_channel_and_the_ledger_reads_back(store: Store) -> None:
    storm = set(NODES[:40])
    sweep(store, "w1", storm, at=NOW - 5 * MIN)
    ledger = evaluation.read_ledger(store.engine, DEFAULT_POLICY, NOW)
    planned = evaluation.evaluate(store.engine, DEFAULT_POLICY, tuple(Channel), NOW)

    rows = ledger_store.notices(store.engine)
    assert sorted(r["channel"] for r in rows) == sorted(c.value for c in Channel)
    for row in rows:
        assert (row["status"], row["count"], row["kind"], row["shadow"]) == (
            "pending",
            40,
            "quarantine",
            False,
        )
        assert row["subjects"] == NODES[:10]
    pd = next(r for r in rows if r["channel"] == "pagerduty")
    assert pd["payload"] == render(next(n for n in planned.notices if n.channel is Channel.PAGERDUTY))
    assert [o.channel for o in ledger_store.pending(store.engine)] == [r["channel"] for r in rows]

    # what the store now holds is what the pure plan says the ledger became
    assert evaluation.read_ledger(store.engine, DEFAULT_POLICY, NOW) == ledger.after(planned)
    incidents = ledger_store.incidents(store.engine)
    assert len(incidents) == 40 and {i.kind for i in incidents} == {"quarantine"}
    evidence = incidents[0].evidence
    assert evidence["criteria"] == ["D-DEV-03"] and len(evidence["verdict_ids"]) == 1  # the verdict behind it

    # read again ten minutes later: nothing new
    assert evaluate(store, NOW + 10 * MIN) == []


def test_a_flapping_node_is_one_incident_row(store: Store) -> None:
    node = NODES[5]
    sweep(store, "w1", {node}, at=NOW - 60 * MIN)
    at = NOW - 55 * MIN
    keys = []
    for i in range(3):
        keys += [r["dedup_key"] for r in evaluate(store, at) if r["channel"] == "pagerduty"]
        run_id = store.ensure_run(f"r3-{i}", suite="xid", backend="test")
        act(store, run_id, f"r3-{i}", [node], nh.RETURN_TO_SERVICE, at=at + 5 * MIN)
        keys += [r["dedup_key"] for r in evaluate(store, at + 6 * MIN) if r["channel"] == "pagerduty"]
        act(store, run_id, f"r3-{i}-again", [node], nh.QUARANTINE, at=at + 8 * MIN)
        at += 10 * MIN

    [incident] = ledger_store.incidents(store.engine)
    assert incident.count == 3 and incident.resolved_at is not None
    assert keys == [incident.dedup_key] * 6
    actions = [
        r["payload"]["event_action"]
        for r in ledger_store.notices(store.engine)
        if r["channel"] == "pagerduty"
    ]
    assert actions == ["trigger", "resolve"] * 3
    # still quarantined: the fourth opening reopens the same row
    evaluate(store, at)
    [incident] = ledger_store.incidents(store.engine)
    assert incident.count == 4 and incident.resolved_at is None


def test_shadow_mode_records_notices_and_sends_nothing(store: Store) -> None:
    sweep(store, "w1", set(NODES[:40]), at=NOW - 5 * MIN)
    shadow = dataclasses.replace(DEFAULT_POLICY, shadow=True)
    rows = evaluate(store, NOW, shadow)
    assert len(rows) == len(Channel) and {(r["status"], r["shadow"]) for r in rows} == {("shadow", True)}
    assert ledger_store.pending(store.engine) == []


def test_held_back_notices_are_marked_reported_by_the_notice_that_says_so(store: Store) -> None:
    policy = dataclasses.replace(DEFAULT_POLICY, rate_limit=1, storm_threshold=50)
    sweep(store, "w1", set(NODES[:3]), at=NOW - 5 * MIN)
    first = [r for r in evaluate(store, NOW, policy) if r["channel"] == "slack"]
    assert [r["status"] for r in first] == ["pending", "suppressed", "suppressed"]

    later = NOW + 61 * MIN
    run_id = store.ensure_run("x1", suite="xid", backend="test")
    act(store, run_id, "x1", [NODES[10]], nh.QUARANTINE, at=later - MIN)
    [carrier] = [r for r in evaluate(store, later, policy) if r["channel"] == "slack"]
    assert carrier["status"] == "pending" and "quarantine 2" in str(carrier["payload"]["blocks"])
    held = [
        r
        for r in ledger_store.notices(store.engine)
        if r["status"] == "suppressed" and r["channel"] == "slack"
    ]
    assert {r["reported_by"] for r in held} == {carrier["id"]}


def test_rollout_halts_are_read_without_the_dry_runs(store: Store) -> None:
    run_id = store.ensure_run("nccl1", suite="post_upgrade_nccl", backend="test")
    for key, dry in (("nccl1/nccl-rollout-halt", False), ("nccl0/nccl-rollout-halt", True)):
        store.record_node_event(
            key,
            node="cluster",
            kind="rollout_halt",
            reason="D-NET-NCCL-01 failed",
            dry_run=dry,
            run_id=run_id,
            details={"failed_subjects": ["r01-n02"]},
            at=NOW - MIN,
        )
    [halt] = ledger_store.rollout_halts(store.engine, NOW - dt.timedelta(days=1))
    assert (halt.key, halt.failed_subjects) == ("nccl1/nccl-rollout-halt", ("r01-n02",))
    rows = evaluate(store, NOW)
    assert {(r["channel"], r["kind"]) for r in rows} >= {(c.value, Kind.ROLLOUT_HALT.value) for c in Channel}


def test_delivery_marks(store: Store) -> None:
    sweep(store, "w1", {NODES[0]}, at=NOW - 5 * MIN)
    evaluate(store, NOW)
    first, second, third = ledger_store.pending(store.engine)
    assert ledger_store.mark(store.engine, first, now=NOW) == "sent"
    assert ledger_store.mark(store.engine, second, now=NOW, skipped=True) == "skipped"
    assert ledger_store.mark(store.engine, third, now=NOW, error="503") == "pending"
    retry = dataclasses.replace(third, attempts=ledger_store.MAX_ATTEMPTS - 1)
    assert ledger_store.mark(store.engine, retry, now=NOW, error="503") == "failed"
    assert ledger_store.pending(store.engine) == []
