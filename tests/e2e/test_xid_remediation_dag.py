"""End to end, on the one real path: `xid_remediation` on a running Airflow 3, the demo fleet behind
`kubernetes_default` on both backends (the simulated cluster, and the real control plane with the
fleet's nodes joined by the virtual kubelet), verdicts in the real PostgreSQL.

Xid 79 on a GPU the device plugin withdrew → cordon → quarantined on that evidence (r3 could
not reach every GPU); a transient Xid 79 → cordon → an r3 probe pod → passes → back in service;
an application Xid 13 and a 300-line Xid 45 storm cordon nothing. Every cordon has its
time-to-cordon recorded; the breaker and shadow mode hold."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from fleetval.fleet.spec import load_fleet_spec
from fleetval.xid.simulated_source import inject, inject_spec_faults
from tests.e2e.conftest import BACKENDS
from tests.paths import DEMO_FLEET

PARAMS = {"max_fleet_fraction": 0.25, "max_rack_fraction": 0.5, "breaker_window_s": 300}
FLEET = load_fleet_spec(DEMO_FLEET.read_text())


def _run(airflow: Any, conf: dict[str, Any]) -> tuple[str, str]:
    run_id = airflow.trigger("xid_remediation", conf)
    return str(airflow.wait_run("xid_remediation", run_id)), str(run_id)


@pytest.mark.parametrize("backend", BACKENDS)
def test_xid_remediation_flow(e2e: Any, backend: str) -> None:
    env = e2e(DEMO_FLEET, backend=backend)
    kube, airflow = env.kube, env.airflow
    store = kube.store
    now = dt.datetime.now(dt.UTC)
    inject_spec_faults(store.engine, FLEET, at=now, tag="t1")  # r02-n08: Xid 79, GPU 2 withdrawn
    inject(store.engine, FLEET, [("r01-n01", 79, 4, 1), ("r01-n02", 13, 0, 1)], at=now, tag="t1")
    inject(
        store.engine, FLEET, [(n, 45, 1, 300) for n in ("r01-n04", "r01-n05", "r01-n06")], at=now, tag="t1"
    )

    state, run_id = _run(airflow, PARAMS)
    assert state == "success"

    nodes = {n.name: n for n in kube.cluster.list_nodes()}
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
    post = {r["subject"]: (r["result"], r["rule_id"]) for r in rows if r["criterion"] == "D-DEV-02"}
    assert post["r02-n08"] == ("fail", "post_xid.gpu_withdrawn")
    assert post["r01-n01"][0] == "pass"
    xid = [r for r in rows if r["criterion"] == "D-DEV-06"]
    storm_verdicts = [r for r in xid if r["evidence"].get("xid") == 45]
    assert len(storm_verdicts) == 3  # one decision per GPU, not 900
    assert all(r["action"] != "cordon" for r in storm_verdicts)
    app = [r for r in xid if r["evidence"].get("xid") == 13]
    assert [r["result"] for r in app] == ["warn"]
    # Raw lines are kept per node as an `xid` probe; the r3 output as a `dcgm` probe of level 3.
    probes = store.probes(rows[0]["run_id"])
    xid_probes = [p for p in probes if p["tool"] == "xid"]
    assert len(xid_probes) == 6
    assert sum(p["raw"].count("NVRM: Xid") for p in xid_probes) == 903
    [r3] = [p for p in probes if p["tool"] == "dcgm"]
    assert (
        r3["nodes"] == ["r01-n01"]
        and '"Driver Version Detected"' in r3["raw"]
        and r3["spec"]["params"]["level"] == 3
    )

    # One r3 probe task, named by its node, in the Airflow grid.
    r3_tasks = [t for t in airflow.task_states("xid_remediation", run_id) if t["task_id"] == "dcgm_r3"]
    assert [(t["rendered_map_index"], t["state"]) for t in r3_tasks] == [("r01-n01", "success")]

    # Nothing left pending: a second run claims nothing and cordons nothing.
    before = len(store.node_events())
    assert _run(airflow, PARAMS)[0] == "success"
    assert len(store.node_events()) == before


# make test-all; the breaker and dry run without Airflow: tests/fleetval/xid/test_steps.py
@pytest.mark.e2e_long
def test_breaker_and_shadow_mode(e2e: Any) -> None:
    env = e2e(DEMO_FLEET)
    kube, airflow = env.kube, env.airflow
    store = kube.store
    victims = ["r01-n01", "r01-n02", "r01-n03", "r02-n01", "r02-n02"]
    inject(store.engine, FLEET, [(n, 79, 0, 1) for n in victims], at=dt.datetime.now(dt.UTC), tag="storm")
    # Room for 2 of 16 nodes: the breaker withholds three cordons; shadow mode touches nothing.
    assert _run(airflow, {**PARAMS, "max_fleet_fraction": 0.125, "dry_run": True})[0] == "success"
    assert not any(n.unschedulable for n in kube.cluster.list_nodes())
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


# make test-all: an Airflow of its own, with schedules (asset-triggered runs), ~3 min on 2 cores.
@pytest.mark.e2e_long
def test_the_trigger_cordons_before_the_event_run_exists(sim_kube: Any, tmp_path: Any) -> None:
    from fleetval.sim.airflow_run import LocalAirflow

    kube = sim_kube(DEMO_FLEET)
    store = kube.store
    airflow = LocalAirflow(
        tmp_path / "home", kube.db_url, kube.kubeconfig, use_schedules=True, deferrable_probes=False
    )
    with airflow:
        airflow.unpause("xid_remediation")
        inject(store.engine, FLEET, [("r01-n01", 79, 0, 1)], at=dt.datetime.now(dt.UTC), tag="event")
        airflow.wait_for("the cordon", lambda: kube.node("r01-n01").spec.unschedulable, 180, interval_s=0.2)
        [cordon] = store.node_events(node="r01-n01", kind="cordon")
        assert cordon["event_key"].startswith("xid-on-read/")  # the trigger's, before any run
        assert any(t.key == "fleetval.io/maintenance" for t in kube.node("r01-n01").spec.taints)
        run_id = airflow.first_run("xid_remediation")
        assert airflow.wait_run("xid_remediation", run_id) == "success"
    assert len(store.node_events(node="r01-n01", kind="cordon")) == 1  # the run did not cordon again
    [ttc] = [r for r in store.verdicts() if r["criterion"] == "D-DEV-05"]
    assert ttc["subject"] == "r01-n01" and ttc["evidence"]["dry_run"] is False
    assert not kube.node("r01-n01").spec.unschedulable  # r3 passed: back in service
