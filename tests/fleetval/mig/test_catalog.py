"""The MIG catalog against every real table in the fixtures (nvidia-smi -lgip/-lgipp, NVIDIA's supported
profiles, GFD labels, the GPU Operator's default mig-parted configs), and the layout validator on layouts
real GPUs accepted and on ones the driver would refuse."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
import yaml

from fleetval.errors import FleetvalError
from fleetval.mig.catalog import (
    GpuMig,
    LayoutCheck,
    MigError,
    catalog,
    check_layout,
    check_mig_parted,
    gpu_for,
    load_catalog,
)
from tests.paths import FIXTURES

MIG = FIXTURES / "mig"
H100_LGIP = "nvidia-smi-mig-lgip-lgipp-h100-pcie-80gb-525-scaleway-docs.txt"
A30_LGIP = "nvidia-smi-mig-lgip-lgipp-lgi-a30-all-allocated-free0-summer-lo-readme.txt"
H100_NVL_LGIP = "nvidia-smi-mig-lgip-h100-nvl-partial-gpu-operator-pr900.txt"
H100_NVL_AZURE = "nvidia-smi-mig-lgip-lgipp-smi-h100-nvl-560-azure-alizeechen11-readme.txt"
B200_LGIP = "nvidia-smi-mig-lgip-b200-partial-mig-parted-pr187.txt"
GB200_LGIP = "nvidia-smi-mig-lgip-gb200-partial-gpu-operator-pr1303.txt"
RTX_LGIP = "nvidia-smi-mig-lgip-rtx-pro-6000-blackwell-gfx-me-all-partial-cubecos-issue312.txt"
H200_LGIP = "nvidia-smi-mig-lgip-h200-580.159.04.txt"  # recorded on an H200 SXM, driver 580.159.04
H200_LGIPP = "nvidia-smi-mig-lgipp-h200-580.159.04.txt"
H200_L = "nvidia-smi-L-h200-580.159.04.txt"
H100_CGI = "nvidia-smi-mig-cgi-lgi-L-h100-pcie-3g40gb-3x1g10gb-scaleway-docs.txt"
DOCS = "mig-supported-profiles-h100-a100-nvidia-docs-excerpt.md"
CONFIGMAP = "gpu-operator-default-mig-parted-config-configmap.yaml"
MIG_PARTED_EXAMPLE = "mig-parted-example-config.yaml"
GFD_MIXED = "gfd-node-labels-h100-mig-mixed-all-balanced-nvidia-docs.json"
GFD_SINGLE = "gfd-node-labels-h100-mig-single-all-disabled-nvidia-docs.json"

_LGIP_ROW = re.compile(r"^\|\s+\d+\s+MIG (\S+)\s+(\d+)\s+\d+/(\d+)\s+(\d+\.\d+)\s")
_LGIPP_ROW = re.compile(r"Profile ID\s+(\d+) Placements?\s*:\s*\{([\d,]+)\}:(\d+)")
_LGI_ROW = re.compile(r"^\|\s+\d+\s+MIG (\S+)\s+(\d+)\s+\d+\s+(\d+):(\d+)\s+\|")
# The memory fraction in NVIDIA's supported-profiles tables, as memory slots of 8.
_FRACTION_SLOTS = {"1/8": 1, "2/8": 2, "1/4": 2, "4/8": 4, "Full": 8}


def read(name: str) -> str:
    return (MIG / name).read_text(encoding="utf-8")


def lgip(text: str) -> list[tuple[str, int, int, float]]:
    """(profile, ID, Total, memory GiB) of every `nvidia-smi mig -lgip` row."""
    rows = []
    for line in text.splitlines():
        if m := _LGIP_ROW.match(line):
            rows.append((m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4))))
    return rows


def lgipp(text: str) -> dict[int, tuple[tuple[int, ...], int]]:
    """Profile ID -> (start slots, size) of every `nvidia-smi mig -lgipp` line."""
    found = {}
    for m in _LGIPP_ROW.finditer(text):
        found[int(m.group(1))] = (tuple(int(s) for s in m.group(2).split(",")), int(m.group(3)))
    return found


def lgi(text: str) -> list[tuple[str, int, int, int]]:
    """(profile, profile ID, start, size) of every `nvidia-smi mig -lgi` row."""
    return [
        (m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)))
        for line in text.splitlines()
        if (m := _LGI_ROW.match(line))
    ]


def smi_product(text: str) -> str:
    """The GFD product label for the GPU `nvidia-smi -L` names: GFD writes the name with spaces as `-`
    (NVIDIA's "NVIDIA H100 80GB HBM3" is labelled `NVIDIA-H100-80GB-HBM3`)."""
    m = re.search(r"^GPU 0: (.+) \(UUID", text, re.MULTILINE)
    assert m
    return m.group(1).replace(" ", "-")


def by_id(gpu: GpuMig, gi_profile_id: int) -> str:
    return next(p.name for p in gpu.profiles if p.gi_profile_id == gi_profile_id)


def configmap_configs() -> dict[str, Any]:
    outer = yaml.safe_load(read(CONFIGMAP))
    config: dict[str, Any] = yaml.safe_load(outer["data"]["config.yaml"])
    return config


def assert_driver_placement_valid(gpu: GpuMig, rows: list[tuple[str, int, int, int]]) -> None:
    """What the driver placed (`-lgi` Start:Size) is a catalogued placement, and none overlap."""
    used: set[int] = set()
    for name, gi_profile_id, start, size in rows:
        profile = gpu.profile(name)
        assert profile is not None and profile.gi_profile_id == gi_profile_id
        assert start in profile.placements and size == profile.placement_size, (name, start, size)
        slots = set(range(start, start + size))
        assert not used & slots
        used |= slots


# --- the catalog against real -lgip / -lgipp output -------------------------------------------------------


# Profiles NVIDIA added after the driver a complete output was taken on (A30's 2g.12gb+me: R525 and later).
LATER_THAN_OUTPUT = {"A30-24GB": {"2g.12gb+me"}}


@pytest.mark.parametrize(
    ("fixture", "gpu_name", "complete"),
    [
        (H100_LGIP, "H100-80GB", True),
        (A30_LGIP, "A30-24GB", True),
        (H100_NVL_AZURE, "H100-94GB", True),
        (H100_NVL_LGIP, "H100-94GB", False),
        (B200_LGIP, "B200-180GB", False),
        (GB200_LGIP, "GB200-189GB", False),
        (RTX_LGIP, "RTX-PRO-6000", False),
        (H200_LGIP, "H200-141GB", True),
    ],
)
def test_every_lgip_row_is_in_the_catalog(fixture: str, gpu_name: str, complete: bool) -> None:
    rows = lgip(read(fixture))
    gpu = catalog()[gpu_name]
    assert len(rows) >= 3
    for name, gi_profile_id, total, memory in rows:
        profile = gpu.profile(name)
        assert profile is not None, name
        assert (profile.gi_profile_id, profile.max_instances, profile.memory_gib) == (
            gi_profile_id,
            total,
            memory,
        )
    if complete:  # a complete output lists every profile the GPU has, and nothing else
        later = LATER_THAN_OUTPUT.get(gpu_name, set())
        assert [r[0] for r in rows] == [n for n in gpu.profile_names() if n not in later]


@pytest.mark.parametrize(
    ("fixture", "gpu_name"),
    [
        (H100_LGIP, "H100-80GB"),
        (A30_LGIP, "A30-24GB"),
        (H100_NVL_AZURE, "H100-94GB"),
        (H200_LGIPP, "H200-141GB"),
    ],
)
def test_lgipp_placements_equal_the_catalog(fixture: str, gpu_name: str) -> None:
    printed = lgipp(read(fixture))
    gpu = catalog()[gpu_name]
    later = LATER_THAN_OUTPUT.get(gpu_name, set())
    assert printed == {
        p.gi_profile_id: (p.placements, p.placement_size) for p in gpu.profiles if p.name not in later
    }


def _docs_tables(text: str) -> dict[str, list[tuple[str, str, int]]]:
    """Section -> (profile, memory fraction, instances) rows of NVIDIA's flattened tables."""
    lines = [line.strip() for line in text.splitlines()]
    tables: dict[str, list[tuple[str, str, int]]] = {}
    section = ""
    for i, line in enumerate(lines):
        if line.startswith("## "):
            section = line[3:].split("[")[0].strip()
        elif m := re.fullmatch(r"MIG (\S+) \|", line):
            cells = [cell.rstrip(" |") for cell in lines[i + 1 : i + 7]]
            instances = re.match(r"\d+", cells[5])
            assert instances, cells
            tables.setdefault(section, []).append((m.group(1), cells[0], int(instances.group())))
    return tables


def test_nvidia_supported_profiles_tables_agree() -> None:
    text = read(DOCS)
    tables = _docs_tables(text)
    assert set(tables) == {"H100 MIG Profiles", "A100 MIG Profiles"}
    gpus = catalog()
    for section, gpu_name in [("H100 MIG Profiles", "H100-80GB"), ("A100 MIG Profiles", "A100-40GB")]:
        gpu = gpus[gpu_name]
        assert [name for name, _, _ in tables[section]] == list(gpu.profile_names())
        for name, fraction, instances in tables[section]:
            profile = gpu.profile(name)
            assert profile is not None and profile.max_instances == instances
            if (gpu_name, name) == ("A100-40GB", "1g.10gb"):
                # NVIDIA's table says 1/8, its own -lgipp in the MIG User Guide says {0,2,4,6}:2 (9.62 GiB).
                assert fraction == "1/8" and profile.placement_size == 2
                continue
            assert profile.placement_size == _FRACTION_SLOTS[fraction], name
    # "For A100-SXM4-80GB, the profile names will change ... `1g.10gb`, ... `7g.80gb` respectively."
    note = text[text.index("For A100-SXM4-80GB") : text.index("respectively")]
    renamed = dict(zip(gpus["A100-40GB"].profile_names(), re.findall(r"`([^`]+)`", note), strict=True))
    for old, new in renamed.items():
        a40, a80 = gpus["A100-40GB"].profile(old), gpus["A100-80GB"].profile(new)
        assert a40 is not None and a80 is not None
        assert (a80.gi_profile_id, a80.max_instances, a80.placements, a80.placement_size) == (
            a40.gi_profile_id,
            a40.max_instances,
            a40.placements,
            a40.placement_size,
        )
    assert list(renamed.values()) == list(gpus["A100-80GB"].profile_names())


def test_gfd_mig_labels_agree_with_the_catalog() -> None:
    labels = json.loads(read(GFD_MIXED))
    gpu = gpu_for(labels["nvidia.com/gpu.product"])
    counts: dict[str, int] = {}
    for key, value in labels.items():
        if m := re.fullmatch(r"nvidia\.com/mig-(.+)\.count", key):
            name = m.group(1)
            counts[name] = int(value)
            profile = gpu.profile(name)
            assert profile is not None
            assert int(labels[f"nvidia.com/mig-{name}.slices.gi"]) == profile.compute_slices
            assert gpu_for(labels[f"nvidia.com/mig-{name}.product"]) is gpu
    assert counts == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}  # all-balanced, as NVIDIA captured it
    layout = [name for name, count in counts.items() for _ in range(count)]
    assert check_layout(gpu, layout).allowed


