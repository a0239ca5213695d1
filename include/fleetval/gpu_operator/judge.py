"""D-OP-01: is each GPU Operator operand healthy, and if not, which one broke first? Pure.

The operator's own validator answers "ready" or "not ready" for the whole stack; an operand that
fails leaves every operand after it stuck in `Init:` (their init containers wait for the
validator's markers), so a pod list shows many failures and one cause. The judge names as the
cause the first operand, in the order they depend on each other, that fails outright (crash loop,
not ready, no pod, a failing validation); those waiting in `Init:` are blocked behind it. The
controller's and the validator's words are added where they were given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from fleetval.gpu_operator.parse import (
    STATE_OPERANDS,
    VALIDATION_CONTAINERS,
    OperandPod,
    OperatorLog,
    ValidatorLog,
    operand_of,
)
from fleetval.records import Result, Verdict

CRITERION: Final = "D-OP-01"
RULE_ID: Final = "operator-operands-v1"
# Operands in the order they depend on each other (the validator's markers gate the later ones).
DEPENDENCY_ORDER: Final = (
    "operator",
    "driver",
    "container-toolkit",
    "device-plugin",
    "dcgm",
    "dcgm-exporter",
    "gpu-feature-discovery",
    "mig-manager",
    "node-status-exporter",
    "validator",
    "cuda-validation",
    "device-plugin-validation",
)
REQUIRED: Final = ("container-toolkit", "device-plugin", "validator")
# The validator's status files and the operand each one confirms.
MARKERS: Final = {
    "toolkit-ready": "container-toolkit",
    "cuda-ready": "cuda-validation",
    "plugin-ready": "device-plugin",
}
DRIVER_MARKERS: Final = ("driver-ready", "host-driver-ready")
FLAPPING_RESTARTS: Final = 3


def _rank(operand: str) -> int:
    return DEPENDENCY_ORDER.index(operand) if operand in DEPENDENCY_ORDER else len(DEPENDENCY_ORDER)


def judge_operands(
    subject: str,
    pods: Sequence[OperandPod],
    *,
    markers: frozenset[str] | None = None,
    operator_log: OperatorLog | None = None,
    validator_logs: Mapping[str, ValidatorLog] | None = None,
) -> Verdict:
    operand_pods = [p for p in pods if p.operand is not None and p.operand != "node-feature-discovery"]
    facts: dict[str, Any] = {"operands": {p.operand: p.to_json() for p in operand_pods}}
    judged_against = {"rule_id": RULE_ID, "dependency_order": list(DEPENDENCY_ORDER)}

    def verdict(result: Result, reason: str) -> Verdict:
        return Verdict(
            criterion=CRITERION,
            subject=subject,
            result=result,
            action="none" if result is Result.PASS else "repair the named operand first",
            rule_id=RULE_ID,
            reason=reason,
            evidence=facts,
            judged_against=judged_against,
        )

    if not operand_pods:
        return verdict(Result.INCONCLUSIVE, "no GPU Operator operand pods in the evidence")
    present = {p.operand for p in operand_pods}
    broken = sorted((p for p in operand_pods if not p.healthy), key=lambda p: _rank(str(p.operand)))
    problems: dict[str, str] = {
        str(p.operand): f"{p.status} ({p.ready}/{p.containers} ready, {p.restarts} restarts)" for p in broken
    }
    missing = [o for o in REQUIRED if o not in present]
    if "driver" not in present and markers is not None and not markers & set(DRIVER_MARKERS):
        missing.insert(0, "driver")
    for operand in missing:
        problems.setdefault(operand, "no pod")
    if markers is not None:
        facts["markers"] = sorted(markers)
        absent = {operand for marker, operand in MARKERS.items() if marker not in markers}
        if not markers & set(DRIVER_MARKERS):
            absent.add("driver")
        for operand in sorted(absent, key=_rank):
            problems.setdefault(operand, "not confirmed by the validator (no status file)")
    if operator_log is not None:
        facts["controller"] = operator_log.to_json()
        said = {STATE_OPERANDS.get(s, s) for s in operator_log.not_ready or ()}
        said |= {STATE_OPERANDS.get(s, s) for s, status in operator_log.steps.items() if status == "notReady"}
        said |= {operand_of(d) or d for d in operator_log.unavailable}
        for operand in sorted(said, key=_rank):
            problems.setdefault(operand, "not ready (the operator's controller)")
    if validator_logs:
        facts["validator"] = {c: log.to_json() for c, log in validator_logs.items()}
        for container, log in validator_logs.items():
            if log.outcome in ("failing", "waiting"):
                operand = VALIDATION_CONTAINERS.get(container, container)
                note = f"{container}: {log.evidence}"
                problems[operand] = f"{problems[operand]} [{note}]" if operand in problems else note
    if problems:
        # An operand waiting in Init: is a symptom; the cause is the first one failing outright.
        ordered = sorted(problems, key=lambda o: (problems[o].startswith("Init:"), _rank(o)))
        root = ordered[0]
        blocked = sorted((o for o in ordered[1:] if problems[o].startswith("Init:")), key=_rank)
        others = sorted((o for o in ordered[1:] if o not in blocked), key=_rank)
        facts.update(root_cause=root, blocked=blocked, also_broken=others, problems=problems)
        reason = f"{root}: {problems[root]}"
        if blocked:
            reason += f"; blocked behind it: {', '.join(blocked)}"
        if others:
            reason += "; also: " + "; ".join(f"{o}: {problems[o]}" for o in others)
        return verdict(Result.FAIL, reason)
    flapping = [p for p in operand_pods if p.restarts >= FLAPPING_RESTARTS]
    if flapping:
        facts["flapping"] = [p.operand for p in flapping]
        names = ", ".join(f"{p.operand} ({p.restarts} restarts)" for p in flapping)
        return verdict(Result.WARN, f"healthy now, but restarting: {names}")
    checked = len(operand_pods)
    sources = ["pods"] + [n for n, v in (("markers", markers), ("controller", operator_log)) if v is not None]
    return verdict(Result.PASS, f"all {checked} operand pods healthy ({', '.join(sources)})")
