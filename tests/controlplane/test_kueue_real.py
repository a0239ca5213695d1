"""The shipped Kueue scenarios on real Kueue v0.17 (the real control plane), run by the product's
identity (deploy/rbac.yaml's fleetval-runner: its ClusterRole for scenarios, enforced by the real
authorizer), each after the last one's leftovers were removed: every expectation holds, as on the
simulated Kueue (tests/fleetval/kueue/test_scenarios_on_sim.py). And the misbehaviour the
simulator's Kueue faults stand for, produced on real Kueue by a misconfigured ClusterQueue, fails
the criterion it breaks.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from kubernetes import config

from fleetval.kueue.runner import ScenarioRunner
from fleetval.kueue.scenario import parse_scenario
from fleetval.kueue.suite import resolve, run_scenario, shipped
from fleetval.records import Result
from fleetval.sim.controlplane.compare import force_clean
from tests.paths import DEMO_FLEET


def test_shipped_scenarios_on_real_kueue(real_kube: Any) -> None:
    kube = real_kube(DEMO_FLEET)
    runner = config.new_client_from_config(config_file=str(kube.kubeconfig))
    admin = kube.api_client()
    failed: dict[tuple[str, int], str] = {}
    for scenario in shipped():
        outcome = run_scenario(runner, scenario, "real-kueue")
        record = outcome.record
        assert not record.harness_error, (scenario.id, record.harness_error)
        assert record.kueue_version == "v0.17.0"
        failed.update({(scenario.id, r.step): r.detail for r in record.results if not r.ok})
        left = force_clean(admin, scenario.id)
        assert not left.pods and not left.workloads, (scenario.id, left)  # the runner removed its own
        assert {v.result for v in outcome.verdicts} == {Result.PASS} or failed, scenario.id
    assert failed == {}


MISCONFIGURED = {  # what is changed in d-sched-03-04-borrow-reclaim -> the criterion it must fail
    "reclaim off": (
        "preemption: {reclaimWithinCohort: Any}",
        "preemption: {reclaimWithinCohort: Never}",
        "D-SCHED-04",
    ),
    "borrowing limit 0": (
        "nominalQuota: 8, borrowingLimit: 4}",
        "nominalQuota: 8, borrowingLimit: 0}",
        "D-SCHED-03",
    ),
}


@pytest.mark.parametrize("change", sorted(MISCONFIGURED))
def test_a_misconfigured_cluster_queue_fails_the_criterion_on_real_kueue(real_kube: Any, change: str) -> None:
    kube = real_kube(DEMO_FLEET)
    runner = config.new_client_from_config(config_file=str(kube.kubeconfig))
    old, new, criterion = MISCONFIGURED[change]
    shipped_scenario = resolve("d-sched-03-04-borrow-reclaim")
    assert shipped_scenario.source.count(old) == 1
    scenario = parse_scenario(shipped_scenario.source.replace(old, new), where=change)
    quick = partial(ScenarioRunner, max_within=5.0)  # an expectation that never holds waits 5 s, not 10
    outcome = run_scenario(runner, scenario, f"misconfigured-{change}", runner=quick)
    assert not outcome.record.harness_error
    results = {v.criterion: v.result for v in outcome.verdicts}
    assert results[criterion] == Result.FAIL, results
    force_clean(kube.api_client(), scenario.id)
