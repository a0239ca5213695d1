"""Nodes, plans and verdict rows for the onboarding tests."""

from __future__ import annotations

from typing import Any

from fleetval.nodes import ONBOARDING_TAINT, NodeInfo

PROFILE = "NVIDIA-H100-80GB-HBM3"


def node(
    name: str,
    rack: str = "r01",
    *,
    taint: str | None = "pending",
    profile: str = PROFILE,
    gpus: int = 8,
    labels: dict[str, str] | None = None,
    **kwargs: Any,
) -> NodeInfo:
    """A GPU node as KubeCluster.list_nodes reads it; `taint` is the onboarding taint's value (None: none)."""
    taints = ({"key": ONBOARDING_TAINT, "value": taint, "effect": "NoSchedule"},) if taint is not None else ()
    return NodeInfo(
        name,
        rack,
        profile,
        gpus,
        labels={"fleetval.io/fabric": "ib", **(labels or {})},
        taints=taints,
        **kwargs,
    )


def row(criterion: str, subject: str, result: str, rule_id: str = "", **evidence: Any) -> dict[str, Any]:
    """A verdict row as Store.verdicts returns it."""
    return {
        "criterion": criterion,
        "subject": subject,
        "result": result,
        "rule_id": rule_id or f"test.{criterion}.{result}",
        "reason": f"{criterion} {result} on {subject}",
        "evidence": evidence,
        "judged_against": {},
        "probe_id": None,
        "action": "none",
    }
