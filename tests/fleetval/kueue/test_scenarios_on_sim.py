"""The shipped scenarios against the simulated cluster's Kueue: on the healthy one every expectation
holds (as on real Kueue: tests/controlplane/test_kueue_real.py), and each Kueue fault fails the
criterion it breaks. Each run gets its own simulated cluster (Kueue's blockAdmission is
cluster-wide), so they run side by side."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from fleetval.fleet.spec import load_fleet_spec
from fleetval.kueue import runner
from fleetval.kueue.runner import ScenarioRunner, cleanup
from fleetval.kueue.scenario import SCENARIO_LABEL, parse_scenario
from fleetval.kueue.suite import ScenarioOutcome, resolve, run_scenario, shipped_files
from fleetval.records import Result
from fleetval.sim.kube.cluster import SimKubeCluster
from fleetval.sim.kube.server import KubeApiServer
from tests.paths import DEMO_FLEET
from tests.rbac import TEST_AGENT, check_server

FAULTS = {  # fault -> (scenario, the criterion it must fail)
    "kueue.no_borrowing": ("d-sched-03-04-borrow-reclaim", "D-SCHED-03"),
    "kueue.no_reclaim": ("d-sched-03-04-borrow-reclaim", "D-SCHED-04"),
    "kueue.partial_gang": ("d-sched-06-gang", "D-SCHED-06"),
    "kueue.wrong_reason": ("d-sched-01-02-quota", "D-SCHED-07"),
}


class Sims:
    def __init__(self, folder: pathlib.Path) -> None:
        self.folder = folder
        self.servers: list[KubeApiServer] = []

    def api(self, faults: tuple[str, ...] = ()) -> client.ApiClient:
        raw = yaml.safe_load(DEMO_FLEET.read_text())
        raw["faults"] = [*raw["faults"], *({"kind": f} for f in faults)]
        server = KubeApiServer(SimKubeCluster(load_fleet_spec(yaml.safe_dump(raw)), None, time_scale=0.0))
        server.start()
        self.servers.append(server)
        kubeconfig = server.write_kubeconfig(self.folder / f"kubeconfig-{len(self.servers)}")
        return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture
def sims(tmp_path: pathlib.Path) -> Iterator[Sims]:
    sims = Sims(tmp_path)
    yield sims
    for server in sims.servers:
        server.stop()
    for server in sims.servers:
        check_server(server.calls)  # the runner called only what deploy/rbac.yaml grants
    assert not job_processes(), "a scenario job's container outlived its pod or its cluster"


def job_processes() -> list[int]:
    """This test process's children still running the scenario job script."""
    alive = []
    for proc in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == os.getpid() and b"FINISH_FILE" in (proc / "cmdline").read_bytes():
                alive.append(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    return alive


def run_all(sims: Sims, jobs: list[tuple[str, tuple[str, ...]]]) -> list[ScenarioOutcome]:
    apis = [sims.api(faults) for _, faults in jobs]
    # On a faulty cluster an expectation that never holds waits out its bound: 6 s is enough here.
    quick = partial(ScenarioRunner, max_within=6.0)
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [
            pool.submit(
                run_scenario, api, resolve(sid), "test-run", runner=quick if faults else ScenarioRunner
            )
            for api, (sid, faults) in zip(apis, jobs, strict=True)
        ]
        return [f.result() for f in futures]


def test_the_shipped_scenarios_on_the_healthy_simulated_kueue_and_each_fault_is_caught(
    sims: Sims,
) -> None:
    healthy = [(sid, ()) for sid in shipped_files()]
    faulty = [(scenario, (fault,)) for fault, (scenario, _) in FAULTS.items()]
    outcomes = run_all(sims, healthy + faulty)
    failed = set()
    for outcome in outcomes[: len(healthy)]:
        record = outcome.record
        assert not record.harness_error, record.harness_error
        waits = any(s.expect and s.expect.checks.get("state") == "pending" for s in outcome.scenario.steps)
        # v0.19's reasons, read from what the cluster wrote (a run with no pending job shows none)
        assert record.kueue_version == "v0.19.2" and record.mode == ("legacy" if waits else None)
        failed |= {(outcome.scenario.id, r.step) for r in record.results if not r.ok}
        assert {v.result for v in outcome.verdicts} == {Result.PASS}, [v.reason for v in outcome.verdicts]
        assert record.cleaned.get("namespaces") == len(outcome.scenario.namespaces)
    assert failed == set()
    for (fault, (_, criterion)), outcome in zip(FAULTS.items(), outcomes[len(healthy) :], strict=True):
        results = {v.criterion: v.result for v in outcome.verdicts}
        assert results[criterion] == Result.FAIL, (
            fault,
            results,
            [(r.step, r.detail) for r in outcome.record.results],
        )
        # The fault breaks what it breaks, not the whole scenario.
        assert any(r == Result.PASS for c, r in results.items() if c != criterion) or len(results) == 1, fault


def test_a_crashed_run_is_cleaned_by_the_next_and_nothing_is_left(
    sims: Sims, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = sims.api()
    scenario = resolve("d-sched-06-gang")

    class Killed(ScenarioRunner):
        def _expect(self, step: Any) -> None:
            raise KeyboardInterrupt  # the worker is killed mid-scenario: its cleanup never runs

    with monkeypatch.context() as patch:
        patch.setattr(runner, "cleanup", lambda *_a, **_k: {})
        with pytest.raises(KeyboardInterrupt):
            Killed(api, scenario, "crashed").run()
    tests = config.new_client_from_config(config_file=str(sims.folder / "kubeconfig-1"))
    tests.user_agent = TEST_AGENT
    core, custom = client.CoreV1Api(tests), client.CustomObjectsApi(tests)
    left = core.list_namespace(label_selector=f"{SCENARIO_LABEL}={scenario.id}").items
    assert len(left) == 1 and core.list_namespaced_pod(left[0].metadata.name).items  # the gang's pods

    outcome = run_scenario(api, scenario, "next")
    assert outcome.record.cleaned["namespaces"] == 2  # the crashed run's and its own
    assert not outcome.record.harness_error
    assert [r.step for r in outcome.record.results if not r.ok] == []
    assert not core.list_namespace(label_selector=SCENARIO_LABEL).items
    for plural in ("clusterqueues", "resourceflavors", "workloadpriorityclasses", "cohorts"):
        assert not custom.list_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", plural, label_selector=SCENARIO_LABEL
        )["items"]
    assert cleanup(core, custom, scenario.id) == {}


def test_an_unreachable_cluster_is_an_error_verdict_not_a_crash(sims: Sims) -> None:
    api = sims.api()
    sims.servers[-1].stop()
    outcome = run_scenario(api, resolve("x-08-misconfigured"), "down")
    assert outcome.record.harness_error
    assert [v.result for v in outcome.verdicts] == [Result.ERROR]


def test_a_victim_cut_short_fails_and_fair_sharing_makes_preemption_inconclusive(sims: Sims) -> None:
    shipped_scenario = resolve("d-sched-05-preempt-resume")
    old = "grace: 30, save: 6}"
    assert shipped_scenario.source.count(old) == 1
    cut_short = parse_scenario(shipped_scenario.source.replace(old, "grace: 1, save: 6}"), where="grace 1")
    outcome = run_scenario(sims.api(), cut_short, "cut-short")  # SIGKILL 1 s into its 6 s save
    [verdict] = outcome.verdicts
    assert verdict.result == Result.FAIL
    assert verdict.reason.startswith("step 5: lo: a pod ran ") and "expected its 6 s save" in verdict.reason

    api = sims.api()
    fair = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nfairSharing: {}\n"
    admin = config.new_client_from_config(config_file=str(sims.folder / f"kubeconfig-{len(sims.servers)}"))
    admin.user_agent = TEST_AGENT  # the test's own call, not the product's
    client.CoreV1Api(admin).create_namespaced_config_map(
        "kueue-system",
        {"metadata": {"name": "kueue-manager-config"}, "data": {"controller_manager_config.yaml": fair}},
    )
    outcome = run_scenario(api, shipped_scenario, "fair")
    [verdict] = outcome.verdicts
    assert verdict.result == Result.INCONCLUSIVE and "fair sharing is on" in verdict.reason
    assert outcome.record.cluster["settings"]["fair_sharing"] is True
    assert not outcome.record.actions  # nothing was created
