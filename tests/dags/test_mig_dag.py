"""`mig_validation`: wiring, the form, and runs of the real DAG (dag.test) against a simulated MIG pool
whose MIG layer misbehaves on purpose on some nodes: a dry run that touches nothing, then a run."""

from __future__ import annotations

import itertools
import pathlib
from typing import Any

import pytest

FLEET = """
name: mig-dag
seed: 5
profiles:
  h100-mig:
    gpu_product: NVIDIA-H100-80GB-HBM3
    gpus: 8
    intra_busbw_gbps: 480
    inter_busbw_gbps: 370
    fabric: ib
    mig_strategy: mixed
racks:
  - {name: r01, profile: h100-mig, nodes: 3}
faults:
  - {node: r01-n02, kind: mig.memory_leak}
  - {node: r01-n03, kind: mig.reconfig_while_busy}
"""
# Simulated seconds per real one, and the run's settings sized to it (see test_suite_sim.py).
TIME_SCALE = 0.001
FAST = {
    "advertise_max_minutes": 0.01,
    "watch_minutes": 0.04,
    "poll_seconds": 0.05,
    "max_fleet_fraction": 1.0,
    "max_rack_fraction": 1.0,
}


def test_shape_schedule_and_form(dagbag: Any) -> None:
    dag = dagbag.dags["mig_validation"]
    order = [
        "mig.plan",
        "mig.take",
        "mig.apply_layouts",
        "mig.baseline_probes",
        "mig.baseline_probe",
        "mig.start_fill",
        "mig.during_probes",
        "mig.during_probe",
        "mig.stop_fill",
        "mig.judge_isolation",
        "mig.busy_reconfig",
        "mig.refused_layout",
        "mig.restore",
        "report",
    ]
    for upstream, downstream in itertools.pairwise(order):
        assert downstream in dag.task_dict[upstream].downstream_task_ids, (upstream, downstream)
    assert "mig.stop_fill" in dag.task_dict["mig.start_fill"].downstream_task_ids  # fillers always go
    for task_id in (
        "mig.stop_fill",
        "mig.judge_isolation",
        "mig.busy_reconfig",
        "mig.refused_layout",
        "mig.restore",
        "report",
    ):
        assert dag.task_dict[task_id].trigger_rule == "all_done", task_id
    assert dag.params.dump() == {
        "nodes": [],
        "layouts": ["all-balanced"],
        "refused_layout": None,
        "dry_run": False,
        "max_fleet_fraction": 0.1,
        "max_rack_fraction": 0.25,
        "advertise_max_minutes": None,
        "watch_minutes": 15,
        "poll_seconds": 5,
        "operator_namespace": "gpu-operator",
        "image": None,
    }
    assert dag.timetable.summary == "0 4 * * 6"
    assert dag.max_active_runs == 1


@pytest.mark.postgres
@pytest.mark.airflow
def test_a_dry_run_touches_nothing_a_run_finds_each_mig_fault_and_gives_every_node_back(
    dagbag: Any, airflow_db: None, sim_kube: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETVAL_PROBE_DEFERRABLE", "false")  # the probes end within a second here
    fleet = tmp_path / "mig-dag.yaml"
    fleet.write_text(FLEET)
    kube = sim_kube(fleet, time_scale=TIME_SCALE)
    dag = dagbag.dags["mig_validation"]
    # A dry run plans and records, and touches nothing.
    dry = dag.test(run_conf={**FAST, "dry_run": True})
    assert dry.state == "success" and kube.store.verdicts() == []
    found = kube.store.find_run()
    assert found is not None
    planned = kube.store.run_meta(found[0])["mig_plan"]["nodes"]
    assert [n["node"] for n in planned] == ["r01-n01", "r01-n02", "r01-n03"]
    for node in ("r01-n01", "r01-n02", "r01-n03"):
        n = kube.core.read_node(node)
        assert not n.spec.unschedulable and n.metadata.labels["nvidia.com/mig.config"] == "all-disabled"
    # The run itself (a dag.test's conf lingers in the DAG's params: dry_run is given again).
    run = dag.test(run_conf={**FAST, "dry_run": False})
    assert run.state == "failed"  # `report` is red: the faults were found
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states.pop("report") == "failed"
    assert set(states.values()) == {"success"}, states
    results = {(v["criterion"], v["subject"]): v["result"] for v in kube.store.verdicts()}
    assert sorted(k for k, r in results.items() if r != "pass") == [
        ("D-GPU-MIG-03", "r01-n02"),
        ("D-GPU-MIG-06", "r01-n03"),
    ]
    assert {r for (c, _), r in results.items() if c == "D-GPU-MIG-03"} == {"pass", "fail"}
    assert len(results) == 3 * 6  # D-GPU-MIG-01..06 on each node
    for node in ("r01-n01", "r01-n02", "r01-n03"):  # given back
        n = kube.core.read_node(node)
        assert not n.spec.unschedulable
        assert (
            n.metadata.labels["nvidia.com/mig.config"],
            n.metadata.labels["nvidia.com/mig.config.state"],
        ) == (
            "all-disabled",
            "success",
        )
