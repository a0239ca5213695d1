"""Reading Kueue Workloads as people and tools hand them over: an object (YAML or JSON, v1beta2,
v1beta1 or the 2022 v1alpha2 shape, possibly an excerpt with `...` elisions) or the text of
`kubectl describe workload`. Both become one shape — a Workload mapping with `status.conditions`
— that `reasons.waiting_reason` and the judge read.

v1alpha2 had no QuotaReserved condition: its `Admitted=False` played that role ("workload didn't
fit"), so it is read as QuotaReserved as well. Pure; bad input raises ParseError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

import yaml

from fleetval.errors import ParseError

MAX_CHARS: Final = 4 * 1024 * 1024
MAX_DEPTH: Final = 64
_ELISION: Final = re.compile(r"^\s*(\.\.\.|…)\s*$")
_DESCRIBE_KEY: Final = re.compile(r"^(?P<indent> *)(?P<key>[A-Z][A-Za-z ]*):(?:\s+(?P<value>.*?))?\s*$")
_CONDITION_FIELDS: Final = {
    "Last Probe Time": "lastProbeTime",
    "Last Transition Time": "lastTransitionTime",
    "Message": "message",
    "Reason": "reason",
    "Status": "status",
    "Type": "type",
}


def parse_workload(text: str) -> dict[str, Any]:
    """A Workload from an object's YAML/JSON or from `kubectl describe workload` output."""
    if len(text) > MAX_CHARS:
        raise ParseError("kueue", f"a Workload of {len(text)} characters is over the {MAX_CHARS} limit")
    if "\x00" in text:
        raise ParseError("kueue", "binary data, not a Workload")
    if _bracket_depth(text) > MAX_DEPTH:  # the YAML and JSON loaders recurse per level
        raise ParseError("kueue", f"nested deeper than {MAX_DEPTH} levels: not a Workload")
    if re.search(r"^(Status|Events):\s*$", text, re.MULTILINE) or re.search(
        r"^Name:\s+\S", text, re.MULTILINE
    ):
        return normalized(_from_describe(text))
    kept = "\n".join(line for line in text.splitlines() if not _ELISION.match(line))
    try:
        data = json.loads(kept) if kept.lstrip().startswith("{") else yaml.safe_load(kept)
    except (ValueError, yaml.YAMLError, RecursionError) as exc:
        raise ParseError("kueue", f"not a Workload object: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ParseError("kueue", "not a Workload object: expected a mapping")
    if data.get("kind") not in (None, "Workload"):
        raise ParseError("kueue", f"not a Workload object: kind {data.get('kind')!r}")
    return normalized(data)


def normalized(data: Mapping[str, Any]) -> dict[str, Any]:
    """Conditions as a list of string-valued mappings; v1alpha2's Admitted read as QuotaReserved."""
    status = data.get("status")
    for key in ("status", "spec", "metadata"):
        if data.get(key) is not None and not isinstance(data.get(key), dict):
            raise ParseError("kueue", f"{key}: expected a mapping")
    conditions = (status or {}).get("conditions") or []
    if not isinstance(conditions, list) or not all(isinstance(c, dict) for c in conditions):
        raise ParseError("kueue", "status.conditions: expected a list of conditions")
    clean = []
    for i, c in enumerate(conditions):
        if not isinstance(c.get("type"), str) or c.get("status") not in ("True", "False", "Unknown"):
            raise ParseError(
                "kueue", f"status.conditions[{i}]: a condition needs a type and a True/False status"
            )
        clean.append({k: (v if isinstance(v, str) else str(v)) for k, v in c.items() if v is not None})
    api_version = str(data.get("apiVersion") or "")
    types = {c["type"] for c in clean}
    if api_version.endswith("/v1alpha2") and "QuotaReserved" not in types:
        clean += [
            {**c, "type": "QuotaReserved"}
            for c in clean
            if c["type"] == "Admitted" and c["status"] == "False"
        ]
    out = dict(data)
    out["status"] = {**(status or {}), "conditions": clean}
    return out


def _from_describe(text: str) -> dict[str, Any]:
    """The fields of `kubectl describe workload` the waiting reason needs: name, namespace, API
    version, spec.active, the conditions, and the requeue state."""
    obj: dict[str, Any] = {"kind": "Workload", "metadata": {}, "spec": {}, "status": {"conditions": []}}
    conditions: list[dict[str, str]] = obj["status"]["conditions"]
    section: list[tuple[int, str]] = []  # (indent, key) of the open blocks
    current: dict[str, str] | None = None
    lines = text.splitlines()
    events_at = next((i for i, line in enumerate(lines) if line.rstrip() == "Events:"), len(lines))
    obj["events"] = _events_table(lines[events_at + 1 :])
    for line in lines[:events_at]:
        if _ELISION.match(line) or not line.strip():
            continue
        match = _DESCRIBE_KEY.match(line)
        if match is None:
            if current is not None and "message" in current and line.startswith(" " * 6):
                current["message"] += " " + line.strip()  # a wrapped message
            continue
        indent, key, value = len(match["indent"]), match["key"].strip(), (match["value"] or "").strip()
        while section and section[-1][0] >= indent:
            section.pop()
        path = [k for _, k in section]
        if not value:
            section.append((indent, key))
            if path[-1:] == ["Conditions"] or key == "Conditions":
                current = None
            continue
        if indent == 0 and key == "Name":
            obj["metadata"]["name"] = value
        elif indent == 0 and key == "Namespace":
            obj["metadata"]["namespace"] = value
        elif indent == 0 and key == "API Version":
            obj["apiVersion"] = value
        elif path[:1] == ["Spec"] and key == "Active":
            obj["spec"]["active"] = value.lower() == "true"
        elif path[:1] == ["Status"] and "Requeue State" in path and key in ("Count", "Requeue At"):
            state = obj["status"].setdefault("requeueState", {})
            state["count" if key == "Count" else "requeueAt"] = int(value) if key == "Count" else value
        elif path[-1:] == ["Conditions"] and key in _CONDITION_FIELDS:
            field = _CONDITION_FIELDS[key]
            if current is None or field in current:
                current = {}
                conditions.append(current)
            current[field] = value
    if not conditions and "name" not in obj["metadata"] and not obj["events"]:
        raise ParseError("kueue", "no Workload in the describe output (no Name, no conditions)")
    return obj


def _events_table(lines: list[str]) -> list[dict[str, str]]:
    """`kubectl describe`'s Events table (Type, Reason, Age, From, Message columns), oldest first;
    "<none>" is no events."""
    header = next((i for i, line in enumerate(lines) if line.split()[:2] == ["Type", "Reason"]), None)
    if header is None:
        return []
    columns = [(m.group(), m.start()) for m in re.finditer(r"\S+", lines[header])]
    events = []
    for line in lines[header + 1 :]:
        if not line.strip() or set(line.strip()) <= {"-", " "}:
            continue
        row = {}
        for i, (name, start) in enumerate(columns):
            end = columns[i + 1][1] if i + 1 < len(columns) else None
            row[name.lower()] = line[start:end].strip()
        events.append(row)
    return events


def _bracket_depth(text: str) -> int:
    """The deepest nesting of [ and { (strings not told apart: an over-estimate, in one pass)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}" and depth:
            depth -= 1
    return deepest
