"""End to end: the weekly_health_sweep DAG runs with dag.test() on the simulated demo fleet, the
verdict store on the real PostgreSQL. Every injected DCGM fault is caught by the right criterion
on the right node and GPU; healthy nodes pass; a rerun adds no duplicate verdicts."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from fleetval.sim.cluster import SimCluster
from fleetval.store.models import NodeEvent, Probe, VerdictRow
from fleetval.store.repository import Store
from tests.paths import ROOT

DEMO = ROOT / "include" / "fleetval" / "sim" / "fleets" / "demo.yaml"
DCGM_FAULTS = {
    "r01-n03": ("fail", "5"),
    "r01-n07": ("fail", "1"),
    "r02-n02": ("fail", "0"),
    "r02-n05": ("warn", "3"),
}


@pytest.fixture
def sim_fleet(sim_demo: tuple[Store, SimCluster]) -> tuple[Store, SimCluster]:
    _store, cluster = sim_demo
    cluster.set_gpu_pods("r01-n01", 2)  # a busy node: not idle, so not swept
    return sim_demo


def _run(dagbag: Any, conf: dict[str, Any]) -> Any:
    dag = dagbag.dags["weekly_health_sweep"]
    return dag.test(run_conf=conf)


def test_weekly_sweep_catches_every_dcgm_fault(
    airflow_db: None, dagbag: Any, sim_fleet: tuple[Store, SimCluster]
) -> None:
    store, cluster = sim_fleet
    dag_run = _run(
        dagbag, {"max_fleet_fraction": 0.25, "max_rack_fraction": 0.5, "max_action_fraction": 0.25}
    )
    assert dag_run.state == "success"

    rows = store.verdicts()
    node_verdicts = {
        r["subject"]: r for r in rows if r["criterion"] == "D-DEV-03" and r["subject"] != "cluster"
    }
    assert "r01-n01" not in node_verdicts  # busy
    swept = {n.name for n in cluster.list_nodes()} - {"r01-n01"}
    assert set(node_verdicts) == swept
    for node, verdict in node_verdicts.items():
        expected = DCGM_FAULTS.get(node, ("pass", None))[0]
        assert verdict["result"] == expected, node

    gpu_records = [r for r in rows if r["criterion"] == "D-DEV-04"]
    assert len(gpu_records) == 8 * len(swept)
    bad = {
        (r["evidence"]["node"], r["evidence"]["gpu_index"]): r["result"]
        for r in gpu_records
        if r["result"] != "pass"
    }
    assert bad == {(n, gpu): result for n, (result, gpu) in DCGM_FAULTS.items()}
    for r in gpu_records:
        assert r["subject"] == cluster.gpu_uuids(r["evidence"]["node"])[int(r["evidence"]["gpu_index"])]
        assert r["evidence"]["level"] == 2

    coverage = next(r for r in rows if r["subject"] == "cluster")
    assert coverage["result"] == "pass"
    assert coverage["evidence"]["skipped_by_reason"] == {"busy (2 GPU pods)": 1}

    # The failed nodes are cordoned, labelled and tainted; the warned one only flagged.
    nodes = {n.name: n for n in cluster.list_nodes()}
    for node, (result, _) in DCGM_FAULTS.items():
        assert nodes[node].unschedulable is (result == "fail"), node
        assert (nodes[node].labels.get("fleetval.io/quarantine") == "dcgm-r2-fail") is (result == "fail")
    assert nodes["r02-n05"].labels["fleetval.io/health"] == "warn"
    assert not nodes["r02-n08"].unschedulable  # an Xid fault is not a DCGM r2 finding

    # Raw output is kept for every probe, so any verdict can be re-judged.
    assert store.count(Probe) == len(swept)

    # A retry of the whole sweep under the same run key adds nothing.
    counts = (store.count(VerdictRow), store.count(Probe), store.count(NodeEvent))
    from fleetval.policy.blast_radius import ActionBudget
    from fleetval.suites import weekly

    run = next(r for r in rows if r["subject"] == "cluster")["run_id"]
    run_key = store.engine.connect().exec_driver_sql(f"SELECT run_key FROM runs WHERE id={run}").scalar_one()
    cluster.uncordon("r01-n03")  # state changed since; the run key still identifies the same sweep
    plan = weekly.SweepPlan.from_json(store.run_meta(run)["plan"])
    for wave in plan.waves:
        weekly.sweep_wave(
            store,
            cluster,
            run_id=run,
            run_key=run_key,
            plan=plan,
            wave=wave,
            action_budget=ActionBudget(0.25, 0.5),
            dry_run=False,
            as_of=dt.datetime.now(dt.UTC),
        )
    assert (store.count(VerdictRow), store.count(Probe), store.count(NodeEvent)) == counts


def test_dry_run_and_circuit_breaker(
    airflow_db: None, dagbag: Any, sim_fleet: tuple[Store, SimCluster]
) -> None:
    store, cluster = sim_fleet
    # Three r2 failures but room to cordon one node (1/16 of the fleet): two alerts instead.
    dag_run = _run(
        dagbag,
        {
            "dry_run": True,
            "max_fleet_fraction": 0.25,
            "max_rack_fraction": 0.5,
            "max_action_fraction": 0.0625,
        },
    )
    assert dag_run.state == "success"
    assert not any(n.unschedulable for n in cluster.list_nodes())  # dry run: nothing touched
    events = store.node_events()
    assert events and all(e["dry_run"] for e in events)
    assert len({e["node"] for e in events if e["kind"] == "cordon"}) == 1
    alerts = [r for r in store.verdicts() if r["criterion"] == "F-SAFE-01"]
    assert len(alerts) == 2 and all(a["result"] == "fail" for a in alerts)
