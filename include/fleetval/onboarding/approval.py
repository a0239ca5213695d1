"""The human in the loop: the approval question for the nodes that warned, and its answer.

The question (Airflow's HITLOperator, multiple choice) offers each warned node by name plus
`HOLD_ALL`, the default: a timeout applies the default, so silence holds every node. Its body is
Markdown: per node, each finding that kept it from passing (stage, criterion, subject, result,
reason, the numbers) and DCGM's own warning text. Nodes that failed, errored or were inconclusive
are never offered: they are held with their reasons.

The answer: the chosen nodes are approved, the others held; `HOLD_ALL` chosen with nodes holds
every node (the safer reading of a contradictory answer); no answer at all (the question's task
never completed) holds every node too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fleetval.onboarding.gate import ASK, GateReport, NodeGate
from fleetval.records import Result

HOLD_ALL: Final = "Hold every node (approve none)"
APPROVED: Final = "approved"
PASSED: Final = "passed"
HELD: Final = "held"
MAX_NODES_IN_BODY: Final = 50
MAX_MESSAGE_CHARS: Final = 300


def _cell(text: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")[:MAX_MESSAGE_CHARS]


def _numbers(numbers: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for key, value in numbers.items():
        if key == "findings":
            parts.extend(str(v) for v in value)
        else:
            parts.append(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}")
    return "; ".join(parts)


def node_section(gate: NodeGate, messages: Sequence[str] = ()) -> str:
    lines = [
        f"#### `{gate.node}`: {gate.result.value}",
        "",
        "| stage | criterion | subject | result | reason | numbers |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {f.stage} | {f.criterion} | {_cell(f.subject)} | **{f.result.value}** | {_cell(f.reason)} "
        f"| {_cell(_numbers(f.numbers))} |"
        for f in gate.findings
    ]
    if messages:
        lines += ["", "DCGM said:", ""] + [f"- {_cell(m)}" for m in messages]
    passed = [s for s, r in gate.stages.items() if r == Result.PASS.value]
    if passed:
        lines += ["", f"Passed: {', '.join(passed)}."]
    return "\n".join(lines)


def question(
    report: GateReport,
    *,
    rack: str,
    timeout_minutes: float,
    messages: Mapping[str, Sequence[str]] | None = None,
    held: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """The HITLOperator arguments for the nodes that warned (None when none did)."""
    offered = report.with_action(ASK)
    if not offered:
        return None
    shown = offered[:MAX_NODES_IN_BODY]
    hours = timeout_minutes / 60
    body = [
        f"### Rack `{rack}`: {len(offered)} node(s) warned",
        "",
        "Every stage passed or warned on these nodes. Choose the nodes to **admit**: they lose the "
        "`fleetval.io/onboarding` taint and get `fleetval.io/in-service=true`. The others stay "
        "held (tainted) with these findings recorded. "
        f"Without an answer within {hours:g} h every node is held. "
        f"Choosing *{HOLD_ALL}* holds them all.",
        "",
    ]
    body += [node_section(report.nodes[n], (messages or {}).get(n, ())) + "\n" for n in shown]
    if len(offered) > len(shown):
        body.append(f"… and {len(offered) - len(shown)} more node(s): see the run's report.\n")
    if held:
        body += ["#### Held without asking (failed, broke the harness or inconclusive)", ""]
        body += [f"- `{n}`: {_cell(r)}" for n, r in sorted(held.items())[:MAX_NODES_IN_BODY]]
    return {
        "subject": f"Rack {rack}: admit {len(offered)} node(s) that warned?",
        "body": "\n".join(body),
        "options": [*offered, HOLD_ALL],
        "defaults": [HOLD_ALL],
        "response_timeout": dt.timedelta(minutes=timeout_minutes),
    }


@dataclass(frozen=True, slots=True)
class Answer:
    """What the human answered about the offered nodes."""

    offered: tuple[str, ...]
    approved: tuple[str, ...]
    received: bool  # an answer (or the timeout's default) reached the run
    timed_out: bool  # nobody answered in time: the default (hold) was applied
    by: str | None = None
    at: str | None = None
    chosen: tuple[str, ...] = ()

    @property
    def held(self) -> tuple[str, ...]:
        return tuple(n for n in self.offered if n not in self.approved)

    @property
    def how(self) -> str:
        if not self.received:
            return "no answer (the approval task did not complete)"
        if self.timed_out:
            return f"no answer by {self.at}: the default, hold"
        return f"answered by {self.by} at {self.at}"

    def to_json(self) -> dict[str, Any]:
        return {
            "offered": list(self.offered),
            "approved": list(self.approved),
            "held": list(self.held),
            "received": self.received,
            "timed_out": self.timed_out,
            "by": self.by,
            "at": self.at,
            "chosen": list(self.chosen),
            "how": self.how,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Answer:
        return cls(
            tuple(data["offered"]),
            tuple(data["approved"]),
            bool(data["received"]),
            bool(data["timed_out"]),
            data.get("by"),
            data.get("at"),
            tuple(data.get("chosen") or ()),
        )


def _who(user: Any) -> str | None:
    if isinstance(user, Mapping):
        return str(user.get("name") or user.get("id") or "") or None
    return str(user) if user else None


def read_answer(offered: Sequence[str], result: Mapping[str, Any] | None) -> Answer:
    """The answer in the HITL task's result (`chosen_options`, `responded_by_user`,
    `responded_at`); None when the task left none. A timeout is an answer nobody gave."""
    offered = tuple(offered)
    if not result:
        return Answer(offered, (), received=False, timed_out=False)
    chosen = tuple(str(c) for c in result.get("chosen_options") or ())
    at = result.get("responded_at")
    at_text = at.isoformat() if isinstance(at, dt.datetime) else (str(at) if at else None)
    by = _who(result.get("responded_by_user"))
    approved = () if HOLD_ALL in chosen else tuple(n for n in offered if n in chosen)
    return Answer(offered, approved, received=True, timed_out=by is None, by=by, at=at_text, chosen=chosen)


@dataclass(frozen=True, slots=True)
class Decision:
    node: str
    admit: bool
    state: str  # passed | approved | held
    why: str


def decide_node(gate: NodeGate, answer: Answer | None) -> Decision | None:
    """What happens to a node: pass → admitted; warn → as answered (None while unanswered);
    anything else → held with its reason."""
    if gate.result is Result.PASS:
        return Decision(gate.node, True, PASSED, "every stage passed")
    if gate.action != ASK:
        return Decision(gate.node, False, HELD, gate.reason)
    if answer is None:
        return None
    if gate.node in answer.approved:
        return Decision(gate.node, True, APPROVED, f"warned ({gate.reason}); approved: {answer.how}")
    return Decision(gate.node, False, HELD, f"warned ({gate.reason}); not approved: {answer.how}")
