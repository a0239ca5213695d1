"""The shipped Kueue scenarios on real Kueue v0.17 (the real control plane), run by the product's
identity (deploy/rbac.yaml's fleetval-runner: its ClusterRole for scenarios, enforced by the real
authorizer), each after the last one's leftovers were removed.

The expectations in tests/kueue_harness.py fail here because of the scenario harness, not Kueue
(and on the simulated Kueue alike: tests/fleetval/kueue/test_scenarios_on_sim.py); they are pinned
so the table in docs/kueue-on-real-kueue.md stays true.
"""

from __future__ import annotations

from typing import Any

from kubernetes import config

from fleetval.kueue.suite import run_scenario, shipped
from fleetval.records import Result
from fleetval.sim.controlplane.compare import force_clean
from tests.kueue_harness import HARNESS_FAILURES
from tests.paths import DEMO_FLEET


def test_shipped_scenarios_on_real_kueue(real_kube: Any) -> None:
    kube = real_kube(DEMO_FLEET)
    runner = config.new_client_from_config(config_file=str(kube.kubeconfig))
    admin = kube.api_client()
    failed: dict[tuple[str, int], str] = {}
    left_behind = {}
    for scenario in shipped():
        outcome = run_scenario(runner, scenario, "real-kueue")
        record = outcome.record
        assert not record.harness_error, (scenario.id, record.harness_error)
        assert record.kueue_version == "v0.17.0"
        assert all(v.result in (Result.PASS, Result.FAIL) for v in outcome.verdicts), scenario.id
        failed.update({(scenario.id, r.step): r.detail for r in record.results if not r.ok})
        left_behind[scenario.id] = force_clean(admin, scenario.id)
    assert set(failed) == set(HARNESS_FAILURES), failed
    # The harness's own cleanup cannot remove a pod Kueue keeps a finalizer on.
    assert all(x.pods for x in left_behind.values())
