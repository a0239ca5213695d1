"""What MIG tools print on a simulated node (pure): the GPU instances a layout makes, their attributes,
`nvidia-smi -L` and `nvidia-smi` with MIG devices, and the lines the isolation probes' scripts print.

Formats are the real ones, rebuilt from the fixtures in `tests/fixtures/mig/` (a test renders each
fixture's values and gets the fixture's lines back byte for byte):

- `nvidia-smi -L`: `GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)` and, under it, `  MIG 1g.10gb     Device
  0: (UUID: MIG-…)` per MIG device, in GPU-instance-ID order (NVIDIA's docs output).
- `nvidia-smi`: the R560 layout (89 columns) of the Azure H100 NVL output: the GPU table, the `MIG
  devices:` table, the `Processes:` table. A container's processes are in another PID namespace:
  the table says "No running processes found", as it does in a pod.
- GPU instance IDs: the driver numbers the slots of an 8-slot GPU like a binary heap (full GPU 0;
  the 4-slot halves 1, 2; the 2-slot quarters 3..6; the 1-slot eighths 7..13; on 4 slots 0, 1..2,
  3..6): the IDs of every real `-lgi` and MIG device table at hand (3g at slot 0 → GI 1, at 4 → 2;
  a 2-slot instance at 4 → 5; 1-slot at 0, 1, 2, 6 → 7, 8, 9, 13; the A30's four 1g → 3..6).
- Per-profile SMs and engines: the H100 NVL's `-lgip` (the same GH100 die as the H100 SXM; the
  H100 SXM's GFD labels say the same 16/32/60 SMs) by compute slices and memory slots; the A30's for
  4-slot GPUs. MIG device memory (MiB): GFD's `nvidia.com/mig-<p>.memory` where NVIDIA's docs print
  it (H100 80GB HBM3: 9984, 20096, 40320 for 1, 2, 4 slots), else the catalog's GiB × 1024, else the
  GPU's share by slots. BAR1: 16 GiB - 1 MiB per memory slot (every MIG device table at hand).

Estimates, not measurements: what a CUDA context of PyTorch takes on a MIG device
(`CONTEXT_MIB`), a device's idle use (`IDLE_MIB`, the 13 MiB of the Azure table) and the fp16
matmul rate per SM (`TFLOPS_PER_SM`, about 700 dense TFLOPS over an H100's 132 SMs).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from fleetval.mig.catalog import GpuMig, MigProfile, check_layout

IDLE_MIB: Final = 13
CONTEXT_MIB: Final = 504
TFLOPS_PER_SM: Final = 5.3
FILL_BLOCK_MIB: Final = 64
# (compute slices, memory slots) -> (SMs, CE, ENC, DEC, OFA, JPG); "+me" profiles add an OFA.
_ENGINES_8: Final = {
    (1, 1): (16, 1, 0, 1, 0, 1),
    (1, 2): (26, 1, 0, 1, 0, 1),
    (2, 2): (32, 2, 0, 2, 0, 2),
    (3, 4): (60, 3, 0, 3, 0, 3),
    (4, 4): (64, 4, 0, 4, 0, 4),
    (7, 8): (132, 8, 0, 7, 1, 7),
}
_ENGINES_4: Final = {
    (1, 1): (14, 1, 0, 1, 0, 0),
    (2, 2): (28, 2, 0, 2, 0, 0),
    (4, 4): (56, 4, 0, 4, 1, 1),
}
# GFD's nvidia.com/mig-<profile>.memory (MiB) where NVIDIA's docs print it, by (GPU, memory slots).
_GFD_MEMORY_MIB: Final = {("H100-80GB", 1): 9984, ("H100-80GB", 2): 20096, ("H100-80GB", 4): 40320}
# The CUDA version each driver branch ships (the `CUDA Version:` nvidia-smi prints).
_CUDA: Final = {"525": "12.0", "535": "12.2", "550": "12.4", "560": "12.6", "565": "12.7", "570": "12.8"}
WIDTH: Final = 91  # the R560 tables, borders included


@dataclass(frozen=True, slots=True)
class DeviceAttrs:
    """What one MIG device of a profile has (the GFD labels and the MIG devices table say it)."""

    memory_mib: int
    sm: int
    ce: int
    enc: int
    dec: int
    ofa: int
    jpg: int
    bar1_mib: int
    slices_gi: int
    slices_ci: int


@dataclass(frozen=True, slots=True)
class Instance:
    """One GPU instance (with its one compute instance, CI 0) of one physical GPU."""

    gpu: int
    profile: str
    start: int
    gi: int
    uuid: str


@dataclass(frozen=True, slots=True)
class MigDeviceUse:
    """A MIG device, its memory in use as nvidia-smi shows it (`IDLE_MIB` when idle) and its GPU."""

    instance: Instance
    attrs: DeviceAttrs
    used_mib: int
    parent_uuid: str


@dataclass(frozen=True, slots=True)
class MigView:
    """What a container given MIG devices sees (its devices first), and what a faulty node leaks."""

    gpu_name: str  # the parent GPU's name, as nvidia-smi prints it
    full_memory_mib: int
    devices: tuple[MigDeviceUse, ...]
    neighbours: tuple[MigDeviceUse, ...]  # the other instances of its GPUs
    sees_all: bool = False  # every MIG device of its GPUs is visible (mig.process_visible)
    spilled_mib: int = 0  # a neighbour's fill in this container's first device (mig.memory_leak)


def gi_id(memory_slots: int, size: int, start: int) -> int:
    """The GPU instance ID the driver gives an instance of `size` slots at `start` (see module doc)."""
    return memory_slots // size - 1 + start // size


def device_attrs(gpu: GpuMig, profile: MigProfile, full_memory_mib: int) -> DeviceAttrs:
    table = _ENGINES_8 if gpu.memory_slots == 8 else _ENGINES_4
    key = (profile.compute_slices, profile.placement_size)
    sm, ce, enc, dec, ofa, jpg = table.get(
        key, (16 * profile.compute_slices, profile.compute_slices, 0, 0, 0, 0)
    )
    if "+me" in profile.name:
        ofa = max(ofa, 1)
    if (gpu.name, profile.placement_size) in _GFD_MEMORY_MIB:
        memory = _GFD_MEMORY_MIB[(gpu.name, profile.placement_size)]
    elif profile.memory_gib is not None:
        memory = round(profile.memory_gib * 1024 / 128) * 128  # -lgip's GiB rounds the 128 MiB-aligned size
    else:
        memory = full_memory_mib * profile.placement_size // gpu.memory_slots // 128 * 128
    return DeviceAttrs(
        memory_mib=memory,
        sm=sm,
        ce=ce,
        enc=enc,
        dec=dec,
        ofa=ofa,
        jpg=jpg,
        bar1_mib=16384 * profile.placement_size - 1,
        slices_gi=profile.compute_slices,
        slices_ci=profile.compute_slices,
    )


def mig_uuid(*parts: object) -> str:
    digest = hashlib.sha256("/".join(map(str, ("mig", *parts))).encode()).hexdigest()
    return f"MIG-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def instances(gpu: GpuMig, index: int, layout: Mapping[str, int], *, salt: str) -> list[Instance]:
    """The instances `layout` makes on GPU `index`, placed as the catalog places them, by GI ID;
    [] for an empty layout or one the GPU cannot hold."""
    names = [name for name, count in layout.items() for _ in range(count)]
    check = check_layout(gpu, names)
    if not check.allowed:
        return []
    made = []
    for name, start in check.placement:
        profile = gpu.profile(name)
        assert profile is not None
        gi = gi_id(gpu.memory_slots, profile.placement_size, start)
        made.append(Instance(index, name, start, gi, mig_uuid(salt, index, gi, name)))
    return sorted(made, key=lambda i: i.gi)


def cuda_version(driver: str) -> str:
    return _CUDA.get(driver.split(".")[0], "12.8")


# --- nvidia-smi -L --------------------------------------------------------------------------------------


def list_line(index: int, name: str, uuid: str) -> str:
    return f"GPU {index}: {name} (UUID: {uuid})\n"


def mig_list_line(profile: str, device: int, uuid: str) -> str:
    return f"  MIG {profile:<11} Device {device:>2}: (UUID: {uuid})\n"


# --- nvidia-smi ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SmiGpuRow:
    index: int
    name: str
    bus_id: str
    mig_enabled: bool
    memory_used_mib: int
    memory_total_mib: int
    temp_c: int = 31
    power_w: int = 72
    power_cap_w: int = 700


@dataclass(frozen=True, slots=True)
class SmiDeviceRow:
    gpu: int
    gi: int
    ci: int
    dev: int
    memory_used_mib: int
    attrs: DeviceAttrs


def _line(cells: Sequence[str]) -> str:
    return "|" + "|".join(cells) + "|\n"


def _rule(widths: Sequence[int], fill: str = "-", *, ends: str = "+", joints: str = "+") -> str:
    return ends + joints.join(fill * w for w in widths) + ends + "\n"


def _box(text: str) -> str:
    """A full-width line of text: `| text ... |`."""
    return "| " + text.ljust(WIDTH - 4) + " |\n"


_FULL: Final = "+" + "-" * (WIDTH - 2) + "+\n"
_GPU_CELLS: Final = (41, 24, 22)
_MIG_CELLS: Final = (18, 34, 11, 23)
_GPU_HEADER: Final = (
    "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n"
    "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n"
    "|                                         |                        |               MIG M. |\n"
)
_MIG_HEADER: Final = (
    "| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |\n"
    "|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |\n"
    "|                  |                                  |        ECC|                       |\n"
)
_PROCESS_HEADER: Final = (
    "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |\n"
    "|        ID   ID                                                               Usage      |\n"
)


def gpu_rows(gpu: SmiGpuRow) -> str:
    """One GPU's three lines of the GPU table."""
    ecc = "On" if gpu.mig_enabled else "0"
    util = "N/A" if gpu.mig_enabled else "0%"
    mode = "Enabled" if gpu.mig_enabled else "Disabled"
    power, cap = f"{gpu.power_w}W", f"{gpu.power_cap_w}W"
    memory = f"{gpu.memory_used_mib}MiB".rjust(11) + " / " + f"{gpu.memory_total_mib}MiB".rjust(9) + " "
    return (
        _line((f"{gpu.index:>4}  {gpu.name:<31}{'On':<4}", f"{gpu.bus_id:>19} {'Off':<3} ", f"{ecc:>21} "))
        + _line(
            (f" N/A   {gpu.temp_c:>2}C    P0{power:>16} / {cap:>5} ", memory, f"{util:>8}{'Default':>13} ")
        )
        + _line((" " * 41, " " * 24, f"{mode:>21} "))
    )


