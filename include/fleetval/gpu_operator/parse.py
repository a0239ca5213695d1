"""Reading the GPU Operator's own evidence: its operand pods, its controller's log, its
validator's logs and readiness markers. Pure.

Formats, as the fixtures in tests/fixtures/gpu-operator show them:

- operand pods: `kubectl get pods -n gpu-operator` (the table; RESTARTS may carry "(5m ago)", a
  STATUS may hold a space: "Init: 0/1") or `-o json` (a PodList);
- the controller (`controllers.ClusterPolicy`): zap console lines (tab-separated time, level,
  logger, message, JSON fields) or zap JSON lines; the messages that tell readiness are
  "ClusterPolicy step completed" (`{"state:": <state>, "status": ready|notReady|disabled}`, the
  key with its colon as the operator writes it), "ClusterPolicy step wasn't ready", "ClusterPolicy
  is not ready, states not ready: [<state> ...]" and "ClusterPolicy is ready.";
- the validator (`nvidia-validator`, one init container per component): plain lines, lines with a
  `kubectl logs --timestamps` prefix, or logrus lines (`INFO[0005] ...`);
- readiness markers: `ls /run/nvidia/validations` (the validator's status files, e.g.
  `driver-ready`, `toolkit-ready`, `cuda-ready`, `plugin-ready`; `host-driver-ready` where the
  driver is installed on the host).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.errors import ParseError

# Pod-name prefixes of the operands (longest first: nvidia-dcgm-exporter before nvidia-dcgm).
OPERAND_PREFIXES: Final = (
    ("gpu-operator-node-feature-discovery", "node-feature-discovery"),
    ("nvidia-container-toolkit-daemonset", "container-toolkit"),
    ("nvidia-device-plugin-daemonset", "device-plugin"),
    ("nvidia-device-plugin-validator", "device-plugin-validation"),
    ("nvidia-node-status-exporter", "node-status-exporter"),
    ("nvidia-operator-validator", "validator"),
    ("nvidia-driver-daemonset", "driver"),
    ("nvidia-cuda-validator", "cuda-validation"),
    ("gpu-feature-discovery", "gpu-feature-discovery"),
    ("nvidia-dcgm-exporter", "dcgm-exporter"),
    ("nvidia-mig-manager", "mig-manager"),
    ("nvidia-dcgm", "dcgm"),
    ("gpu-operator", "operator"),
)
# The controller's state names (assets/state-*) → operands.
STATE_OPERANDS: Final = {
    "state-driver": "driver",
    "state-container-toolkit": "container-toolkit",
    "state-operator-validation": "validator",
    "state-device-plugin": "device-plugin",
    "state-dcgm": "dcgm",
    "state-dcgm-exporter": "dcgm-exporter",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "state-mig-manager": "mig-manager",
    "state-node-status-exporter": "node-status-exporter",
}
# The validator's init containers → the component each one validates.
VALIDATION_CONTAINERS: Final = {
    "driver-validation": "driver",
    "toolkit-validation": "container-toolkit",
    "cuda-validation": "cuda-validation",
    "plugin-validation": "device-plugin",
}
_ROW = re.compile(r"^(\S+)\s+(\d+)/(\d+)\s+(.+?)\s+(\d+)(?:\s+\([^)]*\))?\s+(\S+)$")
_KUBECTL_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)\s")
_LOGRUS = re.compile(r"^(INFO|WARN|WARNING|ERRO|ERROR|FATA|FATAL|DEBU|DEBUG|PANI)\[\d+\]\s*(.*)$")
_NOT_READY = re.compile(r"states not ready: \[([^\]]*)\]")
_MARKER = re.compile(r"(?:^|\s)([a-z0-9][a-z0-9.-]*-ready|workload-type)$")


def operand_of(pod_name: str) -> str | None:
    for prefix, operand in OPERAND_PREFIXES:
        if pod_name == prefix or pod_name.startswith(prefix + "-"):
            return operand
    return None


@dataclass(frozen=True, slots=True)
class OperandPod:
    name: str
    operand: str | None
    ready: int
    containers: int
    status: str  # as kubectl shows it: Running, Completed, CrashLoopBackOff, Init:0/4, ...
    restarts: int
    node: str | None = None

    @property
    def healthy(self) -> bool:
        if self.status == "Completed":
            return self.operand in ("cuda-validation", "device-plugin-validation")
        return self.status == "Running" and self.ready == self.containers

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "operand": self.operand,
            "ready": f"{self.ready}/{self.containers}",
            "status": self.status,
            "restarts": self.restarts,
            "node": self.node,
        }


def parse_operand_pods(text: str) -> list[OperandPod]:
    """The operator namespace's pods, from `kubectl get pods` (table or `-o json`)."""
    stripped = text.strip()
    if stripped.startswith("{"):
        return _pods_from_json(stripped)
    pods: list[OperandPod] = []
    in_table = False
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if line.startswith("NAME ") and "READY" in line and "STATUS" in line:
            in_table = True
            continue
        if not in_table or not line:
            continue
        if line.startswith("$") or line.startswith("["):
            in_table = False  # the next command's output
            continue
        m = _ROW.match(line)
        if m is None:
            raise ParseError("gpu-operator-pods", "a row is not NAME READY STATUS RESTARTS AGE", line)
        name, ready, total, status, restarts, _age = m.groups()
        pods.append(
            OperandPod(name, operand_of(name), int(ready), int(total), status.replace(" ", ""), int(restarts))
        )
    if not pods:
        raise ParseError("gpu-operator-pods", "no pod table (NAME READY STATUS RESTARTS AGE) found", text)
    return pods


