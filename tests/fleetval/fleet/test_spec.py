"""The fleet spec contract: the documented example loads; every kind of bad spec is a clear SpecError
naming the entry by its path; absurd sizes and hostile YAML are refused before they are expanded."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetval.errors import SpecError
from fleetval.fleet.spec import FAULT_KINDS, load_fleet_spec
from tests.paths import ROOT

FLEETS = ROOT / "include" / "fleetval" / "sim" / "fleets"

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
        "dcgm.exporter_contention",
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


def _edited(path: str, value: object) -> dict[str, Any]:
    """The design example with the value at `path` (dots and [i]) set; DELETE removes the key."""
    data = yaml.safe_load(DESIGN_EXAMPLE)
    *parents, last = re.findall(r"[^.\[\]]+", path)
    target: Any = data
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    key: Any = int(last) if isinstance(target, list) else last
    if value is DELETE:
        del target[key]
    else:
        target[key] = value
    return data


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()
PROFILE = "profiles.h100-sxm-ndr"
NAN, INF = float("nan"), float("inf")


def _nccl(kind: str, **params: object) -> dict[str, object]:
    return {"node": "r01-n06", "kind": f"nccl.{kind}", **params}


# (path edited, value, what the SpecError says): each names the entry by its path.
BAD_SPECS = [
    ("faults[0].kind", "dcgm.melted", "faults[0].kind: unknown fault kind 'dcgm.melted'"),
    ("faults[0].node", "r09-n01", "faults[0].node: unknown node 'r09-n01'"),
    ("faults[0].gpu", 8, "faults[0].gpu: must be 0..7 (r01-n03 has 8 GPUs), got 8"),
    ("faults[0].gpu", DELETE, "faults[0] (dcgm.memory): missing ['gpu']"),
    ("faults[0].heat", 3, "faults[0] (dcgm.memory): unknown parameters ['heat']"),
    ("faults[3].node", "r01-n01", "cluster-level fault and takes no 'node'"),
    ("faults[2].node", DELETE, "faults[2] (nccl.socket_fallback): needs a 'node'"),
    ("racks[0].profile", "a100", "racks[0].profile: unknown profile 'a100'"),
    ("racks[0].nodes", 0, "racks[0].nodes: must be 1..100000, got 0"),
    ("racks", [], "racks: must be a non-empty list"),
    ("seed", "forty-two", "seed: must be an integer, got 'forty-two'"),
    # Counts and codes: negative, strings, floats and YAML booleans (bool is an int in Python).
    ("racks[0].nodes", -8, "racks[0].nodes: must be 1..100000, got -8"),
    ("racks[0].nodes", "8", "racks[0].nodes: must be an integer, got '8'"),
    ("racks[0].nodes", 8.0, "racks[0].nodes: must be an integer, got 8.0"),
    ("racks[0].nodes", True, "racks[0].nodes: must be an integer, got True"),
    (f"{PROFILE}.gpus", True, "profiles.h100-sxm-ndr.gpus: must be an integer, got True"),
    (f"{PROFILE}.gpus", -8, "profiles.h100-sxm-ndr.gpus: must be 1..16, got -8"),
    (f"{PROFILE}.gpus", 8.5, "profiles.h100-sxm-ndr.gpus: must be an integer, got 8.5"),
    ("faults[0].gpu", True, "faults[0].gpu: must be an integer, got True"),
    ("faults[0].gpu", -1, "faults[0].gpu: must be 0..15, got -1"),
    ("faults[0].gpu", "5", "faults[0].gpu: must be an integer, got '5'"),
    ("faults[0].gpu", 5.0, "faults[0].gpu: must be an integer, got 5.0"),
    ("faults[1].code", -79, "faults[1].code: must be 1..999, got -79"),
    ("faults[1].code", "79", "faults[1].code: must be an integer, got '79'"),
    ("faults[1].code", 79.5, "faults[1].code: must be an integer, got 79.5"),
    ("faults[1].code", False, "faults[1].code: must be an integer, got False"),
    ("faults[1].count", 0, "faults[1].count: must be 1..10000, got 0"),
    ("faults[1].count", 10**9, "faults[1].count: must be 1..10000, got 1000000000"),
    ("faults[1].count", "3", "faults[1].count: must be an integer, got '3'"),
    # Factors and bandwidths: negative, NaN, infinite, text.
    ("faults[2]", _nccl("nvlink_degraded", factor=-0.6), "faults[2].factor: must be in (0, 1], got -0.6"),
    ("faults[2]", _nccl("nvlink_degraded", factor=0), "faults[2].factor: must be in (0, 1], got 0"),
    ("faults[2]", _nccl("nvlink_degraded", factor=1.5), "faults[2].factor: must be in (0, 1], got 1.5"),
    ("faults[2]", _nccl("nvlink_degraded", factor=NAN), "faults[2].factor: must be a finite number, got nan"),
    ("faults[2]", _nccl("nvlink_degraded", factor="0.6"), "faults[2].factor: must be a number, got '0.6'"),
    ("faults[2]", _nccl("flaky", cv=INF), "faults[2].cv: must be a finite number, got inf"),
    ("faults[2]", _nccl("flaky", cv=-0.1), "faults[2].cv: must be in (0, 1], got -0.1"),
    ("faults[2]", {"node": "r01-n06", "kind": "mig.slow_advertise", "minutes": -5}, "faults[2].minutes"),
    ("faults[2]", {"node": "r01-n06", "kind": "op.operand_down", "operand": ""}, "operand: must not be"),
    (
        "faults[2]",
        {"node": "r01-n06", "kind": "op.gpu_count_wrong", "advertised": True},
        "must be an integer",
    ),
    ("seed", -1, "seed: must be 0..2147483647, got -1"),
    ("seed", 2**40, "seed: must be 0..2147483647"),
    (f"{PROFILE}.intra_busbw_gbps", NAN, "intra_busbw_gbps: must be a finite number, got nan"),
    (f"{PROFILE}.inter_busbw_gbps", INF, "inter_busbw_gbps: must be a finite number, got inf"),
    (f"{PROFILE}.inter_busbw_gbps", -370, "inter_busbw_gbps: must be in (0, 100000], got -370"),
    (f"{PROFILE}.inter_busbw_gbps", 0, "inter_busbw_gbps: must be in (0, 100000], got 0"),
    (f"{PROFILE}.intra_busbw_gbps", "480", "intra_busbw_gbps: must be a number, got '480'"),
    (f"{PROFILE}.intra_busbw_gbps", True, "intra_busbw_gbps: must be a number, got True"),
    (f"{PROFILE}.driver_version", ["570", "133"], "driver_version: must be a string, got ['570', '133']"),
    (f"{PROFILE}.driver_version", 570.8, "driver_version: must be a string, got 570.8"),
    (f"{PROFILE}.driver_version", "", "driver_version: must not be empty"),
    (f"{PROFILE}.fabric", "ethernet", "fabric: must be one of ['ib', 'roce'], got 'ethernet'"),
    (f"{PROFILE}.gpu_product", "", "gpu_product: must not be empty"),
    (f"{PROFILE}.gpu_product", DELETE, "profiles.h100-sxm-ndr: missing 'gpu_product'"),
    (f"{PROFILE}.dcgm_major", "4", "dcgm_major: must be an integer"),
    (f"{PROFILE}.gpus_per_node", 8, "profiles.h100-sxm-ndr: unknown key 'gpus_per_node'"),
    # Names: empty, a list, characters a node or file name cannot hold.
    ("name", "", "name: must not be empty"),
    ("name", ["demo"], "name: must be a string"),
    ("name", "../../etc/demo", "name: '../../etc/demo' is not a name"),
    ("racks[0].name", "", "racks[0].name: must not be empty"),
    ("racks[0].name", "R 01", "racks[0].name: 'R 01' is not lowercase letters"),
    ("racks[0].speed", 3, "racks[0]: unknown key 'speed'"),
    ("fault", [], "the document: unknown key 'fault'"),  # a typo must not drop every fault
    ("faults", {"node": "r01-n03"}, "faults: must be a list"),
    ("faults[0]", "dcgm.memory", "faults[0]: must be a mapping"),
]


@pytest.mark.parametrize(
    ("path", "value", "message"), BAD_SPECS, ids=[f"{p}={v!r}"[:50] for p, v, _ in BAD_SPECS]
)
def test_bad_specs_are_clear_errors_naming_the_entry(path: str, value: object, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_fleet_spec(_edited(path, value))
    assert str(caught.value).startswith("fleet spec: ") and message in str(caught.value)
    # The same edit as YAML text fails the same way (what the CLI reads).
    with pytest.raises(SpecError) as caught:
        load_fleet_spec(yaml.safe_dump(_edited(path, value)))
    assert message in str(caught.value)


def test_optional_parameters_may_be_left_out() -> None:
    spec = load_fleet_spec(_edited("faults[2]", _nccl("nvlink_degraded")))
    assert spec.faults[2].params == {}
    spec = load_fleet_spec(_edited("faults[2]", _nccl("nvlink_degraded", factor=1)))
    assert spec.faults[2].params == {"factor": 1} and isinstance(spec.faults[2].params["factor"], int)


def test_yaml_nan_and_infinity_bandwidths_are_refused() -> None:
    for literal in (".nan", ".inf", "-.inf"):
        text = DESIGN_EXAMPLE.replace("intra_busbw_gbps: 480", f"intra_busbw_gbps: {literal}")
        with pytest.raises(SpecError, match="intra_busbw_gbps: must be a finite number"):
            load_fleet_spec(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: demo\nname: other\n", r"^fleet spec: name: given twice \(line 2\)$"),
        (
            DESIGN_EXAMPLE.replace("    gpus: 8\n", "    gpus: 8\n    gpus: 4\n"),
            r"fleet spec: profiles.h100-sxm-ndr.gpus: given twice \(line 8\)",
        ),
        (DESIGN_EXAMPLE + "racks: []\n", "fleet spec: racks: given twice"),
        ("? [a, b]\n: 1\n", "the document: keys must be strings, got a collection"),
        ("1: a\n", "the document: keys must be strings, got '1'"),
        ("yes: a\n", "the document: keys must be strings, got 'yes'"),
        ("name: !!binary aGVsbG8=\n", "name: unsupported YAML type 'tag:yaml.org,2002:binary'"),
        ("name: 2026-12-01\n", "name: unsupported YAML type 'tag:yaml.org,2002:timestamp'"),
        ("name: !!set {a, b}\n", "name: unsupported YAML type 'tag:yaml.org,2002:set'"),
        ("a: &a [*a]\n", "a contains itself"),
        ("---\nname: a\n---\nname: b\n", "not valid YAML"),
        ("name: demo\x00\n", "not valid YAML"),
        ("name: demo\udcff\n", "not valid YAML"),  # bytes that were not UTF-8
    ],
    ids=[
        "duplicate-top-key",
        "duplicate-profile-key",
        "duplicate-section",
        "collection-key",
        "int-key",
        "bool-key",
        "binary",
        "timestamp",
        "set",
        "recursive-alias",
        "two-documents",
        "nul",
        "lone-surrogate",
    ],
)
def test_yaml_that_is_not_a_plain_spec_is_refused(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_fleet_spec(text)


def test_merge_keys_still_work() -> None:
    text = DESIGN_EXAMPLE.replace(
        "racks:\n  - {name: r01, profile: h100-sxm-ndr, nodes: 8}",
        "racks:\n  - &rack {name: r01, profile: h100-sxm-ndr, nodes: 8}\n  - {<<: *rack, name: r02}",
    )
    spec = load_fleet_spec(text)
    assert [(r.name, r.nodes) for r in spec.racks] == [("r01", 8), ("r02", 8)]


def _alias_bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_is_expanded() -> None:
    # 9^9 strings once expanded: the refusal comes from counting, not from building them.
    with pytest.raises(SpecError, match=r"a5 expands to more than 500000 values \(YAML aliases\)"):
        load_fleet_spec(_alias_bomb(9))


def test_a_deep_document_is_refused_without_recursion_error() -> None:
    with pytest.raises(SpecError, match="nested deeper than 32 levels"):
        load_fleet_spec("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SpecError, match="nested deeper than 32 levels"):
        load_fleet_spec('{"a":' * 5_000 + "1" + "}" * 5_000)  # JSON is YAML


@pytest.mark.parametrize(
    ("racks", "message"),
    [
        (
            [{"name": "r01", "profile": "h100-sxm-ndr", "nodes": 10**7}],
            r"racks\[0\].nodes: must be 1..100000",
        ),
        (
            [{"name": f"r{i:04d}", "profile": "h100-sxm-ndr", "nodes": 10_000} for i in range(1000)],
            r"racks: more than 100000 nodes in all \(at racks\[10\]\)",
        ),
        (
            [{"name": f"r{i:05d}", "profile": "h100-sxm-ndr", "nodes": 1} for i in range(10_001)],
            "racks: at most 10000 racks, got 10001",
        ),
    ],
    ids=["one-rack-of-10^7", "10^7-over-racks", "too-many-racks"],
)
def test_absurd_sizes_are_refused_before_nodes_are_made(racks: list[dict[str, Any]], message: str) -> None:
    data = yaml.safe_load(DESIGN_EXAMPLE)
    data["racks"] = racks
    data["faults"] = []
    with pytest.raises(SpecError, match=message):
        load_fleet_spec(data)


def test_too_large_text_is_refused_before_parsing() -> None:
    with pytest.raises(SpecError, match="larger than 2 MiB"):
        load_fleet_spec("# padding\n" * 300_000 + DESIGN_EXAMPLE)


def test_too_many_faults_are_refused() -> None:
    data = yaml.safe_load(DESIGN_EXAMPLE)
    data["faults"] = [{"kind": "kueue.no_reclaim"}] * 100_001
    with pytest.raises(SpecError, match="faults: at most 100000 faults"):
        load_fleet_spec(data)


@pytest.mark.parametrize("path", sorted(FLEETS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_fleet_loads_exactly_as_before(path: Path) -> None:
    """The checks refuse nothing the shipped fleets say, and the spec is what plain YAML says."""
    text = path.read_text()
    spec = load_fleet_spec(text)
    assert spec.raw == yaml.safe_load(text)
    assert load_fleet_spec(spec.raw) == spec  # as the store hands a saved spec back
    assert spec.rack_of == {n: rack for rack in spec.racks for n in rack.node_names()}
    for fault in spec.faults:
        raw = next(f for f in spec.raw["faults"] if f.get("node") == fault.node and f["kind"] == fault.kind)
        assert fault.params == {k: v for k, v in raw.items() if k not in ("kind", "node")}


def test_a_profile_may_set_the_simulator_knobs() -> None:
    text = DESIGN_EXAMPLE.replace(
        "    fabric: ib ",
        "    fabric: ib\n    driver_version: 575.51.03\n    dcgm_major: 3\n    nccl_version: 2.25.1\n",
    )
    spec = load_fleet_spec(text)
    assert spec.profiles["h100-sxm-ndr"].driver_version == "575.51.03"
    assert spec.raw["profiles"]["h100-sxm-ndr"]["dcgm_major"] == 3


@pytest.mark.parametrize(
    "text", ["", "just a string", "name: [unclosed", "- a\n- b"], ids=["empty", "scalar", "bad-yaml", "list"]
)
def test_garbage_is_a_spec_error(text: str) -> None:
    with pytest.raises(SpecError):
        load_fleet_spec(text)
