"""MIG profile catalog and layout validator: which GPU-instance layouts a GPU can really hold.

A MIG layout (a list of GPU-instance profiles, e.g. what a mig-parted config or a
`nvidia.com/mig.config` label asks for) is only worth applying if the driver will accept it, so the
validator judges it against the driver's own tables: `nvidia-smi mig -lgip` (profile ID, max
instances, memory) and `nvidia-smi mig -lgipp` (allowed start slots and size of each profile on the
8 memory slots; 4 on the A30). A layout is allowed when every profile exists on that GPU, no profile
exceeds its max instances, the compute slices fit, and a non-overlapping placement exists. The
placement search is deterministic (larger profiles first, lowest start first), so the same layout
always gets the same placement and the same reasons.

The catalog is data (`profiles.csv` next to this module; every row names its source):

- **H100-80GB**: the complete `-lgip`/`-lgipp` of an H100 PCIe 80GB on driver 525 (Scaleway's docs,
  fixture `nvidia-smi-mig-lgip-lgipp-h100-pcie-80gb-525-scaleway-docs.txt`), names and max instances
  agreeing with NVIDIA's "Supported MIG Profiles" table for the H100 80GB (PCIe and SXM5). Products:
  `NVIDIA-H100-80GB-HBM3` (GFD labels in NVIDIA's GPU Operator docs) and `NVIDIA-H100-PCIe` (the
  Scaleway GPU's `nvidia-smi -L` name, "NVIDIA H100 PCIe", with spaces as `-`, the way NVIDIA's own
  pair of fixtures turns "NVIDIA H100 80GB HBM3" into `NVIDIA-H100-80GB-HBM3`).
- **A100-40GB**: the `-lgip`/`-lgipp` NVIDIA prints for an A100-SXM4-40GB in the MIG User Guide,
  "Getting Started with MIG" (docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html).
  Product `A100-SXM4-40GB` is that guide's `nvidia-smi -L` name. NVIDIA's supported-profiles table
  gives 1g.10gb "1/8" of memory, but the same guide's `-lgipp` places it on 2 slots ({0,2,4,6}:2,
  9.62 GiB); the catalog follows the driver output.
- **A100-80GB**: NVIDIA's supported-profiles page says the A100-SXM4-80GB profile names change "according
  to the memory proportion" to 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb
  "respectively", i.e. one for one with the A100-40GB rows, so IDs, max instances and placements are
  the A100-40GB ones. No source at hand prints its memory (blank) or its GFD product (none).
- **H100-94GB** (H100 NVL, H800 NVL): the complete `-lgip`/`-lgipp` of an Azure H100 NVL on driver
  560 (fixture `nvidia-smi-mig-lgip-lgipp-smi-h100-nvl-560-azure-alizeechen11-readme.txt`), its first
  three rows also in NVIDIA/gpu-operator PR #900.
- **A30-24GB**: the complete `-lgip`/`-lgipp` of fixture
  `nvidia-smi-mig-lgip-lgipp-lgi-a30-all-allocated-free0-summer-lo-readme.txt` (4 memory slots, 4
  compute slices), plus NVIDIA's 2g.12gb+me (R525 and later; no ID at hand).
- **H200-141GB** (H200 SXM, H200 NVL): the complete `-lgip`/`-lgipp` recorded on an H200 SXM with driver
  580.159.04 (fixtures `nvidia-smi-mig-lgip-h200-580.159.04.txt`, `nvidia-smi-mig-lgipp-h200-580.159.04.txt`),
  agreeing with the GPU Operator's default config and mig-parted's table; product `NVIDIA-H200`, GFD's label
  for the NVML name `NVIDIA H200` that GPU's `nvidia-smi -L` prints.
- **H100-96GB** (GH200 96GB, H100 96GB; the GPU Operator ships these layouts for PG506 and H20 too),
  **GH200-144GB**, **B200-180GB**, **GB200-186GB**: names and max
  instances from the GPU Operator's default mig-parted config (its `all-<profile>` configs fill a GPU
  with the maximum) and mig-parted's profile table (fixture
  `mig-parted-builder-test-gpu-profiles-bd7160f4-excerpt.go.txt`, from NVIDIA's supported-profiles
  page); IDs and memory only where a real `-lgip` prints them (B200's first four rows). **GB200-189GB**
  is the same device under the names its first driver printed (1g.24gb … 7g.189gb: the GB200 `-lgip`
  of PR #1303 and the config that first shipped GB200); NVIDIA renamed them in August 2025.
- **RTX-PRO-6000** (Blackwell Server Edition): the partial `-lgip` of fixture
  `nvidia-smi-mig-lgip-rtx-pro-6000-blackwell-gfx-me-all-partial-cubecos-issue312.txt` (IDs 14, 21,
  47; 65 for +me.all from its note) and the config's and mig-parted's tables for the +gfx, +me.all and
  -me variants. Constraints between those variants (a graphics instance beside a compute one) are not
  modelled.

No real `-lgipp` is at hand for the GPUs of the last two items: their placements are those of a GPU
with the same slice geometry (the H100-80GB's on 8 memory slots, the A30's on 4), and their rows say
so ("placements derived from ..."). Their max-instance counts, which NVIDIA publishes, are the same
as that GPU's, which is what the geometry predicts. Left out: RTX PRO 5000/4500, B300, GB300 and
Thor (no layout in the config at hand), and any GPU whose only source would be a guess.

PCI device ids (`device_ids`, mig-parted's `device-filter` form `0x233010DE`) are every id the
default config's `device-filter`s name, assigned to a catalogued GPU by the ConfigMap's comment
lines and by what pci.ids calls them (fixture `pci-ids-nvidia-mig-devices-excerpt.txt`); so a named
mig-parted config resolves for a node's GPU (`mig_parted_layout`, `node_layouts`, `check_node`).

Memory GiB is what the cited output printed; other SKUs and drivers of the same GPU print slightly
different values, so it is informative and never used to judge a layout.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any, Final

from fleetval.errors import FleetvalError

CATALOG_FILE: Final = "profiles.csv"

_COLUMNS: Final = (
    "gpu",
    "products",
    "device_ids",
    "profile",
    "gi_profile_id",
    "compute_slices",
    "memory_gib",
    "max_instances",
    "placements",
    "placement_size",
    "source",
)
_GPU_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$")
_PRODUCT: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# mig-parted's device-filter form: 0x<device><vendor>, e.g. 0x233010DE (NVIDIA is vendor 10DE).
_DEVICE_ID: Final = re.compile(r"^0x[0-9A-F]{4}10DE$")
# 1g.10gb, 1g.10gb+me, 1g.24gb+me.all, 1g.24gb-me: the leading number is the compute slices.
_PROFILE_NAME: Final = re.compile(r"^(\d+)g\.\d+gb(?:[+-][a-z]+(?:\.[a-z]+)*)?$")
# GFD's per-profile product label (`NVIDIA-H100-80GB-HBM3-MIG-1g.10gb`) names the parent GPU first.
# GFD's `nvidia.com/gpu.product` (NVIDIA/gpu-feature-discovery, mig-strategy.go): the NVML device name with
# every space replaced by `-`; under the single MIG strategy `<product>-MIG-<profile>` (or `-MIG-INVALID` when
# the node's MIG devices do not fit that strategy); time-slicing renames it `<product>-SHARED`.
_MIG_PRODUCT_SUFFIX: Final = re.compile(r"-MIG-(\d+g\.\d+gb\S*|INVALID)$")


class MigError(FleetvalError):
    """A MIG catalog, GPU name or mig-parted config that cannot be read."""


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile of one GPU, as the driver lists it (`-lgip` + `-lgipp`)."""

    name: str
    gi_profile_id: int | None  # None: no source at hand prints it for this GPU
    compute_slices: int
    memory_gib: float | None
    max_instances: int
    placements: tuple[int, ...]
    placement_size: int
    source: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gi_profile_id": self.gi_profile_id,
            "compute_slices": self.compute_slices,
            "memory_gib": self.memory_gib,
            "max_instances": self.max_instances,
            "placements": list(self.placements),
            "placement_size": self.placement_size,
            "source": self.source,
        }


