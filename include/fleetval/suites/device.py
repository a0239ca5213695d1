"""Device-layer suite steps (DCGM), shared by the weekly sweep, onboarding and Xid remediation.

probe → raw stored → parse → judge → verdicts stored → act. Each step is a function of explicit
inputs so an Airflow task and `fleetval sim run` call the same code.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fleetval.errors import ParseError
from fleetval.judges.dcgm import judge_dcgm
from fleetval.k8s.specs import ProbeSpec, dcgm_diag_probe
from fleetval.nodes import NodeInfo, ProbeOutput
from fleetval.parsers.dcgm import DcgmReport, parse_dcgm
from fleetval.parsers.nvidia_smi import split_gpu_list
from fleetval.policy import node_health as nh
from fleetval.records import Result, Verdict
from fleetval.remediation import PlannedAction
from fleetval.store.repository import MeasurementIn, ProbeIn, Store

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


def probe_output(
    spec: ProbeSpec,
    raw: str,
    *,
    exit_code: int | None,
    error: str | None,
    finished_at: float,
    started_at: float | None = None,
) -> ProbeOutput:
    """What a probe left: its raw output, exit code, and the harness failure if there was one."""
    return ProbeOutput(
        spec.probe_key,
        spec.node,
        spec.tool,
        raw,
        exit_code,
        finished_at if started_at is None else started_at,
        finished_at,
        error=error,
        spec=spec.to_json(),
    )


def store_probe_outputs(store: Store, run_id: int, outputs: Sequence[ProbeOutput]) -> list[str]:
    """Keep raw output verbatim before anything parses it; harness errors are kept too.

    A multi-node probe (an NCCL pair) lists its nodes in `params["nodes"]`; its ProbeOutput.node
    is only the joined subject."""
    store.ingest(
        run_id,
        [
            ProbeIn(
                probe_key=o.probe_key,
                tool=o.tool,
                raw=o.raw,
                nodes=tuple((o.spec.get("params") or {}).get("nodes") or (o.node,)),
                exit_code=o.exit_code,
                spec={**o.spec, "harness_error": o.error},
                started_at=dt.datetime.fromtimestamp(o.started_at, dt.UTC),
                finished_at=dt.datetime.fromtimestamp(o.finished_at, dt.UTC),
            )
            for o in outputs
        ],
    )
    return [o.probe_key for o in outputs]


def record_missing_probes(store: Store, run_id: int, specs: Sequence[ProbeSpec]) -> list[str]:
    """Store a harness error for every probe that left nothing in the store (its task failed
    before the pod completed, e.g. a pod that never started); returns their nodes."""
    stored = {p["probe_key"] for p in store.probes(run_id, [s.probe_key for s in specs], with_raw=False)}
    missing = [s for s in specs if s.probe_key not in stored]
    now = time.time()
    store_probe_outputs(
        store,
        run_id,
        [
            probe_output(
                s,
                "",
                exit_code=None,
                error="the probe task ended without the pod completing",
                finished_at=now,
            )
            for s in missing
        ],
    )
    return [s.node for s in missing]


def judge_stored_dcgm(
    store: Store,
    run_id: int,
    probe_keys: Sequence[str],
    *,
    gate: str,
    level: int,
    gpu_uuids: Callable[[str], Sequence[str]] | None = None,
) -> list[NodeDecision]:
    """Parse and judge stored DCGM probes; store measurements and verdicts; return node decisions."""
    decisions: list[NodeDecision] = []
    results: list[tuple[str, Sequence[MeasurementIn], Sequence[Verdict], str | None]] = []
    for probe in store.probes(run_id, probe_keys):
        node = probe["nodes"][0]
        harness_error = (probe["spec"] or {}).get("harness_error")
        if harness_error:
            verdict = Verdict(
                nh.GATE_CRITERION[gate],
                node,
                Result.ERROR,
                nh.RERUN,
                "harness.probe_failed",
                "the probe did not run to completion",
                {"error": harness_error, "exit_code": probe["exit_code"]},
                {"policy_version": nh.NODE_HEALTH_POLICY_VERSION, "gate": gate},
            )
            results.append((probe["probe_key"], (), (verdict,), node))
            decisions.append(NodeDecision(node, Result.ERROR, nh.RERUN, verdict.rule_id, verdict.reason))
            continue
        report: DcgmReport | ParseError
        listed: dict[str, str] = {}
        try:
            listed, text = split_gpu_list(probe["raw"])
            report = parse_dcgm(text)
        except ParseError as exc:
            report = exc
        uuids = {str(i): u for i, u in enumerate(gpu_uuids(node))} if gpu_uuids else {}
        expected = (probe["spec"] or {}).get("gpus")
        judgement = judge_dcgm(
            report,
            gate=gate,
            node=node,
            gpu_uuids={**uuids, **listed},
            level=level,
            expected_gpus=int(expected) if expected else None,
        )
        results.append((probe["probe_key"], dcgm_measurements(node, report, level), judgement.verdicts, node))
        decisions.append(
            NodeDecision(
                node, judgement.result, judgement.action, judgement.rule.rule_id, judgement.rule.reason
            )
        )
    store.attach_results(run_id, results)
    return decisions


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
