"""Parser for DCGM diagnostics (`dcgmi diag`) output: JSON (3.x, 4.x) and the text table (3.0 to 4.x).

DCGM 4.2.3, `dcgmi diag -r 2` text table (NVIDIA/DCGM issue #253, abbreviated; the paste ends
without the table's closing border)::

    Successfully ran diagnostic for group.
    +---------------------------+------------------------------------------------+
    | Diagnostic                | Result                                         |
    +===========================+================================================+
    |-----  Metadata  ----------+------------------------------------------------|
    | DCGM Version              | 4.2.3                                          |
    | Driver Version Detected   | 570.148.08                                     |
    |-----  Deployment  --------+------------------------------------------------|
    | software                  | Pass                                           |
    |                           | GPU0: Pass                                     |
    +-----  Integration  -------+------------------------------------------------+
    | pcie                      | Fail                                           |
    | Warning                   | There was an internal error during the test:   |
    |                           | 'A child process (152) exited with non-zero s  |
    |                           | tatus 1' Check DCGM and system logs for error  |
    |                           | GPU0: Pass                                     |

DCGM 3.x, `dcgmi diag -r 2 -j` (microsoft/VirtualClient example, abbreviated)::

    {
        "DCGM GPU Diagnostic" :
        {
            "test_categories" : [ { "category" : "Hardware", "tests" : [ { "name" : "GPU Memory",
                "results" : [ { "gpu_ids" : "0", "status" : "Pass" } ] } ] } ]
        }
    }

DCGM 4.x `-j` puts results under `"DCGM Diagnostic"`, one per entity (`entity_group`, `entity_id`),
with `warnings[]` objects carrying DCGM's `error_id` / `error_category` / `error_severity`, a
`test_summary`, and `entity_groups` / `metadata` beside it (see the schema fixture).

Rules this parser keeps:

- Output that is empty, garbage, truncated, or of an unknown shape raises `ParseError`; an unknown
  status word raises too, so a renamed status can never read as a pass.
- A text table without its closing border is incomplete. Visible failures still stand (a cut can
  only hide more problems), but an incomplete table whose visible rows all pass raises: it proves
  nothing. JSON is complete by construction (a cut document does not decode).
- Every row of a result table is read or the table is unreadable: a row the parser does not
  understand (a garbled status, a GPU line it cannot read, a row outside any test) raises, so a
  damaged row can never drop out of the evidence. A table interrupted by other lines raises too.
- Bounded work, so no input is slow: a table line longer than dcgmi prints is refused; the
  `dcgmi diag -r N` line is looked for in the 8 lines above the table, in the first 256
  characters of each; JSON nested deeper than DCGM writes is refused; GPU indices are 1 to 4
  ASCII digits. Whatever the input, the parser raises `ParseError` and nothing else.
- A 3.x "Pass - All" row stands for every GPU the run listed under "GPU Device IDs Detected"; it
  is expanded to per-GPU results when that list is readable, else it names no GPU.
- DCGM 4.x prints a *warn* entity as "Fail" everywhere except the test's own text line
  (`Diag::HelperDisplayDiagResult` defaults to `DDR_NO_DISPLAY_WARN`). So in 4.x JSON an entity
  "Fail" whose every warning has severity MONITOR (1, "can perform workload, but needs to be
  monitored") reads as warn; in 4.x text, GPU lines under a test whose own line says "Warn" read
  as warn. A 4.x text test that both fails one GPU and warns another shows both as fail.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.dcgm import levels
from fleetval.errors import ParseError

_TOOL: Final = "dcgm"

# Limits that keep every input's cost linear (dcgmi's own output is far inside each).
MAX_INPUT_CHARS: Final = 16 * 1024 * 1024
MAX_TABLE_LINE: Final = 240  # dcgmi's table rows are 78 characters
MAX_COMMAND_LINE: Final = 256  # characters of a line above the table searched for `dcgmi diag -r N`
COMMAND_LINES_READ: Final = 8  # lines above the table searched (the command is right above it)
MAX_JSON_DEPTH: Final = 64  # dcgmi's JSON nests 8 deep
_GPU_ID: Final = r"(?:0|[1-9][0-9]{0,3})"  # an entity index as DCGM prints it: no sign, no leading 0
_GPU_ID_RE: Final = re.compile(rf"^{_GPU_ID}$", re.A)
_MAX_GPU_INDEX: Final = 9999

# DCGM's error categories (dcgm_errors.h, dcgmErrorCategory_t), as printed in `error_category`.
DCGM_ERROR_CATEGORIES: Final[dict[int, str]] = {
    0: "NONE",
    1: "PERF_THRESHOLD",
    2: "PERF_VIOLATION",
    3: "SOFTWARE_CONFIG",
    4: "SOFTWARE_LIBRARY",
    5: "SOFTWARE_XID",
    6: "SOFTWARE_CUDA",
    7: "SOFTWARE_EUD",
    8: "SOFTWARE_OTHER",
    9: "HARDWARE_THERMAL",
    10: "HARDWARE_MEMORY",
    11: "HARDWARE_NVLINK",
    12: "HARDWARE_NVSWITCH",
    13: "HARDWARE_PCIE",
    14: "HARDWARE_POWER",
    15: "HARDWARE_OTHER",
    16: "INTERNAL_OTHER",
}

# DCGM's error severities (dcgm_errors.h, dcgmErrorSeverity_t), as printed in `error_severity`.
DCGM_ERROR_SEVERITIES: Final[dict[int, str]] = {
    0: "NONE",
    1: "MONITOR",
    2: "ISOLATE",
    3: "UNKNOWN",
    4: "TRIAGE",
    5: "CONFIG",
    6: "RESET",
}

_SEVERITY_MONITOR: Final = "1"
_ERROR_ID_INTERNAL: Final = 44  # DCGM_FR_INTERNAL
_CATEGORY_INTERNAL: Final = "16"  # DCGM_FR_EC_INTERNAL_OTHER

_CATEGORY_CLASS: Final[dict[str, str]] = {
    "1": "compute",
    "2": "compute",
    "3": "config",
    "4": "software",
    "5": "other",
    "6": "software",
    "7": "software",
    "8": "software",
    "9": "thermal",
    "10": "memory",
    "11": "nvlink",
    "12": "nvlink",
    "13": "pcie",
    "14": "power",
    "15": "other",
    "16": "software",
}

# Keys are test names lower-cased with "_" read as " ", so 3.x and 4.x spellings share a row.
_NAME_CLASS: Final[dict[str, str]] = {
    "software": "software",
    "nvml library": "software",
    "cuda main library": "software",
    "graphics processes": "software",
    "denylist": "config",
    "persistence mode": "config",
    "environment variables": "config",
    "environmental variables": "config",
    "permissions and os blocks": "config",
    "permissions and os-related blocks": "config",
    "page retirement/row remap": "memory",
    "gpu memory": "memory",
    "memory": "memory",
    "memtest": "memory",
    "memory bandwidth": "memory",
    "pcie": "pcie",
    "nvbandwidth": "nvlink",
    "nvlink": "nvlink",
    "diagnostic": "compute",
    "targeted stress": "compute",
    "targeted power": "power",
    "pulse test": "power",
}

_NAME_CATEGORY: Final[dict[str, str]] = {
    "software": "Deployment",
    "error": "Deployment",
    "denylist": "Deployment",
    "nvml library": "Deployment",
    "cuda main library": "Deployment",
    "permissions and os blocks": "Deployment",
    "permissions and os-related blocks": "Deployment",
    "persistence mode": "Deployment",
    "environment variables": "Deployment",
    "environmental variables": "Deployment",
    "page retirement/row remap": "Deployment",
    "graphics processes": "Deployment",
    "inforom": "Deployment",
    "gpu memory": "Hardware",
    "memory": "Hardware",
    "diagnostic": "Hardware",
    "memtest": "Hardware",
    "eud test": "Hardware",
    "eud": "Hardware",
    "pcie": "Integration",
    "nvbandwidth": "Integration",
    "targeted stress": "Stress",
    "targeted power": "Stress",
    "memory bandwidth": "Stress",
    "pulse test": "Stress",
}

_KEYWORD_CLASS: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"internal error|child process", re.I), "software"),
    (re.compile(r"nvlink|nvswitch", re.I), "nvlink"),
    (re.compile(r"\bpcie?\b|replay", re.I), "pcie"),
    (re.compile(r"thermal|temperature|cooling", re.I), "thermal"),
    (re.compile(r"memory|\becc\b|row remap|page retire|\b[sd]be\b", re.I), "memory"),
    (re.compile(r"\bpower\b", re.I), "power"),
    (re.compile(r"persistence mode|environment variable|denylist|permission", re.I), "config"),
    (re.compile(r"\bcuda\b|\bnvml\b|librar", re.I), "software"),
)

_INTERNAL_RE: Final = re.compile(r"internal error|child process", re.I)

# DCGM's own words when the GPUs' profiling or diagnostic resources are held by someone else: a
# probe's host engine beside dcgm-exporter collecting profiling (DCP) metrics on the same GPUs. Not
# a node fault. Only strings found in DCGM's source (NVIDIA/DCGM v4.5.3, the same at v4.6.0):
# `dcgmlib/src/dcgm_errors.c` errorString() for DCGM_ST_PROFILING_MULTI_PASS, DCGM_ST_IN_USE and
# DCGM_ST_DIAG_ALREADY_RUNNING,
# and the status names of `dcgmlib/dcgm_structs.h`.
PROFILING_BUSY: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (
        re.compile(
            r"The requested profiling metrics cannot be collected in a single pass"
            r"|DCGM_ST_PROFILING_MULTI_PASS"
        ),
        "the profiling module could not collect its metrics in one pass (DCGM_ST_PROFILING_MULTI_PASS): "
        "another client, e.g. dcgm-exporter, holds profiling metrics on these GPUs",
    ),
    (
        re.compile(
            r"The requested operation could not be completed because the affected resource is in use"
            r"|DCGM_ST_IN_USE"
        ),
        "a DCGM resource was in use (DCGM_ST_IN_USE): another diagnostic or profiling client holds "
        "these GPUs",
    ),
    (
        re.compile(
            r"A diag instance is already running, cannot run a new diag until the current one finishes"
            r"|DCGM_ST_DIAG_ALREADY_RUNNING"
        ),
        "another DCGM diagnostic was running on these GPUs (DCGM_ST_DIAG_ALREADY_RUNNING)",
    ),
)


def profiling_busy(message: str) -> str:
    """Why `message` says DCGM's profiling/diagnostic resources were busy, or "" when it does not."""
    return next((why for pattern, why in PROFILING_BUSY if pattern.search(message)), "")