# --- layouts NVIDIA ships or real GPUs accepted -----------------------------------------------------------

# Some device-filters of the GPU Operator's default config, by their first PCI id: the comment line NVIDIA put
# right above it in the ConfigMap, and the catalogued GPUs that comment names (every filter, by every id:
# test_catalog_sources.py).
FILTER_GPUS = {
    "0x233010DE": ("# H100-80GB, H800-80GB, A100-80GB, A800-80GB", ("H100-80GB", "A100-80GB")),
    "0x20B010DE": ("# A100-40GB, A800-40GB", ("A100-40GB",)),
    "0x20B710DE": ("# A30-24GB", ("A30-24GB",)),
    "0x232110DE": ("# H100 NVL, H800 NVL", ("H100-94GB",)),
}


def _filter_ids(entry: dict[str, Any]) -> list[str]:
    value = entry["device-filter"]
    return [value] if isinstance(value, str) else list(value)


def test_configmap_comments_name_the_filtered_gpus() -> None:
    lines = [line.strip() for line in read(CONFIGMAP).splitlines()]
    seen = set()
    for i, line in enumerate(lines):
        if line.startswith("- device-filter:"):
            first = re.search(r"0x[0-9A-F]{8}", line)
            assert first
            above = next(prev for prev in reversed(lines[:i]) if prev)
            if first.group() in FILTER_GPUS:
                assert above == FILTER_GPUS[first.group()][0]
                seen.add(first.group())
    assert seen == set(FILTER_GPUS)


