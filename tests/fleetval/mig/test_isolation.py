"""D-GPU-MIG-03 and -04: the probes' output (as the simulated NGC PyTorch image prints it on MIG
devices), its parsers and the judges, on healthy, leaking and damaged evidence."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fleetval.errors import ParseError
from fleetval.fleet.gpus import gpu_uuid
from fleetval.fleet.spec import load_fleet_spec
from fleetval.mig import isolation
from fleetval.mig import simulated as sim
from fleetval.mig.catalog import catalog
from fleetval.probes.pod import kpo_kwargs
from fleetval.records import Result
from fleetval.sim.images import ContainerContext, run_container
from tests.paths import ROOT

SPEC = load_fleet_spec((ROOT / "include/fleetval/sim/fleets/mig.yaml").read_text())
NODE = "r01-n01"
H100 = catalog()["H100-80GB"]
INSTANCES = sim.instances(H100, 0, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, salt="test")
ONES = [i for i in INSTANCES if i.profile == "1g.10gb"]


def use(inst: sim.Instance, used: int = sim.IDLE_MIB) -> sim.MigDeviceUse:
    profile = H100.profile(inst.profile)
    assert profile is not None
    return sim.MigDeviceUse(inst, sim.device_attrs(H100, profile, 81559), used, gpu_uuid(SPEC.seed, NODE, 0))


def view(*, filled: bool = True, **faults: Any) -> sim.MigView:
    """The workload's container on the first 1g.10gb; its 1g.10gb neighbour full when `filled`."""
    neighbour = use(ONES[1], sim.filled_use_mib(9984) if filled else sim.IDLE_MIB)
    others = [use(i) for i in INSTANCES if i.profile != "1g.10gb"]
    return sim.MigView("NVIDIA H100 80GB HBM3", 81559, (use(ONES[0]),), (neighbour, *others), **faults)


def workload_output(mig: sim.MigView, salt: str = "pod") -> str:
    spec = isolation.workload_probe(NODE, "1g.10gb", "during", run_key="t")
    ctx = ContainerContext(node=NODE, gpu_indices=(), env=spec.env, salt=salt, mig=mig, started_at=1.8e9)
    result = run_container(spec.image, list(spec.command), list(spec.args), ctx, SPEC)
    assert result.exit_code == 0, result.output
    return result.output


def fill_output() -> str:
    filler = isolation.fill_pod(NODE, "1g.10gb", 1, name="f", namespace="fleetval")
    container = filler["spec"]["containers"][0]
    mig = sim.MigView("NVIDIA H100 80GB HBM3", 81559, (use(ONES[1]),), ())
    ctx = ContainerContext(node=NODE, gpu_indices=(), env={}, salt="fill", mig=mig)
    return run_container(container["image"], container["command"], [], ctx, SPEC).output


def ev(raw: str) -> isolation.Evidence:
    return isolation.Evidence(raw, 0, None)


BASELINE = workload_output(view(filled=False), "baseline")
DURING = workload_output(view(), "during")
FILL = fill_output()


