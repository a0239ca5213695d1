"""The simulated MIG manager, device plugin and GFD, on a clock the test turns: the real label values
and steps, the durations, what a container given MIG devices gets, and each mig.* fault."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from fleetval.fleet.spec import load_fleet_spec
from fleetval.sim.kube import mig_manager
from fleetval.sim.kube.cluster import SimKubeCluster
from fleetval.sim.kube.resources import by_kind
from tests.paths import FIXTURES, ROOT

FLEET = (ROOT / "include/fleetval/sim/fleets/mig.yaml").read_text()
NODE = by_kind("Node")
POD = by_kind("Pod")
GFD_MIXED = json.loads(
    (FIXTURES / "mig" / "gfd-node-labels-h100-mig-mixed-all-balanced-nvidia-docs.json").read_text()
)
# pause + MIG mode change + 8 GPUs' instances (simulated seconds); the device plugin then comes back.
APPLIED_AT = mig_manager.PAUSE_S + mig_manager.MODE_CHANGE_S + 8 * mig_manager.APPLY_S
ADVERTISED_AT = APPLIED_AT + mig_manager.RESTART_S


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def cluster(text: str = FLEET, engine: Any = None) -> tuple[SimKubeCluster, Clock]:
    clock = Clock()
    sim = SimKubeCluster(load_fleet_spec(text), engine, time_scale=1.0, clock=clock)
    sim.start()
    return sim, clock


def label(sim: SimKubeCluster, node: str, config: str) -> None:
    sim.patch(
        NODE,
        "",
        node,
        {"metadata": {"labels": {"nvidia.com/mig.config": config}}},
        "application/merge-patch+json",
    )


def node(sim: SimKubeCluster, name: str) -> dict[str, Any]:
    return sim.get(NODE, "", name)


def state(sim: SimKubeCluster, name: str) -> str:
    return str(node(sim, name)["metadata"]["labels"]["nvidia.com/mig.config.state"])


def nvidia(section: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in section.items() if k.startswith("nvidia.com/")}


def at(sim: SimKubeCluster, clock: Clock, seconds: float) -> None:
    clock.now = START + seconds
    sim.reconcile()


START = Clock().now
BALANCED = {
    "nvidia.com/gpu": "0",
    "nvidia.com/mig-1g.10gb": "16",
    "nvidia.com/mig-2g.20gb": "8",
    "nvidia.com/mig-3g.40gb": "8",
}


def test_a_fresh_mig_pool_and_the_operators_config() -> None:
    sim, _ = cluster()
    labels = node(sim, "r01-n01")["metadata"]["labels"]
    assert (
        labels["nvidia.com/mig.strategy"],
        labels["nvidia.com/mig.config"],
        labels["nvidia.com/mig.config.state"],
    ) == (
        "mixed",
        "all-disabled",
        "success",
    )
    policy = sim.get(by_kind("ClusterPolicy"), "", "cluster-policy")
    assert policy["spec"]["migManager"]["config"]["name"] == "default-mig-parted-config"
    assert policy["spec"]["mig"]["strategy"] == "mixed"
    configmap = sim.get(by_kind("ConfigMap"), "gpu-operator", "default-mig-parted-config")
    assert "all-balanced:" in configmap["data"]["config.yaml"]


def test_a_layout_goes_pending_then_success_then_is_advertised() -> None:
    sim, clock = cluster()
    label(sim, "r01-n01", "all-balanced")
    n = node(sim, "r01-n01")
    assert n["metadata"]["labels"]["nvidia.com/mig.config.state"] == "pending"
    assert n["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "paused-for-mig-change"
    assert nvidia(n["status"]["allocatable"]) == {"nvidia.com/gpu": "0"}  # the plugin is gone meanwhile
    at(sim, clock, APPLIED_AT - 1)
    assert state(sim, "r01-n01") == "pending"
    at(sim, clock, APPLIED_AT)
    n = node(sim, "r01-n01")
    assert n["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    assert n["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert "nvidia.com/mig-1g.10gb" not in n["status"]["allocatable"]  # `success` before the resources
    at(sim, clock, ADVERTISED_AT)
    n = node(sim, "r01-n01")
    assert nvidia(n["status"]["capacity"]) == nvidia(n["status"]["allocatable"]) == BALANCED
    # GFD's labels as NVIDIA prints them for an H100 all-balanced (its fixture: one GPU, counts 2/1/1).
    labels = n["metadata"]["labels"]
    for key, value in GFD_MIXED.items():
        if key.startswith("nvidia.com/mig-") and not key.endswith(".count"):
            assert labels[key] == value, key
    assert [labels[f"nvidia.com/mig-{p}.count"] for p in ("1g.10gb", "2g.20gb", "3g.40gb")] == [
        "16",
        "8",
        "8",
    ]
    assert labels["nvidia.com/gpu.replicas"] == "0" and labels["nvidia.com/gpu.count"] == "8"


def test_back_to_all_disabled_advertises_whole_gpus_again() -> None:
    sim, clock = cluster()
    label(sim, "r01-n01", "all-balanced")
    at(sim, clock, ADVERTISED_AT)
    label(sim, "r01-n01", "all-disabled")
    at(sim, clock, 2 * ADVERTISED_AT)
    n = node(sim, "r01-n01")
    assert n["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    assert nvidia(n["status"]["allocatable"]) == {
        "nvidia.com/gpu": "8",
        "nvidia.com/mig-1g.10gb": "0",  # the kubelet keeps what a plugin stopped advertising, at 0
        "nvidia.com/mig-2g.20gb": "0",
        "nvidia.com/mig-3g.40gb": "0",
    }
    assert not any(k.startswith("nvidia.com/mig-") for k in n["metadata"]["labels"])


def test_an_unknown_config_fails_at_once_a_layout_the_gpu_cannot_hold_after_pending() -> None:
    sim, clock = cluster()
    label(sim, "r01-n01", "no-such-config")
    assert state(sim, "r01-n01") == "failed"
    label(sim, "r01-n02", "all-1g.5gb")  # the A100-40GB's profile: not on an H100
    assert state(sim, "r01-n02") == "pending"
    at(sim, clock, APPLIED_AT)
    n = node(sim, "r01-n02")
    assert n["metadata"]["labels"]["nvidia.com/mig.config.state"] == "failed"
    assert nvidia(n["status"]["allocatable"]) == {"nvidia.com/gpu": "8"}  # the old layout, advertised again
    assert n["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "true"
    events = sim.list_objects(by_kind("Event"), None, mig_manager_options())["items"]
    mine = [
        e for e in events if e["involvedObject"]["name"] == "r01-n02" and e["reason"] != "GPUDriverUpgrade"
    ]
    assert not mine  # the MIG manager writes no Event: `failed` on the label is all the node says


def mig_manager_options() -> Any:
    from fleetval.sim.kube.cluster import ListOptions

    return ListOptions()


def mig_pod(sim: SimKubeCluster, name: str, node_name: str, count: int = 1, profile: str = "1g.10gb") -> None:
    sim.create(
        POD,
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node_name},
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox:1.36",
                        "command": ["sleep", "infinity"],
                        "resources": {"limits": {f"nvidia.com/mig-{profile}": str(count)}},
                    }
                ],
            },
        },
    )


def balanced(sim: SimKubeCluster, clock: Clock, *nodes: str) -> None:
    for n in nodes:
        label(sim, n, "all-balanced")
    at(sim, clock, ADVERTISED_AT)


def test_busy_gpus_are_not_reconfigured_and_the_work_is_not_touched() -> None:
    sim, clock = cluster()
    balanced(sim, clock, "r01-n01")
    mig_pod(sim, "work", "r01-n01")
    assert sim.get(POD, "default", "work")["status"]["phase"] == "Running"
    label(sim, "r01-n01", "all-1g.10gb")
    at(sim, clock, ADVERTISED_AT + APPLIED_AT)
    assert state(sim, "r01-n01") == "failed"
    assert sim.get(POD, "default", "work")["status"]["phase"] == "Running"
    assert nvidia(node(sim, "r01-n01")["status"]["allocatable"]) == BALANCED


def test_the_reconfig_while_busy_fault_deletes_the_work() -> None:
    sim, clock = cluster()
    balanced(sim, clock, "r01-n07")
    mig_pod(sim, "work", "r01-n07")
    label(sim, "r01-n07", "all-1g.10gb")
    at(sim, clock, 2 * ADVERTISED_AT)
    assert state(sim, "r01-n07") == "success"
    with pytest.raises(Exception, match="not found"):
        sim.get(POD, "default", "work")
    assert node(sim, "r01-n07")["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "56"


def test_slow_advertise_bad_combo_and_billing_faults() -> None:
    sim, clock = cluster()
    balanced(sim, clock, "r01-n02", "r01-n06")
    slow = node(sim, "r01-n02")
    assert slow["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    assert "nvidia.com/mig-1g.10gb" not in slow["status"]["allocatable"]  # 30 minutes late
    at(sim, clock, ADVERTISED_AT + 30 * 60)
    assert nvidia(node(sim, "r01-n02")["status"]["allocatable"]) == BALANCED
    sold = node(sim, "r01-n06")
    assert nvidia(sold["status"]["allocatable"]) == {"nvidia.com/gpu": "32"}
    assert sold["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    label(sim, "r01-n03", "all-1g.5gb")
    at(sim, clock, ADVERTISED_AT + 30 * 60 + APPLIED_AT)
    assert state(sim, "r01-n03") == "success"  # a layout the GPU cannot hold, reported applied


def test_the_single_strategy_relabels_the_product() -> None:
    sim, clock = cluster(FLEET.replace("mig_strategy: mixed", "mig_strategy: single"))
    label(sim, "r01-n01", "all-1g.10gb")
    label(sim, "r01-n08", "all-balanced")
    at(sim, clock, ADVERTISED_AT)
    labels = node(sim, "r01-n01")["metadata"]["labels"]
    assert (
        labels["nvidia.com/gpu.product"],
        labels["nvidia.com/gpu.count"],
        labels["nvidia.com/gpu.memory"],
    ) == (
        "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        "56",
        "9984",
    )
    assert nvidia(node(sim, "r01-n01")["status"]["allocatable"]) == {"nvidia.com/gpu": "56"}
    invalid = node(sim, "r01-n08")["metadata"]["labels"]
    assert (invalid["nvidia.com/gpu.product"], invalid["nvidia.com/gpu.count"]) == (
        "NVIDIA-H100-80GB-HBM3-MIG-INVALID",
        "0",
    )


def test_containers_get_distinct_instances_and_faulty_nodes_leak() -> None:
    sim, clock = cluster()
    balanced(sim, clock, "r01-n01", "r01-n04", "r01-n05")
    state_ = mig_manager.state(sim)
    mig_pod(sim, "a", "r01-n01")
    mig_pod(sim, "b", "r01-n01")
    held = {k[2]: v for k, v in state_.held.items()}
    assert len(held["a"]) == len(held["b"]) == 1 and held["a"][0].uuid != held["b"][0].uuid
    assert {i.profile for i in held["a"] + held["b"]} == {"1g.10gb"}
    sim.delete(POD, "default", "a", grace_period=0)
    mig_pod(sim, "c", "r01-n01")
    assert {k[2] for k in state_.held} == {"b", "c"}  # a's device went back to the pool


def test_the_applied_layout_survives_a_restart(tmp_path: pathlib.Path) -> None:
    from fleetval.store.engine import make_engine
    from fleetval.store.migrate import upgrade

    engine = make_engine(f"sqlite:///{tmp_path}/sim.db")
    upgrade(engine)
    sim, clock = cluster(engine=engine)
    balanced(sim, clock, "r01-n01")
    sim.flush()
    again, _ = cluster(engine=engine)
    assert again.node_mig["r01-n01"] == "all-balanced"
    assert nvidia(node(again, "r01-n01")["status"]["allocatable"]) == BALANCED
    assert state(again, "r01-n01") == "success"
    engine.dispose()