_STATUS_WORDS: Final[dict[str, str]] = {
    "pass": "pass",
    "passed": "pass",
    "fail": "fail",
    "failed": "fail",
    "error": "fail",
    "warn": "warn",
    "warning": "warn",
    "skip": "skip",
    "skipped": "skip",
    "not run": "skip",
    # 4.x prints Not Run as an empty cell (HelperDisplayDiagResult's default branch).
    "": "skip",
}
_RANK: Final[dict[str, int]] = {"skip": 0, "pass": 1, "warn": 2, "fail": 3}

_GPU_PREFIX_RE: Final = re.compile(rf"^GPU\s*({_GPU_ID})\b", re.A)
_JSON_START_RE: Final = re.compile(r"^[ \t]*\{", re.M)


@dataclass(frozen=True, slots=True)
class DcgmWarning:
    """One DCGM warning/error message, tied to a GPU index when DCGM ties it to one."""

    gpu: str | None
    message: str
    error_id: int | None
    error_category: str | None
    error_severity: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "message": self.message,
            "error_id": self.error_id,
            "error_category": self.error_category,
            "error_severity": self.error_severity,
        }


@dataclass(frozen=True, slots=True)
class DcgmTest:
    """One DCGM test (plugin) with its per-GPU results, as DCGM names and groups it."""

    name: str
    category: str
    failure_class: str
    result: str
    gpus: dict[str, str]
    warnings: tuple[DcgmWarning, ...]
    internal_error: bool
    # Why the result came from DCGM's resources being busy (PROFILING_BUSY), "" when it did not:
    # every serious finding of the test says so (or is internal) and at least one says busy.
    busy: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "category": self.category,
            "result": self.result,
            "gpus": dict(self.gpus),
            "warnings": [w.to_json() for w in self.warnings],
            "failure_class": self.failure_class,
            "internal_error": self.internal_error,
            **({"busy": self.busy} if self.busy else {}),
        }


