"""Xid inbox semantics (SQLite and PostgreSQL) and the remediation steps against the simulated
cluster, without Airflow."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from fleetval.fleet.spec import FleetSpec, load_fleet_spec
from fleetval.probes import outputs as probe_outputs
from fleetval.sim.images import dcgm_report
from fleetval.store import xid_inbox
from fleetval.store.repository import Store
from fleetval.xid import steps as xid
from fleetval.xid.simulated_source import inject as inject_lines
from tests.paths import DEMO_FLEET
from tests.simkube import SimKube

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
FLEET = load_fleet_spec(DEMO_FLEET.read_text())


class Inbox:
    """The simulator's Xid lines delivered to a store (what `cluster` stood for in these tests)."""

    def __init__(self, store: Store, fleet: FleetSpec) -> None:
        self.store, self.fleet = store, fleet


@pytest.fixture
def cluster(store: Store) -> Inbox:
    return Inbox(store, FLEET)


def inject(inbox: Inbox, injections: list[tuple[str, int, int, int]], *, at: dt.datetime, tag: str) -> int:
    return inject_lines(inbox.store.engine, inbox.fleet, injections, at=at, tag=tag)


@pytest.fixture
def kube(sim_kube: Any) -> SimKube:
    return sim_kube(DEMO_FLEET)  # type: ignore[no-any-return]


def decide(kube: SimKube, run_key: str, *, dry_run: bool = False) -> int:
    store = kube.store
    run_id = store.ensure_run(run_key, suite="xid", backend="kubernetes")
    claimed = xid_inbox.claim(store.engine, run_id, dispatch_ids=None, now=NOW, max_nodes=100)
    xid.decide_and_cordon(
        store,
        kube.cluster,
        run_id=run_id,
        run_key=run_key,
        claimed=claimed,
        breaker=xid.XidBreaker(),
        dry_run=dry_run,
        now=NOW,
    )
    return run_id


def judge(kube: SimKube, run_id: int, run_key: str, spec: Any) -> dict[str, Any]:
    return xid.judge_r3(
        kube.store, kube.cluster, run_id=run_id, run_key=run_key, spec=spec, dry_run=False, now=NOW
    )


def test_dispatch_then_claim_is_exactly_once(store: Store, cluster: Inbox) -> None:
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


def test_claim_caps_nodes_per_run_and_stale_dispatches_are_reclaimed(store: Store, cluster: Inbox) -> None:
    inject(cluster, [(f"r01-n0{i}", 13, 0, 1) for i in range(1, 6)], at=NOW, tag="c")
    assert xid_inbox.dispatch_pending(store.engine, now=NOW) is not None  # its run never comes
    run = store.ensure_run("late", suite="xid", backend="sim")
    assert xid_inbox.claim(store.engine, run, dispatch_ids=None, now=NOW, max_nodes=2) == {}  # not stale yet
    later = NOW + xid_inbox.STALE_DISPATCH + dt.timedelta(seconds=1)
    assert len(xid_inbox.claim(store.engine, run, dispatch_ids=None, now=later, max_nodes=2)) == 2
    run2 = store.ensure_run("late2", suite="xid", backend="sim")
    assert len(xid_inbox.claim(store.engine, run2, dispatch_ids=None, now=later, max_nodes=10)) == 3


def test_r3_waits_for_the_job_then_returns_a_healthy_node(kube: SimKube) -> None:
    store = kube.store
    inject_lines(store.engine, FLEET, [("r01-n04", 79, 0, 1)], at=NOW, tag="d")
    kube.run_workload("r01-n04", 1)
    # A probe pod (an earlier attempt's, which the operator reattaches to) is not a workload.
    kube.run_workload("r01-n04", 1, name="probe", labels={"fleetval.io/probe": "earlier-attempt"})
    run_id = decide(kube, "busy")
    assert kube.node("r01-n04").spec.unschedulable  # cordoned at once: no new work lands on it
    assert kube.cluster.workload_gpu_pods("r01-n04") == 1  # the job that hit the Xid: r3 waits

    [spec], without = xid.r3_probes(kube.cluster, ["r01-n04"], run_key="busy")
    assert without == {} and spec.gpus == 8 and spec.params["level"] == 3
    raw = dcgm_report(FLEET, "r01-n04", 3)
    probe_outputs.store_probe_outputs(
        store, run_id, [probe_outputs.probe_output(spec, raw, exit_code=0, error=None, finished_at=0)]
    )
    outcome = xid.judge_r3(
        store, kube.cluster, run_id=run_id, run_key="busy", spec=spec, dry_run=False, now=NOW
    )
    assert outcome["action"] == "return_to_service"
    node = kube.node("r01-n04")
    assert not node.spec.unschedulable
    assert node.metadata.labels["fleetval.io/xid-remediation"] == "done"
    assert not [t for t in node.spec.taints or [] if t.key == "fleetval.io/maintenance"]


