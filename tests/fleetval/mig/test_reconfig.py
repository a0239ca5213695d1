"""D-GPU-MIG-01, -02, -05 and -06 judged from Node snapshots (pure): what the device plugin must
advertise, in time; a refused layout shown as refused; instances sold as their profile; running
work spared."""

from __future__ import annotations

import json

import pytest

from fleetval.mig import reconfig
from fleetval.mig.reconfig import BusyChange, Change, NodeSnapshot, PodSample
from fleetval.records import Result
from tests.paths import FIXTURES

BALANCED = [{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}] * 8
EXPECTED = {
    "nvidia.com/gpu": 0,
    "nvidia.com/mig-1g.10gb": 16,
    "nvidia.com/mig-2g.20gb": 8,
    "nvidia.com/mig-3g.40gb": 8,
}
WHOLE = {"nvidia.com/gpu": "8"}
GFD_MIXED = json.loads(
    (FIXTURES / "mig" / "gfd-node-labels-h100-mig-mixed-all-balanced-nvidia-docs.json").read_text()
)


def snap(at: float, state: str, resources: dict[str, str] | None = None, **labels: str) -> NodeSnapshot:
    res = resources if resources is not None else WHOLE
    return NodeSnapshot(
        at,
        {"nvidia.com/mig.config.state": state, "nvidia.com/mig.strategy": "mixed", **labels},
        dict(res),
        dict(res),
    )


MIG_RES = {k: str(v) for k, v in EXPECTED.items()}


def change(*snaps: NodeSnapshot, expected: dict[str, int] | None = EXPECTED, watch: float = 900.0) -> Change:
    return Change("n1", "all-balanced", 100.0, snaps, snap(99.0, "success"), expected=expected, watch_s=watch)


def test_what_each_strategy_advertises() -> None:
    assert reconfig.expected_resources(BALANCED, "mixed") == EXPECTED
    assert reconfig.expected_resources([{"1g.10gb": 7}] * 8, "single") == {"nvidia.com/gpu": 56}
    assert reconfig.expected_resources([{}] * 8, "single") == {"nvidia.com/gpu": 8}
    assert reconfig.expected_resources(BALANCED, "single") is None  # GFD says MIG-INVALID
    assert reconfig.expected_resources([{"1g.10gb+me": 1}, {}], "mixed") == {
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-1g.10gb.me": 1,
    }
    stale = snap(0, "success", {**MIG_RES, "nvidia.com/mig-7g.80gb": "2"})
    assert not reconfig.advertises(stale, EXPECTED)
    assert reconfig.advertises(snap(0, "success", {**MIG_RES, "nvidia.com/mig-7g.80gb": "0"}), EXPECTED)


def test_d_gpu_mig_01_times_the_resources_not_the_label() -> None:
    ok = reconfig.judge_advertised_in_time(
        change(snap(100.5, "pending", {}), snap(190.0, "success"), snap(230.0, "success", MIG_RES))
    )
    assert ok.result is Result.PASS and ok.evidence["seconds"] == 130.0
    assert ok.judged_against["max_s"] == 600.0  # the criterion's N = 10 minutes
    assert [s["state"] for s in ok.evidence["states"]] == ["pending", "success"]
    late = reconfig.judge_advertised_in_time(change(snap(101, "pending", {}), snap(800, "success", MIG_RES)))
    assert late.result is Result.FAIL and "only 700.0 s after the label (limit 600 s)" in late.reason
    tight = reconfig.judge_advertised_in_time(change(snap(130, "success", MIG_RES)), max_s=10)
    assert tight.result is Result.FAIL


def test_d_gpu_mig_01_never_advertised_or_failed() -> None:
    never = reconfig.judge_advertised_in_time(change(snap(101, "pending", {}), snap(1000, "success")))
    assert (
        never.result is Result.FAIL
        and "not advertised within 900 s (state success; advertising gpu=8)" in never.reason
    )
    short = reconfig.judge_advertised_in_time(change(snap(101, "pending", {}), watch=60))
    assert short.result is Result.INCONCLUSIVE  # watched less than the limit: cannot say late
    failed = reconfig.judge_advertised_in_time(change(snap(101, "pending", {}), snap(150, "failed")))
    assert failed.result is Result.FAIL and "says failed for a layout the GPU can hold" in failed.reason
    assert (
        reconfig.judge_advertised_in_time(change(snap(101, "success"), expected=None)).result
        is Result.INCONCLUSIVE
    )
    assert reconfig.judge_advertised_in_time(change()).result is Result.ERROR


def refusal(*snaps: NodeSnapshot) -> Change:
    before = snap(99.0, "success", MIG_RES)
    return Change(
        "n1",
        "all-1g.5gb",
        100.0,
        snaps,
        before,
        refused_reasons=('"1g.5gb" is not a MIG profile',),
        watch_s=60,
    )


def test_d_gpu_mig_02_refused_shows_failed_and_keeps_the_old_layout() -> None:
    ok = reconfig.judge_refused(refusal(snap(100.2, "pending", {}), snap(130, "failed", MIG_RES)))
    assert ok.result is Result.PASS
    assert ok.reason.startswith("all-1g.5gb refused: nvidia.com/mig.config.state=failed after 30.0 s")
    assert ok.evidence["catalog_reasons"] == ['"1g.5gb" is not a MIG profile']
    lost = reconfig.judge_refused(refusal(snap(130, "failed", WHOLE)))
    assert lost.result is Result.FAIL and "now advertises" in lost.reason