@dataclass(frozen=True, slots=True)
class DcgmReport:
    """A whole `dcgmi diag` run.

    `complete` (additive) is False for a text table cut before its closing border; such a report
    exists only when a visible row already fails or warns. `gpu_count` (additive) is the number of
    GPUs the report says the run had (4.x JSON `entity_groups`, the text table's "GPU Device IDs
    Detected"), None when it does not say.
    """

    format: str
    dcgm_version: str | None
    driver_version: str | None
    level: int | None
    overall: str
    tests: tuple[DcgmTest, ...]
    gpu_uuids: dict[str, str]
    complete: bool = True
    gpu_count: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "dcgm_version": self.dcgm_version,
            "driver_version": self.driver_version,
            "level": self.level,
            "overall": self.overall,
            "tests": [t.to_json() for t in self.tests],
            "format": self.format,
            "gpu_uuids": dict(self.gpu_uuids),
            "complete": self.complete,
        }


def parse_dcgm(text: str) -> DcgmReport:
    """Parse `dcgmi diag` output (JSON or text table, DCGM 3.x or 4.x) into a `DcgmReport`.

    Raises `ParseError` for empty or garbage input, truncated JSON, a table with no test rows,
    an incomplete table that would otherwise pass, JSON of an unknown shape, or an unknown status.
    """
    if len(text) > MAX_INPUT_CHARS:
        raise ParseError(
            _TOOL, f"output of {len(text)} characters is larger than any DCGM report", text[:200]
        )
    text = text.replace("\r\n", "\n")
    if not text.strip():
        raise ParseError(_TOOL, "empty output")
    table_at = _first_table_offset(text)
    # A JSON document opens a line; anything before it (dcgmi/nvvs "WARNING:" lines) is dropped.
    brace = _JSON_START_RE.search(text)
    brace_at = text.index("{", brace.start()) if brace else -1
    if table_at is not None and (brace_at < 0 or table_at < brace_at):
        return _parse_text(text)
    if brace_at >= 0:
        return _parse_json(text, brace_at)
    raise ParseError(_TOOL, "no DCGM result table or JSON document found", text.strip()[:200])


# ---------------------------------------------------------------------------------------------
# shared helpers


def _key(name: str) -> str:
    return name.strip().lower().replace("_", " ")


def _clean(value: str) -> str:
    """`value` safe to store and print: no NUL, no lone surrogate (JSON escapes can carry both)."""
    return value.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def _status(word: str, where: str) -> str:
    mapped = _STATUS_WORDS.get(word.strip().lower())
    if mapped is None:
        raise ParseError(_TOOL, f"unknown status {word!r} in {where}", word)
    return mapped


