"""DAG integrity: every DAG imports cleanly, is wiring only, and parses cheaply."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.paths import DAGS, KNOWN_POOLS, ROOT

EXPECTED_DAGS = {
    "weekly_health_sweep",
    "weekly_health_sweep_wave",
    "xid_remediation",
    "post_upgrade_nccl_sweep",
    "post_upgrade_nccl_sweep_wave",
    "baseline_backfill",
    "kueue_contention",
    "checkpoint_resume_drill",
    "gpu_operator_validation",
    "mig_validation",
    "rack_onboarding",
}
ALLOWED_TAGS = {
    "layer:operator",
    "layer:device",
    "layer:network",
    "layer:scheduling",
    "layer:sharing",
    "layer:job",
    "schedule:weekly",
    "schedule:event",
    "schedule:manual",
    "owner:fleet-validation",
}


def test_no_import_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) >= EXPECTED_DAGS


def test_dag_id_is_file_stem_and_has_on_call_doc(dagbag: Any) -> None:
    for dag_id in dagbag.dag_ids:
        dag = dagbag.dags[dag_id]
        assert dag.fileloc.endswith(f"/{dag_id}.py")
        assert dag.doc_md and "Triage" in dag.doc_md
        assert set(dag.tags) <= ALLOWED_TAGS
        for task in dag.tasks:
            assert task.owner == "fleet-validation"


def test_pools_are_declared(dagbag: Any) -> None:
    declared = set(json.loads((ROOT / "pools.json").read_text())) | {"default_pool"}
    assert declared == KNOWN_POOLS
    for dag in dagbag.dags.values():
        for task in dag.tasks:
            pool = task.partial_kwargs.get("pool") if hasattr(task, "partial_kwargs") else task.pool
            assert (pool or "default_pool") in declared


def test_weekly_sweep_shape(dagbag: Any) -> None:
    dag = dagbag.dags["weekly_health_sweep"]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {
        "start_run": ["judge_device_trends", "plan_waves", "report_coverage"],
        "plan_waves": ["sweep_wave"],
        "sweep_wave": ["judge_device_trends"],
        "judge_device_trends": ["report_coverage"],
        "report_coverage": [],
    }
    # a failed wave skips neither the early-warning trends nor the coverage verdict
    assert dag.get_task("judge_device_trends").trigger_rule == "all_done"
    assert dag.get_task("report_coverage").trigger_rule == "all_done"
    wave = dag.get_task("sweep_wave")
    assert wave.partial_kwargs["max_active_tis_per_dagrun"] == 1  # waves run one at a time
    assert wave.partial_kwargs["trigger_dag_id"] == "weekly_health_sweep_wave"
    assert wave.partial_kwargs["wait_for_completion"] is True
    assert dag.max_active_runs == 1
    assert dag.schedule == "0 3 * * 0"


def test_wave_is_one_probe_pod_task_per_node(dagbag: Any) -> None:
    from fleetval_airflow.probe_pod import ProbePodOperator

    dag = dagbag.dags["weekly_health_sweep_wave"]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {
        "wave_probes": ["dcgm_r2"],
        "pause_exporters": ["dcgm_r2"],
        "dcgm_r2": ["judge_wave", "restore_exporters"],
        "judge_wave": [],
        "restore_exporters": [],
    }
    probe = dag.get_task("dcgm_r2")
    assert issubclass(probe.operator_class, ProbePodOperator)
    assert probe.partial_kwargs["pool"] == "fleetval_node_diagnosis"
    assert "deferrable" not in probe.partial_kwargs  # the operator defers unless the deployment says not
    assert dag.get_task("judge_wave").trigger_rule == "all_done"
    assert dag.get_task("restore_exporters").trigger_rule == "all_done"  # whatever the probes did
    assert dag.schedule is None and dag.is_paused_upon_creation is False


def test_weekly_sweep_params_reject_bad_input(dagbag: Any) -> None:
    import copy

    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(dagbag.dags["weekly_health_sweep"].params)
    with pytest.raises(ParamValidationError):
        params["max_fleet_fraction"] = 0
    with pytest.raises(ParamValidationError):
        params["dry_run"] = "yes"


def test_domain_package_never_imports_airflow() -> None:
    code = (
        "import sys, fleetval.cli, fleetval.dcgm.weekly, fleetval.sim.kube.server,"
        " fleetval.store.repository,"
        " fleetval.dcgm.judge, fleetval.probes.pod, fleetval.xid.steps, fleetval.nccl.backfill;"
        " print('airflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_dag_files_do_no_io_at_parse_time() -> None:
    """Parse every DAG file with sockets and the fleetval DB made unreachable: parsing must not care."""
    probe = (
        "import socket, runpy, sys\n"
        "def _no(*a, **k): raise RuntimeError('network I/O at DAG parse time')\n"
        "socket.socket.connect = _no\n"
        "socket.create_connection = _no\n"
        "for f in sys.argv[1:]: runpy.run_path(f)\n"
        "print('ok')\n"
    )
    files = sorted(str(p) for p in DAGS.glob("*.py"))
    env_cmd = [sys.executable, "-c", probe, *files]
    out = subprocess.run(
        env_cmd,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "AIRFLOW_CONN_FLEETVAL_DB": "postgresql://nowhere:1/x"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_xid_remediation_shape(dagbag: Any) -> None:
    dag = dagbag.dags["xid_remediation"]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {
        "claim_xid_lines": ["close_run", "decide_and_cordon", "plan_r3"],
        "decide_and_cordon": ["plan_r3"],
        "plan_r3": ["close_run", "dcgm_r3"],
        "dcgm_r3": ["close_run"],
        "close_run": [],
    }
    r3 = dag.get_task("dcgm_r3")
    # r3 waits for the job that hit the Xid (NodeBusy → retry), and never holds the cordon path.
    assert r3.partial_kwargs["retries"] == 12 and r3.partial_kwargs["pool"] == "fleetval_node_diagnosis"
    assert dag.get_task("close_run").trigger_rule == "all_done"
    # Event-driven: an asset whose watcher is the Xid inbox trigger.
    [asset] = dag.timetable.asset_condition.objects
    [watcher] = asset.watchers
    assert watcher.trigger.serialize()[0] == "fleetval_airflow.triggers.xid_inbox.XidInboxTrigger"


def test_post_upgrade_nccl_sweep_shape(dagbag: Any) -> None:
    from fleetval_airflow.nccl_isolation import NcclIsolationOperator

    dag = dagbag.dags["post_upgrade_nccl_sweep"]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {
        "start_run": ["gate", "isolate", "judge", "judge_link_trends", "pair_waves", "plan_sweep"],
        "plan_sweep": ["pair_waves", "sweep_intra"],
        "pair_waves": ["sweep_pairs"],
        "sweep_intra": ["sweep_pairs"],
        "sweep_pairs": ["judge"],
        "judge": ["isolate"],
        "isolate": ["judge_link_trends"],
        "judge_link_trends": ["gate"],  # recorded before the gate; trend verdicts never gate
        "gate": [],
    }
    for mapped in ("sweep_intra", "sweep_pairs"):  # waves are runs of the wave DAG, one at a time
        wave = dag.get_task(mapped)
        assert wave.partial_kwargs["trigger_dag_id"] == "post_upgrade_nccl_sweep_wave"
        assert wave.partial_kwargs["max_active_tis_per_dagrun"] == 1
        assert wave.partial_kwargs["wait_for_completion"] is True
    isolate = dag.get_task("isolate")
    assert isinstance(isolate, NcclIsolationOperator) and isolate.pool == "fleetval_node_diagnosis"
    # the gate decides even if a wave broke
    for task_id in ("sweep_pairs", "judge", "isolate", "judge_link_trends", "gate"):
        task = dag.get_task(task_id)
        rule = (
            task.partial_kwargs.get("trigger_rule") if hasattr(task, "partial_kwargs") else task.trigger_rule
        )
        assert rule == "all_done"
    assert dag.max_active_runs == 1
    # event-driven (driver upgrade-done) and manual
    [asset] = dag.timetable.asset_condition.objects
    [watcher] = asset.watchers
    assert (
        watcher.trigger.serialize()[0] == "fleetval_airflow.triggers.driver_upgrade.DriverUpgradeDoneTrigger"
    )
    assert set(dag.tags) == {"layer:network", "schedule:event", "schedule:manual", "owner:fleet-validation"}
    assert dict(dag.params)["repeats"] == 3 and dict(dag.params)["nodes"] == []


def test_nccl_wave_is_one_probe_task_per_node_or_pair(dagbag: Any) -> None:
    from fleetval_airflow.mpijob_probe import MPIJobProbeOperator
    from fleetval_airflow.probe_pod import ProbePodOperator

    dag = dagbag.dags["post_upgrade_nccl_sweep_wave"]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {
        "intra_probes": ["nccl_intra"],
        "nccl_intra": [],
        "pair_probes": ["nccl_pair"],
        "nccl_pair": [],
    }
    for task_id, operator in (("nccl_intra", ProbePodOperator), ("nccl_pair", MPIJobProbeOperator)):
        probe = dag.get_task(task_id)
        assert issubclass(probe.operator_class, operator)
        assert probe.partial_kwargs["pool"] == "fleetval_node_diagnosis"
        assert "deferrable" not in probe.partial_kwargs  # deferrable unless the deployment says not
        assert "task.spec.node" in probe.partial_kwargs["map_index_template"]
    assert dag.schedule is None and dag.is_paused_upon_creation is False


def test_post_upgrade_nccl_sweep_params_reject_bad_input(dagbag: Any) -> None:
    import copy

    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(dagbag.dags["post_upgrade_nccl_sweep"].params)
    params["nodes"] = ["r01-n01", "r01-n02"]
    with pytest.raises(ParamValidationError):
        params["repeats"] = 0
    with pytest.raises(ParamValidationError):
        params["nodes"] = "r01-n01"
    with pytest.raises(ParamValidationError):
        params["nodes"] = ["a", "a"]


def test_baseline_backfill_shape(dagbag: Any) -> None:
    import copy

    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["baseline_backfill"]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {
        "plan_backfill": ["rederive"],
        "rederive": ["backfill_report"],
        "backfill_report": [],
    }
    assert dag.get_task("rederive").partial_kwargs["max_active_tis_per_dagrun"] == 1
    # a time-based schedule is what Airflow backfill needs; catchup off so unpausing runs one day
    assert dag.schedule == "@daily" and dag.catchup is False and dag.max_active_runs == 1
    params = copy.deepcopy(dag.params)
    params["since"] = "2026-11-01"
    params["profile"] = None
    with pytest.raises(ParamValidationError):
        params["promote"] = "yes"
    with pytest.raises(ParamValidationError):
        params["since"] = 20261101
