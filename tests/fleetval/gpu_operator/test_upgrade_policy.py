"""D-OP-04: a driver rollout as observed against the upgrade policy in force — the judge on
snapshot series, and a rollout on the simulated cluster sampled as gpu_operator_validation does."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from fleetval.gpu_operator import suite
from fleetval.gpu_operator.upgrade_policy import NodeState, Snapshot, judge_rollout, policy_in_force
from fleetval.records import Result

POLICY = {"autoUpgrade": True, "maxParallelUpgrades": 1, "maxUnavailable": "25%"}
TRAINING = {"name": "default/train", "labels": {"app": "train"}}


def series(
    *steps: dict[str, tuple[str, bool] | tuple[str, bool, tuple[dict[str, Any], ...]]],
) -> list[Snapshot]:
    return [
        Snapshot(float(10 * i), {n: NodeState(*state) for n, state in step.items()})  # type: ignore[arg-type]
        for i, step in enumerate(steps)
    ]


IDLE = {
    "a": ("upgrade-done", False),
    "b": ("upgrade-done", False),
    "c": ("upgrade-done", False),
    "d": ("upgrade-done", False),
}
ONE_AT_A_TIME = series(
    IDLE | {"a": ("upgrade-required", False), "b": ("upgrade-required", False)},
    IDLE | {"a": ("wait-for-jobs-required", True, (TRAINING,)), "b": ("upgrade-required", False)},
    IDLE | {"a": ("pod-restart-required", True), "b": ("upgrade-required", False)},
    IDLE | {"b": ("cordon-required", False)},
    IDLE | {"b": ("validation-required", True)},
    IDLE,
)


def test_a_rollout_within_its_policy_passes() -> None:
    verdict = judge_rollout("ClusterPolicy/cluster-policy", POLICY, ONE_AT_A_TIME, interval_s=10)
    assert verdict.result is Result.PASS, verdict.reason
    assert verdict.evidence["most_upgrading_at_once"] == 1
    assert verdict.judged_against["policy"] == "ClusterPolicy/cluster-policy"


def test_each_policy_field_is_named_when_the_rollout_breaks_it() -> None:
    two = series(IDLE | {"a": ("cordon-required", True), "b": ("drain-required", True)})
    assert "maxParallelUpgrades=1: 2 nodes upgrading" in judge_rollout("p", POLICY, two, interval_s=10).reason
    wide = {**POLICY, "maxParallelUpgrades": 0}
    assert "maxUnavailable=25% (1 of 4): 2 cordoned" in judge_rollout("p", wide, two, interval_s=10).reason
    through = series(IDLE | {"a": ("pod-restart-required", True, (TRAINING,))})
    reason = judge_rollout("p", POLICY, through, interval_s=10).reason
    assert reason == "podDeletion: GPU pod(s) default/train still running on a in pod-restart-required"
    paused = judge_rollout("p", {**POLICY, "autoUpgrade": False}, ONE_AT_A_TIME, interval_s=10)
    assert (
        paused.result is Result.FAIL
        and "autoUpgrade=false: a moved upgrade-required → wait-for-jobs-required" in paused.reason
    )
    waiting = {**POLICY, "waitForCompletion": {"podSelector": "app=train", "timeoutSeconds": 600}}
    early = judge_rollout("p", waiting, ONE_AT_A_TIME, interval_s=10)
    assert early.result is Result.FAIL and early.reason.startswith(
        "waitForCompletion: a left wait-for-jobs-required after 10 s"
    )
    expired = {**POLICY, "waitForCompletion": {"podSelector": "app=other", "timeoutSeconds": 600}}
    assert judge_rollout("p", expired, ONE_AT_A_TIME, interval_s=10).result is Result.PASS


def test_no_rollout_is_no_evidence_and_the_nvidiadriver_policy_wins_when_delegated() -> None:
    assert judge_rollout("p", POLICY, series(IDLE), interval_s=10).result is Result.INCONCLUSIVE
    cluster_policy = {
        "metadata": {"name": "cluster-policy"},
        "spec": {"driver": {"useNvidiaDriverCRD": True, "upgradePolicy": {"maxParallelUpgrades": 9}}},
    }
    drivers = [
        {
            "metadata": {"name": "late", "creationTimestamp": "2026-02-01T00:00:00Z"},
            "spec": {"upgradePolicy": {"maxParallelUpgrades": 3}},
        },
        {
            "metadata": {"name": "first", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"upgradePolicy": {"maxParallelUpgrades": 2}},
        },
    ]
    assert policy_in_force(cluster_policy, drivers) == (
        "NVIDIADriver/first",
        {"autoUpgrade": True, "maxParallelUpgrades": 2},
    )
    assert policy_in_force(
        {**cluster_policy, "spec": {"driver": {"upgradePolicy": {"maxParallelUpgrades": 9}}}}, drivers
    )[1] == {"maxParallelUpgrades": 9}


FLEET = """
name: rollout-lab
seed: 3
profiles:
  h100:
    gpu_product: NVIDIA-H100-80GB-HBM3
    gpus: 8
    intra_busbw_gbps: 480
    inter_busbw_gbps: 370
    fabric: ib