@dataclass(frozen=True, slots=True)
class GpuMig:
    """A GPU's MIG geometry: its profiles and the slots they are placed on."""

    name: str
    products: tuple[str, ...]
    profiles: tuple[MigProfile, ...]
    memory_slots: int
    compute_slices: int
    device_ids: tuple[str, ...] = ()

    def profile(self, name: str) -> MigProfile | None:
        """The profile called `name` (`1g.10gb`, or as nvidia-smi prints it, `MIG 1g.10gb`)."""
        wanted = _profile_name(name)
        return next((p for p in self.profiles if p.name == wanted), None)

    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "products": list(self.products),
            "device_ids": list(self.device_ids),
            "memory_slots": self.memory_slots,
            "compute_slices": self.compute_slices,
            "profiles": [p.to_json() for p in self.profiles],
        }


@dataclass(frozen=True, slots=True)
class LayoutCheck:
    """The verdict on one layout: allowed, or the reasons it is not; the placement when allowed,
    as (profile, start slot) sorted by start."""

    allowed: bool
    reasons: tuple[str, ...]
    placement: tuple[tuple[str, int], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "reasons": list(self.reasons),
            "placement": [{"profile": name, "start": start} for name, start in self.placement],
        }


def _profile_name(name: str) -> str:
    return name.strip().removeprefix("MIG ").strip()


