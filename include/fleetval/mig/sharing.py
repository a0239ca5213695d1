"""D-GPU-TS-01: a time-sliced GPU is never sold as an isolated one.

With time-slicing (or MPS) the NVIDIA device plugin advertises each physical GPU as `replicas`
units. Replicas share one frame buffer and fail together, so the product surface must say so:
either the resource is renamed (`nvidia.com/gpu.shared`, `renameByDefault`) or GPU Feature
Discovery's labels mark it (`nvidia.com/gpu.replicas` > 1, `nvidia.com/gpu.sharing-strategy`,
`nvidia.com/gpu.product` ending in `-SHARED`). The judge compares what the node advertises
(capacity) with the physical count GFD reports (`nvidia.com/gpu.count`, and per MIG profile
`nvidia.com/mig-<profile>.count`): more units than devices without a marker is a fail. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from fleetval.records import Result, Verdict

CRITERION: Final = "D-GPU-TS-01"
RULE_ID: Final = "ts-disclosure-v1"
GPU: Final = "nvidia.com/gpu"
SHARED_SUFFIX: Final = ".shared"
SHARING_STRATEGIES: Final = frozenset({"time-slicing", "mps"})


def _count(text: str | None) -> int | None:
    if text is None or not text.isascii() or not text.isdigit() or len(text) > 9:
        return None
    return int(text)


def _quantity(capacity: Mapping[str, str], name: str) -> int:
    value = _count(str(capacity.get(name, "0")).strip())
    return value or 0


def judge_time_slicing(node: str, labels: Mapping[str, str], capacity: Mapping[str, str]) -> Verdict:
    """Whether the node's shared GPUs (whole GPUs and MIG profiles) are disclosed as shared."""
    physical = _count(labels.get(f"{GPU}.count"))
    evidence: dict[str, object] = {
        "gpu.count": labels.get(f"{GPU}.count"),
        "gpu.replicas": labels.get(f"{GPU}.replicas"),
        "gpu.sharing-strategy": labels.get(f"{GPU}.sharing-strategy"),
        "gpu.product": labels.get(f"{GPU}.product"),
        "capacity": {k: v for k, v in capacity.items() if k.startswith("nvidia.com/")},
    }

    def verdict(result: Result, reason: str) -> Verdict:
        return Verdict(CRITERION, node, result, "none", RULE_ID, reason, evidence, {"rule": RULE_ID})

    if physical is None:
        return verdict(
            Result.INCONCLUSIVE, "no readable nvidia.com/gpu.count label: the physical GPU count is unknown"
        )
    # (resource, devices, replicas label, strategy label) for the whole GPUs and each MIG profile
    kinds = [(GPU, physical, labels.get(f"{GPU}.replicas"), labels.get(f"{GPU}.sharing-strategy"))]
    for key, value in sorted(labels.items()):
        if key.startswith("nvidia.com/mig-") and key.endswith(".count"):
            profile = key.removesuffix(".count")
            devices = _count(value)
            if devices is not None:
                kinds.append(
                    (
                        profile,
                        devices,
                        labels.get(f"{profile}.replicas"),
                        labels.get(f"{profile}.sharing-strategy"),
                    )
                )
    undisclosed, shared = [], []
    for resource, devices, replicas_label, strategy in kinds:
        replicas = _count(replicas_label) or 0
        renamed = _quantity(capacity, resource + SHARED_SUFFIX)
        advertised = _quantity(capacity, resource)
        marked = renamed > 0 or replicas > 1 or (strategy or "none") in SHARING_STRATEGIES
        if marked:
            shared.append(f"{resource}: {renamed or advertised} units on {devices} devices, marked shared")
        elif advertised > devices:
            undisclosed.append(
                f"{resource}: {advertised} units advertised on {devices} devices, "
                "without a .shared resource, a replicas label or a sharing strategy"
            )
    evidence["shared"], evidence["undisclosed"] = shared, undisclosed
    if undisclosed:
        return verdict(Result.FAIL, "sold as isolated: " + "; ".join(undisclosed))
    if shared:
        return verdict(Result.PASS, "; ".join(shared))
    return verdict(Result.PASS, f"not shared: {physical} GPUs, each advertised once")