def test_configmap_device_filtered_layouts_are_allowed() -> None:
    config = configmap_configs()
    gpus = catalog()
    checked = set()
    for name, entries in config["mig-configs"].items():
        for entry in entries:
            if "device-filter" not in entry or _filter_ids(entry)[0] not in FILTER_GPUS:
                continue
            for gpu_name in FILTER_GPUS[_filter_ids(entry)[0]][1]:
                for device_id in _filter_ids(entry):
                    result = check_mig_parted(config, name, gpus[gpu_name], device_id=device_id)
                    assert result.allowed, (name, gpu_name, result.reasons)
                checked.add((name, gpu_name))
    assert checked == {
        ("all-1g.10gb", "H100-80GB"),
        ("all-1g.10gb", "A100-80GB"),
        ("all-1g.10gb", "A100-40GB"),
        ("all-balanced", "H100-80GB"),
        ("all-balanced", "A100-80GB"),
        ("all-balanced", "A100-40GB"),
        ("all-balanced", "A30-24GB"),
        ("all-balanced", "H100-94GB"),
    }


def test_configmap_layouts_named_by_profile_are_allowed_wherever_the_profiles_exist() -> None:
    # A config without a device-filter applies to whatever GPU the node has; its profile names make the GPU
    # unambiguous, so on every catalogued GPU that has all of them, it must be allowed.
    config = configmap_configs()
    checked = set()
    nowhere = set()
    for name, entries in config["mig-configs"].items():
        if any("device-filter" in entry for entry in entries):
            continue
        profiles = {p for entry in entries for p in (entry.get("mig-devices") or {})}
        fits = [gpu for gpu in catalog().values() if all(gpu.profile(p) for p in profiles)]
        for gpu in fits:
            result = check_mig_parted(config, name, gpu)
            assert result.allowed, (name, gpu.name, result.reasons)
            checked.add((name, gpu.name))
        if not fits:
            nowhere.add(name)
    assert {
        ("all-disabled", "A30-24GB"),
        ("all-enabled", "H100-94GB"),
        ("all-1g.5gb", "A100-40GB"),
        ("all-7g.40gb", "A100-40GB"),
        ("all-1g.10gb.me", "H100-80GB"),
        ("all-1g.20gb", "A100-80GB"),
        ("all-2g.20gb", "H100-80GB"),
        ("all-3g.40gb", "A100-80GB"),
        ("all-4g.40gb", "H100-80GB"),
        ("all-7g.80gb", "H100-80GB"),
        ("all-1g.6gb", "A30-24GB"),
        ("all-1g.6gb.me", "A30-24GB"),
        ("all-2g.12gb", "A30-24GB"),
        ("all-4g.24gb", "A30-24GB"),
        ("all-1g.12gb", "H100-94GB"),
        ("all-1g.24gb", "H100-94GB"),
        ("all-2g.24gb", "H100-94GB"),
        ("all-3g.47gb", "H100-94GB"),
        ("all-7g.94gb", "H100-94GB"),
    } <= checked
    assert not nowhere  # every layout NVIDIA ships has a catalogued GPU that holds it


