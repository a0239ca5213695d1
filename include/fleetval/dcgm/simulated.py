"""What `dcgmi diag -r <level> [-j]` prints on a simulated node, byte-format-faithful.

Shapes follow the real outputs in `tests/fixtures/dcgm/` and DCGM's own writer (`dcgmi/Diag.cpp`,
`nvvs/include/JsonResult.hpp`): JSON is laid out the way jsoncpp's `toStyledString()` lays it out
(tab indent, `"key" : `, keys sorted, short scalar arrays on one line); the text table is dcgmi's
78-column table with messages wrapped every 45 characters. DCGM 4.x, abbreviated::

    | memory                    | Fail                                           |
    |                           | GPU0: Pass                                     |
    |                           | GPU1: Fail                                     |
    | Warning: GPU1             | Found 12 faulty memory elements on GPU 1 Run a |

Test sets per level (DCGM user guide): r1 runs only the software/deployment checks; r2 adds the
memory and pcie plugins; r3 adds diagnostic, targeted stress/power and memory bandwidth; r4 adds
memtest and the pulse test. A fault shows in the plugin that finds it: `memory` and `thermal_warn`
in memory, `pcie` and `nvlink` in pcie (DCGM's pcie plugin reports NVLink error counters), so an
r1 run, like a real one, sees none of them. `profiling_busy` is no hardware fault: a dcgm-exporter
beside the diagnostic holds DCGM's profiling module, and the pcie plugin's profiling watch fails
(DCGM_ST_PROFILING_MULTI_PASS) on each GPU it is given.

Warnings carry DCGM's own codes (dcgm_errors.h / dcgm_errors.c): error_id, category, severity and
message text with the suggested next step appended, as dcgmi prints them. DCGM 4.x prints a warn
entity as "Fail" everywhere but the test's own text line; this renderer does the same.

Real JSON carries no GPU UUIDs (entities have entity_id, device_id and serial_num), so `gpu_uuids`
only seeds each GPU's serial number; callers map index -> UUID from their own inventory.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from fleetval.errors import SpecError

# The releases this renderer plays (the supported images' DCGM, fleetval.dcgm.probe). 4.2.3 and
# 4.6.0 print the same diag table and JSON for every test fleetval runs: between the two tags,
# dcgmi/Diag.cpp only adds EUD package versions to the metadata and prints NOT_RUN as "Not Run"
# (an empty cell before), neither of which these reports contain.
SIMULATED_DCGM_VERSIONS: Final = ("3.3.9", "4.2.3", "4.6.0")
# The release a major means when only the major is given (the newest of each).
DCGM_VERSIONS: Final[dict[int, str]] = {3: "3.3.9", 4: "4.6.0"}
DEVICE_ID: Final = "2330"  # PCI device id of H100 SXM5 80GB, as in "GPU Device IDs Detected"
FAULT_KINDS: Final = ("memory", "pcie", "nvlink", "thermal_warn")  # hardware faults of one GPU
# Not a GPU's fault: DCGM's profiling module held by another client (dcgm-exporter's DCP watches).
BUSY_KINDS: Final = ("profiling_busy",)

_SUGGEST_FIELD_DIAG: Final = "Run a field diagnostic on the GPU."
_SUGGEST_COOLING: Final = (
    "Verify that the cooling on this machine is functional, including external, "
    "thermal material interface, fans, and any other components."
)
_SUGGEST_SYSTEM_TRIAGE: Final = (  # SYSTEM_TRIAGE_MSG, DCGM_FR_DCGM_API's suggestion
    "Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."
)
_SUGGEST_BANDWIDTH: Final = (
    "Verify that your minimum bandwidth setting is appropriate for the topology of each GPU. "
    "If so, and errors are consistent, please run a field diagnostic."
)


@dataclass(frozen=True, slots=True)
class DcgmFault:
    """A fault injected on one GPU of a simulated node."""

    gpu: int
    kind: str  # "memory" | "pcie" | "nvlink" | "thermal_warn" | "profiling_busy"


@dataclass(frozen=True, slots=True)
class _FaultSpec:
    test: str  # key of the plugin that finds it
    result: str  # "Fail" | "Warn"
    error_id: int
    category: int
    severity: int
    message: str  # "{gpu}" is the GPU index


_FAULTS: Final[dict[str, _FaultSpec]] = {
    # DCGM_FR_FAULTY_MEMORY: ISOLATE, HARDWARE_MEMORY
    "memory": _FaultSpec(
        "memory", "Fail", 52, 10, 2, f"Found 12 faulty memory elements on GPU {{gpu}} {_SUGGEST_FIELD_DIAG}"
    ),
    # DCGM_FR_LOW_BANDWIDTH: TRIAGE, HARDWARE_PCIE
    "pcie": _FaultSpec(
        "pcie",
        "Fail",
        30,
        13,
        4,
        "Bandwidth of GPU {gpu} in direction h2d of 5.21 did not exceed minimum required bandwidth "
        f"of 20.00. {_SUGGEST_BANDWIDTH}",
    ),
    # DCGM_FR_NVLINK_ERROR_CRITICAL: ISOLATE, HARDWARE_NVLINK
    "nvlink": _FaultSpec(
        "pcie",
        "Fail",
        71,
        11,
        2,
        f"Detected 14 Replay NvLink errors on GPU {{gpu}}'s NVLink (should be 0) {_SUGGEST_FIELD_DIAG}",
    ),
    # DCGM_FR_DCGM_API ("Error using DCGM API %s") with errorString(DCGM_ST_PROFILING_MULTI_PASS):
    # the pcie plugin's watch on the profiling (DCP) PCIe/NVLink byte counters, which dcgm-exporter
    # collects by default, refused because the exporter's watches hold the profiling module.
    # TRIAGE, INTERNAL_OTHER: dcgm_errors.c's table entry for the code at v3.3.9 and v4.6.0.
    "profiling_busy": _FaultSpec(
        "pcie",
        "Fail",
        67,
        16,
        4,
        "Error using DCGM API dcgmProfWatchFields: The requested profiling metrics cannot be collected "
        f"in a single pass {_SUGGEST_SYSTEM_TRIAGE}",
    ),
    # DCGM_FR_THERMAL_VIOLATIONS_TS: MONITOR, HARDWARE_THERMAL
    "thermal_warn": _FaultSpec(
        "memory",
        "Warn",
        41,
        9,
        1,
        "Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test for GPU {gpu} "
        f"{_SUGGEST_COOLING}",
    ),
}


@dataclass(frozen=True, slots=True)
class _Plugin:
    key: str
    category: str
    name3: str
    name4: str
    level: int


_PLUGINS: Final = (
    _Plugin("software", "Deployment", "software", "software", 1),
    _Plugin("memory", "Hardware", "GPU Memory", "memory", 2),
    _Plugin("pcie", "Integration", "PCIe", "pcie", 2),
    _Plugin("diagnostic", "Hardware", "Diagnostic", "diagnostic", 3),
    _Plugin("targeted_stress", "Stress", "Targeted Stress", "targeted_stress", 3),
    _Plugin("targeted_power", "Stress", "Targeted Power", "targeted_power", 3),
    _Plugin("memory_bandwidth", "Stress", "Memory Bandwidth", "memory_bandwidth", 3),
    _Plugin("memtest", "Hardware", "Memtest", "memtest", 4),
    _Plugin("pulse_test", "Stress", "Pulse Test", "pulse_test", 4),
)

# 3.x reports the software plugin as separate Deployment checks (names as dcgmi 3.x prints them).
_DEPLOYMENT_3X: Final = (
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
)

# Category order as each major prints it (3.x: the 3.0.4 table; 4.x: Diag::HelperDisplayAsCli).
_CATEGORY_ORDER: Final[dict[int, tuple[str, ...]]] = {
    3: ("Deployment", "Integration", "Hardware", "Stress"),
    4: ("Deployment", "Hardware", "Integration", "Stress"),
}

_RANK: Final[dict[str, int]] = {"Pass": 0, "Warn": 1, "Fail": 2}

_BORDER: Final = "+---------------------------+------------------------------------------------+"
_HEADER: Final = (
    _BORDER,
    "| Diagnostic                | Result                                         |",
    "+===========================+================================================+",
)
_SECTIONS: Final[dict[str, str]] = {
    "Metadata": "|-----  Metadata  ----------+------------------------------------------------|",
    "Deployment": "|-----  Deployment  --------+------------------------------------------------|",
    "Hardware": "+-----  Hardware  ----------+------------------------------------------------+",
    "Integration": "+-----  Integration  -------+------------------------------------------------+",
    "Stress": "+-----  Stress  ------------+------------------------------------------------+",
}
_NAME_WIDTH: Final = 25
_INFO_WIDTH: Final = 46
_WRAP: Final = 45  # dcgmi's DATA_INFO_TAG_LEN


@dataclass(frozen=True, slots=True)
class _Finding:
    gpu: int
    spec: _FaultSpec

    @property
    def message(self) -> str:
        return self.spec.message.format(gpu=self.gpu)

    def to_json(self) -> dict[str, Any]:
        return {
            "error_category": self.spec.category,
            "error_id": self.spec.error_id,
            "error_severity": self.spec.severity,
            "warning": self.message,
        }


@dataclass(frozen=True, slots=True)
class _Run:
    plugin: _Plugin
    per_gpu: tuple[tuple[str, tuple[_Finding, ...]], ...]  # index = GPU

    @property
    def result(self) -> str:
        return max((status for status, _ in self.per_gpu), key=_RANK.__getitem__, default="Pass")


def render_dcgm(
    *,
    level: int,
    gpu_count: int,
    gpu_uuids: Sequence[str],
    driver_version: str,
    faults: Sequence[DcgmFault] = (),
    dcgm_major: int = 4,
    fmt: str = "json",
    dcgm_version: str = "",
) -> str:
    """What `dcgmi diag -r <level>` (`-j` when fmt="json") prints for this node and these faults,
    from DCGM `dcgm_version` (one of SIMULATED_DCGM_VERSIONS; "" = the newest of `dcgm_major`)."""
    if level not in (1, 2, 3, 4):
        raise ValueError(f"DCGM run level must be 1..4, got {level}")
    if not dcgm_version:
        if dcgm_major not in DCGM_VERSIONS:
            raise ValueError(f"dcgm_major must be 3 or 4, got {dcgm_major}")
        dcgm_version = DCGM_VERSIONS[dcgm_major]
    if dcgm_version not in SIMULATED_DCGM_VERSIONS:
        raise ValueError(
            f"dcgm_version must be one of {', '.join(SIMULATED_DCGM_VERSIONS)}, got {dcgm_version!r}"
        )
    version = dcgm_version
    if fmt not in ("json", "text"):
        raise ValueError(f"fmt must be 'json' or 'text', got {fmt!r}")
    if gpu_count < 1 or len(gpu_uuids) != gpu_count:
        raise ValueError(f"need gpu_count >= 1 and one UUID per GPU, got {gpu_count} and {len(gpu_uuids)}")
    for fault in faults:
        if fault.kind not in _FAULTS:
            known = ", ".join((*FAULT_KINDS, *BUSY_KINDS))
            raise SpecError(f"unknown DCGM fault kind {fault.kind!r}; known: {known}")
        if not 0 <= fault.gpu < gpu_count:
            raise SpecError(f"fault on GPU {fault.gpu} but the node has GPUs 0..{gpu_count - 1}")

    runs = _runs(level, gpu_count, faults)
    if version.startswith("4."):
        if fmt == "json":
            return jsoncpp_styled(_json4(runs, gpu_uuids, driver_version, version))
        return _text4(runs, gpu_count, driver_version, version)
    if fmt == "json":
        return jsoncpp_styled(_json3(runs, driver_version, version))
    return _text3(runs, gpu_count, driver_version, version)


def _runs(level: int, gpu_count: int, faults: Sequence[DcgmFault]) -> list[_Run]:
    runs = []
    for plugin in _PLUGINS:
        if plugin.level > level:
            continue
        per_gpu = []
        for gpu in range(gpu_count):
            found = tuple(
                _Finding(gpu, _FAULTS[f.kind])
                for f in faults
                if f.gpu == gpu and _FAULTS[f.kind].test == plugin.key
            )
            status = max((f.spec.result for f in found), key=_RANK.__getitem__, default="Pass")
            per_gpu.append((status, found))
        runs.append(_Run(plugin, tuple(per_gpu)))
    return runs


def _by_category(runs: list[_Run], major: int) -> list[tuple[str, list[_Run]]]:
    grouped = [(cat, [r for r in runs if r.plugin.category == cat]) for cat in _CATEGORY_ORDER[major]]
    return [(cat, members) for cat, members in grouped if members]


def _serial(uuid: str) -> str:
    # Stable per GPU, shaped like the 13-digit board serials DCGM reports.
    return str(int(hashlib.sha256(uuid.encode()).hexdigest()[:15], 16) % 10**13).zfill(13)


# ---------------------------------------------------------------------------------------------
# JSON


def _json4(runs: list[_Run], gpu_uuids: Sequence[str], driver_version: str, version: str) -> dict[str, Any]:
    def shown(status: str) -> str:
        return "Fail" if status == "Warn" else status  # HelperDisplayDiagResult without DDR_DISPLAY_WARN

    categories = []
    for category, members in _by_category(runs, 4):
        tests = []
        for run in members:
            results = []
            for gpu, (status, found) in enumerate(run.per_gpu):
                entry: dict[str, Any] = {
                    "entity_group": "GPU",
                    "entity_group_id": 1,
                    "entity_id": gpu,
                    "status": shown(status),
                }
                if found:
                    entry["warnings"] = [f.to_json() for f in found]
                results.append(entry)
            tests.append(
                {"name": run.plugin.name4, "results": results, "test_summary": {"status": shown(run.result)}}
            )
        categories.append({"category": category, "tests": tests})
    entities = [
        {"device_id": DEVICE_ID, "entity_id": gpu, "serial_num": _serial(uuid)}
        for gpu, uuid in enumerate(gpu_uuids)
    ]
    return {
        "DCGM Diagnostic": {"test_categories": categories},
        "entity_groups": [{"entities": entities, "entity_group": "GPU", "entity_group_id": 1}],
        "metadata": {"Driver Version Detected": driver_version, "version": version},
    }


def _json3(runs: list[_Run], driver_version: str, version: str) -> dict[str, Any]:
    categories = []
    for category, members in _by_category(runs, 3):
        tests: list[dict[str, Any]] = []
        for run in members:
            if run.plugin.key == "software":
                # dcgmi 3.x reports deployment checks once for the group, without gpu_ids.
                tests.extend({"name": name, "results": [{"status": "Pass"}]} for name in _DEPLOYMENT_3X)
                continue
            results = []
            for gpu, (status, found) in enumerate(run.per_gpu):
                entry: dict[str, Any] = {"gpu_ids": str(gpu), "status": status}
                if found:
                    entry["warnings"] = [f.to_json() for f in found]
                results.append(entry)
            tests.append({"name": run.plugin.name3, "results": results})
        categories.append({"category": category, "tests": tests})
    return {
        "DCGM GPU Diagnostic": {
            "Driver Version Detected": driver_version,
            "test_categories": categories,
            "version": version,
        }
    }


def jsoncpp_styled(value: Any) -> str:
    """`value` laid out as jsoncpp's `Json::Value::toStyledString()` does (what dcgmi prints)."""
    out: list[str] = []
    _write(value, out, 0)
    return "".join(out) + "\n"


