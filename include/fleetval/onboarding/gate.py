"""The onboarding gate: a pure judge over the stages' stored verdicts, node by node.

For each planned node, the stages run in order (`fleetval.onboarding.registry.STAGES`); a stage's
verdicts about the node (its own subject, either end of a pair, every node of a class for a
per-class check) give the stage's result, a measured failure first, else the worst. The node's
result, and what happens to it:

| result | when | action |
|---|---|---|
| fail | any verdict failed | hold (not offered for approval) |
| error | the harness broke on it (no failure found) | hold: rerun |
| inconclusive | the evidence cannot decide | hold: rerun |
| warn | every stage passed or warned, one warned | ask a human (the default answer is hold) |
| pass | every stage that applies passed | admit |

Inconclusive: unreadable output, no promoted baseline, a stage that left no verdict about the node
or could not test it.

A node stops at its first stage that fails, errors or is inconclusive (the later stages do not
test it and say so); "no promoted baseline" alone does not stop it, since the first rack of a new
profile is where the baseline comes from (`fleetval.onboarding.baselines`). Missing evidence is
never a pass: a stage that should have tested the node and left no verdict makes it inconclusive.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.onboarding.plan import OnboardingPlan
from fleetval.onboarding.registry import StageImpl, StageSpec
from fleetval.records import Result, worst

ADMIT: Final = "admit"
ASK: Final = "ask_operator"
HOLD: Final = "hold"
ACTION_OF: Final = {
    Result.PASS: ADMIT,
    Result.WARN: ASK,
    Result.FAIL: HOLD,
    Result.ERROR: HOLD,
    Result.INCONCLUSIVE: HOLD,
}
GATE_POLICY_VERSION: Final = "onboarding-gate/2026-12-01.1"
# Verdicts that wait for a baseline the run itself may propose: they do not stop a node in the funnel.
PENDING_BASELINE_RULES: Final = frozenset({"nccl.busbw.no_baseline"})
STOPPING: Final = frozenset({Result.FAIL, Result.ERROR, Result.INCONCLUSIVE})
MAX_FINDINGS: Final = 20
# Evidence numbers a finding shows (the reason already says most); at most this many.
MAX_NUMBERS: Final = 8


@dataclass(frozen=True, slots=True)
class StageRun:
    """A stage as it ran in this run: its spec and implementation, and its state (None: it never
    planned, e.g. its first task failed). The state's `nodes` are the nodes it tested, `notes`
    the ones it could not, with why, and `enabled` False when the request turned it off."""

    spec: StageSpec
    impl: StageImpl
    state: Mapping[str, Any] | None
    # The tested nodes as a set, built once: the gate asks about every node (linear, not quadratic).
    tested: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tested", frozenset((self.state or {}).get("nodes") or ()))

    @property
    def enabled(self) -> bool:
        return self.state is None or bool(self.state.get("enabled", True))

    @property
    def notes(self) -> Mapping[str, str]:
        return dict((self.state or {}).get("notes") or {})


@dataclass(frozen=True, slots=True)
class Finding:
    """A verdict (or a missing one) that kept a node from passing."""

    stage: str
    criterion: str
    subject: str
    result: Result
    rule_id: str
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "criterion": self.criterion,
            "subject": self.subject,
            "result": self.result.value,
            "rule_id": self.rule_id,
            "reason": self.reason,
            "numbers": self.numbers,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Finding:
        return cls(
            str(data["stage"]),
            str(data["criterion"]),
            str(data["subject"]),
            Result(data["result"]),
            str(data["rule_id"]),
            str(data["reason"]),
            dict(data.get("numbers") or {}),
        )


@dataclass(frozen=True, slots=True)
class NodeGate:
    node: str
    result: Result
    action: str
    findings: tuple[Finding, ...]
    stages: dict[str, str]  # stage → its result for the node, or "not run: …" / "not applicable"

    @property
    def reason(self) -> str:
        if not self.findings:
            return "every stage passed"
        first = self.findings[0]
        more = f" (+{len(self.findings) - 1} more)" if len(self.findings) > 1 else ""
        return f"{first.stage}: {first.criterion} {first.result.value}: {first.reason}{more}"

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "result": self.result.value,
            "action": self.action,
            "reason": self.reason,
            "findings": [f.to_json() for f in self.findings],
            "stages": self.stages,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeGate:
        return cls(
            str(data["node"]),
            Result(data["result"]),
            str(data["action"]),
            tuple(Finding.from_json(f) for f in data.get("findings") or ()),
            dict(data.get("stages") or {}),
        )


@dataclass(frozen=True, slots=True)
class GateReport:
    nodes: dict[str, NodeGate]

    def counts(self) -> dict[str, int]:
        return dict(Counter(g.result.value for g in self.nodes.values()))

    def with_action(self, action: str) -> list[str]:
        return sorted(n for n, g in self.nodes.items() if g.action == action)

    def to_json(self) -> dict[str, Any]:
        return {"policy": GATE_POLICY_VERSION, "nodes": {n: g.to_json() for n, g in self.nodes.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GateReport:
        return cls({n: NodeGate.from_json(g) for n, g in (data.get("nodes") or {}).items()})


def numbers(evidence: Mapping[str, Any]) -> dict[str, Any]:
    """The evidence a human reads beside the reason: plain numbers, and DCGM's findings."""
    shown: dict[str, Any] = {}
    for key, value in evidence.items():
        if len(shown) >= MAX_NUMBERS:
            break
        if isinstance(value, int | float) and not isinstance(value, bool):
            shown[key] = value
    findings = evidence.get("findings")
    if isinstance(findings, list) and findings:
        shown["findings"] = [
            f"{f.get('test')}: {f.get('result')} on GPU {', '.join(map(str, f.get('gpus') or [])) or '?'}"
            for f in findings[:MAX_NUMBERS]
            if isinstance(f, Mapping)
        ]
    return shown


