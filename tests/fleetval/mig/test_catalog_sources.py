"""The MIG catalog against every source of its GPUs: the PCI ids the GPU Operator's configs filter on
(and what pci.ids calls them), every layout NVIDIA ships per device (today's ConfigMap and the one that
first shipped GB200), mig-parted's profile table, derived placements marked as such, and what real GPUs
refused or accepted."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from fleetval.mig.catalog import (
    MigError,
    catalog,
    check_layout,
    check_mig_parted,
    check_node,
    gpu_for,
    gpus_for_device,
    mig_parted_layout,
    node_layouts,
    read_mig_parted_config,
)
from tests.paths import FIXTURES

MIG = FIXTURES / "mig"
CONFIGMAP = "gpu-operator-default-mig-parted-config-configmap.yaml"
CONFIGMAP_GB200_FIRST = "gpu-operator-mig-parted-config-configmap-748827774-gb200-first.yaml"
PCI_IDS = "pci-ids-nvidia-mig-devices-excerpt.txt"
BUILDER_TEST = "mig-parted-builder-test-gpu-profiles-bd7160f4-excerpt.go.txt"
A30_LGIP = "nvidia-smi-mig-lgip-lgipp-lgi-a30-all-allocated-free0-summer-lo-readme.txt"
H100_NVL_AZURE = "nvidia-smi-mig-lgip-lgipp-smi-h100-nvl-560-azure-alizeechen11-readme.txt"

# What pci.ids calls the device ids of each catalogued GPU (the ConfigMap groups ids per comment line).
PCI_NAMES = {
    "H100-80GB": {"GH100 [H100 SXM5 80GB]", "GH100 [H100 PCIe]", "GH100 [H800 PCIe]", "GH100 [H800]"},
    "H100-94GB": {"GH100 [H100L 94GB]", "GH100 [H800L 94GB]"},
    "A100-40GB": {"GA100 [A100 SXM4 40GB]", "GA100 [A100 PCIe 40GB]", "GA100 [A800 40GB PCIe]"},
    "A100-80GB": {
        "GA100 [A100 SXM4 80GB]",
        "GA100 [A100 PCIe 80GB]",
        "GA100 [A800-SXM4-80GB]",
        "GA100 [A800 80GB PCIe]",
    },
    "A30-24GB": {"GA100GL [A30 PCIe]"},
    # One device-filter of the ConfigMap ships the H100-96GB layouts for PG506 and H20 too.
    "H100-96GB": {"GH100 [GH200 120GB / 480GB]", "GH100 [H100 96GB]", "GA100GL [PG506-232]", "GH100 [H20]"},
    "H200-141GB": {"GH100 [H200 SXM 141GB]", "GH100 [H200 NVL]"},
    "GH200-144GB": {"GH100 [GH200 144G HBM3e]"},
    "B200-180GB": {"GB100 [B200]"},
    "GB200-186GB": {"GB100 [HGX GB200]"},
    "GB200-189GB": {"GB100 [HGX GB200]"},
    "RTX-PRO-6000": {"GB202GL [RTX PRO 6000 Blackwell Server Edition]"},
}
# GPUs whose placements come from a real -lgipp (the others take those of a GPU of the same geometry).
WITH_LGIPP = {"H100-80GB", "H100-94GB", "A30-24GB", "A100-40GB", "A100-80GB", "H200-141GB"}


def read(name: str) -> str:
    return (MIG / name).read_text(encoding="utf-8")


def config_of(name: str) -> dict[str, Any]:
    return read_mig_parted_config(read(name))


def filter_ids(entry: dict[str, Any]) -> list[str]:
    value = entry["device-filter"]
    return [str(i).upper().replace("0X", "0x") for i in ([value] if isinstance(value, str) else value)]


def pci_names() -> dict[str, str]:
    names = {}
    for line in read(PCI_IDS).splitlines():
        if m := re.fullmatch(r"\t([0-9a-f]{4})  (.+)", line):
            names[f"0x{m.group(1).upper()}10DE"] = m.group(2)
    return names


# --- device ids ------------------------------------------------------------------------------------------


def test_device_ids_are_the_configmaps_and_pci_ids_names_them() -> None:
    config = config_of(CONFIGMAP)
    named = {
        i
        for entries in config["mig-configs"].values()
        for e in entries
        if "device-filter" in e
        for i in filter_ids(e)
    }
    catalogued = {i for gpu in catalog().values() for i in gpu.device_ids}
    assert catalogued == named  # every device NVIDIA's default config filters for, and only those
    pci = pci_names()
    for gpu in catalog().values():
        assert {pci[i] for i in gpu.device_ids} == PCI_NAMES[gpu.name], gpu.name


def test_gpu_for_a_device_id() -> None:
    assert gpu_for("0x233010DE").name == "H100-80GB"
    assert gpu_for("0x2bb510de").name == "RTX-PRO-6000"
    assert [g.name for g in gpus_for_device("0x294110DE")] == ["GB200-186GB", "GB200-189GB"]
    with pytest.raises(MigError, match="0x294110DE is GB200-186GB or GB200-189GB"):
        gpu_for("0x294110DE")
    assert gpus_for_device("0x1EB810DE") == []  # a T4: no MIG


# --- every layout NVIDIA ships ----------------------------------------------------------------------------


@pytest.mark.parametrize("configmap", [CONFIGMAP, CONFIGMAP_GB200_FIRST])
def test_every_layout_shipped_for_a_device_is_allowed_on_its_gpu(configmap: str) -> None:
    # Each device-filter entry, for every device id it names: a catalogued GPU of that id accepts it (GB200's
    # profiles were renamed between drivers, so one of its two namings must).
    config = config_of(configmap)
    checked = 0
    for name, entries in config["mig-configs"].items():
        for entry in entries:
            if "device-filter" not in entry:
                continue
            for device_id in filter_ids(entry):
                gpus = gpus_for_device(device_id)
                assert gpus, (configmap, name, device_id)
                results = [check_mig_parted(config, name, gpu, device_id=device_id) for gpu in gpus]
                assert any(r.allowed for r in results), (name, device_id, [r.reasons for r in results])
                checked += 1
    assert checked >= 30


@pytest.mark.parametrize("configmap", [CONFIGMAP, CONFIGMAP_GB200_FIRST])
def test_every_layout_for_any_device_is_allowed_wherever_its_profiles_exist(configmap: str) -> None:
    config = config_of(configmap)
    for name, entries in config["mig-configs"].items():
        if any("device-filter" in entry for entry in entries):
            continue
        profiles = {p for entry in entries for p in (entry.get("mig-devices") or {})}
        fits = [gpu for gpu in catalog().values() if all(gpu.profile(p) for p in profiles)]
        assert fits, name  # every layout NVIDIA ships has a catalogued GPU
        for gpu in fits:
            assert check_mig_parted(config, name, gpu).allowed, (name, gpu.name)


def test_all_profile_configs_fill_their_gpus_to_the_catalogs_maximum() -> None:
    # `all-<profile>` fills each GPU with as many instances of one profile as it holds: NVIDIA's count is the
    # catalog's max_instances on some GPU that has the profile (and the entry's devices, where it filters).
    config = config_of(CONFIGMAP)
    seen = 0
    for name, entries in config["mig-configs"].items():
        if not name.startswith("all-") or name == "all-balanced":
            continue
        for entry in entries:
            devices = entry.get("mig-devices") or {}
            if len(devices) != 1:
                continue
            [(profile_name, count)] = devices.items()
            owners = [gpu for gpu in catalog().values() if gpu.profile(profile_name)]
            if "device-filter" in entry:
                owners = [g for g in owners if set(g.device_ids) & set(filter_ids(entry))]
            maxima = {g.profile(profile_name).max_instances for g in owners}  # type: ignore[union-attr]
            assert count in maxima, (name, profile_name, count, maxima)
            seen += 1
    assert seen >= 50


def test_one_more_instance_than_shipped_is_refused() -> None:
    config = config_of(CONFIGMAP)
    for name, entries in config["mig-configs"].items():
        for entry in entries:
            devices = entry.get("mig-devices") or {}
            if not name.startswith("all-") or name == "all-balanced" or len(devices) != 1:
                continue
            [(profile_name, count)] = devices.items()
            for gpu in catalog().values():
                profile = gpu.profile(profile_name)
                if profile is not None and profile.max_instances == count:
                    assert not check_layout(gpu, [profile_name] * (count + 1)).allowed, (gpu.name, name)


# --- mig-parted's table (NVIDIA's supported-profiles page) ----------------------------------------------


def builder_test_profiles() -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    gpu = ""
    for line in read(BUILDER_TEST).splitlines():
        if m := re.fullmatch(r'\t"([^"]+)": \{', line):
            gpu = m.group(1)
        elif m := re.search(r'\{Name: "([^"]+)", MaxCount: (\d+),', line):
            table.setdefault(gpu, {})[m.group(1)] = int(m.group(2))
    return table


def test_mig_parteds_profile_table_agrees_with_the_catalog() -> None:
    table = builder_test_profiles()
    # RTX PRO 5000 is left out: NVIDIA's default config ships no layout for it and no -lgip is at hand.
    assert sorted(table) == sorted(
        [*(set(PCI_NAMES) - {"GH200-144GB", "GB200-186GB", "GB200-189GB"}), "RTX-PRO-5000"]
    )
    for gpu_name, profiles in table.items():
        if gpu_name == "RTX-PRO-5000":
            continue
        caught = {p.name: p.max_instances for p in catalog()[gpu_name].profiles}
        assert caught == profiles, gpu_name


# --- derived placements -----------------------------------------------------------------------------------


def test_placements_no_lgipp_prints_are_derived_and_say_so() -> None:
    for gpu in catalog().values():
        for profile in gpu.profiles:
            derived = "placements derived from " in profile.source
            if gpu.name in WITH_LGIPP and (gpu.name, profile.name) != ("A30-24GB", "2g.12gb+me"):
                assert not derived, (gpu.name, profile.name)
                continue
            model = "A30-24GB" if gpu.memory_slots == 4 else "H100-80GB"
            assert derived and model in profile.source, (gpu.name, profile.name)
            twins = [
                p
                for p in catalog()[model].profiles
                if (p.compute_slices, p.placement_size) == (profile.compute_slices, profile.placement_size)
            ]
            assert any(p.placements == profile.placements for p in twins), (gpu.name, profile.name)
            assert profile.max_instances <= len(profile.placements)


def test_no_id_or_memory_is_made_up() -> None:
    # A blank is what no source printed; GPUs with a complete real -lgip have every ID.
    for gpu in catalog().values():
        for profile in gpu.profiles:
            if profile.gi_profile_id is not None or profile.memory_gib is not None:
                assert "-lgip" in profile.source, (gpu.name, profile.name)


# --- what real GPUs refused and accepted -------------------------------------------------------------------


def test_a30_with_four_1g_instances_refuses_anything_more() -> None:
    # The A30's -lgip after four 1g.6gb instances: every profile Free 0. The catalog refuses each addition.
    text = read(A30_LGIP)
    free = {m.group(1): int(m.group(2)) for m in re.finditer(r"MIG (\S+)\s+\d+\s+(\d+)/\d+", text)}
    assert set(free.values()) == {0}
    gpu = catalog()["A30-24GB"]
    existing = ["1g.6gb"] * 4
    assert check_layout(gpu, existing).allowed
    for profile in gpu.profiles:
        assert not check_layout(gpu, [*existing, profile.name]).allowed, profile.name


def test_h100_nvl_instances_the_driver_created_are_allowed() -> None:
    text = read(H100_NVL_AZURE)
    cgi = re.search(r"-cgi ([\d,]+)", text)
    assert cgi
    gpu = catalog()["H100-94GB"]
    by_id = {p.gi_profile_id: p.name for p in gpu.profiles}
    layout = [by_id[int(i)] for i in cgi.group(1).split(",")]
    assert layout == ["3g.47gb", "1g.24gb", "1g.12gb"]
    assert check_layout(gpu, layout).allowed
    # The MIG devices table the driver then printed: one device per instance, SM counts as -lgip says.
    rows = re.findall(r"^\|\s+0\s+(\d+)\s+0\s+(\d)\s+\|\s+\d+MiB / (\d+)MiB\s+\| (\d+)\s", text, re.MULTILINE)
    assert [(int(dev), int(sm)) for _gi, dev, _mem, sm in rows] == [(0, 60), (1, 26), (2, 16)]


# --- mig-parted configs per node ---------------------------------------------------------------------------


def test_node_layouts_follow_device_indices() -> None:
    config = yaml.safe_load(read("mig-parted-example-config.yaml"))
    a100 = catalog()["A100-40GB"]
    layouts = node_layouts(config, "custom-config", a100, 8)
    assert layouts[:4] == [{}] * 4 and layouts[4] == {"1g.5gb": 7} and len(layouts) == 8
    assert check_node(config, "custom-config", a100, 8).allowed


def test_check_node_names_the_gpu_only_when_gpus_differ() -> None:
    config = {
        "version": "v1",
        "mig-configs": {
            "uneven": [
                {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 8}},
                {"devices": [1], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
            ],
            "even": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 8}}],
        },
    }
    h100 = catalog()["H100-80GB"]
    uneven = check_node(config, "uneven", h100, 2)
    assert not uneven.allowed and uneven.reasons[0] == "GPU 0: 8 x 1g.10gb: at most 7 instances"
    even = check_node(config, "even", h100, 8)
    assert even.reasons == ("8 x 1g.10gb: at most 7 instances", "compute slices 8 > 7")
    with pytest.raises(MigError, match="no entry applies"):
        mig_parted_layout(config, "uneven", h100, device_index=5)


def test_read_mig_parted_config_from_the_configmap_or_bare() -> None:
    from_configmap = read_mig_parted_config(read(CONFIGMAP))
    assert "all-balanced" in from_configmap["mig-configs"]  # type: ignore[operator]
    bare = read_mig_parted_config(read("mig-parted-example-config.yaml"))
    assert "custom-config" in bare["mig-configs"]  # type: ignore[operator]
    for bad, why in [
        ("kind: ConfigMap\ndata: {}\n", "no data\\[config.yaml\\]"),
        ("a: [1\n", "not YAML"),
        ("- 1\n", "not a mig-parted config"),
    ]:
        with pytest.raises(MigError, match=why):
            read_mig_parted_config(bad)
