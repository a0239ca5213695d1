"""`gpu_operator_validation`: wiring, the form, and a run of the real DAG (dag.test) against a
simulated cluster whose GPU Operator misbehaves on purpose, verdicts in the store."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tests.fleetval.gpu_operator.test_operator_checks import FLEET


def test_shape_schedule_and_form(dagbag: Any) -> None:
    dag = dagbag.dags["gpu_operator_validation"]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {
        "open_run": [
            "check_advertised",
            "check_operands",
            "check_upgrade_policy",
            "judge_isolation",
            "plan_isolation",
            "report",
        ],
        "plan_isolation": ["no_gpu_pod"],
        "no_gpu_pod": ["judge_isolation"],
        "judge_isolation": ["report"],
        "check_operands": ["report"],
        "check_advertised": ["report"],
        "check_upgrade_policy": ["report"],
        "report": [],
    }
    assert dag.task_dict["report"].trigger_rule == "all_done"
    assert dag.task_dict["judge_isolation"].trigger_rule == "all_done"
    assert dag.params.dump() == {
        "operator_namespace": "gpu-operator",
        "rollout_watch_minutes": 60,
        "rollout_poll_seconds": 15,
        "image": None,
    }
    # Weekly, and whenever nodes finish a driver upgrade (the NCCL sweep's asset).
    assert dag.timetable.summary == "Asset or 0 2 * * 0"
    assets = [key.name for key, _ in dag.timetable.asset_condition.iter_assets()]
    assert assets == ["fleetval_driver_upgrade_done"]


@pytest.mark.postgres
@pytest.mark.airflow
def test_a_run_finds_every_operator_fault_on_its_node(
    dagbag: Any, airflow_db: None, sim_kube: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETVAL_PROBE_DEFERRABLE", "false")  # the probes end within a second here
    fleet = tmp_path / "operator-lab.yaml"
    fleet.write_text(FLEET)
    kube = sim_kube(fleet)
    run = dagbag.dags["gpu_operator_validation"].test()
    assert run.state == "failed"  # `report` is red: the faults were found
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["report"] == "failed"
    assert {k: v for k, v in states.items() if k != "report"} == dict.fromkeys(
        (
            "open_run",
            "check_operands",
            "check_advertised",
            "plan_isolation",
            "no_gpu_pod",
            "judge_isolation",
            "check_upgrade_policy",
        ),
        "success",
    )
    results = {(v["criterion"], v["subject"]): v["result"] for v in kube.store.verdicts()}
    failed = sorted(k for k, r in results.items() if r == "fail")
    assert failed == [
        ("D-GPU-TS-01", "r02-n02"),
        ("D-OP-01", "r01-n02"),
        ("D-OP-01", "r01-n03"),
        ("D-OP-02", "r01-n04"),
        ("D-OP-02", "r02-n02"),
        ("D-OP-03", "r02-n01"),
    ]
    assert results[("D-OP-03", "r01-n01")] == "pass"
    assert len(results) == 6 + 6 + 6 + 2 and set(results.values()) == {"pass", "fail"}