_RIGHT_MARGIN: Final = 74


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return json.dumps(str(value))


def _is_container(value: Any) -> bool:
    return isinstance(value, dict | list) and bool(value)


def _one_line(values: list[Any]) -> str | None:
    """jsoncpp's single-line form of a scalar array, or None when it goes multi-line."""
    if any(_is_container(v) for v in values):
        return None
    rendered = [_scalar(v) for v in values]
    # jsoncpp: 4 for "[ " + " ]", 2 per ", ", plus the values; at the right margin it breaks.
    if 4 + 2 * (len(rendered) - 1) + sum(map(len, rendered)) >= _RIGHT_MARGIN:
        return None
    return "[ " + ", ".join(rendered) + " ]"


def _write(value: Any, out: list[str], depth: int) -> None:
    """Write `value` at the current position; nested containers open on a fresh line."""
    pad = "\t" * depth
    if not _is_container(value):
        out.append(_scalar(value))
        return
    if isinstance(value, dict):
        out.append("{")
        items = sorted(value.items())  # jsoncpp objects are std::map: keys in byte order
        for i, (key, child) in enumerate(items):
            out.append(f"\n{pad}\t{json.dumps(key)} : ")
            if _is_container(child) and not (isinstance(child, list) and _one_line(child) is not None):
                out.append(f"\n{pad}\t")
            _write(child, out, depth + 1)
            if i < len(items) - 1:
                out.append(",")
        out.append(f"\n{pad}}}")
        return
    line = _one_line(value)
    if line is not None:
        out.append(line)
        return
    out.append("[")
    for i, child in enumerate(value):
        out.append(f"\n{pad}\t")
        _write(child, out, depth + 1)
        if i < len(value) - 1:
            out.append(",")
    out.append(f"\n{pad}]")