racks:
  - {name: r01, profile: h100, nodes: 4}
faults:
  - {node: r01-n02, kind: op.upgrade_no_drain}
"""
POLICY_REF = {"group": "nvidia.com", "version": "v1", "plural": "clusterpolicies", "name": "cluster-policy"}


@pytest.mark.postgres
def test_a_simulated_rollout_that_swaps_the_driver_under_a_job_fails_naming_pod_deletion(
    sim_kube: Any, tmp_path: pathlib.Path
) -> None:
    fleet = tmp_path / "rollout-lab.yaml"
    fleet.write_text(FLEET)
    kube = sim_kube(fleet)
    store = kube.store
    run_id = store.ensure_run("rollout", suite=suite.SUITE, backend="test")
    # No rollout: nothing to observe, nothing stored.
    assert (
        suite.check_upgrade_policy(
            store, run_id, kube.core, kube.custom, run_key="r", max_s=60, interval_s=1, sleep=lambda _s: None
        )
        is None
    )
    assert store.probes(run_id) == []

    kube.run_workload("r01-n02", 8)  # the operator's fault: it never deletes this pod
    kube.custom.patch_cluster_custom_object(body={"spec": {"driver": {"version": "580.95.05"}}}, **POLICY_REF)
    verdict = suite.check_upgrade_policy(
        store, run_id, kube.core, kube.custom, run_key="r", max_s=600, interval_s=1, sleep=lambda _s: None
    )
    assert verdict is not None and verdict.result is Result.FAIL
    assert "podDeletion: GPU pod(s) default/training-r01-n02 still running on r01-n02" in verdict.reason
    assert verdict.evidence["most_upgrading_at_once"] == 1  # the default policy: one node at a time
    assert verdict.judged_against["upgradePolicy"]["maxParallelUpgrades"] == 1
    [raw] = store.probes(run_id)
    assert raw["tool"] == "driver-rollout" and '"snapshots"' in raw["raw"]
    states = {
        n.metadata.name: n.metadata.labels.get("nvidia.com/gpu-driver-upgrade-state")
        for n in kube.core.list_node().items
    }
    assert set(states.values()) == {"upgrade-done"}  # observed to the end of the rollout


def test_a_halt_that_erases_the_state_labels_is_inconclusive_not_a_pass_or_a_false_fail() -> None:
    """autoUpgrade=false makes the operator delete the state label from every node, one patch per
    node (gpu-operator v26.7.0 controllers/upgrade_controller.go removeNodeUpgradeStateLabels);
    cordons stay. A snapshot mid-cleanup must not shrink the managed count under maxUnavailable,
    and a rollout stopped half way did not "upgrade within its policy"."""
    eight = {f"n{i}": ("upgrade-done", False) for i in range(8)}
    midway = {"n0": ("cordon-required", True), "n1": ("wait-for-jobs-required", True)}
    erased = {f"n{i}": ("", False) for i in range(2, 8)}
    halted = series(
        eight | midway,
        erased | midway,  # the cleanup half done: n0 and n1 still labelled
        erased | {"n0": ("", True), "n1": ("", True)},
    )
    policy = {**POLICY, "maxParallelUpgrades": 2}
    verdict = judge_rollout("p", policy, halted, interval_s=10)
    assert verdict.result is Result.INCONCLUSIVE, verdict.reason
    assert verdict.reason.startswith("rollout halted at t=10 s")
    assert "n0 (cordon-required), n1 (wait-for-jobs-required)" in verdict.reason
    assert verdict.evidence["halted_at"] == 10.0
    assert verdict.evidence["unfinished"] == {"n0": "cordon-required", "n1": "wait-for-jobs-required"}
    assert verdict.evidence["left_cordoned"] == ["n0", "n1"]
    assert "uncordon" in verdict.action
    # Only the cleanup's last patch seen: the same.
    quick = judge_rollout("p", policy, [halted[0], halted[2]], interval_s=10)
    assert quick.result is Result.INCONCLUSIVE and quick.evidence["left_cordoned"] == ["n0", "n1"]
    # A breach before the halt still fails.
    breach = series(eight | midway | {"n2": ("drain-required", True)}, erased | midway)
    assert judge_rollout("p", policy, breach, interval_s=10).result is Result.FAIL
