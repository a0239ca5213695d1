"""D-OP-02: does the device plugin advertise the GPUs the node has? Pure.

The hardware count is GPU Feature Discovery's `nvidia.com/gpu.count` (read from NVML on the
node); what the device plugin advertises is the Node's `status.capacity`. Without MIG (or with the
`single` strategy, where each MIG device is advertised as `nvidia.com/gpu` and GFD counts MIG
devices) the two must be equal.
With the `mixed` strategy the plugin advertises `nvidia.com/mig-<profile>` resources instead, and
each must equal GFD's `nvidia.com/mig-<profile>.count`. A GPU the plugin has withdrawn as
unhealthy (allocatable below capacity) is the device layer's finding, not a miscount: `warn`.
With time-slicing or MPS disclosed as such (`nvidia.com/gpu.replicas` > 1 with a sharing
strategy), each GPU is advertised `replicas` times, as `nvidia.com/gpu` or, renamed,
`nvidia.com/gpu.shared`: the expected count is GPUs × replicas. Undisclosed sharing is a miscount
here and D-GPU-TS-01's failure too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from fleetval.records import Result, Verdict

CRITERION: Final = "D-OP-02"
RULE_ID: Final = "operator-advertised-gpus-v1"
GPU_RESOURCE: Final = "nvidia.com/gpu"
COUNT_LABEL: Final = "nvidia.com/gpu.count"
MIG_STRATEGY_LABEL: Final = "nvidia.com/mig.strategy"
MIG_CONFIG_LABEL: Final = "nvidia.com/mig.config"
REPLICAS_LABEL: Final = "nvidia.com/gpu.replicas"
SHARING_LABEL: Final = "nvidia.com/gpu.sharing-strategy"
SHARED_STRATEGIES: Final = frozenset({"time-slicing", "mps"})
# GFD and the device plugin spell a profile's `+` as `.` (1g.10gb+me → nvidia.com/mig-1g.10gb.me).
_MIG_COUNT_LABEL: Final = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb(?:\.(?:me|gfx)(?:\.all)?)?)\.count$")
ACTIONS: Final = {  # a verdict's action is at most 64 characters (the store's column)
    Result.PASS: "none",
    Result.WARN: "none (the device layer owns the withdrawn GPU)",
    Result.FAIL: "fix the device plugin's config (resources, MIG strategy)",
    Result.INCONCLUSIVE: "check GPU feature discovery on this node",
}


def node_facts(node: Mapping[str, Any]) -> dict[str, Any]:
    """What D-OP-02 reads of a Node object (a dict as the API returns it): the evidence to store."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    return {
        "labels": {k: v for k, v in (meta.get("labels") or {}).items() if k.startswith("nvidia.com/")},
        "capacity": {k: v for k, v in (status.get("capacity") or {}).items() if k.startswith("nvidia.com/")},
        "allocatable": {
            k: v for k, v in (status.get("allocatable") or {}).items() if k.startswith("nvidia.com/")
        },
    }


def _count(value: Any) -> int | None:
    text = str(value)
    return int(text) if text.isascii() and text.isdigit() else None  # '²'.isdigit() is True


def judge_advertised(subject: str, facts: Mapping[str, Any]) -> Verdict:
    labels: Mapping[str, str] = facts.get("labels") or {}
    capacity: Mapping[str, Any] = facts.get("capacity") or {}
    allocatable: Mapping[str, Any] = facts.get("allocatable") or {}
    strategy = labels.get(MIG_STRATEGY_LABEL, "none")
    judged_against = {"rule_id": RULE_ID, "hardware": COUNT_LABEL, "mig_strategy": strategy}

    def verdict(result: Result, reason: str, **evidence: Any) -> Verdict:
        return Verdict(
            CRITERION,
            subject,
            result,
            ACTIONS[result],
            RULE_ID,
            reason,
            {**facts, **evidence},
            judged_against,
        )

    mig_enabled = labels.get(MIG_CONFIG_LABEL, "all-disabled") != "all-disabled"
    if strategy == "mixed" and mig_enabled:
        expected = {
            f"nvidia.com/mig-{m.group(1)}": _count(v)
            for k, v in labels.items()
            if (m := _MIG_COUNT_LABEL.match(k))
        }
        if not expected or None in expected.values():
            return verdict(
                Result.INCONCLUSIVE,
                "mixed MIG strategy without readable nvidia.com/mig-<profile>.count labels",
            )
        wrong = {
            r: (n, _count(capacity.get(r, "0")))
            for r, n in sorted(expected.items())
            if _count(capacity.get(r, "0")) != n
        }
        if wrong:
            detail = "; ".join(
                f"{r}: advertises {got}, GFD counts {want}" for r, (want, got) in wrong.items()
            )
            return verdict(Result.FAIL, f"MIG resources miscounted: {detail}", mismatched=sorted(wrong))
        listed = ", ".join(f"{r.removeprefix('nvidia.com/')}={n}" for r, n in sorted(expected.items()))
        return verdict(Result.PASS, f"the device plugin advertises every MIG device GFD counts ({listed})")

    hardware = _count(labels.get(COUNT_LABEL))
    if hardware is None:
        return verdict(Result.INCONCLUSIVE, f"no readable {COUNT_LABEL} label: the hardware count is unknown")
    replicas = _count(labels.get(REPLICAS_LABEL, "1")) or 1
    if labels.get(SHARING_LABEL, "none") not in SHARED_STRATEGIES:
        replicas = 1  # a replicas label without a sharing strategy is not sharing
    whole = _count(capacity.get(GPU_RESOURCE, "0"))
    renamed = _count(capacity.get(GPU_RESOURCE + ".shared", "0"))
    advertised = None if whole is None or renamed is None else whole + renamed
    if replicas > 1 and advertised is not None:
        units = hardware * replicas
        if advertised != units:
            return verdict(
                Result.FAIL,
                f"time-sliced ×{replicas}: the device plugin advertises {advertised} units; "
                f"{hardware} GPUs × {replicas} replicas is {units}",
            )
        return verdict(Result.PASS, f"{hardware} GPUs advertised {replicas} times each, disclosed as shared")
    if advertised is None:
        return verdict(
            Result.INCONCLUSIVE, f"capacity {GPU_RESOURCE}={capacity.get(GPU_RESOURCE)!r} is not a count"
        )
    if advertised != hardware:
        return verdict(
            Result.FAIL,
            f"the device plugin advertises {advertised} {GPU_RESOURCE}; "
            f"the node has {hardware} GPUs ({COUNT_LABEL})",
            advertised=advertised,
            hardware=hardware,
        )
    usable = _count(allocatable.get(GPU_RESOURCE, advertised))
    if usable is not None and usable < advertised:
        return verdict(
            Result.WARN,
            f"{advertised} of {hardware} GPUs advertised; {advertised - usable} withdrawn as unhealthy",
            withdrawn=advertised - usable,
        )
    return verdict(Result.PASS, f"the device plugin advertises all {hardware} GPUs")
