"""D-OP-02 (advertised GPUs) and D-OP-03 (a no-GPU pod sees no GPU): the judges on their own, and
the operator checks against a simulated cluster whose operator misbehaves on purpose."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from fleetval.gpu_operator import suite
from fleetval.gpu_operator.advertised import judge_advertised
from fleetval.gpu_operator.isolation import judge_isolation, parse_isolation
from fleetval.records import Result

FLEET = """
name: operator-lab
seed: 7
profiles:
  h100:
    gpu_product: NVIDIA-H100-80GB-HBM3
    gpus: 8
    intra_busbw_gbps: 480
    inter_busbw_gbps: 370
    fabric: ib
  a100:
    gpu_product: NVIDIA-A100-SXM4-80GB
    gpus: 4
    intra_busbw_gbps: 230
    inter_busbw_gbps: 180
    fabric: roce
racks:
  - {name: r01, profile: h100, nodes: 4}
  - {name: r02, profile: a100, nodes: 2}
faults:
  - {node: r01-n02, kind: op.operand_down, operand: driver}
  - {node: r01-n03, kind: op.operand_down, operand: device-plugin}
  - {node: r01-n04, kind: op.gpu_count_wrong, advertised: 7}
  - {node: r02-n01, kind: op.isolation_leak}
  - {node: r02-n02, kind: ts.undisclosed}