def _worst(results: list[str]) -> str:
    """Worst of fail > warn > pass; empty or all-skip gives skip."""
    return max(results, key=_RANK.__getitem__, default="skip")


def _gpu_from_message(message: str) -> str | None:
    m = _GPU_PREFIX_RE.match(message)
    return m.group(1) if m else None


def _is_internal(w: DcgmWarning) -> bool:
    return (
        w.error_id == _ERROR_ID_INTERNAL
        or w.error_category == _CATEGORY_INTERNAL
        or bool(_INTERNAL_RE.search(w.message))
    )


def _warning_class(w: DcgmWarning) -> str | None:
    if w.error_category is not None and w.error_category in _CATEGORY_CLASS:
        return _CATEGORY_CLASS[w.error_category]
    for pattern, cls in _KEYWORD_CLASS:
        if pattern.search(w.message):
            return cls
    return None


def _is_monitor(w: DcgmWarning) -> bool:
    # Text tables carry no severity; every thermal code in DCGM's error table is MONITOR.
    if w.error_severity is not None:
        return w.error_severity == _SEVERITY_MONITOR
    return _warning_class(w) == "thermal"


def _build_test(
    name: str, category: str | None, result: str, gpus: dict[str, str], warnings: list[DcgmWarning]
) -> DcgmTest:
    key = _key(name)
    internal = False
    busy = ""
    failure_class = _NAME_CLASS.get(key, "other")
    if result in ("fail", "warn") and warnings:
        # Warnings on the GPUs that carry the test's result, plus those tied to no GPU, decide.
        decisive = [w for w in warnings if w.gpu is None or gpus.get(w.gpu, result) == result]
        serious = [w for w in decisive if not _is_monitor(w)]
        internal = any(_is_internal(w) for w in decisive) and all(_is_internal(w) for w in serious)
        reasons = [profiling_busy(w.message) for w in serious]
        if any(reasons) and all(r or _is_internal(w) for r, w in zip(reasons, serious, strict=True)):
            busy = next(r for r in reasons if r)
            failure_class = "software"
        elif internal:
            failure_class = "software"
        else:
            # A fail is explained by its non-MONITOR findings (a thermal note beside a memory
            # failure does not make it thermal); a warn by whatever was found.
            pool = serious if result == "fail" else decisive
            found = next((c for c in map(_warning_class, pool) if c is not None), None)
            if found is not None:
                failure_class = found
            elif key == "error":
                failure_class = "software"
    return DcgmTest(
        name=name,
        category=category or _NAME_CATEGORY.get(key, "Custom"),
        failure_class=failure_class,
        result=result,
        gpus=gpus,
        warnings=tuple(warnings),
        internal_error=internal,
        busy=busy,
    )


def _report(
    fmt: str,
    version: str | None,
    driver: str | None,
    level: int | None,
    tests: list[DcgmTest],
    uuids: dict[str, str],
    complete: bool,
    excerpt: str,
    gpu_count: int | None = None,
) -> DcgmReport:
    if not tests:
        raise ParseError(_TOOL, f"no test results in {fmt} output", excerpt)
    overall = _worst([t.result for t in tests])
    if not complete and overall in ("pass", "skip"):
        raise ParseError(
            _TOOL,
            "result table ends without its closing border (truncated); visible rows cannot prove a pass",
            excerpt,
        )
    frozen = tuple(tests)
    if level is None and complete:
        level = levels.stated_level({t.name for t in frozen})
    return DcgmReport(
        format=fmt,
        dcgm_version=version,
        driver_version=driver,
        level=level,
        overall=overall,
        tests=frozen,
        gpu_uuids=uuids,
        complete=complete,
        gpu_count=gpu_count,
    )


# ---------------------------------------------------------------------------------------------
# JSON (3.x "DCGM GPU Diagnostic", 4.x "DCGM Diagnostic")