def test_mig_parted_example_config_is_allowed_on_a100_40gb() -> None:
    config = yaml.safe_load(read(MIG_PARTED_EXAMPLE))
    a100 = gpu_for("A100-SXM4-40GB")
    for name in config["mig-configs"]:
        if name == "custom-config":
            for index in range(8):
                assert check_mig_parted(config, name, a100, device_index=index).allowed, index
        else:
            assert check_mig_parted(config, name, a100).allowed, name
    seven = check_mig_parted(config, "custom-config", a100, device_index=4)
    assert seven.placement == tuple(("1g.5gb", start) for start in range(7))
    assert check_mig_parted(config, "custom-config", a100, device_index=0) == LayoutCheck(True, (), ())


def test_scaleway_h100_cgi_layout_is_allowed_where_the_driver_put_it() -> None:
    text = read(H100_CGI)
    gpu = gpu_for(smi_product(text))
    assert gpu.name == "H100-80GB"
    cgi = re.search(r"-cgi ([\d,]+)", text)
    assert cgi
    layout = [by_id(gpu, int(i)) for i in cgi.group(1).split(",")]
    assert layout == ["3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"]
    created = re.findall(r"GPU instance ID\s+\d+ on GPU\s+\d+ using profile MIG (\S+) \(ID\s+(\d+)\)", text)
    assert [by_id(gpu, int(i)) for _, i in created] == [name for name, _ in created] == layout
    result = check_layout(gpu, layout)
    assert result.allowed
    assert result.placement == (("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.10gb", 6))
    rows = lgi(text)
    assert Counter(name for name, *_ in rows) == Counter(layout)
    assert_driver_placement_valid(gpu, rows)  # the driver chose 1g at 0,1,2 and 3g at 4: also catalogued


