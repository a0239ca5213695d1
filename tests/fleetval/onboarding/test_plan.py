"""Which nodes an onboarding tests and which it refuses, and why (pure)."""

from __future__ import annotations

import pytest

from fleetval.onboarding.plan import OnboardingPlan, PlanError, in_service, plan_onboarding
from fleetval.onboarding.request import OnboardingRequest
from tests.fleetval.onboarding.helpers import node

INVENTORY = [
    node("r01-n01"),
    node("r01-n02"),
    node("r01-n03", taint="held"),  # held by an earlier onboarding: not in service
    node("r01-n04", taint=None),  # joined without the taint: in service
    node("r02-n01", "r02", taint=None),
    node("r02-n02", "r02"),
    node("loose-n01", ""),  # no rack label yet
]


def plan(**request: object) -> OnboardingPlan:
    return plan_onboarding(OnboardingRequest(**{"rack": "r01", **request}), INVENTORY, max_nodes=1024)  # type: ignore[arg-type]


def test_a_rack_is_its_tainted_nodes() -> None:
    made = plan()
    assert list(made.nodes) == ["r01-n01", "r01-n02", "r01-n03"]
    assert "already in service" in made.refused["r01-n04"]
    assert set(made.refused) == {"r01-n04"}  # other racks are out of scope, not refused one by one
    assert made.fleet_size == len(INVENTORY) and made.rack_sizes["r01"] == 4
    assert not any(n.assign_rack or n.was_in_service for n in made.nodes.values())


def test_in_service_means_no_onboarding_taint_and_not_cordoned() -> None:
    assert in_service(node("a", taint=None))
    assert not in_service(node("a"))
    assert not in_service(node("a", taint="held"))
    assert not in_service(node("a", taint=None, unschedulable=True))


def test_re_onboarding_in_service_nodes_stays_within_the_action_budget() -> None:
    inventory = [node(f"r05-n{i:02d}", "r05", taint=None) for i in range(1, 9)]
    request = OnboardingRequest(
        rack="r05", include_in_service=True, max_action_fraction=1.0, max_rack_fraction=0.25
    )
    made = plan_onboarding(request, inventory, max_nodes=1024)
    assert list(made.nodes) == ["r05-n01", "r05-n02"]  # a quarter of a rack of 8
    assert all(n.was_in_service for n in made.nodes.values())
    assert len(made.withheld) == 6 and "action budget" in made.withheld["r05-n08"]
    # Nodes that are not in service cost nothing from the budget.
    tainted = [node(f"r05-n{i:02d}", "r05") for i in range(1, 9)]
    assert len(plan_onboarding(request, tainted, max_nodes=1024).nodes) == 8


def test_listed_nodes_are_refused_with_their_reason() -> None:
    inventory = [
        *INVENTORY,
        node("r01-n05", profile="NVIDIA-A100-SXM4-80GB"),
        node("r01-n06", labels={"fleetval.io/quarantine": "dcgm-r3-fail"}),
        node("r01-n07", gpu_pods=2),
        node("r01-n08", allocatable_gpus=7),
    ]
    request = OnboardingRequest(
        rack="r01",
        nodes=("r01-n01", "r02-n02", "ghost", "r01-n05", "r01-n06", "r01-n07", "r01-n08", "loose-n01"),
        hardware_profile="NVIDIA-H100-80GB-HBM3",
    )
    made = plan_onboarding(request, inventory, max_nodes=1024)
    assert list(made.nodes) == ["loose-n01", "r01-n01"]
    assert made.nodes["loose-n01"].assign_rack and made.nodes["loose-n01"].rack == "r01"
    assert made.refused == {
        "r02-n02": "in rack 'r02', not 'r01'",
        "ghost": "no GPU node of this name (nvidia.com/gpu.present=true)",
        "r01-n05": "profile 'NVIDIA-A100-SXM4-80GB', not 'NVIDIA-H100-80GB-HBM3'",
        "r01-n06": "quarantined (fleetval.io/quarantine): remediation decides when it returns",
        "r01-n07": "busy: 2 pod(s) hold GPUs (a probe needs every GPU)",
        "r01-n08": "1 GPU(s) withdrawn by the device plugin: r2 cannot cover every GPU "
        "(repair, then onboard again)",
    }
    assert made.rack_sizes["r01"] == 9  # the node the rack is given counts in it


def test_a_label_selector_picks_this_rack_or_unlabelled_nodes() -> None:
    inventory = [
        node("a", labels={"batch": "7"}),
        node("b", "r02", labels={"batch": "7"}),
        node("c", "", labels={"batch": "7"}),
        node("d", labels={"batch": "8"}),
    ]
    made = plan_onboarding(OnboardingRequest(rack="r01", label_selector="batch=7"), inventory, max_nodes=10)
    assert list(made.nodes) == ["a", "c"] and made.refused == {}
    both = plan_onboarding(
        OnboardingRequest(rack="r01", nodes=("a", "d"), label_selector="batch=7"), inventory, max_nodes=10
    )
    assert list(both.nodes) == ["a"] and "does not match the label selector" in both.refused["d"]


def test_more_than_a_run_holds_is_an_error_naming_the_limit() -> None:
    with pytest.raises(PlanError, match=r"at most 2 .*max_map_length"):
        plan_onboarding(OnboardingRequest(rack="r01"), INVENTORY, max_nodes=2)


def test_nothing_to_onboard_says_why() -> None:
    with pytest.raises(PlanError, match="r01-n04: already in service"):
        plan_onboarding(OnboardingRequest(rack="r01", nodes=("r01-n04",)), INVENTORY, max_nodes=10)
    with pytest.raises(PlanError, match="racks the cluster reports: r01, r02"):
        plan_onboarding(OnboardingRequest(rack="r09"), INVENTORY, max_nodes=10)


def test_the_plan_round_trips_and_knows_mig_pools() -> None:
    inventory = [node("m1", labels={"nvidia.com/mig.config": "all-1g.10gb"}), node("m2")]
    made = plan_onboarding(OnboardingRequest(rack="r01"), inventory, max_nodes=10)
    assert OnboardingPlan.from_json(made.to_json()) == made
    assert made.nodes["m1"].mig_pool and not made.nodes["m2"].mig_pool
    assert made.nodes["m2"].fabric == "ib"