def _parse_json(text: str, start: int) -> DcgmReport:
    excerpt = text[start : start + 200]
    try:
        doc, end = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise ParseError(_TOOL, f"invalid or truncated JSON: {exc.msg} at offset {exc.pos}", excerpt) from exc
    except RecursionError as exc:
        raise ParseError(_TOOL, "JSON nested deeper than the decoder follows", excerpt) from exc
    except ValueError as exc:  # e.g. an integer of more digits than int() converts
        raise ParseError(_TOOL, f"JSON value that cannot be read: {str(exc)[:100]}", excerpt) from exc
    if _deeper_than(doc, MAX_JSON_DEPTH):
        raise ParseError(_TOOL, f"JSON nested deeper than {MAX_JSON_DEPTH} levels (dcgmi writes 8)", excerpt)
    rest = text[end:].lstrip()
    # Trailing log lines are fine (kubectl exec appends its own); more JSON means a fragment.
    if rest[:1] in {",", "]", "}", "[", "{", '"'} and rest:
        raise ParseError(_TOOL, "JSON fragment: the document continues after the decoded object", excerpt)
    if not isinstance(doc, dict):
        raise ParseError(_TOOL, "unknown JSON shape: top level is not an object", excerpt)
    if "DCGM GPU Diagnostic" in doc:
        fmt, body = "json3", doc["DCGM GPU Diagnostic"]
    elif "DCGM Diagnostic" in doc:
        fmt, body = "json4", doc["DCGM Diagnostic"]
    else:
        raise ParseError(_TOOL, f"unknown JSON shape: top-level keys {sorted(doc)[:5]!r}", excerpt)
    if not isinstance(body, dict):
        raise ParseError(_TOOL, "unknown JSON shape: diagnostic body is not an object", excerpt)

    categories = body.get("test_categories")
    if categories is None:
        runtime_error = body.get("runtime_error")
        if runtime_error:
            message = _clean(str(runtime_error))[:300]
            raise ParseError(_TOOL, f"DCGM reported a runtime error: {message}", message)
        raise ParseError(_TOOL, "unknown JSON shape: no test_categories", excerpt)
    tests = [
        _json_test(test, category, fmt)
        for category, test in _json_category_tests(_as_list(categories, "test_categories"))
    ]

    metadata = doc.get("metadata")
    meta = metadata if isinstance(metadata, dict) else {}
    version = _opt_str(meta.get("version", body.get("version")))
    driver = _opt_str(meta.get("Driver Version Detected", body.get("Driver Version Detected")))
    return _report(fmt, version, driver, None, tests, _json_uuids(doc), True, excerpt, _json_gpu_count(doc))


def _deeper_than(doc: Any, limit: int) -> bool:
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(value, dict):
            stack.extend((child, depth + 1) for child in value.values())
        elif isinstance(value, list):
            stack.extend((child, depth + 1) for child in value)
    return False


def _as_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ParseError(_TOOL, f"unknown JSON shape: {what} is not an array", repr(value)[:200])
    return value


def _as_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ParseError(_TOOL, f"unknown JSON shape: {what} is not an object", repr(value)[:200])
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else _clean(str(value))


