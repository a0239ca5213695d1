"""Scenario files: the shipped ones are valid; a bad one is refused with the field named."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from fleetval.kueue.scenario import (
    ScenarioError,
    message_pattern,
    parse_scenario,
    prefix_for,
    rename_map,
    renamed,
    renamed_text,
)
from fleetval.kueue.suite import check_text, shipped, shipped_files

QUOTA = shipped_files()["d-sched-01-02-quota"].read_text()


def test_every_shipped_scenario_is_valid_and_covers_every_scheduling_criterion() -> None:
    scenarios = shipped()
    decided = {c for s in scenarios for c in s.criteria}
    assert {f"D-SCHED-0{i}" for i in range(1, 8)} <= decided
    assert "D-GPU-MIG-05" in decided
    for s in scenarios:
        checked = {step.expect.criterion for step in s.steps if step.expect}
        assert checked == set(s.criteria), s.id  # every criterion it claims is checked
        assert len(s.digest) == 64


def edited(change: Any) -> str:
    data = yaml.safe_load(QUOTA)
    change(data)
    return yaml.safe_dump(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(colour="red"), r"colour: unknown field"),
        (lambda d: d.update(id="Bad_Id"), r"id: must be lowercase"),
        (lambda d: d.update(criteria=["D-NET-NCCL-01"]), r"criteria\[0\]: not a scheduling criterion"),
        (
            lambda d: d["objects"][1]["spec"].update(queueingStrategy="Fifo"),
            r"objects\[1\] \(ClusterQueue team-a-cq\): refused by the clusterqueues.kueue.x-k8s.io schema: "
            r".*spec.queueingStrategy",
        ),
        (
            lambda d: d["objects"][1]["spec"].update(colour="red"),
            r"objects\[1\] .*unknown field \"spec.colour\"",
        ),
        (
            lambda d: d["objects"][0].update(apiVersion="kueue.x-k8s.io/v9"),
            r"objects\[0\].apiVersion: ResourceFlavor is served as",
        ),
        (lambda d: d["objects"][0].update(kind="Deployment"), r"objects\[0\].kind: must be one of"),
        (
            lambda d: d["objects"][2]["metadata"].update(namespace="elsewhere"),
            r"objects\[2\].metadata.namespace",
        ),
        (lambda d: d["jobs"]["a-run-2"].update(gpus=-1), r"jobs.a-run-2.gpus: a whole number from 0 to 64"),
        (
            lambda d: d["jobs"]["a-run-2"].update(priority="urgent"),
            r"jobs.a-run-2.priority: no WorkloadPriorityClass",
        ),
        (lambda d: d["jobs"]["a-run-2"].update(colour="red"), r"jobs.a-run-2.colour: unknown field"),
        (lambda d: d["timeline"].append({"submit": "nobody"}), r"timeline\[10\].submit: no job 'nobody'"),
        (lambda d: d["timeline"].append({"submit": "a-run-2", "finish": "a-run-2"}), r"exactly one of"),
        (lambda d: d["timeline"][2].update(at=-1), r"timeline\[2\].at: seconds from 0"),
        (
            lambda d: d["timeline"][1]["expect"].update(criterion="D-SCHED-05"),
            r"timeline\[1\].expect.criterion: must be one of the scenario's criteria",
        ),
        (lambda d: d["timeline"][1]["expect"].update(state="running"), r"timeline\[1\].expect.state: one of"),
        (lambda d: d["timeline"][1]["expect"].update(reason="slow"), r"timeline\[1\].expect.reason: one of"),
        (lambda d: d["timeline"][1]["expect"].update(within="soon"), r"timeline\[1\].expect.within: seconds"),
    ],
)
def test_a_bad_scenario_is_refused_naming_the_field(change: Any, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(edited(change), where="s.yaml")


@pytest.mark.parametrize("text", ["", "[1, 2]", "id: x\n", "\x00\x01", "a: [unclosed"])
def test_garbage_is_a_scenario_error(text: str) -> None:
    with pytest.raises(ScenarioError):
        parse_scenario(text)


def test_steps_out_of_time_order_are_refused() -> None:
    def change(d: Any) -> None:
        d["timeline"][0]["at"] = 5
        d["timeline"][2]["at"] = 1

    with pytest.raises(ScenarioError, match=r"timeline\[2\].at: steps are in time order"):
        parse_scenario(edited(change))


def test_a_run_renames_what_the_scenario_owns_and_nothing_else() -> None:
    scenario = parse_scenario(QUOTA)
    prefix = prefix_for(scenario.id, "run-1")
    assert re.fullmatch(r"fvk-[0-9a-f]{6}-", prefix) and prefix != prefix_for(scenario.id, "run-2")
    names = rename_map(scenario, prefix)
    cq = renamed(copy.deepcopy(scenario.objects[1]), names)
    assert cq["metadata"]["name"] == prefix + "team-a-cq"
    assert cq["spec"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": prefix + "team-a"
    }
    flavor = cq["spec"]["resourceGroups"][0]["flavors"][0]
    assert flavor["name"] == prefix + "default-flavor"
    assert [r["name"] for r in flavor["resources"]] == ["cpu", "memory", "nvidia.com/gpu"]
    text = renamed_text(
        "insufficient unused quota for nvidia.com/gpu in flavor default-flavor, team-a-cq-x", names
    )
    assert (
        text == f"insufficient unused quota for nvidia.com/gpu in flavor {prefix}default-flavor, team-a-cq-x"
    )


def test_message_pattern_is_exact_with_a_pod_set_placeholder() -> None:
    pattern = message_pattern("couldn't assign flavors to pod set <podset>: 2 more needed")
    assert pattern.match("couldn't assign flavors to pod set a1f1df3a: 2 more needed")
    assert pattern.match("couldn't assign flavors to pod set main: 2 more needed")
    assert not pattern.match("couldn't assign flavors to pod set main: 2 more needed. Pending the preemption")
    assert not pattern.match("couldn't assign flavors to pod set : 2 more needed")


def test_check_summarizes_a_valid_file() -> None:
    summary = check_text(QUOTA, "quota.yaml")
    assert summary["id"] == "d-sched-01-02-quota"
    assert summary["objects"] == [
        "ResourceFlavor/default-flavor",
        "ClusterQueue/team-a-cq",
        "LocalQueue/team-a-lq",
    ]
    assert summary["jobs"] == ["a-run-2", "a-run-4", "a-wait-4"]
