"""Judge a DCGM diagnostic report against the node health policy (D-DEV-01..04).

Pure: the report (or the parse error standing in for it), the gate, the node and its GPU UUIDs
are arguments; the decision comes from `fleetval.policy.node_health`. One node-level verdict
for the gate's criterion, plus one D-DEV-04 record per GPU (node, GPU UUID, level, result,
action), so every judgement is kept per GPU.

A report passes only what it covers: every test the level runs (`fleetval.dcgm.levels`) with a
result on every GPU of the node. Anything it leaves out is a coverage gap (`fleetval.dcgm.coverage`)
that makes a clean-looking report no evidence, and a GPU with a gap gets an inconclusive record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetval.dcgm.coverage import CoverageGap, coverage_gaps, node_gpus, uncovered_gpus
from fleetval.dcgm.parser import DcgmReport, profiling_busy
from fleetval.errors import ParseError
from fleetval.policy import node_health
from fleetval.policy.node_health import HealthRule
from fleetval.records import Result, Verdict

_MAX_GAPS_SHOWN = 20
_GPU_RESULT = {"pass": Result.PASS, "warn": Result.WARN, "fail": Result.FAIL, "skip": Result.INCONCLUSIVE}


@dataclass(frozen=True, slots=True)
class DcgmJudgement:
    result: Result
    action: str
    rule: HealthRule
    verdicts: tuple[Verdict, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "result": self.result.value,
            "action": self.action,
            "rule_id": self.rule.rule_id,
            "verdicts": [v.to_json() for v in self.verdicts],
        }


def reported_gpus(report: DcgmReport) -> set[str]:
    return {gpu for test in report.tests for gpu in test.gpus}


def required_level(report: DcgmReport, gate: str, level: int | None = None) -> int:
    """The level whose tests the report must hold: the highest of what the probe asked for, what the
    report shows, and what the gate needs (a higher level also runs every lower level's tests)."""
    found = [x for x in (level, report.level, node_health.GATE_MIN_LEVEL[gate]) if x is not None]
    return max(found)


def classify(
    report: DcgmReport | ParseError,
    gate: str,
    expected_gpus: int | None = None,
    *,
    level: int | None = None,
    gaps: tuple[CoverageGap, ...] | None = None,
) -> str:
    """The policy outcome a report stands for at `gate` (see the policy module).

    A failure stands whatever else the report lost (a defect found is a defect). A pass or a warn
    needs the whole run: a table cut short, or a report with coverage gaps (a test of the level
    absent or skipped, a GPU of the node without a result, `expected_gpus` being the node's
    capacity), is no evidence for what it left out, so it is `no_evidence`."""
    if isinstance(report, ParseError):
        # A run DCGM refused because its resources were busy (a runtime error) is no evidence
        # either, but says why: the same outcome as a test failed for that reason.
        return "profiling_busy" if profiling_busy(report.reason) else "no_evidence"
    ran = [t for t in report.tests if t.result != "skip"]
    if not ran:
        return "no_evidence"
    if report.level is not None and report.level < node_health.GATE_MIN_LEVEL[gate]:
        return "level_too_low"
    failed = [t for t in ran if t.result == "fail"]
    if failed and all(t.busy or t.internal_error for t in failed) and any(t.busy for t in failed):
        return "profiling_busy"  # the host engine competed for the GPUs: no evidence about them
    if failed and all(t.internal_error for t in failed):
        return "internal_error"
    if failed:
        return "fail"
    if not report.complete:
        return "no_evidence"
    if gaps is None:
        gaps = coverage_gaps(report, level=required_level(report, gate, level), expected_gpus=expected_gpus)
    if gaps:
        return "no_evidence"
    warned = [t for t in ran if t.result == "warn"]
    if warned and all(t.busy for t in warned):
        return "profiling_busy"
    if warned:
        return "warn"
    return "pass"


def judge_dcgm(
    report: DcgmReport | ParseError,
    *,
    gate: str,
    node: str,
    gpu_uuids: Mapping[str, str] | None = None,
    level: int | None = None,
    expected_gpus: int | None = None,
) -> DcgmJudgement:
    """Decide `node`'s fate at `gate` from its DCGM report.

    `gpu_uuids` (index → UUID) names GPUs when the report does not; `level` is the level the
    probe asked for, used when the report does not say; `expected_gpus` is the node's GPU
    count (capacity), so a report on fewer GPUs cannot pass the node.
    """
    if gate not in node_health.GATES:
        raise ValueError(f"unknown gate {gate!r}; expected one of {node_health.GATES}")
    gaps = (
        ()
        if isinstance(report, ParseError)
        else coverage_gaps(report, level=required_level(report, gate, level), expected_gpus=expected_gpus)
    )
    outcome = classify(report, gate, expected_gpus, level=level, gaps=gaps)
    rule = node_health.lookup(gate, outcome)
    against = {"policy_version": node_health.NODE_HEALTH_POLICY_VERSION, "gate": gate}
    criterion = node_health.GATE_CRITERION[gate]
    if isinstance(report, ParseError):
        evidence: dict[str, Any] = {"parse_error": report.reason, "excerpt": report.excerpt, "level": level}
        node_verdict = Verdict(
            criterion, node, rule.result, rule.action, rule.rule_id, rule.reason, evidence, against
        )
        return DcgmJudgement(rule.result, rule.action, rule, (node_verdict,))

    run_level = report.level if report.level is not None else level
    uuids = {**(gpu_uuids or {}), **report.gpu_uuids}
    failing = [
        {
            "test": t.name,
            "class": t.failure_class,
            "result": t.result,
            "gpus": sorted(g for g, r in t.gpus.items() if r in ("fail", "warn")),
            "internal_error": t.internal_error,
            **({"busy": t.busy} if t.busy else {}),
        }
        for t in report.tests
        if t.result in ("fail", "warn")
    ]
    evidence = {
        "level": run_level,
        "overall": report.overall,
        "dcgm_version": report.dcgm_version,
        "driver_version": report.driver_version,
        "findings": failing,
        "tests_run": len([t for t in report.tests if t.result != "skip"]),
        "gpus_reported": len(reported_gpus(report)),
        "gpus_expected": expected_gpus,
        "level_required": required_level(report, gate, level),
        "complete": report.complete,
        "coverage_gaps": [g.to_json() for g in gaps[:_MAX_GAPS_SHOWN]],
    }
    verdicts = [
        Verdict(criterion, node, rule.result, rule.action, rule.rule_id, rule.reason, evidence, against)
    ]
    gpus = node_gpus(report, expected_gpus)
    uncovered = uncovered_gpus(gaps, gpus)
    verdicts.extend(_gpu_records(report, node, uuids, run_level, rule, against, gpus, uncovered))
    return DcgmJudgement(rule.result, rule.action, rule, tuple(verdicts))


def _gpu_records(
    report: DcgmReport,
    node: str,
    uuids: Mapping[str, str],
    level: int | None,
    rule: HealthRule,
    against: dict[str, Any],
    gpus_of_node: tuple[str, ...],
    uncovered: set[str],
) -> list[Verdict]:
    """One D-DEV-04 record per GPU, the node's and any other the report names. A GPU passes only
    with a result in every test the level runs; a failure or a warning found on it stands."""
    per_gpu: dict[str, list[tuple[str, str, str, bool]]] = {gpu: [] for gpu in gpus_of_node}
    for test in report.tests:
        for gpu, result in test.gpus.items():
            per_gpu.setdefault(gpu, []).append((test.name, test.failure_class, result, test.internal_error))
    records = []
    for gpu in sorted(per_gpu, key=_gpu_sort_key):
        results = per_gpu[gpu]
        # A failure the diagnostic blames on itself says nothing about this GPU.
        hardware = [
            _GPU_RESULT.get(r, Result.INCONCLUSIVE)
            for _, _, r, internal in results
            if r != "skip" and not (internal and r == "fail")
        ]
        gpu_result = max(hardware, key=lambda r: r.severity) if hardware else Result.INCONCLUSIVE
        if gpu_result is Result.PASS and (gpu in uncovered or not report.complete):
            gpu_result = Result.INCONCLUSIVE  # a pass on part of the run is no pass
        findings = [
            {"test": name, "class": cls, "result": r} for name, cls, r, _ in results if r in ("fail", "warn")
        ]
        action = rule.action if gpu_result in (Result.FAIL, Result.WARN) else node_health.NONE
        subject = uuids.get(gpu, f"{node}/gpu{gpu}")
        evidence = {
            "node": node,
            "gpu_index": gpu,
            "gpu_uuid": uuids.get(gpu),
            "level": level,
            "findings": findings,
            "covered": gpu not in uncovered and bool(results),
        }
        records.append(
            Verdict(
                "D-DEV-04",
                subject,
                gpu_result,
                action,
                f"{rule.rule_id}.gpu",
                f"GPU {gpu} on {node}",
                evidence,
                against,
            )
        )
    return records


def _gpu_sort_key(gpu: str) -> tuple[int, str]:
    return (int(gpu), gpu) if gpu.isascii() and gpu.isdigit() else (1 << 30, gpu)