def test_a30_four_1g_6gb_layout_is_allowed() -> None:
    gpu = catalog()["A30-24GB"]
    rows = lgi(read(A30_LGIP))
    assert [name for name, *_ in rows] == ["1g.6gb"] * 4
    result = check_layout(gpu, [name for name, *_ in rows])
    assert result.allowed and [start for _, start in result.placement] == [0, 1, 2, 3]
    assert_driver_placement_valid(gpu, rows)


@pytest.mark.parametrize(
    "fixture",
    [
        "nvidia-smi-L-h100-mig-single-all-1g.10gb-nvidia-docs.txt",
        "nvidia-smi-L-h100-mig-mixed-all-balanced-nvidia-docs.txt",
    ],
)
def test_nvidia_smi_L_layouts_are_allowed(fixture: str) -> None:
    text = read(fixture)
    gpu = gpu_for(smi_product(text))
    layout = re.findall(r"^\s+MIG (\S+)\s+Device", text, re.MULTILINE)
    assert gpu.name == "H100-80GB" and len(layout) >= 4
    assert check_layout(gpu, layout).allowed


# NVIDIA MIG User Guide, "Getting Started with MIG" (A100-SXM4-40GB): the geometries it creates with
# `nvidia-smi mig -cgi` and the placements `-lgi` then shows (profile, profile ID, start, size).
# https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html
A100_GUIDE_GEOMETRIES = [
    [("3g.20gb", 9, 4, 4), ("3g.20gb", 9, 0, 4)],
    [("1g.5gb", 19, 6, 1), ("2g.10gb", 14, 4, 2), ("4g.20gb", 5, 0, 4)],
    [("1g.5gb", 19, 0, 1), ("1g.5gb", 19, 1, 1), ("2g.10gb", 14, 2, 2), ("3g.20gb", 9, 4, 4)],
    [("1g.5gb", 19, s, 1) for s in (0, 1, 2, 3, 6)] + [("2g.10gb", 14, 4, 2)],
]


@pytest.mark.parametrize("rows", A100_GUIDE_GEOMETRIES)
def test_a100_geometries_from_nvidias_guide_are_allowed(rows: list[tuple[str, int, int, int]]) -> None:
    gpu = gpu_for("A100-SXM4-40GB")
    assert check_layout(gpu, [name for name, *_ in rows]).allowed
    assert_driver_placement_valid(gpu, rows)


