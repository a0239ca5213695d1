"""The weekly sweep's choice of nodes: idle GPU nodes only, each other node with its reason."""

from __future__ import annotations

from typing import Any

from fleetval.dcgm.weekly import plan_sweep
from fleetval.nodes import ONBOARDING_TAINT, NodeInfo
from fleetval.policy.blast_radius import DiagnosisBudget


def _info(name: str, **kw: Any) -> NodeInfo:
    return NodeInfo(name=name, rack="r01", profile="p", gpus=kw.pop("gpus", 8), **kw)


def test_only_idle_gpu_nodes_are_swept_and_the_rest_say_why() -> None:
    nodes = [
        _info("idle"),
        _info("cpu", gpus=0),
        _info("q", labels={"fleetval.io/quarantine": "xid"}),
        _info("new", taints=({"key": ONBOARDING_TAINT, "value": "pending", "effect": "NoSchedule"},)),
        _info("cordoned", unschedulable=True),
        _info("busy", gpu_pods=1),
        _info("withdrawn", allocatable_gpus=7),
    ]
    plan = plan_sweep(nodes, DiagnosisBudget(1.0, 1.0), max_waves=4)
    assert plan.waves == [["idle"]]
    assert plan.skipped == {
        "cpu": "no GPUs",
        "q": "quarantined",
        "new": "being onboarded (rack_onboarding)",
        "cordoned": "cordoned",
        "busy": "busy (1 GPU pods)",
        "withdrawn": "GPU withdrawn by the device plugin",
    }
