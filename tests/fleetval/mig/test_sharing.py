"""D-GPU-TS-01 on GPU Feature Discovery's real labels, time-sliced with and without disclosure."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleetval.mig.sharing import judge_time_slicing
from fleetval.records import Result
from tests.paths import FIXTURES

SINGLE = json.loads(
    (FIXTURES / "mig" / "gfd-node-labels-h100-mig-single-all-disabled-nvidia-docs.json").read_text()
)
MIXED = json.loads(
    (FIXTURES / "mig" / "gfd-node-labels-h100-mig-mixed-all-balanced-nvidia-docs.json").read_text()
)


def judge(labels: dict[str, Any], capacity: dict[str, str]) -> Any:
    return judge_time_slicing("n1", labels, capacity)


def test_an_unshared_gpu_passes() -> None:
    count = SINGLE["nvidia.com/gpu.count"]
    verdict = judge(SINGLE, {"nvidia.com/gpu": count})
    assert verdict.result == Result.PASS and verdict.reason.startswith("not shared")


def test_mixed_mig_profiles_each_advertised_once_pass() -> None:
    capacity = {"nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-3g.40gb": "1"}
    counts = {k: v for k, v in MIXED.items() if k.endswith(".count") and k.startswith("nvidia.com/mig-")}
    assert counts == {f"{k}.count": v for k, v in capacity.items()}  # the fixture says the same
    assert judge(MIXED, capacity).result == Result.PASS


@pytest.mark.parametrize(
    ("labels", "capacity"),
    [
        (
            {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
            {"nvidia.com/gpu": "4"},
        ),
        ({}, {"nvidia.com/gpu.shared": "4"}),  # renameByDefault
    ],
)
def test_a_disclosed_time_sliced_gpu_passes(labels: dict[str, str], capacity: dict[str, str]) -> None:
    verdict = judge({**SINGLE, **labels}, capacity)
    assert verdict.result == Result.PASS and "marked shared" in verdict.reason


def test_an_oversubscribed_gpu_without_a_marker_fails() -> None:
    verdict = judge(SINGLE, {"nvidia.com/gpu": "4"})  # 1 H100 sold as 4
    assert verdict.result == Result.FAIL
    assert verdict.reason == (
        "sold as isolated: nvidia.com/gpu: 4 units advertised on 1 devices, without a .shared resource, "
        "a replicas label or a sharing strategy"
    )
    sliced_mig = {**MIXED}
    capacity = {"nvidia.com/mig-1g.10gb": "8", "nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-3g.40gb": "1"}
    assert "nvidia.com/mig-1g.10gb: 8 units advertised on 2 devices" in judge(sliced_mig, capacity).reason


@pytest.mark.parametrize("count", [None, "", "four", "٤", "9" * 50])
def test_no_readable_physical_count_is_inconclusive_never_pass(count: str | None) -> None:
    labels = {k: v for k, v in SINGLE.items() if k != "nvidia.com/gpu.count"}
    if count is not None:
        labels["nvidia.com/gpu.count"] = count
    assert judge(labels, {"nvidia.com/gpu": "4"}).result == Result.INCONCLUSIVE