def _pods_from_json(text: str) -> list[OperandPod]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ParseError("gpu-operator-pods", f"not JSON: {exc}", text) from None
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ParseError("gpu-operator-pods", "not a PodList (no items)", text)
    pods = []
    for item in items:
        if not isinstance(item, dict):
            raise ParseError("gpu-operator-pods", "an item is not a Pod", text)
        meta, spec, status = item.get("metadata") or {}, item.get("spec") or {}, item.get("status") or {}
        name = str(meta.get("name") or "")
        statuses = [s for s in status.get("containerStatuses") or [] if isinstance(s, dict)]
        total = len(spec.get("containers") or []) or len(statuses)
        pods.append(
            OperandPod(
                name=name,
                operand=operand_of(name),
                ready=sum(1 for s in statuses if s.get("ready")),
                containers=total,
                status=_kubectl_status(status, statuses),
                restarts=sum(int(s.get("restartCount") or 0) for s in statuses),
                node=spec.get("nodeName"),
            )
        )
    return pods


def _kubectl_status(status: dict[str, Any], statuses: list[dict[str, Any]]) -> str:
    """STATUS as kubectl prints it, for what the operator's pods show: an init container not done
    (Init:<done>/<all>), a waiting or terminated reason, else the phase."""
    inits = [s for s in status.get("initContainerStatuses") or [] if isinstance(s, dict)]
    done = sum(1 for s in inits if ((s.get("state") or {}).get("terminated") or {}).get("exitCode") == 0)
    if inits and done < len(inits):
        for s in inits:
            waiting = (s.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull"):
                return f"Init:{waiting['reason']}"
        return f"Init:{done}/{len(inits)}"
    for s in statuses:
        state = s.get("state") or {}
        reason = (state.get("waiting") or {}).get("reason") or (state.get("terminated") or {}).get("reason")
        if reason:
            return str(reason)
    return str(status.get("phase") or "Unknown")


@dataclass(frozen=True, slots=True)
class OperatorLog:
    steps: dict[str, str] = field(default_factory=dict)  # state → its last status
    not_ready: tuple[str, ...] | None = None  # from the last "ClusterPolicy is not ready" line
    ready: bool | None = None  # the last verdict the controller printed
    unavailable: dict[str, int] = field(default_factory=dict)  # DaemonSet → NumberUnavailable > 0
    lines: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "not_ready": list(self.not_ready) if self.not_ready is not None else None,
            "ready": self.ready,
            "unavailable": self.unavailable,
            "lines": self.lines,
        }


