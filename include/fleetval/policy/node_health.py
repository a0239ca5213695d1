"""The node health policy under test (criteria D-DEV-01/02/03), as a decision table.

Rows are keyed by (gate, DCGM outcome); the first matching row decides the result and the
action. Outcomes are derived from a parsed report by `fleetval.dcgm.judge.classify`:

- `pass` / `warn` / `fail`: the diagnostic ran at the gate's level and found that;
- `internal_error`: a test failed *because the diagnostic itself broke* (DCGM reports an
  internal error or a plugin/child process exit). That is not evidence about the hardware, so
  it never passes and never quarantines: the node is held (not admitted / left cordoned) and r2
  is re-run. A second internal error in a row is for a human (the action says so).
- `profiling_busy`: the tests failed (or DCGM refused the run) only because DCGM's profiling or
  diagnostic resources were held by another client — the probe's own host engine beside
  dcgm-exporter collecting profiling metrics on the same GPUs (`fleetval.dcgm.parser.PROFILING_BUSY`).
  Not evidence about the hardware: inconclusive and re-run, never quarantined.
- `level_too_low`: the report is from a lower run level than the gate requires.
- `no_evidence`: every test skipped, the output could not be parsed (truncated, garbage, a row
  the parser cannot read), a text table cut short with no failure in sight, or the report does
  not cover what was asked (`fleetval.dcgm.coverage`): a test the level runs absent or skipped
  without a documented reason (`fleetval.dcgm.levels`), a GPU of the node without a result in a
  test, a GPU the node does not have (a withdrawn GPU is never passed).

A failure stands even when the rest of the report is damaged: a defect found is a defect. Only a
pass or a warn needs the whole run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from fleetval.records import Result

NODE_HEALTH_POLICY_VERSION: Final = "node-health/2026-12-05.2"

GATES: Final = ("onboarding", "weekly", "post-xid")
GATE_CRITERION: Final = {"onboarding": "D-DEV-01", "weekly": "D-DEV-03", "post-xid": "D-DEV-02"}
GATE_MIN_LEVEL: Final = {"onboarding": 2, "weekly": 2, "post-xid": 3}

# Actions are stable strings: the DAGs map them to node operations.
ADMIT: Final = "admit"
HOLD_FOR_APPROVAL: Final = "hold_for_approval"
REJECT: Final = "reject"
NONE: Final = "none"
FLAG: Final = "flag"
QUARANTINE_AND_R3: Final = "cordon_quarantine_schedule_r3"
RETURN_TO_SERVICE: Final = "return_to_service"
QUARANTINE: Final = "quarantine"
RERUN: Final = "rerun_diagnostic"
# No node operation: the verdict is stored for the on-call reader (the early-warning trend rows).
RECORD: Final = "record_only"

# Actions that take a node out of service (what the blast-radius budget counts).
DISRUPTIVE_ACTIONS: Final = frozenset({QUARANTINE_AND_R3, QUARANTINE})


@dataclass(frozen=True, slots=True)
class HealthRule:
    rule_id: str
    gate: str
    outcome: str
    result: Result
    action: str
    reason: str


NODE_HEALTH_TABLE: Final[tuple[HealthRule, ...]] = (
    HealthRule(
        "dev.onboarding.pass", "onboarding", "pass", Result.PASS, ADMIT, "r2 passed: node may enter service"
    ),
    HealthRule(
        "dev.onboarding.warn",
        "onboarding",
        "warn",
        Result.WARN,
        HOLD_FOR_APPROVAL,
        "r2 warned: held for operator approval",
    ),
    HealthRule(
        "dev.onboarding.fail",
        "onboarding",
        "fail",
        Result.FAIL,
        REJECT,
        "r2 failed: node stays out of service",
    ),
    HealthRule(
        "dev.onboarding.internal",
        "onboarding",
        "internal_error",
        Result.INCONCLUSIVE,
        RERUN,
        "diagnostic broke (internal error): held, r2 re-run",
    ),
    HealthRule(
        "dev.onboarding.busy",
        "onboarding",
        "profiling_busy",
        Result.INCONCLUSIVE,
        RERUN,
        "DCGM's profiling resources were busy (e.g. dcgm-exporter on the same GPUs): held, r2 re-run",
    ),
    HealthRule(
        "dev.onboarding.level",
        "onboarding",
        "level_too_low",
        Result.INCONCLUSIVE,
        RERUN,
        "report below r2: held, r2 re-run",
    ),
    HealthRule(
        "dev.onboarding.none",
        "onboarding",
        "no_evidence",
        Result.INCONCLUSIVE,
        RERUN,
        "no usable evidence: held, r2 re-run",
    ),
    HealthRule("dev.weekly.pass", "weekly", "pass", Result.PASS, NONE, "weekly r2 passed"),
    HealthRule(
        "dev.weekly.warn", "weekly", "warn", Result.WARN, FLAG, "weekly r2 warned: flagged for review"
    ),
    HealthRule(
        "dev.weekly.fail",
        "weekly",
        "fail",
        Result.FAIL,
        QUARANTINE_AND_R3,
        "weekly r2 failed: cordon, quarantine label, r3 scheduled",
    ),
    HealthRule(
        "dev.weekly.internal",
        "weekly",
        "internal_error",
        Result.INCONCLUSIVE,
        RERUN,
        "diagnostic broke (internal error): r2 re-run, node not quarantined on this evidence",
    ),
    HealthRule(
        "dev.weekly.busy",
        "weekly",
        "profiling_busy",
        Result.INCONCLUSIVE,
        RERUN,
        "DCGM's profiling resources were busy (e.g. dcgm-exporter on the same GPUs): r2 re-run, "
        "node not quarantined on this evidence",
    ),
    HealthRule(
        "dev.weekly.level", "weekly", "level_too_low", Result.INCONCLUSIVE, RERUN, "report below r2: re-run"
    ),
    HealthRule(
        "dev.weekly.none", "weekly", "no_evidence", Result.INCONCLUSIVE, RERUN, "no usable evidence: re-run"
    ),
    HealthRule(
        "dev.postxid.pass",
        "post-xid",
        "pass",
        Result.PASS,
        RETURN_TO_SERVICE,
        "r3 passed after Xid: uncordon",
    ),
    HealthRule(
        "dev.postxid.warn",
        "post-xid",
        "warn",
        Result.WARN,
        HOLD_FOR_APPROVAL,
        "r3 warned after Xid: stays cordoned for operator approval",
    ),
    HealthRule(
        "dev.postxid.fail", "post-xid", "fail", Result.FAIL, QUARANTINE, "r3 failed after Xid: quarantined"
    ),
    HealthRule(
        "dev.postxid.internal",
        "post-xid",
        "internal_error",
        Result.INCONCLUSIVE,
        RERUN,
        "diagnostic broke (internal error): stays cordoned, r3 re-run",
    ),
    HealthRule(
        "dev.postxid.busy",
        "post-xid",
        "profiling_busy",
        Result.INCONCLUSIVE,
        RERUN,
        "DCGM's profiling resources were busy (e.g. dcgm-exporter on the same GPUs): "
        "stays cordoned, r3 re-run",
    ),
    HealthRule(
        "dev.postxid.level",
        "post-xid",
        "level_too_low",
        Result.INCONCLUSIVE,
        RERUN,
        "report below r3: stays cordoned, r3 re-run",
    ),
    HealthRule(
        "dev.postxid.none",
        "post-xid",
        "no_evidence",
        Result.INCONCLUSIVE,
        RERUN,
        "no usable evidence: stays cordoned, r3 re-run",
    ),
)


# Early warning from trends (D-DEV-TREND-01, D-NET-NCCL-TREND-01; `fleetval.trends`): a node's
# history across sweeps, not one diagnostic. Warn never cordons, labels or reruns anything: the
# verdict is recorded for the on-call reader; the hard judges (r2, Xid, NCCL) still decide the fail.
# A history too short or unreadable is inconclusive (never pass, never warn).
TREND_GATES: Final = ("trend-device", "trend-link")
TREND_CRITERION: Final = {"trend-device": "D-DEV-TREND-01", "trend-link": "D-NET-NCCL-TREND-01"}
TREND_OUTCOMES: Final = ("pass", "warn", "no_evidence")

TREND_TABLE: Final[tuple[HealthRule, ...]] = (
    HealthRule("trend.device.pass", "trend-device", "pass", Result.PASS, RECORD, "no GPU counter drifting"),
    HealthRule(
        "trend.device.warn",
        "trend-device",
        "warn",
        Result.WARN,
        RECORD,
        "GPU counters drifting toward a hard failure: recorded for on-call, node stays in service",
    ),
    HealthRule(
        "trend.device.none",
        "trend-device",
        "no_evidence",
        Result.INCONCLUSIVE,
        RECORD,
        "history too short or unreadable: no trend judged",
    ),
    HealthRule("trend.link.pass", "trend-link", "pass", Result.PASS, RECORD, "busbw not declining"),
    HealthRule(
        "trend.link.warn",
        "trend-link",
        "warn",
        Result.WARN,
        RECORD,
        "busbw declining toward the hard threshold: recorded for on-call, node stays in service",
    ),
    HealthRule(
        "trend.link.none",
        "trend-link",
        "no_evidence",
        Result.INCONCLUSIVE,
        RECORD,
        "busbw history too short or unreadable: no trend judged",
    ),
)


def lookup(gate: str, outcome: str, table: tuple[HealthRule, ...] = NODE_HEALTH_TABLE) -> HealthRule:
    for rule in table:
        if rule.gate == gate and rule.outcome == outcome:
            return rule
    raise KeyError(f"node health table has no rule for gate={gate!r} outcome={outcome!r}")