def test_a_node_whose_gpu_was_withdrawn_is_quarantined_without_r3(kube: SimKube) -> None:
    store = kube.store
    run_id = store.ensure_run("withdrawn", suite="xid", backend="kubernetes")
    specs, without = xid.r3_probes(kube.cluster, ["r02-n08", "r01-n01", "gone-n99"], run_key="w")
    assert [s.node for s in specs] == ["r01-n01"]
    assert "withdrew 1 of 8 GPUs" in without["r02-n08"] and without["gone-n99"] == "the node is gone"
    verdicts = xid.quarantine_withdrawn(
        store, kube.cluster, run_id=run_id, run_key="w", withdrawn=without, dry_run=False, now=NOW
    )
    assert {(v.subject, v.result.value) for v in verdicts} == {("r02-n08", "fail"), ("gone-n99", "error")}
    node = kube.node("r02-n08")
    assert node.spec.unschedulable
    assert node.metadata.labels["fleetval.io/quarantine"] == "dcgm-r3-fail"
    assert node.metadata.labels["fleetval.io/xid-remediation"] == "quarantined"


def test_r3_that_never_ran_is_an_error_and_the_node_stays_cordoned(kube: SimKube) -> None:
    store = kube.store
    inject_lines(store.engine, FLEET, [("r01-n05", 79, 0, 1)], at=NOW, tag="n")
    run_id = decide(kube, "never")
    [spec], _ = xid.r3_probes(kube.cluster, ["r01-n05"], run_key="never")
    outcome = xid.judge_r3(
        store, kube.cluster, run_id=run_id, run_key="never", spec=spec, dry_run=False, now=NOW
    )
    assert outcome["result"] == "error"
    assert kube.node("r01-n05").spec.unschedulable


def test_unreadable_xid_line_is_inconclusive_not_dropped(kube: SimKube) -> None:
    xid_inbox.receive_lines(
        kube.store.engine,
        [("k1", "r01-n05", "2026-11-29T12:00:00+00:00 r01-n05 kernel: NVRM: Xid (PCI:garbage", "test")],
        at=NOW,
    )
    run_id = decide(kube, "u")
    results = {v["result"] for v in kube.store.verdicts(run_id) if v["criterion"] == "D-DEV-06"}
    assert results == {"inconclusive"}
    assert not kube.node("r01-n05").spec.unschedulable


def test_trigger_fires_once_per_batch_and_serializes(
    store: Store, cluster: Inbox, monkeypatch: pytest.MonkeyPatch
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


def test_two_decisions_on_one_gpu_are_both_stored(kube: SimKube) -> None:
    inject_lines(kube.store.engine, FLEET, [("r01-n06", 13, 2, 1), ("r01-n06", 79, 2, 1)], at=NOW, tag="f")
    run_id = decide(kube, "two", dry_run=True)
    rows = [v for v in kube.store.verdicts(run_id) if v["criterion"] == "D-DEV-06"]
    assert sorted(r["evidence"]["xid"] for r in rows) == [13, 79]
    assert len({r["subject"] for r in rows}) == 2


def test_no_readable_log_is_inconclusive_not_a_pass(kube: SimKube) -> None:
    """Binary garbage in a node's lines was judged "no Xid events" (a pass): no readable log is
    not a healthy log."""
    xid_inbox.receive_lines(kube.store.engine, [("g1", "r01-n05", "\x00\x8f\x03\x7f\ufffd", "test")], at=NOW)
    run_id = decide(kube, "garbage")
    rows = [v for v in kube.store.verdicts(run_id) if v["criterion"] == "D-DEV-06"]
    assert [(r["subject"], r["result"], r["rule_id"]) for r in rows] == [
        ("r01-n05", "inconclusive", "xid.log.unreadable")
    ]
    assert not kube.node("r01-n05").spec.unschedulable


def test_a_failure_judging_one_node_is_an_error_verdict_and_the_others_are_cordoned(
    kube: SimKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetval.xid.judge import judge_xid as real_judge

    def judge_failing_on_n05(events: Any, *, node: str, **kwargs: Any) -> Any:
        if node == "r01-n05":
            raise RuntimeError("simulated bug in the judge")
        return real_judge(events, node=node, **kwargs)

    monkeypatch.setattr(xid, "judge_xid", judge_failing_on_n05)
    inject_lines(kube.store.engine, FLEET, [("r01-n04", 79, 0, 1), ("r01-n05", 79, 0, 1)], at=NOW, tag="x")
    run_id = decide(kube, "bug")
    rows = {v["subject"]: v for v in kube.store.verdicts(run_id) if v["criterion"] == "D-DEV-06"}
    bad = rows["r01-n05"]
    assert (bad["result"], bad["rule_id"]) == ("error", "xid.judge.error")
    assert "RuntimeError: simulated bug in the judge" in bad["evidence"]["error"]
    assert not kube.node("r01-n05").spec.unschedulable  # no decision: the node is left as it is
    assert kube.node("r01-n04").spec.unschedulable  # the other node was judged and cordoned