def _controller_record(line: str) -> tuple[str, dict[str, Any]] | None:
    """(message, fields) of one controller line, JSON or zap console; None for other lines."""
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            return None
        if not isinstance(record, dict) or not isinstance(record.get("msg"), str):
            return None
        return str(record["msg"]), record
    parts = line.split("\t")
    if len(parts) < 4:
        return None
    fields: dict[str, Any] = {}
    if len(parts) >= 5:
        try:
            loaded = json.loads(parts[4])
        except (ValueError, RecursionError):
            loaded = None
        fields = loaded if isinstance(loaded, dict) else {}
    return parts[3], fields


def parse_operator_log(text: str) -> OperatorLog:
    steps: dict[str, str] = {}
    unavailable: dict[str, int] = {}
    not_ready: tuple[str, ...] | None = None
    ready: bool | None = None
    daemonset: str | None = None
    lines = 0
    for raw_line in text.splitlines():
        found = _controller_record(raw_line.strip())
        if found is None:
            continue
        lines += 1
        message, fields = found
        if isinstance(fields.get("DaemonSet"), str):
            daemonset = fields["DaemonSet"]
        if "ClusterPolicy step completed" in message:
            state = fields.get("state:", fields.get("state"))
            if isinstance(state, str):
                steps[state] = str(fields.get("status", ""))
        elif "ClusterPolicy step wasn't ready" in message and daemonset:
            steps[daemonset] = str(fields.get("State:", "notReady"))
        elif isinstance(fields.get("NumberUnavailable"), int) and daemonset:
            if fields["NumberUnavailable"] > 0:
                unavailable[daemonset] = int(fields["NumberUnavailable"])
            else:
                unavailable.pop(daemonset, None)
        elif (m := _NOT_READY.search(message)) is not None:
            not_ready, ready = tuple(m.group(1).split()), False
        elif message.strip() == "ClusterPolicy is ready.":
            not_ready, ready = (), True
    if not lines:
        raise ParseError("gpu-operator-log", "no controller log line (zap console or JSON) found", text)
    return OperatorLog(steps, not_ready, ready, unavailable, lines)


@dataclass(frozen=True, slots=True)
class ValidatorLog:
    outcome: str  # success | failing | waiting | unknown
    evidence: str  # the line that decided it
    retries: int

    def to_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "evidence": self.evidence, "retries": self.retries}


def _message(line: str) -> str:
    line = _KUBECTL_STAMP.sub("", line.strip(), count=1)
    m = _LOGRUS.match(line)
    return m.group(2) if m else line


def parse_validator_log(text: str) -> ValidatorLog:
    """One validation container's log: did it succeed, is it failing (retrying), or waiting?"""
    messages = [
        _message(line) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("$")
    ]
    retries = sum(1 for m in messages if "retrying after" in m)
    outcome, evidence = "unknown", ""
    for message in messages:
        if "validation is successful" in message or message == "all validations are successful":
            outcome, evidence = "success", message
        elif "failed" in message and ("retrying" in message or "failed to run command" in message):
            outcome, evidence = "failing", message
        elif message.startswith("waiting for"):
            outcome, evidence = "waiting", message
    return ValidatorLog(outcome, evidence, retries)


def parse_markers(text: str) -> frozenset[str]:
    """The validator's status files, from `ls` (plain or `-al`) of /run/nvidia/validations."""
    markers = set()
    for line in text.splitlines():
        if line.lstrip().startswith(("[", "$", "total ")):
            continue
        m = _MARKER.search(line.strip())
        if m is not None:
            markers.add(m.group(1))
    return frozenset(markers)