def _json_category_tests(categories: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for raw in categories:
        category = _as_dict(raw, "a test category")
        name = _clean(str(category.get("category", "Custom")))
        # DCGM 3.1's own writer leaves literal nulls between tests; its reader skips them.
        out.extend(
            (name, _as_dict(test, "a test"))
            for test in _as_list(category.get("tests"), "tests")
            if test is not None
        )
    return out


def _json_status(entry: dict[str, Any], where: str) -> str:
    # JSON states every status in words (4.x drops Not Run entries), so a missing one is damage.
    raw = entry.get("status")
    if not isinstance(raw, str) or not raw.strip():
        raise ParseError(_TOOL, f"missing status in {where}", repr(entry)[:200])
    return _status(raw, where)


def _entity_index(value: Any) -> str | None:
    """A GPU/entity index as DCGM writes it (a small non-negative integer), else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_GPU_INDEX:
        return None
    return str(value)


def _json_gpu_ids(result: dict[str, Any], fmt: str) -> list[str] | None:
    """GPU indices a result covers; None when it names no GPU (3.x Deployment rows, CPU entities)."""
    if "entity_id" in result or fmt == "json4":
        entity = _entity_index(result.get("entity_id"))
        if entity is None:
            raise ParseError(
                _TOOL, "unknown JSON shape: entity_id is not an entity index", repr(result)[:200]
            )
        group = result.get("entity_group")
        if not isinstance(group, str):
            # Which kind of entity the result is for decides whether it is GPU evidence at all.
            raise ParseError(_TOOL, "unknown JSON shape: a result has an entity_id but no entity_group")
        return [entity] if group == "GPU" else None
    raw = result.get("gpu_ids", result.get("gpu_id"))
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ParseError(
            _TOOL, "unknown JSON shape: gpu_ids is neither a string nor an integer", repr(raw)[:200]
        )
    ids = [part.strip() for part in str(raw).split(",")]
    for gid in ids:
        if not _GPU_ID_RE.match(gid):
            raise ParseError(_TOOL, f"unknown GPU id {gid[:20]!r} in gpu_ids", repr(raw)[:200])
    return ids


def _error_id(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 1_000_000 else None
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,6}", value, re.A):
        return int(value)
    return None


def _json_warnings(result: dict[str, Any], gpu: str | None) -> list[DcgmWarning]:
    out: list[DcgmWarning] = []
    for raw in _as_list(result.get("warnings", []), "warnings"):
        if raw is None:
            continue
        if isinstance(raw, str):
            message = _clean(raw)
            out.append(DcgmWarning(gpu or _gpu_from_message(message), message, None, None, None))
            continue
        item = _as_dict(raw, "a warning")
        message = _clean(str(item.get("warning", "")))
        out.append(
            DcgmWarning(
                gpu=gpu or _gpu_from_message(message),
                message=message,
                error_id=_error_id(item.get("error_id")),
                error_category=_opt_str(item.get("error_category")),
                error_severity=_opt_str(item.get("error_severity")),
            )
        )
    return out


def _json_test(test: dict[str, Any], category: str, fmt: str) -> DcgmTest:
    raw_name = test.get("name")
    if not isinstance(raw_name, str) or not raw_name.strip():
        raise ParseError(_TOOL, "unknown JSON shape: a test has no name", repr(test)[:200])
    name = _clean(raw_name)
    gpus: dict[str, str] = {}
    loose: list[str] = []
    warnings: list[DcgmWarning] = []
    # DCGM writes `results` for every test, and 4.x a `test_summary` too (its own schema requires
    # both): a test without them lost its evidence, it did not skip.
    if "results" not in test or (fmt == "json4" and "test_summary" not in test):
        raise ParseError(_TOOL, f"unknown JSON shape: test {name!r} has no results or test_summary")
    for raw in _as_list(test["results"], f"results of {name!r}"):
        if raw is None:
            continue
        result = _as_dict(raw, f"a result of {name!r}")
        status = _json_status(result, f"test {name!r}")
        ids = _json_gpu_ids(result, fmt)
        own = _json_warnings(result, ids[0] if ids and len(ids) == 1 else None)
        warnings.extend(own)
        if (
            fmt == "json4"
            and status == "fail"
            and own
            and all(w.error_severity == _SEVERITY_MONITOR for w in own)
        ):
            status = "warn"  # 4.x prints a warn entity as "Fail"; see the module docstring
        if ids:
            for gid in ids:
                gpus[gid] = _worst([gpus.get(gid, "skip"), status])
        else:
            loose.append(status)

    evidence = [*gpus.values(), *loose]
    summary = test.get("test_summary")
    if summary is None:
        if not evidence:
            raise ParseError(_TOOL, f"test {name!r} has no result", repr(test)[:200])
        result_word = _worst(evidence)
    else:
        summary = _as_dict(summary, f"test_summary of {name!r}")
        stated = _json_status(summary, f"test_summary of {name!r}")
        own = _json_warnings(summary, None)
        warnings.extend(own)
        implied = ["warn" if w.error_severity == _SEVERITY_MONITOR else "fail" for w in own]
        if (
            fmt == "json4"
            and stated == "fail"
            and "fail" not in evidence + implied
            and "warn" in evidence + implied
        ):
            stated = "warn"  # only MONITOR findings behind a 4.x "Fail"
        result_word = _worst([stated, *evidence, *implied])
    return _build_test(name, category, result_word, gpus, warnings)


def _gpu_entities(doc: dict[str, Any]) -> list[dict[str, Any]]:
    groups = doc.get("entity_groups")
    out: list[dict[str, Any]] = []
    for group in groups if isinstance(groups, list) else []:
        if isinstance(group, dict) and group.get("entity_group") == "GPU":
            entities = group.get("entities")
            out.extend(e for e in (entities if isinstance(entities, list) else []) if isinstance(e, dict))
    return out


def _json_uuids(doc: dict[str, Any]) -> dict[str, str]:
    # 4.2's writer emits entity_id / device_id / serial_num only; a UUID key is read if one appears.
    uuids: dict[str, str] = {}
    for entity in _gpu_entities(doc):
        index = _entity_index(entity.get("entity_id"))
        uuid = entity.get("uuid", entity.get("gpu_uuid"))
        if index is not None and isinstance(uuid, str) and uuid:
            uuids[index] = _clean(uuid)
    return uuids


def _json_gpu_count(doc: dict[str, Any]) -> int | None:
    """How many GPUs 4.x lists under entity_groups; None without that list (3.x) or with one that
    does not read as distinct entity indices."""
    if not isinstance(doc.get("entity_groups"), list):
        return None
    indices = [_entity_index(entity.get("entity_id")) for entity in _gpu_entities(doc)]
    if not indices or None in indices or len(set(indices)) != len(indices):
        return None
    return len(indices)


# ---------------------------------------------------------------------------------------------
# text table (3.0.x no Metadata; 3.3.x Metadata; 4.x lower-case names, "GPU0: Pass" lines)

_TABLE_LINE_RE: Final = re.compile(r"^[|+][-=| ]")
_FOOTER_RE: Final = re.compile(r"^\+-{3,}\+-{3,}\+\s*$")
_RULE_RE: Final = re.compile(r"^\+=+\+=+\+\s*$")
_SECTION_RE: Final = re.compile(r"^[|+]-{3,}\s+(\S(?:.*?\S)?)\s+-+\+-+[|+]\s*$")
_GPU_LINE_RE: Final = re.compile(rf"^(GPU|CPU)({_GPU_ID}):\s*(Pass|Fail|Warn|Skip|Not Run)?$", re.I | re.A)
_GROUP_RE: Final = re.compile(
    rf"^(Pass|Fail|Warn|Skip|Not Run)\s*-\s*(?:(All)|GPUs?:\s*({_GPU_ID}(?:\s*,\s*{_GPU_ID})*))$", re.I | re.A
)
# What a GPU line ("GPU5: ...") or a status group ("... - GPUs: ...") still looks like when its status
# is damaged. Messages name a GPU as "GPU 5", so a wrapped message row does not start like this.
_RESULT_SHAPE_RE: Final = re.compile(r"^(?:[GC]PU[0-9]+\s*:|\S+\s+-\s+(?:All\b|GPUs?\s*:))", re.I | re.A)
_LABEL_RE: Final = re.compile(rf"^(Warning|Info)(?::\s*(GPU|CPU)\s*({_GPU_ID}))?$", re.I | re.A)
# 3.x prints the diagnostic's return code under a "Warn - All" row (dcgmi Diag.cpp).
_CODE_RE: Final = re.compile(r"^Code: \([0-9]{1,20}\)$", re.A)
_DEVICE_ID_RE: Final = re.compile(r"^[0-9a-fA-F]{4}$", re.A)
_SUITE_LEVELS: Final[dict[str, int]] = {"quick": 1, "short": 1, "medium": 2, "long": 3, "xlong": 4}

# dcgmi's layout: "| " + name (25) + " | " + info (46) + " |"; messages wrap every 45 characters.
_NAME_END: Final = 28
_INFO_START: Final = 30
_INFO_END: Final = 76
_WRAP: Final = 45


@dataclass(slots=True)
class _TextTest:
    name: str
    category: str | None
    stated: str | None = None
    groups: list[str] = field(default_factory=list)
    gpus: dict[str, str] = field(default_factory=dict)
    notes: list[tuple[str | None, list[str]]] = field(default_factory=list)


def _first_table_offset(text: str) -> int | None:
    offset = 0
    for line in text.split("\n"):
        if _TABLE_LINE_RE.match(line):
            return offset
        offset += len(line) + 1
    return None


def _stated_level(lines: list[str]) -> int | None:
    """The level of a `dcgmi diag -r N` command line above the table (a paste's shell prompt).

    Only the last COMMAND_LINES_READ lines are read, and of each only its first MAX_COMMAND_LINE
    characters, as words: no pattern runs over an arbitrarily long line."""
    for line in lines[-COMMAND_LINES_READ:]:
        words = line[:MAX_COMMAND_LINE].split()
        for i in range(len(words) - 1):
            if words[i].rsplit("/", 1)[-1] == "dcgmi" and words[i + 1] == "diag":
                level = _level_option(words[i + 2 :])
                if level is not None:
                    return level
    return None


def _level_option(words: list[str]) -> int | None:
    for i, word in enumerate(words):
        if word in ("-r", "--run") and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith("--run="):
            value = word.removeprefix("--run=")
        elif word.startswith("-r") and not word.startswith("--") and len(word) > 2:
            value = word[2:]
        else:
            continue
        value = value.lower()
        return int(value) if value in ("1", "2", "3", "4") else _SUITE_LEVELS.get(value)
    return None


def _cells(number: int, line: str) -> tuple[str, str]:
    """(name, info cell) of a data row; a row with more than dcgmi's two cells is unreadable."""
    if len(line) > _NAME_END and line[_NAME_END] == "|":
        name, cell, rest = line[1:_NAME_END].strip(), line[_INFO_START:_INFO_END], line[_INFO_END:]
        if rest.strip() not in ("", "|"):
            raise ParseError(_TOOL, f"line {number} of the result table has text past its right border", line)
        return name, cell
    parts = line.split("|")
    if len(parts) < 3 or len(parts) > 4 or (len(parts) == 4 and parts[3].strip()):
        raise ParseError(_TOOL, f"line {number} of the result table is not a two-cell row", line)
    return parts[1].strip(), parts[2][1:]


def _device_count(info: str) -> int | None:
    """GPUs in "GPU Device IDs Detected" (one PCI device id per GPU); None when it does not read so.

    dcgmi cuts a long list at the cell's width between ids, which can only undercount."""
    ids = [part.strip() for part in info.split(",")]
    return len(ids) if all(_DEVICE_ID_RE.match(i) for i in ids) else None


@dataclass(slots=True)
class _TableReader:
    """Reads a dcgmi result table row by row; every row is understood or the table is unreadable."""

    version: str | None = None
    driver: str | None = None
    gpu_count: int | None = None
    section: str | None = None
    tests: list[_TextTest] = field(default_factory=list)
    current: _TextTest | None = None
    block: list[str] | None = None  # the message that blank-name rows continue
    seen_rows: bool = False
    closed: bool = False
    ended_at: int | None = None  # the first line after the table that is not part of it

    def read(self, number: int, line: str) -> None:
        if not _TABLE_LINE_RE.match(line):
            if self.ended_at is None:
                self.ended_at = number
            return
        if self.ended_at is not None:
            # A table with other lines inside it lost rows, or is two tables: neither is one run.
            raise ParseError(
                _TOOL,
                f"the result table is interrupted at line {self.ended_at} and resumes at line {number}",
                line,
            )
        if len(line) > MAX_TABLE_LINE:
            raise ParseError(
                _TOOL, f"line {number} is {len(line)} characters long; dcgmi's table rows are 78", line[:100]
            )
        if _FOOTER_RE.match(line):
            self.closed = self.seen_rows
            return
        if _RULE_RE.match(line):
            return
        section = _SECTION_RE.match(line)
        if section:
            self.section, self.current, self.block = section.group(1), None, None
            return
        if not line.startswith("|"):
            raise ParseError(
                _TOOL, f"line {number} of the result table is a frame line dcgmi does not print", line
            )
        name, cell = _cells(number, line)
        info = cell.strip()
        if name == "Diagnostic" and info == "Result":
            return
        self.seen_rows, self.closed = True, False
        if self.section == "Metadata":
            self._metadata_row(name, info)
        elif name:
            self._named_row(name, cell, info)
        else:
            self._unnamed_row(cell, info)

    def _metadata_row(self, name: str, info: str) -> None:
        if name == "DCGM Version":
            self.version = info or None
        elif name == "Driver Version Detected":
            self.driver = info or None
        elif name == "GPU Device IDs Detected":
            self.gpu_count = _device_count(info)
        elif _looks_like_result(info):
            # A test row read as metadata (its section line lost) would vanish from the evidence.
            raise ParseError(_TOOL, f"a test result inside the Metadata section: {name!r}", info)

    def _named_row(self, name: str, cell: str, info: str) -> None:
        label = _LABEL_RE.match(name)
        if label:
            if label.group(1).lower() == "info":
                self.block = []  # verbose Info text is not evidence; swallow its continuation rows
                return
            if self.current is None:
                raise ParseError(_TOOL, "a Warning row outside any test", info)
            gpu = label.group(3) if (label.group(2) or "").upper() == "GPU" else None
            self.block = [cell[:_WRAP]]
            self.current.notes.append((gpu, self.block))
            return
        self.current = _TextTest(name=name, category=self.section)
        self.tests.append(self.current)
        if name == "Error":
            # An "Error" row replaces a test's result with DCGM's message.
            self.current.stated, self.block = "fail", [cell[:_WRAP]]
            self.current.notes.append((None, self.block))
        else:
            self.block = None
            _apply_result_cell(self.current, info)

    def _unnamed_row(self, cell: str, info: str) -> None:
        if not info:
            return  # an empty row carries nothing
        gpu_line = _GPU_LINE_RE.match(info)
        if gpu_line or _GROUP_RE.match(info):
            if self.current is None:
                raise ParseError(_TOOL, "a result row outside any test", info)
            self.block = None
            if gpu_line is None:
                _apply_result_cell(self.current, info)
            elif gpu_line.group(1).upper() == "GPU":
                status = _status(gpu_line.group(3) or "", f"test {self.current.name!r}")
                gpu = gpu_line.group(2)
                self.current.gpus[gpu] = _worst([self.current.gpus.get(gpu, "skip"), status])
            return
        where = f"test {self.current.name!r}" if self.current else "the result table"
        if _RESULT_SHAPE_RE.match(info):
            raise ParseError(_TOOL, f"unreadable result row in {where}", info)
        if self.block is not None:
            self.block.append(cell[:_WRAP])
        elif not _CODE_RE.match(info):
            raise ParseError(_TOOL, f"unrecognised row in {where}", info)


def _looks_like_result(info: str) -> bool:
    return bool(info) and (info.lower() in _STATUS_WORDS or bool(_GROUP_RE.match(info)))


def _parse_text(text: str) -> DcgmReport:
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if _TABLE_LINE_RE.match(line))
    reader = _TableReader()
    for number, line in enumerate(lines[start:], start + 1):
        reader.read(number, line)
    built = [_finish_text_test(t, reader.gpu_count) for t in reader.tests]
    excerpt = "\n".join(lines[-6:])[-200:]
    return _report(
        "text",
        reader.version,
        reader.driver,
        _stated_level(lines[:start]),
        built,
        {},
        reader.closed,
        excerpt,
        reader.gpu_count,
    )


def _apply_result_cell(test: _TextTest, info: str) -> None:
    group = _GROUP_RE.match(info)
    if group is None:
        test.stated = _status(info, f"test {test.name!r}")
        return
    status = _status(group.group(1), f"test {test.name!r}")
    if group.group(2):
        test.groups.append(status)
    else:
        for gid in re.split(r"\s*,\s*", group.group(3)):
            test.gpus[gid] = _worst([test.gpus.get(gid, "skip"), status])


def _finish_text_test(test: _TextTest, gpu_count: int | None) -> DcgmTest:
    warnings = []
    for gpu, chunks in test.notes:
        message = "".join(chunks).strip()
        warnings.append(DcgmWarning(gpu or _gpu_from_message(message), message, None, None, None))
    gpus = dict(test.gpus)
    if gpu_count is not None:
        # "<Status> - All": every GPU of the run had that status (dcgmi Diag.cpp HelperDisplayGpuResults).
        for status in test.groups:
            for gid in map(str, range(gpu_count)):
                gpus[gid] = _worst([gpus.get(gid, "skip"), status])
    if test.name == "Error":
        for w in warnings:
            if w.gpu is not None:
                gpus[w.gpu] = "fail"
    if test.stated == "warn":
        # 4.x prints a warn entity as "Fail" under a test line that says "Warn".
        gpus = {gid: "warn" if st == "fail" else st for gid, st in gpus.items()}
    stated = [test.stated] if test.stated is not None else []
    result = _worst([*stated, *test.groups, *gpus.values()])
    return _build_test(test.name, test.category, result, gpus, warnings)