def test_placement_is_deterministic_larger_profiles_first() -> None:
    gpu = catalog()["H100-80GB"]
    a = check_layout(gpu, ["1g.10gb", "2g.20gb", "1g.10gb", "3g.40gb"])
    assert a == check_layout(gpu, ["3g.40gb", "1g.10gb", "1g.10gb", "2g.20gb"])
    # 3g.40gb at 0 leaves 2g.20gb only 4 and one 1g.10gb only 6 (it cannot start at 7): backtrack to 3g at 4.
    assert a.placement == (("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4))


def test_empty_layout_and_nvidia_smi_names() -> None:
    gpu = catalog()["H100-80GB"]
    assert check_layout(gpu, []) == LayoutCheck(True, (), ())
    assert check_layout(gpu, ["MIG 7g.80gb"]) == LayoutCheck(True, (), (("7g.80gb", 0),))


# --- layouts the driver would refuse ----------------------------------------------------------------------

H100_PROFILES = "1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"


@pytest.mark.parametrize(
    ("gpu_name", "layout", "reasons"),
    [
        pytest.param(
            "H100-80GB",
            ["2g.20gb"] * 4,
            ("4 x 2g.20gb: at most 3 instances", "compute slices 8 > 7"),
            id="too-many-2g",
        ),
        pytest.param(
            "H100-80GB",
            ["1g.10gb+me", "1g.10gb+me"],
            ("2 x 1g.10gb+me: at most 1 instance",),
            id="two-media-extensions",
        ),
        pytest.param(
            "A30-24GB",
            ["1g.6gb"] * 5,
            ("5 x 1g.6gb: at most 4 instances", "compute slices 5 > 4", "memory slots 5 > 4"),
            id="a30-five-1g",
        ),
        pytest.param(
            "H100-80GB",
            ["4g.40gb", "3g.40gb", "1g.10gb"],
            (
                "compute slices 8 > 7",
                "memory slots 9 > 8",
                "no placement: 4g.40gb (4 slots at 0) and 3g.40gb (4 slots at 4) leave no slot for 1g.10gb",
            ),
            id="overlap-4-3-1",
        ),
        pytest.param(
            "H100-80GB",
            ["3g.40gb", "3g.40gb", "1g.10gb"],
            (
                "memory slots 9 > 8",
                "no placement: 2 x 3g.40gb (4 slots each at 0, 4) leave no slot for 1g.10gb",
            ),
            id="overlap-3-3-1-within-7-slices",
        ),
        pytest.param(
            "H100-80GB",
            ["7g.80gb", "1g.10gb"],
            (
                "compute slices 8 > 7",
                "memory slots 9 > 8",
                "no placement: 7g.80gb (8 slots at 0) leaves no slot for 1g.10gb",
            ),
            id="full-gpu-plus-one",
        ),
        pytest.param(
            "H100-80GB",
            ["2g.10gb", "1g.10gb"],
            (f'"2g.10gb" is not a MIG profile of H100-80GB (profiles: {H100_PROFILES})',),
            id="a100-40gb-profile-on-h100",
        ),
        pytest.param(
            "A100-40GB",
            ["1g.10gb"] * 5,
            ("5 x 1g.10gb: at most 4 instances", "memory slots 10 > 8"),
            id="same-name-other-size-on-a100-40gb",
        ),
    ],
)
def test_refused_layouts_say_why(gpu_name: str, layout: list[str], reasons: tuple[str, ...]) -> None:
    assert check_layout(catalog()[gpu_name], layout) == LayoutCheck(False, reasons, ())


def test_every_refusal_has_a_reason_and_every_allowed_layout_a_full_placement() -> None:
    gpu = catalog()["H100-80GB"]
    for first in gpu.profiles:
        for second in gpu.profiles:
            for third in gpu.profiles:
                layout = [first.name, second.name, third.name]
                result = check_layout(gpu, layout)
                assert result.allowed == (not result.reasons)
                if result.allowed:
                    assert sorted(name for name, _ in result.placement) == sorted(layout)


def test_a_string_is_not_a_layout() -> None:
    with pytest.raises(MigError, match="not the string"):
        check_layout(catalog()["H100-80GB"], "1g.10gb")


# --- gpu_for ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "gpu_name"),
    [
        (json.loads(read(GFD_SINGLE))["nvidia.com/gpu.product"], "H100-80GB"),
        ("NVIDIA-H100-PCIe", "H100-80GB"),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "H100-80GB"),  # GFD's per-profile label (mixed strategy)
        ("NVIDIA-H100-80GB-HBM3-SHARED", "H100-80GB"),  # GFD's time-sliced label
        ("h100-80gb", "H100-80GB"),
        ("A100-SXM4-40GB", "A100-40GB"),
        ("A100-80GB", "A100-80GB"),
        ("A30-24GB", "A30-24GB"),
        ("H100-94GB", "H100-94GB"),
        ("NVIDIA-H200", "H200-141GB"),  # the H200's label: its NVML name "NVIDIA H200", spaces to dashes
        ("NVIDIA H200", "H200-141GB"),  # the NVML name itself (nvidia-smi -L)
        ("NVIDIA-H200-MIG-3g.71gb", "H200-141GB"),  # single strategy: GFD appends the profile
        ("NVIDIA-H200-MIG-INVALID", "H200-141GB"),  # single strategy, MIG devices that do not fit it
    ],
)
def test_gpu_for_names_and_gfd_products(label: str, gpu_name: str) -> None:
    assert gpu_for(label).name == gpu_name


def test_gpu_for_unknown_names_the_known_ones() -> None:
    with pytest.raises(MigError) as info:
        gpu_for("Tesla-T4")
    message = str(info.value)
    assert message.startswith("unknown GPU 'Tesla-T4': the MIG catalog knows A100-40GB, A100-80GB, A30-24GB")
    assert "NVIDIA-H100-80GB-HBM3" in message and "\n" not in message
    assert isinstance(info.value, FleetvalError)


# --- mig-parted configs that cannot be judged -------------------------------------------------------------


def _config(entries: Any) -> dict[str, Any]:
    return {"version": "v1", "mig-configs": {"c": entries}}