def test_d_gpu_mig_02_accepted_or_silent_fails() -> None:
    accepted = reconfig.judge_refused(refusal(snap(100.2, "pending", {}), snap(130, "success", WHOLE)))
    assert accepted.result is Result.FAIL and "reported applied (state success)" in accepted.reason
    silent = reconfig.judge_refused(refusal(snap(101, "success", MIG_RES), snap(160, "success", MIG_RES)))
    assert silent.result is Result.FAIL and "never refused within 60 s" in silent.reason
    stuck = reconfig.judge_refused(refusal(snap(101, "pending", {}), snap(160, "pending", {})))
    assert stuck.result is Result.FAIL


def test_d_gpu_mig_05_on_nvidias_own_mixed_labels() -> None:
    # NVIDIA's mixed-strategy label set (one H100, all-balanced) with what its device plugin advertises.
    labels = {k: v for k, v in GFD_MIXED.items() if k.startswith("nvidia.com/")}
    res = {
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.10gb": "2",
        "nvidia.com/mig-2g.20gb": "1",
        "nvidia.com/mig-3g.40gb": "1",
    }
    node = NodeSnapshot(0, labels, res, res)
    layout = [{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}]
    assert reconfig.judge_sold_as_profile("n1", node, layout).result is Result.PASS
    sold = NodeSnapshot(
        0, {**labels, "nvidia.com/mig.strategy": "single"}, {"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "4"}
    )
    verdict = reconfig.judge_sold_as_profile("n1", sold, layout)
    assert verdict.result is Result.FAIL
    assert "4 MIG instances (1g.10gb, 2g.20gb, 3g.40gb) advertised as nvidia.com/gpu=4" in verdict.reason
    assert "under the whole GPU's product NVIDIA-H100-80GB-HBM3 and memory 81559 MiB" in verdict.reason
    single = {
        **labels,
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
    }
    ok = NodeSnapshot(0, single, {"nvidia.com/gpu": "7"}, {"nvidia.com/gpu": "7"})
    assert reconfig.judge_sold_as_profile("n1", ok, [{"1g.10gb": 7}]).result is Result.PASS
    relabelled = {**labels, "nvidia.com/mig-2g.20gb.product": "NVIDIA-H100-80GB-HBM3"}
    assert (
        "2g.20gb: its product label"
        in reconfig.judge_sold_as_profile("n1", NodeSnapshot(0, relabelled, res, res), layout).reason
    )
    assert reconfig.judge_sold_as_profile("n1", node, [{}]).result is Result.INCONCLUSIVE


def busy(samples: tuple[PodSample, ...], *snaps: NodeSnapshot) -> BusyChange:
    base = Change("n1", "all-1g.10gb", 100.0, snaps, snap(99, "success", MIG_RES), watch_s=60)
    return BusyChange(base, "work", samples)


RUNNING = PodSample(100.0, "Running", 0)


@pytest.mark.parametrize(
    ("samples", "snaps", "result", "why"),
    [
        pytest.param(
            (RUNNING, PodSample(130, "Running")),
            (snap(100.2, "pending", {}), snap(130, "failed", MIG_RES)),
            Result.PASS,
            "refused",
            id="refused",
        ),
        pytest.param(
            (RUNNING, PodSample(160, "Running")),
            (snap(101, "pending", {}),),
            Result.PASS,
            "waits",
            id="waits",
        ),
        pytest.param(
            (RUNNING, PodSample(110, None)),
            (snap(101, "pending", {}),),
            Result.FAIL,
            "was deleted",
            id="deleted",
        ),
        pytest.param(
            (RUNNING, PodSample(110, "Failed")),
            (snap(101, "pending", {}),),
            Result.FAIL,
            "was Failed",
            id="failed",
        ),
        pytest.param(
            (RUNNING, PodSample(110, "Running", 1)),
            (snap(101, "pending", {}),),
            Result.FAIL,
            "restarted",
            id="restarted",
        ),
        pytest.param(
            (RUNNING, PodSample(130, "Running")),
            (snap(130, "success", WHOLE),),
            Result.FAIL,
            "under running work",
            id="applied",
        ),
        pytest.param(
            (PodSample(100, "Pending"),),
            (snap(101, "failed", MIG_RES),),
            Result.INCONCLUSIVE,
            "not running",
            id="no-work",
        ),
        pytest.param(
            (RUNNING,),
            (snap(101, "success", MIG_RES),),
            Result.INCONCLUSIVE,
            "neither refused nor waited",
            id="silent",
        ),
    ],
)
def test_d_gpu_mig_06_spares_the_running_work(
    samples: tuple[PodSample, ...], snaps: tuple[NodeSnapshot, ...], result: Result, why: str
) -> None:
    verdict = reconfig.judge_busy_reconfig(busy(samples, *snaps))
    assert verdict.result is result and why in verdict.reason


def test_snapshots_round_trip_and_read_only_nvidia_keys() -> None:
    node = {
        "metadata": {"labels": {"nvidia.com/mig.config.state": "success", "kubernetes.io/hostname": "n1"}},
        "spec": {"unschedulable": True},
        "status": {"capacity": {"cpu": "8", "nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"}},
    }
    s = reconfig.node_snapshot(node, 5.0)
    assert s.labels == {"nvidia.com/mig.config.state": "success"} and s.capacity == {"nvidia.com/gpu": "8"}
    assert NodeSnapshot.from_json(json.loads(json.dumps(s.to_json()))) == s and s.unschedulable