# ---------------------------------------------------------------------------------------------
# text table


def _row(name: str, info: str) -> str:
    return f"| {name[:_NAME_WIDTH]:<{_NAME_WIDTH}} | {info[:_INFO_WIDTH]:<{_INFO_WIDTH}} |"


def _wrapped(label: str, message: str) -> list[str]:
    chunks = [message[i : i + _WRAP] for i in range(0, len(message), _WRAP)] or [""]
    return [_row(label if i == 0 else "", chunk) for i, chunk in enumerate(chunks)]


def _metadata(version: str, gpu_count: int, driver_version: str) -> list[str]:
    return [
        _SECTIONS["Metadata"],
        _row("DCGM Version", version),
        _row("Driver Version Detected", driver_version),
        _row("GPU Device IDs Detected", ", ".join([DEVICE_ID] * gpu_count)),
    ]


def _text4(runs: list[_Run], gpu_count: int, driver_version: str, version: str) -> str:
    lines = [
        "Successfully ran diagnostic for group.",
        *_HEADER,
        *_metadata(version, gpu_count, driver_version),
    ]
    for category, members in _by_category(runs, 4):
        lines.append(_SECTIONS[category])
        for run in members:
            lines.append(_row(run.plugin.name4, run.result))  # the test line alone shows "Warn"
            for gpu, (status, found) in enumerate(run.per_gpu):
                lines.append(_row("", f"GPU{gpu}: {'Fail' if status == 'Warn' else status}"))
                for finding in found:
                    lines.extend(_wrapped(f"Warning: GPU{gpu}", finding.message))
    lines.append(_BORDER)
    return "\n".join(lines) + "\n"


