"""`rack_onboarding`: its shape follows the stage registry, its form refuses bad input, and the
form's rack suggestions come from a bounded local file that can never break parsing."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from fleetval.onboarding.registry import STAGES
from tests.fleetval.onboarding.helpers import node

DAG = "rack_onboarding"


def test_one_task_group_per_registered_stage(dagbag: Any) -> None:
    from fleetval_airflow.mpijob_probe import MPIJobProbeOperator
    from fleetval_airflow.probe_pod import ProbePodOperator

    dag = dagbag.dags[DAG]
    chain = ["plan_onboarding"]
    group_tasks: list[str] = []
    for stage in STAGES:
        for k in range(1, stage.rounds + 1):
            chain += [f"{stage.name}.list_{k}", f"{stage.name}.round_{k}"]
            probe = dag.get_task(f"{stage.name}.round_{k}")
            runner = ProbePodOperator if stage.runner == "pod" else MPIJobProbeOperator
            assert issubclass(probe.operator_class, runner)
            assert probe.partial_kwargs["pool"] == "fleetval_node_diagnosis"
            assert probe.partial_kwargs["map_index_template"] == stage.map_index
            rule = dag.get_task(f"{stage.name}.list_{k}").trigger_rule
            assert rule == ("all_done" if k == 1 else "none_skipped")  # an empty round ends the stage
        if stage.runner == "group":  # a layer's own task group between its node list and the judge
            chain.append(f"{stage.name}.nodes")
            group_tasks += [t for t in dag.task_ids if t.startswith(f"{stage.name}.checks.")]
        chain.append(f"{stage.name}.judge")
    chain += [
        "propose_baselines",
        "approve_baselines",
        "promote_baselines",
        "gate",
        "approve_nodes",
        "apply_answer",
        "report",
    ]
    for upstream, downstream in itertools.pairwise(chain):
        if upstream.endswith(".nodes"):
            continue  # the group's own wiring: test_a_layers_own_task_group_joins_with_one_registry_entry
        assert downstream in dag.get_task(upstream).downstream_task_ids, (upstream, downstream)
    assert group_tasks and len(dag.tasks) == len(chain) + len(group_tasks)
    for task_id in ("approve_baselines", "approve_nodes"):  # the question's options are known at run time
        hitl = dag.get_task(task_id)
        assert hitl.operator_class.__name__ == "HITLOperator" and hitl.partial_kwargs["multiple"] is True
    for task_id in ("gate", "apply_answer", "report", "promote_baselines", f"{STAGES[-1].name}.judge"):
        assert dag.get_task(task_id).trigger_rule == "all_done"  # the gate decides even if a probe broke
    assert dag.schedule is None and dag.max_active_runs == 1
    assert set(dag.tags) == {
        "layer:operator",
        "layer:device",
        "layer:network",
        "layer:sharing",
        "schedule:manual",
        "owner:fleet-validation",
    }


def test_the_form_refuses_bad_input(dagbag: Any) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(dagbag.dags[DAG].params)
    params["rack"] = "r07"
    params["label_selector"] = None  # optional fields take null, not ""
    params["nodes"] = ["r07-n01", "r07-n02"]
    for key, bad in (
        ("rack", "r07;"),
        ("rack", ""),
        ("nodes", ["r07-n01", "r07-n01"]),
        ("nodes", ["R07_N01"]),
        ("label_selector", ""),
        ("hardware_profile", "H100 80GB"),
        ("dcgm_level", 1),
        ("run_pairs", "yes"),
        ("approval_timeout_minutes", 0),
        ("max_action_fraction", 1.5),
        ("operator_namespace", "GPU"),
    ):
        with pytest.raises(ParamValidationError):
            params[key] = bad
    validated = params.validate()
    assert validated["rack"] == "r07" and validated["dcgm_level"] == 2 and validated["dry_run"] is False


def test_the_rack_is_required(dagbag: Any) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        copy.deepcopy(dagbag.dags[DAG].params).validate()


def test_rack_suggestions_round_trip_and_never_break_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetval_airflow import onboarding_tasks

    cache = tmp_path / "racks.json"
    monkeypatch.setenv(onboarding_tasks.CACHE_ENV, str(cache))
    assert onboarding_tasks.suggestions("racks") == []  # no file yet: the form takes any rack
    onboarding_tasks.remember_inventory([node("r02-n01", "r02"), node("r01-n01"), node("x", "")])
    assert onboarding_tasks.suggestions("racks") == ["r01", "r02"]
    assert onboarding_tasks.suggestions("profiles") == ["NVIDIA-H100-80GB-HBM3"]
    for garbage in ("{", "[1, 2]", json.dumps({"racks": ["ok", "no way", 3, None]})):
        cache.write_text(garbage)
        assert onboarding_tasks.suggestions("racks") in ([], ["ok"])
    cache.write_text(json.dumps({"racks": ["r01"] * onboarding_tasks.CACHE_MAX_BYTES}))
    assert onboarding_tasks.suggestions("racks") == []  # too big to read at parse time
    monkeypatch.setenv(onboarding_tasks.CACHE_ENV, str(tmp_path / "missing" / "dir" / "racks.json"))
    assert onboarding_tasks.suggestions("racks") == []


def test_a_layers_own_task_group_joins_with_one_registry_entry() -> None:
    """The MIG layer's registry entry: mig_validation's task group runs on the nodes still in."""
    from airflow.dag_processing.dagbag import DagBag

    from fleetval.onboarding import registry
    from tests.paths import DAGS, KNOWN_POOLS

    assert registry.STAGES[-1] == registry.stage_spec("mig") and registry.STAGES[-1].runner == "group"
    bag = DagBag(dag_folder=str(DAGS / "rack_onboarding.py"), known_pools=KNOWN_POOLS)
    assert bag.import_errors == {}
    dag = bag.dags[DAG]
    last = f"{registry.STAGES[-2].name}.judge"
    assert dag.get_task(last).downstream_task_ids == {"mig.nodes"}
    assert "mig.checks.plan" in dag.get_task("mig.nodes").downstream_task_ids
    group_ends = {
        t.task_id
        for t in dag.tasks
        if t.task_id.startswith("mig.checks.") and not t.downstream_task_ids - {"mig.judge"}
    }
    assert group_ends and all("mig.judge" in dag.get_task(t).downstream_task_ids for t in group_ends)
    assert dag.get_task("mig.judge").downstream_task_ids == {"propose_baselines"}