def attribute(
    rows: Iterable[Mapping[str, Any]], plan: OnboardingPlan, stages: Sequence[StageRun]
) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """(stage, node) → the stage's verdict rows about the node (only nodes the stage tested)."""
    by: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    rows = list(rows)
    for stage in stages:
        tested = stage.tested
        if not tested:
            continue
        for row in rows:
            if stage.impl.claims(row):
                for node in stage.impl.nodes_of(row, plan, tested):
                    by[(stage.spec.name, node)].append(row)
    return by


def _stage_result(rows: Sequence[Mapping[str, Any]]) -> Result:
    results = [Result(r["result"]) for r in rows]
    return Result.FAIL if Result.FAIL in results else worst(results)


def _finding(stage: str, row: Mapping[str, Any]) -> Finding:
    return Finding(
        stage,
        str(row["criterion"]),
        str(row["subject"]),
        Result(row["result"]),
        str(row["rule_id"]),
        str(row["reason"]),
        numbers(row.get("evidence") or {}),
    )


def _missing(stage: StageRun, node: str, reason: str) -> Finding:
    return Finding(
        stage.spec.name, "-", node, Result.INCONCLUSIVE, f"onboarding.{stage.spec.name}.untested", reason
    )


def judge_node(
    node: str,
    plan: OnboardingPlan,
    stages: Sequence[StageRun],
    attributed: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
    *,
    final: bool = True,
) -> NodeGate:
    """The gate for one node (see module doc). With `final` False (the funnel between stages),
    verdicts waiting for a baseline do not count, and stages not run yet are not missing."""
    findings: list[Finding] = []
    summary: dict[str, str] = {}
    stopped: str | None = None
    for stage in stages:
        name = stage.spec.name
        if not stage.enabled:
            summary[name] = "off"
            continue
        if stopped is not None:
            summary[name] = f"not run: stopped at {stopped}"
            continue
        if not stage.impl.applies(plan.nodes[node]):
            summary[name] = "not applicable"
            continue
        if stage.state is None:
            if final:
                findings.append(_missing(stage, node, f"{stage.spec.title}: the stage did not run"))
                summary[name] = Result.INCONCLUSIVE.value
                stopped = name
            continue
        if node in stage.notes:
            findings.append(_missing(stage, node, stage.notes[node]))
            summary[name] = Result.INCONCLUSIVE.value
            stopped = name
            continue
        if node not in stage.tested:
            # Not stopped before this stage, yet not tested by it: no evidence, no pass.
            if final:
                findings.append(_missing(stage, node, f"{stage.spec.title}: did not test this node"))
                summary[name] = Result.INCONCLUSIVE.value
                stopped = name
            continue
        rows = list(attributed.get((name, node), ()))
        if not final:
            rows = [r for r in rows if r["rule_id"] not in PENDING_BASELINE_RULES]
        if not rows:
            if final:
                findings.append(_missing(stage, node, f"{stage.spec.title}: left no verdict about this node"))
                summary[name] = Result.INCONCLUSIVE.value
                stopped = name
            continue
        result = _stage_result(rows)
        summary[name] = result.value
        findings.extend(_finding(name, r) for r in rows if r["result"] != Result.PASS.value)
        if result in STOPPING:
            stopped = name
    results = [f.result for f in findings]
    result = Result.FAIL if Result.FAIL in results else (worst(results) if results else Result.PASS)
    # Most severe first, so the first finding is the reason a human reads.
    findings.sort(key=lambda f: (f.result is not Result.FAIL, -f.result.severity))
    return NodeGate(node, result, ACTION_OF[result], tuple(findings[:MAX_FINDINGS]), summary)


def decide(plan: OnboardingPlan, rows: Iterable[Mapping[str, Any]], stages: Sequence[StageRun]) -> GateReport:
    """The gate for every planned node."""
    attributed = attribute(rows, plan, stages)
    return GateReport({n: judge_node(n, plan, stages, attributed) for n in plan.nodes})


def still_in(
    plan: OnboardingPlan, rows: Iterable[Mapping[str, Any]], earlier: Sequence[StageRun]
) -> tuple[list[str], dict[str, str]]:
    """The planned nodes whose verdicts in the `earlier` stages are all pass or warn (a missing
    baseline aside), and the stopped ones with the reason."""
    attributed = attribute(rows, plan, earlier)
    going: list[str] = []
    stopped: dict[str, str] = {}
    for node in plan.nodes:
        gate = judge_node(node, plan, earlier, attributed, final=False)
        if gate.result in STOPPING:
            stopped[node] = gate.reason
        else:
            going.append(node)
    return going, stopped