def _int(row: Mapping[str, str], column: str, minimum: int) -> int:
    text = row[column].strip()
    if not text.isascii() or not text.isdigit() or int(text) < minimum:
        raise MigError(
            f"MIG catalog: {row['gpu']} {row['profile']}: {column} {text!r} is not an integer >= {minimum}"
        )
    return int(text)


def _row_profile(row: Mapping[str, str]) -> MigProfile:
    name = row["profile"].strip()
    match = _PROFILE_NAME.match(name)
    if not match:
        raise MigError(f"MIG catalog: {row['gpu']}: {name!r} is not a MIG profile name like 1g.10gb")
    compute = _int(row, "compute_slices", 1)
    if int(match.group(1)) != compute:
        raise MigError(f"MIG catalog: {row['gpu']} {name}: compute_slices {compute} is not its g number")
    memory_text = row["memory_gib"].strip()
    memory = None
    if memory_text:
        if not re.fullmatch(r"\d+(\.\d+)?", memory_text) or not float(memory_text) > 0:
            raise MigError(
                f"MIG catalog: {row['gpu']} {name}: memory_gib {memory_text!r} is not a positive number"
            )
        memory = float(memory_text)
    starts_text = [s.strip() for s in row["placements"].split(";")]
    if not all(s.isascii() and s.isdigit() for s in starts_text):
        raise MigError(
            f"MIG catalog: {row['gpu']} {name}: placements {row['placements']!r} are not slot numbers"
        )
    starts = tuple(int(s) for s in starts_text)
    if list(starts) != sorted(set(starts)):
        raise MigError(
            f"MIG catalog: {row['gpu']} {name}: placements {row['placements']!r} are not increasing"
        )
    maximum = _int(row, "max_instances", 1)
    if maximum > len(starts):
        raise MigError(
            f"MIG catalog: {row['gpu']} {name}: max_instances {maximum} > {len(starts)} placements"
        )
    if not row["source"].strip():
        raise MigError(f"MIG catalog: {row['gpu']} {name}: no source")
    return MigProfile(
        name=name,
        gi_profile_id=_int(row, "gi_profile_id", 0) if row["gi_profile_id"].strip() else None,
        compute_slices=compute,
        memory_gib=memory,
        max_instances=maximum,
        placements=starts,
        placement_size=_int(row, "placement_size", 1),
        source=row["source"].strip(),
    )


def _gpu(
    name: str, products: tuple[str, ...], device_ids: tuple[str, ...], profiles: list[MigProfile]
) -> GpuMig:
    """A GPU from its rows; the totals are those of its full-GPU profile (all slots, most compute)."""
    slots = max(start + p.placement_size for p in profiles for start in p.placements)
    compute = max(p.compute_slices for p in profiles)
    if not any(p.placement_size == slots and p.compute_slices == compute for p in profiles):
        raise MigError(f"MIG catalog: {name} has no full-GPU profile ({compute}g on {slots} slots)")
    return GpuMig(name, products, tuple(profiles), slots, compute, device_ids)