"""


def facts(count: str | None, capacity: str, allocatable: str | None = None, **labels: str) -> dict[str, Any]:
    all_labels = {**({"nvidia.com/gpu.count": count} if count is not None else {}), **labels}
    return {
        "labels": all_labels,
        "capacity": {"nvidia.com/gpu": capacity},
        "allocatable": {"nvidia.com/gpu": allocatable or capacity},
    }


def test_the_advertised_count_must_be_the_hardware_count() -> None:
    assert judge_advertised("n", facts("8", "8")).result is Result.PASS
    wrong = judge_advertised("n", facts("8", "7"))
    assert wrong.result is Result.FAIL and "advertises 7 nvidia.com/gpu; the node has 8 GPUs" in wrong.reason
    withdrawn = judge_advertised("n", facts("8", "8", "7"))
    assert withdrawn.result is Result.WARN and withdrawn.evidence["withdrawn"] == 1
    assert judge_advertised("n", facts(None, "8")).result is Result.INCONCLUSIVE
    assert judge_advertised("n", facts("eight", "8")).result is Result.INCONCLUSIVE
    sliced = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    assert judge_advertised("n", facts("8", "32", **sliced)).result is Result.PASS
    renamed = {"labels": facts("8", "0", **sliced)["labels"], "capacity": {"nvidia.com/gpu.shared": "32"}}
    assert judge_advertised("n", renamed).result is Result.PASS
    assert "is 32" in judge_advertised("n", facts("8", "24", **sliced)).reason
    undisclosed = facts(
        "8", "32", **{"nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none"}
    )
    assert judge_advertised("n", undisclosed).result is Result.FAIL
    assert judge_advertised("n", facts("8", "lots")).result is Result.INCONCLUSIVE


def test_mixed_mig_counts_each_profile_the_plugin_advertises() -> None:
    labels = {
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config": "all-balanced",
        "nvidia.com/mig-1g.10gb.count": "14",
        "nvidia.com/mig-3g.40gb.count": "2",
    }
    good = {"labels": labels, "capacity": {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "2"}}
    assert judge_advertised("n", good).result is Result.PASS
    short = {"labels": labels, "capacity": {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/gpu": "2"}}
    verdict = judge_advertised("n", short)
    assert (
        verdict.result is Result.FAIL
        and "nvidia.com/mig-3g.40gb: advertises 0, GFD counts 2" in verdict.reason
    )
    assert (
        judge_advertised("n", {"labels": {"nvidia.com/mig.strategy": "mixed"}}).result is Result.INCONCLUSIVE
    )


def test_a_media_extension_profile_is_counted_as_gfd_spells_it() -> None:
    # GFD and the device plugin write 1g.10gb+me as 1g.10gb.me: its count must still be compared.
    labels = {
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config": "custom-me",
        "nvidia.com/mig-1g.10gb.count": "6",
        "nvidia.com/mig-1g.10gb.me.count": "1",
    }
    good = {"labels": labels, "capacity": {"nvidia.com/mig-1g.10gb": "6", "nvidia.com/mig-1g.10gb.me": "1"}}
    assert judge_advertised("n", good).result is Result.PASS
    missing = {"labels": labels, "capacity": {"nvidia.com/mig-1g.10gb": "6"}}
    verdict = judge_advertised("n", missing)
    assert verdict.result is Result.FAIL and "nvidia.com/mig-1g.10gb.me: advertises 0" in verdict.reason


HEALTHY = """NVIDIA_VISIBLE_DEVICES=all
--- ls -1 /dev
core
fd
null
pts
shm
--- nvidia-smi -L
/bin/bash: line 5: nvidia-smi: command not found
--- exit 127
"""
LEAK = HEALTHY.replace("null\n", "null\nnvidia0\nnvidia1\nnvidiactl\n").replace(
    "/bin/bash: line 5: nvidia-smi: command not found\n--- exit 127",
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0a)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-0b)\n--- exit 0",
)


def test_a_no_gpu_pod_that_sees_gpus_fails_and_damaged_output_never_passes() -> None:
    assert judge_isolation("n", HEALTHY, exit_code=0, error=None).result is Result.PASS
    leak = judge_isolation("n", LEAK, exit_code=0, error=None)
    assert leak.result is Result.FAIL
    assert "/dev/nvidia0, /dev/nvidia1" in leak.reason and "nvidia-smi lists 2 GPU(s)" in leak.reason
    assigned = HEALTHY.replace("=all", "=GPU-0a")
    assert judge_isolation("n", assigned, exit_code=0, error=None).result is Result.FAIL
    assert judge_isolation("n", "", exit_code=None, error="pod never started").result is Result.ERROR
    lines = HEALTHY.splitlines(keepends=True)
    structural = [i for i, line in enumerate(lines) if line.startswith(("NVIDIA_", "---", "null"))]
    damaged = ["".join(lines[:cut]) for cut in range(len(lines))]  # every truncation
    damaged += ["".join(lines[:i] + lines[i + 1 :]) for i in structural]  # a section's line lost
    for text in damaged:
        assert judge_isolation("n", text, exit_code=0, error=None).result is not Result.PASS, text
    assert parse_isolation(LEAK).device_nodes == ("nvidia0", "nvidia1")


@pytest.mark.postgres
def test_each_operator_fault_is_caught_on_its_node_and_healthy_nodes_pass(
    sim_kube: Any, tmp_path: pathlib.Path
) -> None:
    fleet = tmp_path / "operator-lab.yaml"
    fleet.write_text(FLEET)
    kube = sim_kube(fleet)
    store = kube.store
    run_id = store.ensure_run("op-test", suite=suite.SUITE, backend="test")
    nodes = suite.gpu_nodes(kube.core)
    names = sorted(n["metadata"]["name"] for n in nodes)
    assert names == ["r01-n01", "r01-n02", "r01-n03", "r01-n04", "r02-n01", "r02-n02"]

    operands = {
        v.subject: v
        for v in suite.check_operands(
            store, run_id, kube.core, run_key="op", nodes=names, namespace="gpu-operator"
        )
    }
    assert {n for n, v in operands.items() if v.result is Result.FAIL} == {"r01-n02", "r01-n03"}
    assert operands["r01-n02"].reason.startswith("driver: CrashLoopBackOff")
    assert "blocked behind it: container-toolkit, device-plugin" in operands["r01-n02"].reason
    assert operands["r01-n03"].reason.startswith("device-plugin: CrashLoopBackOff")
    assert operands["r01-n01"].result is Result.PASS

    resources = suite.check_advertised(store, run_id, nodes, run_key="op")
    failed = sorted((v.criterion, v.subject) for v in resources if v.result is not Result.PASS)
    # r02-n02 sells each GPU four times with no replicas label: a miscount and undisclosed sharing.
    assert failed == [("D-GPU-TS-01", "r02-n02"), ("D-OP-02", "r01-n04"), ("D-OP-02", "r02-n02")]

    # The raw evidence was stored before it was judged, one probe per node and check.
    tools = sorted((p["tool"], p["nodes"][0]) for p in store.probes(run_id, with_raw=False))
    assert tools == sorted([(t, n) for t in ("gpu-operator", "node-resources") for n in names])

    specs = suite.isolation_probes(kube.cluster.list_nodes(), run_key="op")
    assert [(s.node, s.params["profile"]) for s in specs] == [
        ("r02-n01", "NVIDIA-A100-SXM4-80GB"),
        ("r01-n01", "NVIDIA-H100-80GB-HBM3"),
    ]
