"""A component of the real control plane killed in the middle of a Kueue scenario: the verdicts are
`error` (the harness could not finish, so nothing is judged, and nothing passes), and once the
component is back a rerun of the scenario runs to its end. No process is left (the fixture checks)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import config

from fleetval.kueue.runner import ScenarioRunner
from fleetval.kueue.scenario import Step
from fleetval.kueue.suite import resolve, run_scenario
from fleetval.records import Result
from fleetval.sim.controlplane.compare import force_clean
from tests.paths import DEMO_FLEET

SCENARIO = "d-sched-01-02-quota"  # submits after its first expectation: the kill shows at once


@pytest.mark.parametrize("component", ["kueue", "kube-apiserver"])
def test_a_component_killed_mid_scenario_is_an_error_and_a_rerun_completes(
    real_kube: Any, component: str
) -> None:
    kube = real_kube(DEMO_FLEET)
    runner = config.new_client_from_config(config_file=str(kube.kubeconfig))
    scenario = resolve(SCENARIO)

    class KilledAfterTheFirstExpectation(ScenarioRunner):
        def _expect(self, step: Step) -> None:
            super()._expect(step)
            if not kube.outage:
                kube.kill(component)

    killed = run_scenario(runner, scenario, "killed", runner=KilledAfterTheFirstExpectation)
    assert killed.record.harness_error
    assert killed.verdicts and {v.result for v in killed.verdicts} == {Result.ERROR}

    kube.restart(component)
    force_clean(kube.api_client(), scenario.id)
    rerun = run_scenario(runner, scenario, "rerun")
    assert not rerun.record.harness_error
    assert [r.step for r in rerun.record.results if not r.ok] == []
    assert {v.result for v in rerun.verdicts} == {Result.PASS}
