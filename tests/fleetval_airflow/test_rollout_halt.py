"""Halting the driver rollout where the GPU Operator really reads its upgrade policy: the
ClusterPolicy, or with `useNvidiaDriverCRD` the NVIDIADriver objects (patching the ClusterPolicy then
pauses nothing)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client, config

from fleetval.sim.kube.gpu_operator import CLUSTER_POLICY, UPGRADE_STATE_LABEL
from fleetval_airflow.k8s_gate import pause_driver_upgrades

NV = ("nvidia.com", "v1")
NVD = ("nvidia.com", "v1alpha1")


def _states(kube: Any) -> dict[str, str | None]:
    return {
        n.metadata.name: (n.metadata.labels or {}).get(UPGRADE_STATE_LABEL)
        for n in kube.core.list_node().items
    }


def _eventually(check: Any) -> None:
    for _ in range(200):
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("the simulated operator never got there")


@pytest.mark.postgres
def test_with_the_nvidiadriver_crd_the_halt_pauses_every_nvidiadriver(sim_kube: Any) -> None:
    kube = sim_kube()
    product = client.CustomObjectsApi(config.new_client_from_config(config_file=str(kube.kubeconfig)))
    policy = kube.custom.get_cluster_custom_object(*NV, "clusterpolicies", CLUSTER_POLICY)
    version = policy["spec"]["driver"]["version"]
    kube.custom.patch_cluster_custom_object(
        *NV, "clusterpolicies", CLUSTER_POLICY, {"spec": {"driver": {"useNvidiaDriverCRD": True}}}
    )
    _eventually(lambda: not any(_states(kube).values()))  # no NVIDIADriver yet: nothing is managed
    driver = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "default"},
        "spec": {
            "default": True,
            "driverType": "gpu",
            "image": "nvcr.io/nvidia/driver",
            "version": version,
            "upgradePolicy": {"autoUpgrade": True},
        },
    }
    kube.custom.create_cluster_custom_object(*NVD, "nvidiadrivers", driver)
    _eventually(lambda: set(_states(kube).values()) == {"upgrade-done"})

    # pausing the ClusterPolicy, as before, changes nothing: the NVIDIADriver governs
    kube.custom.patch_cluster_custom_object(
        *NV, "clusterpolicies", CLUSTER_POLICY, {"spec": {"driver": {"upgradePolicy": {"autoUpgrade": True}}}}
    )
    changed = pause_driver_upgrades(product, dry_run=True)
    assert changed == [{"nvidiadriver": "default", "autoUpgrade_before": True, "dry_run": True}]
    got = kube.custom.get_cluster_custom_object(*NVD, "nvidiadrivers", "default")
    assert got["spec"]["upgradePolicy"]["autoUpgrade"] is True  # dry run: nothing persisted

    assert pause_driver_upgrades(product, dry_run=False) == [
        {"nvidiadriver": "default", "autoUpgrade_before": True, "dry_run": False}
    ]
    got = kube.custom.get_cluster_custom_object(*NVD, "nvidiadrivers", "default")
    assert got["spec"]["upgradePolicy"]["autoUpgrade"] is False
    policy = kube.custom.get_cluster_custom_object(*NV, "clusterpolicies", CLUSTER_POLICY)
    assert policy["spec"]["driver"]["upgradePolicy"]["autoUpgrade"] is True  # untouched
    # the operator, paused, removes the upgrade-state label from every node
    _eventually(lambda: not any(_states(kube).values()))