def device_rows(d: SmiDeviceRow) -> str:
    """One MIG device's two lines of the MIG devices table."""
    a = d.attrs
    used = f"{d.memory_used_mib}MiB".rjust(19) + " / " + f"{a.memory_mib}MiB".rjust(8) + "    "
    engines = f"{a.ce:>3}{a.enc:>4}{a.dec:>5}{a.ofa:>5}{a.jpg:>5} "
    bar1 = "0MiB".rjust(21) + " / " + f"{a.bar1_mib}MiB".rjust(8) + "  "
    return _line((f"{d.gpu:>3}{d.gi:>5}{d.ci:>4}{d.dev:>4}  ", used, f" {a.sm:<3}{0:>6} ", engines)) + _line(
        (" " * 18, bar1, " " * 11, " " * 23)
    )


def render_smi(
    *, driver: str, gpus: Sequence[SmiGpuRow], devices: Sequence[SmiDeviceRow], when: float | None = None
) -> str:
    """`nvidia-smi` in a container (R560 layout): its GPUs, its MIG devices, no processes visible."""
    out = [time.asctime(time.gmtime(when if when is not None else 0.0)) + "\n", _FULL]
    cuda = cuda_version(driver)
    out.append(f"| NVIDIA-SMI {driver:<23}Driver Version: {driver:<15}CUDA Version: {cuda:<9}|\n")
    out.append(_rule(_GPU_CELLS, ends="|")[:-2] + "+\n")  # R560 closes this one rule with a `+`
    out.append(_GPU_HEADER)
    out.append(_rule(_GPU_CELLS, "=", ends="|"))
    for gpu in gpus:
        out.append(gpu_rows(gpu))
        out.append(_rule(_GPU_CELLS))
    if devices:
        out += [
            "\n",
            _FULL,
            _box("MIG devices:"),
            _rule(_MIG_CELLS),
            _MIG_HEADER,
            _rule(_MIG_CELLS, "=", ends="|"),
        ]
        for d in devices:
            out.append(device_rows(d))
            out.append(_rule(_MIG_CELLS))
    out += ["\n", _FULL, _box("Processes:"), _PROCESS_HEADER, "|" + "=" * (WIDTH - 2) + "|\n"]
    out += [_box(" No running processes found"), _FULL]
    return "".join(out)


