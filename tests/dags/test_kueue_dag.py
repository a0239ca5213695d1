"""`kueue_contention`: wiring, the form, and a run of the real DAG (dag.test) against the
simulated cluster's Kueue, verdicts in the store."""

from __future__ import annotations

from typing import Any

import pytest

from fleetval.kueue.suite import shipped_files


def test_shape_and_form(dagbag: Any) -> None:
    dag = dagbag.dags["kueue_contention"]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {
        "plan_scenarios": ["run_scenario"],
        "run_scenario": ["report"],
        "report": [],
    }
    assert dag.task_dict["run_scenario"].max_active_tis_per_dagrun == 1
    assert dag.task_dict["report"].trigger_rule == "all_done"
    assert dag.max_active_runs == 1
    params = dag.params.dump()
    assert params == {"scenarios": [], "kueue_namespace": "kueue-system", "image": None, "dry_run": False}
    scenarios = dag.params.get_param("scenarios").schema
    assert scenarios["items"]["enum"] == scenarios["examples"] == list(shipped_files())  # the form's choices


@pytest.mark.postgres
@pytest.mark.airflow
def test_a_run_judges_the_chosen_scenarios_and_a_dry_run_creates_nothing(
    dagbag: Any, airflow_db: None, sim_kube: Any
) -> None:
    kube = sim_kube()
    dag = dagbag.dags["kueue_contention"]
    dry = dag.test(run_conf={"scenarios": ["d-sched-06-gang"], "dry_run": True})
    assert dry.state == "success"
    assert kube.store.verdicts() == []
    assert not kube.core.list_namespace(label_selector="fleetval.io/kueue-scenario").items

    chosen = ["d-sched-03-04-borrow-reclaim", "x-03-lending-limit"]
    run = dag.test(run_conf={"scenarios": chosen, "dry_run": False})  # dag.test keeps the last conf
    assert run.state == "success"
    verdicts = {(v["subject"], v["criterion"]): v for v in kube.store.verdicts()}
    assert sorted(verdicts) == [
        ("kueue/d-sched-03-04-borrow-reclaim", "D-SCHED-03"),
        ("kueue/d-sched-03-04-borrow-reclaim", "D-SCHED-04"),
        ("kueue/d-sched-03-04-borrow-reclaim", "D-SCHED-07"),
        ("kueue/x-03-lending-limit", "D-SCHED-03"),
    ]
    assert {v["result"] for v in verdicts.values()} == {"pass"}
    assert {v["judged_against"]["kueue_version"] for v in verdicts.values()} == {"v0.19.2"}
    assert not kube.core.list_namespace(label_selector="fleetval.io/kueue-scenario").items
