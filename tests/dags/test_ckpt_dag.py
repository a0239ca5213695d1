"""`checkpoint_resume_drill`: its wiring and its form (the run itself: tests/e2e/test_ckpt_drill_dag.py)."""

from __future__ import annotations

from typing import Any

from fleetval.ckpt.contract import DRILL_IMAGE


def test_shape_and_form(dagbag: Any) -> None:
    dag = dagbag.dags["checkpoint_resume_drill"]
    down = {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}
    assert down["kill_in_save"] == ["kill_in_save_inspect"]
    assert down["sigterm"] == ["sigterm_inspect"]
    # The interrupters report to the judge (when the signal went, how the run ended).
    assert down["interrupt_kill"] == ["judge", "kill_in_save_inspect"]
    assert down["preempt"] == ["judge", "sigterm_inspect"]
    assert down["corrupt"] == ["corrupt_damage"] and down["corrupt_damage"] == ["corrupt_inspect"]
    for scenario in ("kill_in_save", "sigterm", "corrupt"):
        assert down[f"{scenario}_inspect"] == [f"{scenario}_resume"]
        assert down[f"{scenario}_resume"] == ["judge"]
    assert down["reference"] == ["judge"]
    assert dag.task_dict["judge"].trigger_rule == "all_done"
    # The interrupted runs and their interrupters are never retried: a retry would drill nothing.
    for task_id in ("kill_in_save", "sigterm", "interrupt_kill", "preempt"):
        assert dag.task_dict[task_id].retries == 0, task_id
    params = dag.params.dump()
    assert params["image"] == DRILL_IMAGE and params["command"] is None and params["node"] is None
    assert (params["steps"], params["grace_s"], params["gpus"]) == (150, 30, 0)
    assert dag.max_active_runs == 1