def _text3(runs: list[_Run], gpu_count: int, driver_version: str, version: str) -> str:
    lines = [
        "Successfully ran diagnostic for group.",
        *_HEADER,
        *_metadata(version, gpu_count, driver_version),
    ]
    for category, members in _by_category(runs, 3):
        lines.append(_SECTIONS[category])
        for run in members:
            if run.plugin.key == "software":
                lines.extend(_row(name, "Pass") for name in _DEPLOYMENT_3X)
                continue
            groups = _status_groups(run)
            for i, group in enumerate(groups):
                lines.append(_row(run.plugin.name3 if i == 0 else "", group))
            for gpu, (_, found) in enumerate(run.per_gpu):
                for finding in found:
                    # 3.x names the GPU at the start of the message (see the ml-engineering sample).
                    lines.extend(_wrapped("Warning", f"GPU {gpu} {finding.message}"))
    lines.append(_BORDER)
    return "\n".join(lines) + "\n"


def _status_groups(run: _Run) -> list[str]:
    statuses = [status for status, _ in run.per_gpu]
    if all(s == "Pass" for s in statuses):
        return ["Pass - All"]
    groups = []
    for word in ("Pass", "Fail", "Warn"):
        gpus = [str(i) for i, s in enumerate(statuses) if s == word]
        if gpus:
            groups.append(f"{word} - {'GPUs' if len(gpus) > 1 else 'GPU'}: {', '.join(gpus)}")
    return groups
