"""Xid inbox semantics and remediation steps, on SQLite and PostgreSQL, without Airflow."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from fleetval.sim.cluster import SimCluster
from fleetval.sim.spec import load_fleet_spec
from fleetval.sim.xid_source import inject
from fleetval.store import xid_inbox
from fleetval.store.repository import Store
from fleetval.suites import xid
from tests.paths import DEMO_FLEET

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def cluster(store: Store) -> SimCluster:
    return SimCluster.load(store.engine, load_fleet_spec(DEMO_FLEET.read_text()))


def test_dispatch_then_claim_is_exactly_once(store: Store, cluster: SimCluster) -> None:
    inject(cluster, [("r01-n01", 79, 0, 1)], at=NOW, tag="a")
    first = xid_inbox.dispatch_pending(store.engine, now=NOW)
    assert first is not None
    assert first["nodes"] == 1
    assert xid_inbox.dispatch_pending(store.engine, now=NOW) is None  # nothing new
    inject(cluster, [("r01-n01", 79, 0, 1)], at=NOW, tag="a")  # the same delivery again: ignored
    assert xid_inbox.dispatch_pending(store.engine, now=NOW) is None
    inject(cluster, [("r02-n01", 48, 3, 2)], at=NOW, tag="b")
    second = xid_inbox.dispatch_pending(store.engine, now=NOW)
    assert second is not None

    run_a = store.ensure_run("a", suite="xid", backend="sim")
    run_b = store.ensure_run("b", suite="xid", backend="sim")
    claimed_a = xid_inbox.claim(
        store.engine, run_a, dispatch_ids=[first["dispatch_id"]], now=NOW, max_nodes=10
    )
    claimed_b = xid_inbox.claim(
        store.engine, run_b, dispatch_ids=[second["dispatch_id"]], now=NOW, max_nodes=10
    )
    assert list(claimed_a) == ["r01-n01"]
    assert list(claimed_b) == ["r02-n01"]
    assert len(claimed_b["r02-n01"]) == 3  # GPU-at-PCI line + 2 Xid lines
    # Claiming again returns the same rows; nobody else gets them.
    assert (
        xid_inbox.claim(store.engine, run_a, dispatch_ids=[first["dispatch_id"]], now=NOW, max_nodes=10)
        == claimed_a
    )


def test_claim_caps_nodes_per_run_and_stale_dispatches_are_reclaimed(
    store: Store, cluster: SimCluster
) -> None:
    inject(cluster, [(f"r01-n0{i}", 13, 0, 1) for i in range(1, 6)], at=NOW, tag="c")
    assert xid_inbox.dispatch_pending(store.engine, now=NOW) is not None  # its run never comes
    run = store.ensure_run("late", suite="xid", backend="sim")
    assert xid_inbox.claim(store.engine, run, dispatch_ids=None, now=NOW, max_nodes=2) == {}  # not stale yet
    later = NOW + xid_inbox.STALE_DISPATCH + dt.timedelta(seconds=1)
    assert len(xid_inbox.claim(store.engine, run, dispatch_ids=None, now=later, max_nodes=2)) == 2
    run2 = store.ensure_run("late2", suite="xid", backend="sim")
    assert len(xid_inbox.claim(store.engine, run2, dispatch_ids=None, now=later, max_nodes=10)) == 3


def test_busy_node_waits_for_its_job_before_r3(store: Store, cluster: SimCluster) -> None:
    inject(cluster, [("r01-n04", 79, 0, 1)], at=NOW, tag="d")
    cluster.set_gpu_pods("r01-n04", 1)
    run_id = xid.run_remediation(
        store, cluster, run_key="busy", fleet="demo", breaker=xid.XidBreaker(), dry_run=False, now=NOW
    )
    node = cluster.node("r01-n04")
    assert node.unschedulable  # cordoned at once: no new work lands on it
    assert not [p for p in store.probes(run_id) if p["tool"] == "dcgm"]  # r3 not run under a job
    assert (
        xid.remediate(store, cluster, run_id=run_id, run_key="busy", node="r01-n04", dry_run=False, now=NOW)[
            "state"
        ]
        == "waiting"
    )
    cluster.set_gpu_pods("r01-n04", 0)
    outcome = xid.remediate(
        store, cluster, run_id=run_id, run_key="busy", node="r01-n04", dry_run=False, now=NOW
    )
    assert outcome["action"] == "return_to_service"
    assert not cluster.node("r01-n04").unschedulable


def test_unreadable_xid_line_is_inconclusive_not_dropped(store: Store, cluster: SimCluster) -> None:
    xid_inbox.receive_lines(
        store.engine,
        [("k1", "r01-n05", "2026-11-29T12:00:00+00:00 r01-n05 kernel: NVRM: Xid (PCI:garbage", "test")],
        at=NOW,
    )
    run_id = xid.run_remediation(
        store, cluster, run_key="u", fleet="demo", breaker=xid.XidBreaker(), dry_run=False, now=NOW
    )
    results = {v["result"] for v in store.verdicts(run_id) if v["criterion"] == "D-DEV-06"}
    assert results == {"inconclusive"}
    assert not cluster.node("r01-n05").unschedulable


def test_trigger_fires_once_per_batch_and_serializes(
    store: Store, cluster: SimCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from fleetval_airflow.triggers.xid_inbox import XidInboxTrigger

    url = store.engine.url.render_as_string(hide_password=False)
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLEETVAL_DB", json.dumps({"conn_type": "generic", "extra": {"url": url}})
    )
    trigger = XidInboxTrigger(poll_interval=0.05)
    classpath, kwargs = trigger.serialize()
    assert classpath == "fleetval_airflow.triggers.xid_inbox.XidInboxTrigger"
    assert XidInboxTrigger(**kwargs).serialize() == (classpath, kwargs)

    async def first_event(timeout: float) -> object:
        agen = XidInboxTrigger(**kwargs).run()
        try:
            return await asyncio.wait_for(agen.__anext__(), timeout)
        except TimeoutError:
            return None
        finally:
            await agen.aclose()

    assert asyncio.run(first_event(0.5)) is None  # empty inbox: no event
    inject(cluster, [("r01-n01", 79, 0, 1)], at=NOW, tag="e")
    event = asyncio.run(first_event(5))
    assert event is not None
    assert event.payload["nodes"] == 1  # type: ignore[attr-defined]
    assert asyncio.run(first_event(0.5)) is None  # dispatched once


def test_two_decisions_on_one_gpu_are_both_stored(store: Store, cluster: SimCluster) -> None:
    inject(cluster, [("r01-n06", 13, 2, 1), ("r01-n06", 79, 2, 1)], at=NOW, tag="f")
    run_id = xid.run_remediation(
        store, cluster, run_key="two", fleet="demo", breaker=xid.XidBreaker(), dry_run=True, now=NOW
    )
    rows = [v for v in store.verdicts(run_id) if v["criterion"] == "D-DEV-06"]
    assert sorted(r["evidence"]["xid"] for r in rows) == [13, 79]
    assert len({r["subject"] for r in rows}) == 2