# --- what the isolation probes' scripts print ---------------------------------------------------------


def workload_lines(
    *, name: str, sm: int, total_mib: int, free_mib: int, alloc_ok: bool, tflops: float | None
) -> str:
    """WORKLOAD_SCRIPT's lines (fleetval.mig.isolation), for a device of `total_mib` with `free_mib` free
    once its CUDA context exists. A failed allocation kills the script when the matmul buffers cannot be
    had either (`tflops` None): it then ends with PyTorch's traceback on stderr, not modelled."""
    want = int(free_mib * 0.9)
    lines = [
        "fleetval-mig-workload 1",
        f"device {name} sm {sm}",
        f"mem_total_mib {total_mib}",
        f"mem_free_mib {free_mib}",
        f"alloc_mib {want} ok" if alloc_ok else f"alloc_mib {want} failed OutOfMemoryError",
    ]
    if tflops is not None:
        lines += [f"matmul_tflops {tflops:.2f}", "done"]
    return "\n".join(lines) + "\n"


def fill_lines(listing: str, devices: Sequence[tuple[str, int]]) -> str:
    """FILL_SCRIPT's lines: its `nvidia-smi -L`, then each device (uuid, total MiB) filled in 64 MiB
    blocks once its CUDA context is up, then `filled-all`."""
    lines = [f"fleetval-mig-fill 1 devices {len(devices)}\n", listing]
    for uuid, total in devices:
        blocks = (total - IDLE_MIB - CONTEXT_MIB) // FILL_BLOCK_MIB
        lines.append(f"filled {uuid} {blocks * FILL_BLOCK_MIB} {total}\n")
    lines.append(f"filled-all {len(devices)}\n")
    return "".join(lines)


def filled_use_mib(total_mib: int) -> int:
    """A device's memory use while the filler holds it."""
    return IDLE_MIB + CONTEXT_MIB + (total_mib - IDLE_MIB - CONTEXT_MIB) // FILL_BLOCK_MIB * FILL_BLOCK_MIB