def load_catalog(text: str) -> dict[str, GpuMig]:
    """GPUs from a catalog CSV (lines starting `#` are comments); an inconsistent one is a MigError."""
    body = "".join(line for line in io.StringIO(text) if not line.startswith("#"))
    reader = csv.DictReader(io.StringIO(body))
    if tuple(reader.fieldnames or ()) != _COLUMNS:
        raise MigError(f"MIG catalog: columns {reader.fieldnames} != {list(_COLUMNS)}")
    rows: dict[str, list[MigProfile]] = {}
    products: dict[str, tuple[str, ...]] = {}
    devices: dict[str, tuple[str, ...]] = {}
    for row in reader:
        if None in row or any(value is None for value in row.values()):
            raise MigError(f"MIG catalog: row {row} does not have {len(_COLUMNS)} columns")
        gpu = row["gpu"].strip()
        if not _GPU_NAME.match(gpu):
            raise MigError(f"MIG catalog: GPU name {gpu!r} is not a name like H100-80GB")
        labels = tuple(p.strip() for p in row["products"].split(";") if p.strip())
        if bad := [p for p in labels if not _PRODUCT.match(p)]:
            raise MigError(f"MIG catalog: {gpu}: product labels {bad} are not GFD label values")
        if products.setdefault(gpu, labels) != labels:
            raise MigError(f"MIG catalog: {gpu}: products differ between rows ({products[gpu]} vs {labels})")
        ids = tuple(i.strip() for i in row["device_ids"].split(";") if i.strip())
        if bad := [i for i in ids if not _DEVICE_ID.match(i)]:
            raise MigError(f"MIG catalog: {gpu}: device ids {bad} are not like 0x233010DE")
        if devices.setdefault(gpu, ids) != ids:
            raise MigError(f"MIG catalog: {gpu}: device ids differ between rows ({devices[gpu]} vs {ids})")
        profile = _row_profile(row)
        listed = rows.setdefault(gpu, [])
        if any(p.name == profile.name for p in listed):
            raise MigError(f"MIG catalog: {gpu} {profile.name} listed twice")
        if profile.gi_profile_id is not None and any(
            p.gi_profile_id == profile.gi_profile_id for p in listed
        ):
            raise MigError(f"MIG catalog: {gpu}: profile ID {profile.gi_profile_id} used twice")
        listed.append(profile)
    owners: dict[str, str] = {}
    for gpu, labels in products.items():
        for label in labels:
            if owners.setdefault(label.casefold(), gpu) != gpu:
                raise MigError(
                    f"MIG catalog: product {label} belongs to both {owners[label.casefold()]} and {gpu}"
                )
    if not rows:
        raise MigError("MIG catalog: no rows")
    return {gpu: _gpu(gpu, products[gpu], devices[gpu], profiles) for gpu, profiles in rows.items()}


@cache
def _catalog() -> MappingProxyType[str, GpuMig]:
    text = resources.files("fleetval.mig").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    return MappingProxyType(load_catalog(text))


def catalog() -> dict[str, GpuMig]:
    """The shipped catalog by canonical GPU name (read once; each call gets its own dict)."""
    return dict(_catalog())


def gpus_for_device(device_id: str) -> list[GpuMig]:
    """The catalogued GPUs of a PCI device id (`0x233010DE`): one, or one per profile naming its
    drivers have used (GB200); [] when the catalog does not know the device."""
    wanted = device_id.strip().upper().replace("0X", "0x", 1)
    return [gpu for gpu in _catalog().values() if wanted in gpu.device_ids]