def test_the_probe_pod_asks_for_one_instance_of_its_profile() -> None:
    spec = isolation.workload_probe(NODE, "1g.10gb+me", "baseline", run_key="t")
    resources = kpo_kwargs(spec)["container_resources"]
    assert resources.limits == {"nvidia.com/mig-1g.10gb.me": "1"}
    assert spec.env["FLEETVAL_WORKLOAD"] == isolation.WORKLOAD_SCRIPT
    filler = isolation.fill_pod(NODE, "1g.10gb", 15, name="f", namespace="fleetval")
    assert filler["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "15"}
    compile(isolation.WORKLOAD_SCRIPT, "workload", "exec")  # real Python the real image runs
    compile(isolation.FILL_SCRIPT, "fill", "exec")


def test_the_workloads_output_reads() -> None:
    out = isolation.parse_workload(DURING)
    assert out.mig_uuids == (ONES[0].uuid,) and out.gpu_uuid == gpu_uuid(SPEC.seed, NODE, 0)
    assert (out.mem_total_mib, out.mem_free_mib, out.alloc_ok, out.done) == (9984, 9467, True, True)
    assert out.alloc_mib == int(9467 * 0.9) and 80 < (out.matmul_tflops or 0) < 90
    [device] = out.smi.mig_devices
    assert (device.gi, device.dev, device.memory_used_mib) == (ONES[0].gi, 0, sim.IDLE_MIB)
    fill = isolation.parse_fill(FILL)
    assert fill.complete and [u for u, _, _ in fill.devices] == [ONES[1].uuid]
    assert fill.parents[ONES[1].uuid] == out.gpu_uuid


def test_healthy_neighbours_pass_both() -> None:
    fill = isolation.judge_fill(NODE, ev(BASELINE), ev(DURING), ev(FILL))
    assert fill.result is Result.PASS, fill.reason
    assert "neighbours filled (1 instances)" in fill.reason
    seen = isolation.judge_visibility(NODE, ev(DURING))
    assert seen.result is Result.PASS, seen.reason


def test_a_neighbour_spilling_over_fails_d_gpu_mig_03() -> None:
    leaked = workload_output(view(spilled_mib=6000), "leak")
    verdict = isolation.judge_fill(NODE, ev(BASELINE), ev(leaked), ev(FILL))
    assert verdict.result is Result.FAIL
    assert (
        verdict.reason == "with the neighbouring instances full, its free memory fell from 9467 to 3467 MiB"
    )


def test_seeing_the_neighbours_fails_d_gpu_mig_04() -> None:
    seeing = workload_output(view(sees_all=True), "see")
    verdict = isolation.judge_visibility(NODE, ev(seeing))
    assert verdict.result is Result.FAIL
    assert "nvidia-smi -L lists 4 MIG devices" in verdict.reason
    assert f"GI {ONES[1].gi} ({sim.filled_use_mib(9984)} MiB used)" in verdict.reason


def test_a_foreign_process_fails_d_gpu_mig_04() -> None:
    row = "|    0   13    0      41233      C   python3                                     9210MiB |"
    text = DURING.replace(
        "|  No running processes found                                                             |", row
    )
    assert "pid 41233 python3 on GI 13" in isolation.judge_visibility(NODE, ev(text)).reason


def test_throughput_and_allocation_harm_fail() -> None:
    slow = DURING.replace(
        f"matmul_tflops {isolation.parse_workload(DURING).matmul_tflops:.2f}", "matmul_tflops 40.00"
    )
    assert "throughput fell" in isolation.judge_fill(NODE, ev(BASELINE), ev(slow), ev(FILL)).reason
    oom = DURING.replace("alloc_mib 8520 ok", "alloc_mib 8520 failed OutOfMemoryError")
    assert (
        "allocating 8520 MiB failed (OutOfMemoryError)"
        in isolation.judge_fill(NODE, ev(BASELINE), ev(oom), ev(FILL)).reason
    )
    died = DURING[: DURING.index("matmul_tflops")] + "--- exit 1\n"
    assert "did not finish (exit 1)" in isolation.judge_fill(NODE, ev(BASELINE), ev(died), ev(FILL)).reason


@pytest.mark.parametrize(
    ("baseline", "during", "fill", "result", "why"),
    [
        pytest.param(None, DURING, FILL, Result.ERROR, "baseline probe did not run", id="no-baseline"),
        pytest.param(BASELINE, "garbage", FILL, Result.INCONCLUSIVE, "unreadable during-fill", id="garbage"),
        pytest.param(BASELINE, DURING, "", Result.INCONCLUSIVE, "unreadable filler log", id="empty-fill"),
        pytest.param(
            BASELINE,
            DURING,
            FILL.replace("filled-all 1\n", ""),
            Result.INCONCLUSIVE,
            "never reported",
            id="unfilled",
        ),
        pytest.param(
            BASELINE,
            DURING,
            FILL.replace(f" {(9984 - 517) // 64 * 64} 9984", " 100 9984"),
            Result.INCONCLUSIVE,
            "held only 100 of 9984",
            id="thin-fill",
        ),
        pytest.param(
            BASELINE,
            DURING.replace(gpu_uuid(SPEC.seed, NODE, 0), gpu_uuid(SPEC.seed, NODE, 5)),
            FILL,
            Result.INCONCLUSIVE,
            "not on one GPU",
            id="other-gpu",
        ),
        pytest.param(
            BASELINE.replace("alloc_mib 8520 ok", "alloc_mib 8520 failed OutOfMemoryError"),
            DURING,
            FILL,
            Result.INCONCLUSIVE,
            "baseline workload itself",
            id="bad-baseline",
        ),
    ],
)
def test_missing_or_doubtful_evidence_never_passes(
    baseline: str | None, during: str, fill: str, result: Result, why: str
) -> None:
    verdict = isolation.judge_fill(NODE, ev(baseline) if baseline is not None else None, ev(during), ev(fill))
    assert verdict.result is result and why in verdict.reason


def test_harness_failures_are_errors() -> None:
    broken = isolation.Evidence("", None, "the probe pod is gone")
    assert isolation.judge_visibility(NODE, broken).result is Result.ERROR
    assert isolation.judge_visibility(NODE, None).result is Result.ERROR


@pytest.mark.parametrize(
    ("text", "match"),
    [
        pytest.param("--- nvidia-smi -L\n--- exit 0\n", "sections", id="sections"),
        pytest.param(
            DURING.replace("mem_free_mib 9467", "mem_free_mib 99999"), "above the device", id="free"
        ),
        pytest.param(DURING.replace("mem_total_mib 9984\n", ""), "mem_total_mib is missing", id="total"),
        pytest.param(DURING.replace("alloc_mib 8520 ok\n", ""), "allocation line", id="alloc"),
        pytest.param(DURING.replace("fleetval-mig-workload 1", "hello"), "did not start", id="start"),
        pytest.param(
            DURING.replace("mem_free_mib 9467", "mem_free_mib 9467\nmem_free_mib 1"), "twice", id="twice"
        ),
    ],
)
def test_a_damaged_workload_output_is_a_parse_error(text: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        isolation.parse_workload(text)


def test_a_fill_log_must_name_its_devices() -> None:
    with pytest.raises(ParseError, match="did not list"):
        isolation.parse_fill(FILL.replace(ONES[1].uuid, "MIG-00000000-0000-0000-0000-000000000000", 1))
    with pytest.raises(ParseError, match="filled-all 2 after 1"):
        isolation.parse_fill(FILL.replace("filled-all 1", "filled-all 2"))
    assert dataclasses.asdict(isolation.parse_fill(FILL))["complete"] is True
