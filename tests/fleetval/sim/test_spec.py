"""The fleet spec contract: the documented example loads; every kind of bad spec is a clear SpecError."""

from __future__ import annotations

import pytest
import yaml

from fleetval.errors import SpecError
from fleetval.sim.spec import FAULT_KINDS, load_fleet_spec

DESIGN_EXAMPLE = """
name: demo
seed: 42
profiles:
  h100-sxm-ndr:
    gpu_product: NVIDIA-H100-80GB-HBM3
    gpus: 8
    intra_busbw_gbps: 480      # what a healthy node of this profile measures (simulator truth)
    inter_busbw_gbps: 370
    fabric: ib                 # ib | roce
racks:
  - {name: r01, profile: h100-sxm-ndr, nodes: 8}     # nodes r01-n01 .. r01-n08
faults:
  - {node: r01-n03, kind: dcgm.memory, gpu: 5}
  - {node: r01-n05, kind: xid, code: 79, gpu: 2}
  - {node: r01-n06, kind: nccl.socket_fallback}
  - {kind: kueue.no_reclaim}                          # cluster-level fault: no node
"""


def test_design_example_loads() -> None:
    spec = load_fleet_spec(DESIGN_EXAMPLE)
    assert spec.name == "demo" and spec.seed == 42
    assert [n for n, _ in spec.nodes()] == [f"r01-n{i:02d}" for i in range(1, 9)]
    assert spec.faults_on("r01-n03")[0].gpu == 5
    assert spec.faults_on("r01-n05")[0].params == {"code": 79, "gpu": 2}
    assert [f.kind for f in spec.cluster_faults()] == ["kueue.no_reclaim"]
    assert spec.profile_of("r01-n01").fabric == "ib"


def test_every_design_fault_kind_is_known() -> None:
    design_kinds = {
        "dcgm.memory",
        "dcgm.pcie",
        "dcgm.nvlink",
        "dcgm.thermal_warn",
        "xid",
        "nccl.nvlink_degraded",
        "nccl.socket_fallback",
        "nccl.flaky",
        "nccl.errors",
        "nccl.hang",
        "nccl.wrong",
        "mig.slow_advertise",
        "mig.bad_combo_accepted",
        "mig.memory_leak",
        "mig.process_visible",
        "mig.billing_as_gpu",
        "mig.reconfig_while_busy",
        "ts.undisclosed",
        "op.operand_down",
        "op.gpu_count_wrong",
        "op.isolation_leak",
        "op.upgrade_no_drain",
        "kueue.no_reclaim",
        "kueue.no_borrowing",
        "kueue.partial_gang",
        "kueue.wrong_reason",
        "ckpt.non_atomic",
        "ckpt.missing_optimizer",
        "ckpt.skip_step",
        "ckpt.no_sigterm_save",
        "ckpt.slow_save",
        "ckpt.no_integrity_check",
    }
    assert design_kinds == set(FAULT_KINDS)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("faults", [{"node": "r01-n03", "kind": "dcgm.melted", "gpu": 1}]),
            "unknown fault kind 'dcgm.melted'",
        ),
        (("faults", [{"node": "r09-n01", "kind": "dcgm.memory", "gpu": 1}]), "unknown node 'r09-n01'"),
        (("faults", [{"node": "r01-n01", "kind": "dcgm.memory", "gpu": 8}]), "gpu must be 0..7"),
        (("faults", [{"node": "r01-n01", "kind": "dcgm.memory"}]), "missing \\['gpu'\\]"),
        (("faults", [{"node": "r01-n01", "kind": "dcgm.memory", "gpu": 1, "heat": 3}]), "unknown parameters"),
        (("faults", [{"node": "r01-n01", "kind": "kueue.no_reclaim"}]), "cluster-level fault"),
        (("faults", [{"kind": "nccl.hang"}]), "needs a 'node'"),
        (("racks", [{"name": "r01", "profile": "a100", "nodes": 8}]), "unknown profile 'a100'"),
        (("racks", [{"name": "r01", "profile": "h100-sxm-ndr", "nodes": 0}]), "nodes must be >= 1"),
        (("racks", []), "'racks' must be a non-empty list"),
        (("seed", "forty-two"), "'seed' must be int"),
    ],
    ids=[
        "unknown-kind",
        "unknown-node",
        "gpu-out-of-range",
        "missing-param",
        "unknown-param",
        "cluster-fault-with-node",
        "node-fault-without-node",
        "unknown-profile",
        "empty-rack",
        "no-racks",
        "bad-seed",
    ],
)
def test_bad_specs_are_clear_errors(edit: tuple[str, object], message: str) -> None:
    data = yaml.safe_load(DESIGN_EXAMPLE)
    data[edit[0]] = edit[1]
    with pytest.raises(SpecError, match=message):
        load_fleet_spec(data)


@pytest.mark.parametrize(
    "text", ["", "just a string", "name: [unclosed", "- a\n- b"], ids=["empty", "scalar", "bad-yaml", "list"]
)
def test_garbage_is_a_spec_error(text: str) -> None:
    with pytest.raises(SpecError):
        load_fleet_spec(text)


def test_bad_profile_fabric() -> None:
    data = yaml.safe_load(DESIGN_EXAMPLE)
    data["profiles"]["h100-sxm-ndr"]["fabric"] = "ethernet"
    with pytest.raises(SpecError, match="fabric must be one of"):
        load_fleet_spec(data)
