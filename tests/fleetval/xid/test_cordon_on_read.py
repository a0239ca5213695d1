"""The cordon as the trigger reads the lines (`cordon_on_read`), before any DAG run exists, and the
DAG run's `decide_and_cordon` after it: one cordon per node, the same breaker, the same shadow
mode, and a node the first step could not cordon is cordoned by the second."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import pytest

from fleetval.fleet.spec import load_fleet_spec
from fleetval.store import xid_inbox
from fleetval.xid import steps as xid
from fleetval.xid.simulated_source import inject
from tests.paths import DEMO_FLEET
from tests.simkube import SimKube

FLEET = load_fleet_spec(DEMO_FLEET.read_text())  # 16 nodes, racks r01 and r02
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)  # recent: the breaker window counts from the clock
OPEN = xid.XidBreaker(1.0, 1.0)


@pytest.fixture
def kube(sim_kube: Any) -> SimKube:
    return sim_kube(DEMO_FLEET)  # type: ignore[no-any-return]


def dispatch(kube: SimKube, injections: list[tuple[str, int, int, int]], tag: str) -> str:
    inject(kube.store.engine, FLEET, injections, at=NOW, tag=tag)
    batch = xid_inbox.dispatch_pending(kube.store.engine, now=NOW)
    assert batch is not None
    return str(batch["dispatch_id"])


def run_after(
    kube: SimKube, dispatch_id: str, *, breaker: xid.XidBreaker = OPEN, dry_run: bool = False
) -> tuple[int, list[xid.CordonOutcome]]:
    """The DAG run the event starts: claim the dispatch, then decide_and_cordon."""
    store = kube.store
    run_id = store.ensure_run(f"run/{dispatch_id}", suite="xid", backend="kubernetes")
    claimed = xid_inbox.claim(store.engine, run_id, dispatch_ids=[dispatch_id], now=NOW, max_nodes=100)
    outcomes = xid.decide_and_cordon(
        store,
        kube.cluster,
        run_id=run_id,
        run_key=f"run/{dispatch_id}",
        claimed=claimed,
        breaker=breaker,
        dry_run=dry_run,
        now=NOW,
        dispatch_ids=[dispatch_id],
    )
    return run_id, outcomes


def cordon_events(kube: SimKube) -> list[dict[str, Any]]:
    return kube.store.node_events(kind="cordon")


def test_the_trigger_cordons_taints_and_labels_and_the_run_records_it_once(kube: SimKube) -> None:
    dispatch_id = dispatch(kube, [("r01-n01", 79, 0, 1), ("r02-n03", 48, 1, 1), ("r01-n02", 13, 0, 1)], "a")
    outcomes = xid.cordon_on_read(
        kube.store, kube.cluster, dispatch_id=dispatch_id, breaker=OPEN, dry_run=False, now=NOW
    )
    assert sorted(o.node for o in outcomes if o.cordoned) == ["r01-n01", "r02-n03"]
    for name in ("r01-n01", "r02-n03"):
        node = kube.node(name)
        assert node.spec.unschedulable
        assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [
            ("fleetval.io/maintenance", "xid", "NoSchedule")
        ]
        assert node.metadata.labels["fleetval.io/xid-remediation"] == "pending-r3"
    assert not kube.node("r01-n02").spec.unschedulable  # an application Xid 13 once: no cordon
    assert len(cordon_events(kube)) == 2

    run_id, after = run_after(kube, dispatch_id)
    assert sorted(o.node for o in after if o.cordoned) == ["r01-n01", "r02-n03"]  # r3 follows for both
    assert len(cordon_events(kube)) == 2  # not cordoned a second time
    ttc = {v["subject"]: v for v in kube.store.verdicts(run_id) if v["criterion"] == "D-DEV-05"}
    assert sorted(ttc) == ["r01-n01", "r02-n03"]
    early = {e["node"]: e["at"] for e in cordon_events(kube)}
    for name, verdict in ttc.items():
        # The time recorded is the trigger's cordon, not this later task's.
        expected = early[name].timestamp() - NOW.timestamp()
        assert verdict["evidence"]["time_to_cordon_s"] == pytest.approx(expected, abs=0.01)
    judged = {v["evidence"].get("node") for v in kube.store.verdicts(run_id) if v["criterion"] == "D-DEV-06"}
    assert judged == {"r01-n01", "r02-n03", "r01-n02"}  # the decisions are the run's verdicts


def test_the_breaker_holds_in_the_trigger_and_the_run_raises_its_alerts(kube: SimKube) -> None:
    victims = ["r01-n01", "r01-n02", "r01-n03", "r02-n01", "r02-n02"]
    dispatch_id = dispatch(kube, [(n, 79, 0, 1) for n in victims], "b")
    tight = xid.XidBreaker(0.125, 1.0)  # 2 of 16 nodes
    outcomes = xid.cordon_on_read(
        kube.store, kube.cluster, dispatch_id=dispatch_id, breaker=tight, dry_run=False, now=NOW
    )
    cordoned = sorted(o.node for o in outcomes if o.cordoned)
    withheld = sorted(o.node for o in outcomes if o.withheld)
    assert len(cordoned) == 2 and sorted(cordoned + withheld) == victims
    assert sorted(n.name for n in kube.cluster.list_nodes() if n.unschedulable) == cordoned

    # A run with a looser breaker still raises the trigger's alerts and cordons nothing more.
    run_id, after = run_after(kube, dispatch_id, breaker=OPEN)
    assert sorted(o.node for o in after if o.cordoned) == cordoned
    alerts = [v for v in kube.store.verdicts(run_id) if v["criterion"] == "F-SAFE-01"]
    assert sorted(a["subject"] for a in alerts) == withheld
    assert all(a["evidence"]["already_cordoned"] == 2 for a in alerts)
    assert sorted(n.name for n in kube.cluster.list_nodes() if n.unschedulable) == cordoned

    # The next burst within the window finds the budget spent.
    second = dispatch(kube, [("r02-n05", 79, 0, 1)], "b2")
    [late] = xid.cordon_on_read(
        kube.store, kube.cluster, dispatch_id=second, breaker=tight, dry_run=False, now=NOW
    )
    assert late.withheld and not kube.node("r02-n05").spec.unschedulable


def test_shadow_mode_in_the_trigger_touches_no_node(kube: SimKube) -> None:
    dispatch_id = dispatch(kube, [("r01-n04", 79, 0, 1)], "c")
    [outcome] = xid.cordon_on_read(
        kube.store, kube.cluster, dispatch_id=dispatch_id, breaker=OPEN, dry_run=True, now=NOW
    )
    assert outcome.cordoned
    node = kube.node("r01-n04")
    assert not node.spec.unschedulable and not node.spec.taints
    assert all(e["dry_run"] for e in kube.store.node_events())
    run_id, _ = run_after(kube, dispatch_id, dry_run=True)
    [verdict] = [v for v in kube.store.verdicts(run_id) if v["criterion"] == "D-DEV-05"]
    assert verdict["evidence"]["dry_run"] is True and "shadow mode" in verdict["reason"]
    assert not kube.node("r01-n04").spec.unschedulable


class FailingFor:
    """The cluster, but the one-call cordon of `node` fails (the API refused it)."""

    def __init__(self, cluster: Any, node: str) -> None:
        self.cluster, self.node = cluster, node

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster, name)

    def cordon_and_taint(self, node: str, **kwargs: Any) -> None:
        if node == self.node:
            raise RuntimeError("simulated API failure")
        self.cluster.cordon_and_taint(node, **kwargs)


def test_a_node_the_trigger_could_not_cordon_is_cordoned_by_the_run(kube: SimKube) -> None:
    dispatch_id = dispatch(kube, [("r01-n05", 79, 0, 1), ("r01-n06", 79, 0, 1)], "d")
    outcomes = xid.cordon_on_read(
        kube.store,
        FailingFor(kube.cluster, "r01-n05"),  # type: ignore[arg-type]
        dispatch_id=dispatch_id,
        breaker=OPEN,
        dry_run=False,
        now=NOW,
    )
    assert {o.node: o.cordoned for o in outcomes} == {"r01-n05": False, "r01-n06": True}
    assert [e["node"] for e in cordon_events(kube)] == ["r01-n06"]  # recorded only once applied
    assert not kube.node("r01-n05").spec.unschedulable

    _, after = run_after(kube, dispatch_id)
    assert sorted(o.node for o in after if o.cordoned) == ["r01-n05", "r01-n06"]
    assert kube.node("r01-n05").spec.unschedulable
    assert any(t.key == "fleetval.io/maintenance" for t in kube.node("r01-n05").spec.taints)
    assert sorted(e["node"] for e in cordon_events(kube)) == ["r01-n05", "r01-n06"]


def test_the_trigger_has_cordoned_before_it_fires(kube: SimKube, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetval_airflow.triggers.xid_inbox import XidInboxTrigger

    monkeypatch.setenv("AIRFLOW_VAR_FLEETVAL_XID_BREAKER", json.dumps({"max_fleet_fraction": 1.0}))
    trigger = XidInboxTrigger(
        poll_interval=0.05, source="inbox", cordon_on_read=True, breaker={**xid_breaker_params()}
    )
    classpath, kwargs = trigger.serialize()
    assert XidInboxTrigger(**kwargs).serialize() == (classpath, kwargs)
    inject(
        kube.store.engine, FLEET, [(n, 79, 0, 1) for n in ("r01-n07", "r01-n08", "r02-n07")], at=NOW, tag="e"
    )

    async def first_event() -> Any:
        agen = XidInboxTrigger(**kwargs).run()
        try:
            return await asyncio.wait_for(agen.__anext__(), 30)
        finally:
            await agen.aclose()

    event = asyncio.run(first_event())
    assert event.payload["nodes"] == 3
    # 3 of 16 is past the DAG's 10 % default: the Variable's override was read.
    assert all(kube.node(n).spec.unschedulable for n in ("r01-n07", "r01-n08", "r02-n07"))
    assert {e["details"]["dispatch_id"] for e in cordon_events(kube)} == {event.payload["dispatch_id"]}


def test_cordon_on_read_needs_the_breaker() -> None:
    from fleetval_airflow.triggers.xid_inbox import XidInboxTrigger

    with pytest.raises(ValueError, match="breaker"):
        XidInboxTrigger(cordon_on_read=True)


def xid_breaker_params() -> dict[str, Any]:
    return {"max_fleet_fraction": 0.10, "max_rack_fraction": 0.50, "breaker_window_s": 300}