@pytest.mark.parametrize(
    ("config", "kwargs", "match"),
    [
        pytest.param({"version": "v1"}, {}, "no mig-configs mapping", id="no-mig-configs"),
        pytest.param({"version": "v2", "mig-configs": {"c": []}}, {}, "version 'v2' is not v1", id="version"),
        pytest.param(_config({"devices": "all"}), {}, "not a list of device entries", id="not-a-list"),
        pytest.param(_config(["all"]), {}, "entry 0: not a mapping", id="entry-not-mapping"),
        pytest.param(
            _config([{"devices": "all", "mig-enabled": "yes"}]),
            {},
            "mig-enabled 'yes' is not true",
            id="enabled",
        ),
        pytest.param(
            _config([{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": -1}}]),
            {},
            "count -1 is not a whole number",
            id="negative-count",
        ),
        pytest.param(
            _config([{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": "7"}}]),
            {},
            "count '7' is not a whole number",
            id="string-count",
        ),
        pytest.param(
            _config([{"devices": "all", "mig-enabled": True, "mig-devices": ["1g.10gb"]}]),
            {},
            "is not a mapping of profile to count",
            id="devices-list",
        ),
        pytest.param(
            _config([{"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 7}}]),
            {},
            "mig-enabled is false but mig-devices asks for",
            id="disabled-with-devices",
        ),
        pytest.param(
            _config([{"devices": "some", "mig-enabled": False}]),
            {},
            "devices 'some' is neither",
            id="devices",
        ),
        pytest.param(
            _config([{"device-filter": ["0x20B010DE"], "devices": "all", "mig-enabled": False}]),
            {},
            r"no entry applies to this GPU \(H100-80GB, device_id=0x233010DE,0x233110DE,",
            id="filter-for-other-devices",
        ),
        pytest.param(
            _config([{"device-filter": ["0x233010DE"], "devices": "all", "mig-enabled": False}]),
            {"device_id": "0x20B010DE"},
            "no entry applies to this GPU",
            id="filter-matches-nothing",
        ),
        pytest.param(
            _config([{"devices": [0], "mig-enabled": False}]),
            {},
            r"picks GPUs by index \[0\]; give the GPU's device_index",
            id="index-without-device-index",
        ),
        pytest.param(
            _config([{"devices": "all", "mig-enabled": False}, {"devices": [1], "mig-enabled": False}]),
            {"device_index": 1},
            r"entries \[0, 1\] all apply",
            id="two-entries-apply",
        ),
    ],
)
def test_bad_mig_parted_config_is_refused_clearly(config: dict[str, Any], kwargs: Any, match: str) -> None:
    with pytest.raises(MigError, match=match) as info:
        check_mig_parted(config, "c", catalog()["H100-80GB"], **kwargs)
    assert "\n" not in str(info.value)


def test_a_filter_needs_a_device_id_when_the_catalog_knows_none() -> None:
    [gpu] = load_catalog(HEADER + FULL).values()
    config = _config([{"device-filter": ["0x233010DE"], "devices": "all", "mig-enabled": False}])
    with pytest.raises(MigError, match=r"device-filter \['0X233010DE'\]; give the GPU's device_id"):
        check_mig_parted(config, "c", gpu)
    assert check_mig_parted(config, "c", gpu, device_id="0x233010de").allowed


def test_unknown_mig_parted_config_name_lists_the_configs() -> None:
    with pytest.raises(
        MigError, match=r"has no config 'all-9g\.90gb' \(configs: all-disabled, all-enabled, "
    ):
        check_mig_parted(configmap_configs(), "all-9g.90gb", catalog()["H100-80GB"])


def test_mig_parted_layout_the_gpu_cannot_hold_is_not_allowed() -> None:
    config = configmap_configs()
    # The A100-40GB layout on an H100: the names do not exist there.
    result = check_mig_parted(config, "all-1g.5gb", catalog()["H100-80GB"])
    assert not result.allowed
    assert result.reasons == (f'"1g.5gb" is not a MIG profile of H100-80GB (profiles: {H100_PROFILES})',)
    too_many = _config([{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 8, "1g.20gb": 0}}])
    assert check_mig_parted(too_many, "c", catalog()["H100-80GB"]).reasons == (
        "8 x 1g.10gb: at most 7 instances",
        "compute slices 8 > 7",
    )


# --- the catalog file itself ------------------------------------------------------------------------------

HEADER = (
    "gpu,products,device_ids,profile,gi_profile_id,compute_slices,memory_gib,max_instances,"
    "placements,placement_size,source\n"
)
FULL = "G-8GB,P-1,,7g.8gb,0,7,7.5,1,0,8,src\n"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        pytest.param("gpu,profile\n", "columns", id="columns"),
        pytest.param(HEADER, "no rows", id="empty"),
        pytest.param(HEADER + FULL.replace("7g.8gb,0,7", "7g.8gb,0,6"), "is not its g number", id="g-number"),
        pytest.param(HEADER + FULL + FULL, "listed twice", id="duplicate"),
        pytest.param(
            HEADER + FULL + "G-8GB,P-1,,1g.1gb,0,1,,7,0;1;2;3;4;5;6,1,src\n", "ID 0 used twice", id="id"
        ),
        pytest.param(
            HEADER + FULL + "G-8GB,P-2,,1g.1gb,19,1,,7,0;1;2;3;4;5;6,1,src\n", "products differ", id="prod"
        ),
        pytest.param(
            HEADER + FULL + "G-8GB,P-1,0x233010DE,1g.1gb,19,1,,7,0;1;2;3;4;5;6,1,src\n",
            "device ids differ",
            id="devices-differ",
        ),
        pytest.param(HEADER + FULL.replace("P-1,,", "P-1,0x2330,"), "not like 0x233010DE", id="device-id"),
        pytest.param(HEADER + FULL + FULL.replace("G-8GB", "H-8GB"), "belongs to both", id="shared-product"),
        pytest.param(HEADER + FULL.replace(",0,8,", ",1;0,8,"), "not increasing", id="placements-order"),
        pytest.param(HEADER + FULL.replace(",1,0,8,", ",2,0,8,"), "max_instances 2 > 1", id="max"),
        pytest.param(HEADER + FULL.replace("7.5", "lots"), "memory_gib 'lots'", id="memory"),
        pytest.param(HEADER + FULL.replace(",src", ","), "no source", id="source"),
        pytest.param(HEADER + FULL.replace("7g.8gb", "7g"), "not a MIG profile name", id="name"),
        pytest.param(
            HEADER + "G-8GB,,,1g.1gb,19,1,,7,0;1;2;3;4;5;6,1,src\n", "no full-GPU profile", id="no-full"
        ),
        pytest.param(HEADER + FULL.replace(",src", ",src,extra"), "columns", id="extra-column"),
    ],
)
def test_inconsistent_catalog_is_refused(text: str, match: str) -> None:
    with pytest.raises(MigError, match=match):
        load_catalog(text)


def test_catalog_is_cached_but_callers_get_their_own_dict() -> None:
    first = catalog()
    first.pop("H100-80GB")
    assert "H100-80GB" in catalog()
    assert catalog()["A30-24GB"] is catalog()["A30-24GB"]


def test_every_row_names_a_source_and_every_gpu_its_totals() -> None:
    totals = {name: (gpu.memory_slots, gpu.compute_slices) for name, gpu in catalog().items()}
    assert totals == {
        "H100-80GB": (8, 7),
        "H100-94GB": (8, 7),
        "H100-96GB": (8, 7),
        "H200-141GB": (8, 7),
        "GH200-144GB": (8, 7),
        "B200-180GB": (8, 7),
        "GB200-186GB": (8, 7),
        "GB200-189GB": (8, 7),
        "A100-40GB": (8, 7),
        "A100-80GB": (8, 7),
        "A30-24GB": (4, 4),
        "RTX-PRO-6000": (4, 4),
    }
    for gpu in catalog().values():
        for profile in gpu.profiles:
            assert profile.source.startswith(("fixture ", "https://"))
            for named in re.findall(r"fixture (\S+)", profile.source):
                assert (MIG / named).is_file(), named


def test_to_json_round_trips_through_json() -> None:
    gpu = catalog()["H100-80GB"]
    data = json.loads(json.dumps(gpu.to_json()))
    assert data["name"] == "H100-80GB" and data["profiles"][0]["placements"] == [0, 1, 2, 3, 4, 5, 6]
    check = json.loads(json.dumps(check_layout(gpu, ["7g.80gb"]).to_json()))
    assert check == {"allowed": True, "reasons": [], "placement": [{"profile": "7g.80gb", "start": 0}]}
