"""DCGM suite steps, shared by the weekly sweep, onboarding and Xid remediation.

probe → raw stored → parse → judge → verdicts stored → act. Each step is a function of explicit
inputs so an Airflow task and `fleetval sim run` call the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleetval.dcgm.judge import judge_dcgm
from fleetval.dcgm.parser import DcgmReport, parse_dcgm
from fleetval.dcgm.probe import dcgm_diag_probe
from fleetval.errors import ParseError
from fleetval.nodes import NodeInfo
from fleetval.nvidia_smi.parser import split_gpu_list
from fleetval.policy import node_health as nh
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Result, Verdict
from fleetval.remediation import PlannedAction
from fleetval.store.repository import MeasurementIn, ProbeResults, Store

_RESULT_CODE = {"pass": 0.0, "warn": 1.0, "fail": 2.0, "skip": -1.0}


@dataclass(frozen=True, slots=True)
class NodeDecision:
    node: str
    result: Result
    action: str
    rule_id: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "result": self.result.value,
            "action": self.action,
            "rule_id": self.rule_id,
            "reason": self.reason,
        }


def dcgm_specs(nodes: Sequence[NodeInfo], *, level: int, run_key: str) -> list[ProbeSpec]:
    return [dcgm_diag_probe(n.name, level=level, gpus=n.gpus, run_key=run_key) for n in nodes]


def judge_stored_dcgm(
    store: Store,
    run_id: int,
    probe_keys: Sequence[str],
    *,
    gate: str,
    level: int,
    gpu_uuids: Callable[[str], Sequence[str]] | None = None,
) -> list[NodeDecision]:
    """Parse and judge stored DCGM probes (`judge_dcgm_probes`); store measurements and verdicts;
    return node decisions."""
    decisions, results = judge_dcgm_probes(
        store.probes(run_id, probe_keys), gate=gate, level=level, gpu_uuids=gpu_uuids
    )
    store.attach_results(run_id, results)
    return decisions


def judge_dcgm_probes(
    probes: Iterable[Mapping[str, Any]],
    *,
    gate: str,
    level: int,
    gpu_uuids: Callable[[str], Sequence[str]] | None = None,
) -> tuple[list[NodeDecision], list[ProbeResults]]:
    """Judge DCGM probe rows (as `Store.probes` returns them): each node's decision, and each
    probe's measurements and verdicts to store (`Store.attach_results`).

    Each probe is judged on its own: output that cannot be read is the judge's no-evidence path
    (ParseError), and anything unexpected while judging one probe is an `error` verdict for that
    node, never an abort of the others."""
    decisions: list[NodeDecision] = []
    results: list[ProbeResults] = []
    for probe in probes:
        node = probe["nodes"][0]
        spec = probe["spec"] or {}
        harness_error = spec.get("harness_error")
        expected = node_capacity(spec)
        if harness_error:
            verdict = _error_verdict(
                gate,
                node,
                "harness.probe_failed",
                "the probe did not run to completion",
                {"error": harness_error, "exit_code": probe["exit_code"]},
            )
        elif expected is None:
            # Without the node's GPU count no report can be shown to cover every GPU.
            verdict = _error_verdict(
                gate,
                node,
                "harness.no_gpu_count",
                "the probe spec does not say how many GPUs the node has",
                {"gpus": repr(spec.get("gpus"))[:50]},
            )
        else:
            try:
                measurements, verdicts, decision = _judge_probe(probe, node, expected, gate, level, gpu_uuids)
            except Exception as exc:  # one probe's surprise must not abort the wave's judging
                verdict = _error_verdict(
                    gate,
                    node,
                    "harness.judge_failed",
                    f"judging this node's DCGM output failed ({type(exc).__name__})",
                    {"exception": type(exc).__name__, "message": str(exc)[:300]},
                )
            else:
                results.append((probe["probe_key"], measurements, verdicts, node))
                decisions.append(decision)
                continue
        results.append((probe["probe_key"], (), (verdict,), node))
        decisions.append(NodeDecision(node, Result.ERROR, nh.RERUN, verdict.rule_id, verdict.reason))
    return decisions, results


def _judge_probe(
    probe: Mapping[str, Any],
    node: str,
    expected: int,
    gate: str,
    level: int,
    gpu_uuids: Callable[[str], Sequence[str]] | None,
) -> tuple[list[MeasurementIn], tuple[Verdict, ...], NodeDecision]:
    report: DcgmReport | ParseError
    listed: dict[str, str] = {}
    try:
        listed, text = split_gpu_list(probe["raw"])
        report = parse_dcgm(text)
    except ParseError as exc:
        report = exc
    uuids = {str(i): u for i, u in enumerate(gpu_uuids(node))} if gpu_uuids else {}
    judgement = judge_dcgm(
        report,
        gate=gate,
        node=node,
        gpu_uuids={**uuids, **listed},
        level=level,
        expected_gpus=expected,
    )
    decision = NodeDecision(
        node, judgement.result, judgement.action, judgement.rule.rule_id, judgement.rule.reason
    )
    return dcgm_measurements(node, report, level), judgement.verdicts, decision


def node_capacity(spec: dict[str, Any]) -> int | None:
    """The node's GPU capacity the probe requested (`ProbeSpec.gpus`), or None if the spec lacks one."""
    gpus = spec.get("gpus")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        return None
    return gpus


def _error_verdict(gate: str, node: str, rule_id: str, reason: str, evidence: dict[str, Any]) -> Verdict:
    return Verdict(
        nh.GATE_CRITERION[gate],
        node,
        Result.ERROR,
        nh.RERUN,
        rule_id,
        reason,
        evidence,
        {"policy_version": nh.NODE_HEALTH_POLICY_VERSION, "gate": gate},
    )


def dcgm_measurements(node: str, report: DcgmReport | ParseError, level: int) -> list[MeasurementIn]:
    if isinstance(report, ParseError):
        return []
    return [
        MeasurementIn(
            node=node,
            gpu=gpu,
            metric="dcgm.test_result",
            value=_RESULT_CODE.get(result),
            unit="code",
            attrs={"test": test.name, "class": test.failure_class, "result": result, "level": level},
        )
        for test in report.tests
        for gpu, result in sorted(test.gpus.items())
    ]


def planned_actions(decisions: Sequence[NodeDecision], rack_of: dict[str, str]) -> list[PlannedAction]:
    return [PlannedAction(d.node, rack_of.get(d.node, ""), d.action, d.reason, d.rule_id) for d in decisions]
