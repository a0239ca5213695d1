"""End to end, on the one real path: `weekly_health_sweep` on a running Airflow 3 (LocalExecutor),
its waves as runs of `weekly_health_sweep_wave` with one KubernetesPodOperator task per node, the
pods run by the simulated cluster (`fleetval sim serve`) and by the real control plane (`fleetval
cluster up`: the real scheduler, RBAC and kubelet log proxy; the GPU nodes' virtual kubelet runs
the same image catalog), verdicts in the real PostgreSQL.

Every injected DCGM fault is caught by the right criterion on the right node and GPU; healthy
nodes pass; a busy node and a node whose GPU the device plugin withdrew are not swept, and say
why; failed nodes are cordoned, labelled and tainted on the cluster; a rerun of the same sweep
keeps its plan and adds nothing."""

from __future__ import annotations

from typing import Any

import pytest

from fleetval.fleet.gpus import gpu_uuid
from fleetval.fleet.spec import load_fleet_spec
from fleetval.store.models import NodeEvent, Probe, VerdictRow
from tests.e2e.conftest import BACKENDS
from tests.paths import DEMO_FLEET

DCGM_FAULTS = {
    "r01-n03": ("fail", "5"),
    "r01-n07": ("fail", "1"),
    "r02-n02": ("fail", "0"),
    "r02-n05": ("warn", "3"),
}
SEED = load_fleet_spec(DEMO_FLEET.read_text()).seed
NOT_SWEPT = {"r01-n01", "r02-n08"}  # busy; Xid 79 withdrew a GPU


@pytest.mark.parametrize("backend", BACKENDS)
def test_weekly_sweep_catches_every_dcgm_fault(e2e: Any, backend: str) -> None:
    env = e2e(DEMO_FLEET, backend=backend)
    kube, airflow = env.kube, env.airflow
    kube.run_workload("r01-n01", 2)
    conf = {
        "max_fleet_fraction": 0.5,
        "max_rack_fraction": 0.5,
        "max_action_fraction": 0.25,
        "dry_run": False,
    }
    run_id = airflow.trigger("weekly_health_sweep", conf)
    assert airflow.wait_run("weekly_health_sweep", run_id) == "success"

    # One wave run per wave, one probe task per node in it, named by the node.
    waves = [r for r in airflow.runs("weekly_health_sweep_wave") if r["dag_run_id"].startswith(run_id)]
    # 14 idle nodes, at most 8 (50 % of 16) under diagnosis at once, 4 of a rack (50 % of 8).
    # (Four smaller waves, and the breaker: test_dry_run_and_circuit_breaker, make test-all.)
    assert len(waves) == 2
    probed = {
        ti["rendered_map_index"]
        for wave in waves
        for ti in airflow.task_states("weekly_health_sweep_wave", wave["dag_run_id"])
        if ti["task_id"] == "dcgm_r2"
    }
    store = kube.store
    rows = store.verdicts()
    nodes = {n.metadata.name for n in kube.core.list_node().items}
    swept = nodes - NOT_SWEPT
    assert probed == swept

    node_verdicts = {
        r["subject"]: r for r in rows if r["criterion"] == "D-DEV-03" and r["subject"] != "cluster"
    }
    assert set(node_verdicts) == swept
    for node, verdict in node_verdicts.items():
        assert verdict["result"] == DCGM_FAULTS.get(node, ("pass", None))[0], node

    gpu_records = [r for r in rows if r["criterion"] == "D-DEV-04"]
    assert len(gpu_records) == 8 * len(swept)
    bad = {
        (r["evidence"]["node"], r["evidence"]["gpu_index"]): r["result"]
        for r in gpu_records
        if r["result"] != "pass"
    }
    assert bad == {(n, gpu): result for n, (result, gpu) in DCGM_FAULTS.items()}
    for r in gpu_records:  # GPUs are named by the UUIDs the probe's nvidia-smi -L listed
        assert r["subject"] == gpu_uuid(SEED, r["evidence"]["node"], int(r["evidence"]["gpu_index"]))

    coverage = next(r for r in rows if r["subject"] == "cluster")
    assert coverage["result"] == "pass"
    assert coverage["evidence"]["skipped_by_reason"] == {
        "busy (1 GPU pods)": 1,
        "GPU withdrawn by the device plugin": 1,
    }

    # Failed nodes are cordoned, labelled and tainted on the cluster; the warned one only flagged.
    for node, (result, _) in DCGM_FAULTS.items():
        obj = kube.node(node)
        failed = result == "fail"
        assert bool(obj.spec.unschedulable) is failed, node
        assert (obj.metadata.labels.get("fleetval.io/quarantine") == "dcgm-r2-fail") is failed
        assert any(t.key == "fleetval.io/maintenance" for t in obj.spec.taints or []) is failed
    assert kube.node("r02-n05").metadata.labels["fleetval.io/health"] == "warn"
    # dcgm-exporter was paused on each swept node for its diagnostic and is back, as it was.
    events = store.node_events()
    for kind in ("pause_exporter", "restore_exporter"):
        assert {e["node"] for e in events if e["kind"] == kind} == swept, kind
    for node in nodes:
        labels = kube.node(node).metadata.labels
        assert labels["nvidia.com/gpu.deploy.dcgm-exporter"] == "true", node
        assert not any(key.startswith("fleetval.io/dcgm-exporter") for key in labels), node
    # Probe pods that succeeded are gone; the DCGM findings (exit 226) were reported, not kept.
    assert (
        kube.core.list_namespaced_pod("fleetval", label_selector="app.kubernetes.io/part-of=fleetval").items
        == []
    )
    assert store.count(Probe) == len(swept)

    # Clearing the sweep and running it again keeps the first attempt's plan (the cordoned nodes
    # are still in it) and adds no verdict, probe or node event.
    counts = (store.count(VerdictRow), store.count(Probe), store.count(NodeEvent))
    airflow.call(
        "POST",
        "/api/v2/dags/weekly_health_sweep/clearTaskInstances",
        {"dag_run_id": run_id, "dry_run": False, "only_failed": False, "reset_dag_runs": True},
    )
    assert airflow.wait_run("weekly_health_sweep", run_id) == "success"
    assert (store.count(VerdictRow), store.count(Probe), store.count(NodeEvent)) == counts
    coverage = next(r for r in store.verdicts() if r["subject"] == "cluster")
    assert coverage["reason"] == f"{len(swept)} of {len(swept)} idle GPU nodes swept"


@pytest.mark.e2e_long  # make test-all: the same waves as above, twice more
def test_dry_run_and_circuit_breaker(e2e: Any) -> None:
    env = e2e(DEMO_FLEET)
    kube, airflow = env.kube, env.airflow
    # Three r2 failures but room to cordon one node (1/16 of the fleet): two alerts instead.
    conf = {
        "max_fleet_fraction": 0.25,
        "max_rack_fraction": 0.5,
        "max_action_fraction": 0.0625,
        "dry_run": True,
    }
    run_id = airflow.trigger("weekly_health_sweep", conf)
    assert airflow.wait_run("weekly_health_sweep", run_id) == "success"
    assert not any(n.spec.unschedulable for n in kube.core.list_node().items)  # dry run: nothing touched
    assert not any(n.spec.taints for n in kube.core.list_node().items)
    store = kube.store
    events = store.node_events()
    assert events and all(e["dry_run"] for e in events)
    assert len({e["node"] for e in events if e["kind"] == "cordon"}) == 1
    alerts = [r for r in store.verdicts() if r["criterion"] == "F-SAFE-01"]
    assert len(alerts) == 2 and all(a["result"] == "fail" for a in alerts)