def gpu_for(product_or_name: str) -> GpuMig:
    """The GPU for a canonical name (`H100-80GB`), a GFD `nvidia.com/gpu.product` value (including
    the time-sliced `-SHARED`, per-MIG-profile `-MIG-1g.10gb` and `-MIG-INVALID` forms GFD writes),
    the NVML name it is made from (`NVIDIA H200`: GFD turns its spaces into `-`) or a PCI device id
    (`0x233010DE`, when only one catalogued GPU has it)."""
    gpus = _catalog()
    text = product_or_name.strip()
    if _DEVICE_ID.match(text.upper().replace("0X", "0x", 1)):
        found = gpus_for_device(text)
        if len(found) == 1:
            return found[0]
        if found:
            raise MigError(
                f"device {text} is {' or '.join(g.name for g in found)}: its drivers name its profiles"
                " differently; give the GPU's name"
            )
    label = _MIG_PRODUCT_SUFFIX.sub("", "-".join(text.split()).removesuffix("-SHARED")).casefold()
    for gpu in gpus.values():
        if text.casefold() == gpu.name.casefold() or label in {p.casefold() for p in gpu.products}:
            return gpu
    known_products = sorted(p for gpu in gpus.values() for p in gpu.products)
    raise MigError(
        f"unknown GPU {product_or_name!r}: the MIG catalog knows {', '.join(sorted(gpus))}"
        f" (GFD products {', '.join(known_products)})"
    )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _and(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _describe(placed: Sequence[tuple[MigProfile, int]]) -> str:
    """`4g.40gb (4 slots at 0) and 2 x 1g.10gb (1 slot each at 4, 5)`: runs of one profile grouped."""
    groups: list[tuple[MigProfile, list[int]]] = []
    for profile, start in placed:
        if groups and groups[-1][0] is profile:
            groups[-1][1].append(start)
        else:
            groups.append((profile, [start]))
    parts = []
    for profile, starts in groups:
        size = _plural(profile.placement_size, "slot")
        if len(starts) == 1:
            parts.append(f"{profile.name} ({size} at {starts[0]})")
        else:
            parts.append(f"{len(starts)} x {profile.name} ({size} each at {', '.join(map(str, starts))})")
    return _and(parts)


def _place(
    instances: Sequence[MigProfile],
) -> tuple[list[tuple[MigProfile, int]] | None, list[tuple[MigProfile, int]]]:
    """The first non-overlapping placement in search order (instances in the given order, lowest
    start first), or None and the deepest partial placement the search reached."""
    current: list[tuple[MigProfile, int]] = []
    deepest: list[tuple[MigProfile, int]] = []
    failed: set[tuple[int, int, int]] = set()

    def search(index: int, occupied: int) -> bool:
        nonlocal deepest
        if len(current) > len(deepest):
            deepest = list(current)
        if index == len(instances):
            return True
        profile = instances[index]
        # Instances of one profile are interchangeable: each starts after the previous one.
        after = current[-1][1] if current and current[-1][0] is profile else -1
        if (index, occupied, after) in failed:
            return False
        for start in profile.placements:
            mask = ((1 << profile.placement_size) - 1) << start
            if start <= after or occupied & mask:
                continue
            current.append((profile, start))
            if search(index + 1, occupied | mask):
                return True
            current.pop()
        failed.add((index, occupied, after))
        return False

    return (list(current) if search(0, 0) else None), deepest


def _judge(gpu: GpuMig, counts: Mapping[str, int]) -> LayoutCheck:
    """The verdict on `counts` (profile name -> instances); a name the GPU lacks is refused even at 0."""
    reasons: list[str] = []
    known: dict[MigProfile, int] = {}
    unknown = False
    for name, count in counts.items():
        profile = gpu.profile(name)
        if profile is None:
            unknown = True
            reasons.append(
                f'"{name}" is not a MIG profile of {gpu.name} (profiles: {", ".join(gpu.profile_names())})'
            )
        elif count > 0:
            known[profile] = known.get(profile, 0) + count
    over = [(p, c) for p, c in known.items() if c > p.max_instances]
    reasons += [f"{c} x {p.name}: at most {_plural(p.max_instances, 'instance')}" for p, c in over]
    slices = sum(p.compute_slices * c for p, c in known.items())
    if slices > gpu.compute_slices:
        reasons.append(f"compute slices {slices} > {gpu.compute_slices}")
    slots = sum(p.placement_size * c for p, c in known.items())
    if slots > gpu.memory_slots:
        reasons.append(f"memory slots {slots} > {gpu.memory_slots}")
    if unknown or over:  # no placement to search: the reasons above already refuse it
        return LayoutCheck(False, tuple(reasons), ())
    # Larger profiles first (memory slots, then compute slices); the catalog's order breaks ties.
    order = {p: i for i, p in enumerate(gpu.profiles)}
    instances = sorted(
        (p for p, c in known.items() for _ in range(c)),
        key=lambda p: (-p.placement_size, -p.compute_slices, order[p]),
    )
    placed, deepest = _place(instances)
    if placed is None:
        verb = "leaves" if len(deepest) == 1 else "leave"
        missing = instances[len(deepest)].name
        reasons.append(
            f"no placement: {_describe(deepest)} {verb} no slot for {missing}"
            if deepest
            else f"no placement for {missing}"
        )
    if reasons:
        return LayoutCheck(False, tuple(reasons), ())
    assert placed is not None
    by_start = sorted(placed, key=lambda item: item[1])
    return LayoutCheck(True, (), tuple((p.name, start) for p, start in by_start))


def check_layout(gpu: GpuMig, profiles: Sequence[str]) -> LayoutCheck:
    """Whether `gpu` can hold one GPU instance per entry of `profiles` (names may repeat)."""
    if isinstance(profiles, str):
        raise MigError(f"a MIG layout is a list of profile names, not the string {profiles!r}")
    return _judge(gpu, Counter(_profile_name(p) for p in profiles))


def _device_filter(entry: Mapping[str, object], where: str) -> tuple[str, ...] | None:
    value = entry.get("device-filter")
    if value is None:
        return None
    ids = [value] if isinstance(value, str) else value
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise MigError(f"{where}: device-filter {value!r} is not a PCI device id or a list of them")
    return tuple(str(i).upper() for i in ids)


def _devices(entry: Mapping[str, object], where: str) -> tuple[int, ...] | None:
    """None for `devices: all`, else the GPU indices the entry names."""
    value = entry.get("devices")
    if value == "all":
        return None
    if (
        isinstance(value, list)
        and value
        and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
    ):
        return tuple(value)
    raise MigError(f"{where}: devices {value!r} is neither 'all' nor a list of GPU indices")


def _mig_devices(entry: Mapping[str, object], where: str) -> dict[str, int]:
    enabled = entry.get("mig-enabled")
    if not isinstance(enabled, bool):
        raise MigError(f"{where}: mig-enabled {enabled!r} is not true or false")
    devices = entry.get("mig-devices")
    if devices is None:
        devices = {}
    if not isinstance(devices, Mapping):
        raise MigError(f"{where}: mig-devices {devices!r} is not a mapping of profile to count")
    counts: dict[str, int] = {}
    for name, count in devices.items():
        if not isinstance(name, str) or not name.strip():
            raise MigError(f"{where}: mig-devices key {name!r} is not a profile name")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise MigError(f"{where}: mig-devices {name!r}: count {count!r} is not a whole number >= 0")
        counts[_profile_name(name)] = counts.get(_profile_name(name), 0) + count
    if not enabled and any(counts.values()):
        raise MigError(f"{where}: mig-enabled is false but mig-devices asks for {dict(counts)}")
    return counts


def _entries(config: Mapping[str, object], name: str) -> list[Mapping[str, object]]:
    version = config.get("version")
    if version is not None and version != "v1":
        raise MigError(f"mig-parted config: version {version!r} is not v1")
    configs = config.get("mig-configs")
    if not isinstance(configs, Mapping) or not configs:
        raise MigError("mig-parted config: no mig-configs mapping")
    entries = configs.get(name)
    if entries is None:
        raise MigError(f"mig-parted config has no config {name!r} (configs: {', '.join(map(str, configs))})")
    if not isinstance(entries, list) or not entries:
        raise MigError(f"mig-parted config {name!r}: not a list of device entries")
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise MigError(f"mig-parted config {name!r} entry {index}: not a mapping")
    return entries


def mig_parted_layout(
    config: Mapping[str, object],
    name: str,
    gpu: GpuMig,
    *,
    device_id: str | None = None,
    device_index: int | None = None,
) -> dict[str, int]:
    """What config `name` of a mig-parted v1 config asks of one GPU: profile -> instances ({} for
    `mig-enabled: false`).

    The entry that applies is picked the way mig-parted does: by `device-filter` (the PCI device
    id: `device_id`, else any of the catalog's `gpu.device_ids`) and by `devices` (`all`, or GPU
    indices: give `device_index`). A config that is malformed, or where no single entry applies,
    is a MigError: there is no layout to judge.
    """
    entries = _entries(config, name)
    wanted = {device_id.strip().upper()} if device_id is not None else {i.upper() for i in gpu.device_ids}
    applying: list[tuple[int, dict[str, int]]] = []
    for index, entry in enumerate(entries):
        where = f"mig-parted config {name!r} entry {index}"
        counts = _mig_devices(entry, where)
        ids = _device_filter(entry, where)
        indices = _devices(entry, where)
        if ids is not None:
            if not wanted:
                raise MigError(
                    f"{where}: picks GPUs by device-filter {list(ids)}; give the GPU's device_id"
                    f" (the catalog knows none for {gpu.name})"
                )
            if not wanted & set(ids):
                continue
        if indices is not None:
            if device_index is None:
                raise MigError(f"{where}: picks GPUs by index {list(indices)}; give the GPU's device_index")
            if device_index not in indices:
                continue
        applying.append((index, counts))
    if not applying:
        raise MigError(
            f"mig-parted config {name!r}: no entry applies to this GPU"
            f" ({gpu.name}, device_id={device_id or ','.join(gpu.device_ids) or None},"
            f" device_index={device_index})"
        )
    if len(applying) > 1:
        raise MigError(
            f"mig-parted config {name!r}: entries {[i for i, _ in applying]} all apply to this GPU"
        )
    return applying[0][1]


def check_mig_parted(
    config: Mapping[str, object],
    name: str,
    gpu: GpuMig,
    *,
    device_id: str | None = None,
    device_index: int | None = None,
) -> LayoutCheck:
    """Whether `gpu` can hold what config `name` of a mig-parted v1 config asks of it (the entry
    picked as `mig_parted_layout` picks it). `mig-enabled: false` is an empty layout, which is
    allowed."""
    return _judge(gpu, mig_parted_layout(config, name, gpu, device_id=device_id, device_index=device_index))


def node_layouts(config: Mapping[str, object], name: str, gpu: GpuMig, gpus: int) -> list[dict[str, int]]:
    """The layout config `name` asks of each of a node's `gpus` GPUs (all of model `gpu`), by index."""
    return [mig_parted_layout(config, name, gpu, device_index=i) for i in range(gpus)]


def check_node(config: Mapping[str, object], name: str, gpu: GpuMig, gpus: int) -> LayoutCheck:
    """Whether every GPU of a node can hold what config `name` asks of it. The reasons of a GPU
    that cannot are prefixed with its index when the GPUs were asked different things."""
    layouts = node_layouts(config, name, gpu, gpus)
    checks = [_judge(gpu, layout) for layout in layouts]
    if all(c.allowed for c in checks):
        return LayoutCheck(True, (), checks[0].placement if len({str(x) for x in layouts}) == 1 else ())
    same = len({str(x) for x in layouts}) == 1
    reasons: list[str] = []
    for index, check in enumerate(checks):
        for reason in check.reasons:
            text = reason if same else f"GPU {index}: {reason}"
            if text not in reasons:
                reasons.append(text)
    return LayoutCheck(False, tuple(reasons), ())


def read_mig_parted_config(text: str) -> dict[str, object]:
    """A mig-parted v1 config from YAML text: the config itself, or a ConfigMap holding it under
    `data["config.yaml"]` (the GPU Operator's `default-mig-parted-config`)."""
    import yaml  # a run-time import: the catalog itself needs no YAML

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MigError(f"mig-parted config is not YAML: {' '.join(str(exc).split())[:200]}") from None
    if isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap":
        data = doc.get("data")
        inner = data.get("config.yaml") if isinstance(data, Mapping) else None
        if not isinstance(inner, str):
            raise MigError("ConfigMap has no data[config.yaml]: not a mig-parted config")
        return read_mig_parted_config(inner)
    if not isinstance(doc, Mapping) or "mig-configs" not in doc:
        raise MigError("not a mig-parted config (no mig-configs)")
    return {str(k): v for k, v in doc.items()}
