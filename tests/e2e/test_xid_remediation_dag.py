"""End to end: `xid_remediation` with dag.test() on the simulated demo fleet, store on PostgreSQL.

Xid 79 on a GPU the spec says is damaged → cordon → r3 fails → quarantined; a transient Xid 79 →
cordon → r3 passes → back in service; an application Xid 13 and a 300-line Xid 45 storm cordon
nothing. Every cordon has its time-to-cordon recorded; the breaker and shadow mode hold."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fleetval.sim.cluster import SimCluster
from fleetval.sim.xid_source import inject, inject_spec_faults
from fleetval.store.repository import Store

PARAMS = {"max_fleet_fraction": 0.25, "max_rack_fraction": 0.5, "breaker_window_s": 300}


def _run(dagbag: Any, conf: dict[str, Any]) -> Any:
    return dagbag.dags["xid_remediation"].test(run_conf=conf)


def test_xid_remediation_flow(airflow_db: None, dagbag: Any, sim_demo: tuple[Store, SimCluster]) -> None:
    store, cluster = sim_demo
    now = dt.datetime.now(dt.UTC)
    inject_spec_faults(cluster, at=now, tag="t1")  # r02-n08: Xid 79 on GPU 2, which the spec damages
    inject(cluster, [("r01-n01", 79, 4, 1), ("r01-n02", 13, 0, 1)], at=now, tag="t1")
    inject(cluster, [(n, 45, 1, 300) for n in ("r01-n04", "r01-n05", "r01-n06")], at=now, tag="t1")

    dag_run = _run(dagbag, PARAMS)
    assert dag_run.state == "success"

    nodes = {n.name: n for n in cluster.list_nodes()}
    assert nodes["r02-n08"].unschedulable
    assert nodes["r02-n08"].labels["fleetval.io/quarantine"] == "dcgm-r3-fail"
    assert nodes["r02-n08"].labels["fleetval.io/xid-remediation"] == "quarantined"
    assert not nodes["r01-n01"].unschedulable  # transient: r3 passed, returned to service
    assert nodes["r01-n01"].labels["fleetval.io/xid-remediation"] == "done"
    assert not any(t["key"] == "fleetval.io/maintenance" for t in nodes["r01-n01"].taints)
    for node in ("r01-n02", "r01-n04", "r01-n05", "r01-n06"):
        assert not nodes[node].unschedulable, node

    rows = store.verdicts()
    ttc = {r["subject"]: r["evidence"]["time_to_cordon_s"] for r in rows if r["criterion"] == "D-DEV-05"}
    assert set(ttc) == {"r02-n08", "r01-n01"}
    assert all(0 <= s < 60 for s in ttc.values())
    post = {r["subject"]: r["result"] for r in rows if r["criterion"] == "D-DEV-02"}
    assert post == {"r02-n08": "fail", "r01-n01": "pass"}
    xid = [r for r in rows if r["criterion"] == "D-DEV-06"]
    storm = [r for r in xid if r["evidence"].get("xid") == 45]
    assert len(storm) == 3  # one decision per GPU, not 900
    assert all(r["action"] != "cordon" for r in storm)
    app = [r for r in xid if r["evidence"].get("xid") == 13]
    assert [r["result"] for r in app] == ["warn"]
    # Raw lines are kept per node as an `xid` probe.
    xid_probes = [p for p in store.probes(rows[0]["run_id"]) if p["tool"] == "xid"]
    assert len(xid_probes) == 6
    assert sum(p["raw"].count("NVRM: Xid") for p in xid_probes) == 903

    # Nothing left pending: a second run claims nothing and cordons nothing.
    before = len(store.node_events())
    assert _run(dagbag, PARAMS).state == "success"
    assert len(store.node_events()) == before


def test_breaker_and_shadow_mode(airflow_db: None, dagbag: Any, sim_demo: tuple[Store, SimCluster]) -> None:
    store, cluster = sim_demo
    victims = ["r01-n01", "r01-n02", "r01-n03", "r02-n01", "r02-n02"]
    inject(cluster, [(n, 79, 0, 1) for n in victims], at=dt.datetime.now(dt.UTC), tag="storm")
    # Room for 2 of 16 nodes: the breaker withholds three cordons; shadow mode touches nothing.
    dag_run = _run(dagbag, {**PARAMS, "max_fleet_fraction": 0.125, "dry_run": True})
    assert dag_run.state == "success"
    assert not any(n.unschedulable for n in cluster.list_nodes())
    cordons = [
        e for e in store.node_events() if e["kind"] == "cordon" and e["details"].get("source") == "xid"
    ]
    assert len(cordons) == 2
    assert all(e["dry_run"] for e in store.node_events())
    alerts = [r for r in store.verdicts() if r["criterion"] == "F-SAFE-01"]
    assert sorted(a["subject"] for a in alerts) == sorted(set(victims) - {e["node"] for e in cordons})


def test_breaker_variable_overrides_params(monkeypatch: Any) -> None:
    from fleetval_airflow.xid_tasks import _breaker

    assert _breaker(PARAMS).max_fleet_fraction == 0.25
    monkeypatch.setenv(
        "AIRFLOW_VAR_FLEETVAL_XID_BREAKER", '{"max_fleet_fraction": 0.0625, "breaker_window_s": 5}'
    )
    breaker = _breaker(PARAMS)
    assert breaker.max_fleet_fraction == 0.0625
    assert breaker.max_rack_fraction == 0.5
    assert breaker.window.total_seconds() == 5
