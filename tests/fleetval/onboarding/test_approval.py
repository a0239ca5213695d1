"""The approval question and the reading of its answer: silence and contradictions hold."""

from __future__ import annotations

import datetime as dt

from fleetval.onboarding.approval import (
    HOLD_ALL,
    MAX_NODES_IN_BODY,
    Answer,
    decide_node,
    question,
    read_answer,
)
from fleetval.onboarding.gate import ASK, HOLD, Finding, GateReport, NodeGate
from fleetval.records import Result


def gate_of(node: str, result: Result, action: str, reason: str = "r2 warned") -> NodeGate:
    finding = Finding("dcgm", "D-DEV-01", node, result, "dev.onboarding.warn", reason, {"level": 2})
    findings = () if result is Result.PASS else (finding,)
    return NodeGate(node, result, action, findings, {"operator": "pass", "dcgm": result.value})


REPORT = GateReport(
    {
        "n1": gate_of("n1", Result.PASS, "admit"),
        "n2": gate_of("n2", Result.WARN, ASK, "r2 warned | held"),
        "n3": gate_of("n3", Result.WARN, ASK),
        "n4": gate_of("n4", Result.FAIL, HOLD, "r2 failed"),
    }
)


def test_only_warned_nodes_are_offered_and_the_default_holds() -> None:
    asked = question(
        REPORT,
        rack="r01",
        timeout_minutes=90,
        messages={"n2": ["memory: Thermal violations 13.3 s"]},
        held={"n4": "r2 failed"},
    )
    assert asked is not None
    assert asked["options"] == ["n2", "n3", HOLD_ALL] and asked["defaults"] == [HOLD_ALL]
    assert asked["response_timeout"] == dt.timedelta(minutes=90)
    body = asked["body"]
    assert "#### `n2`: warn" in body and "r2 warned \\| held" in body  # a | cannot break the table
    assert "Thermal violations 13.3 s" in body and "level=2" in body
    assert "- `n4`: r2 failed" in body and "1.5 h" in body
    assert "Passed: operator." in body


def test_nothing_to_ask() -> None:
    assert (
        question(
            GateReport({"n1": REPORT.nodes["n1"], "n4": REPORT.nodes["n4"]}), rack="r01", timeout_minutes=1
        )
        is None
    )


def test_a_long_list_is_cut_in_the_body_not_in_the_options() -> None:
    many = GateReport(
        {f"n{i:03d}": gate_of(f"n{i:03d}", Result.WARN, ASK) for i in range(MAX_NODES_IN_BODY + 5)}
    )
    asked = question(many, rack="r01", timeout_minutes=1)
    assert asked is not None and len(asked["options"]) == MAX_NODES_IN_BODY + 6
    assert "and 5 more node(s)" in asked["body"]


def test_reading_the_answer() -> None:
    at = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)
    user = {"id": "alice", "name": "Alice"}
    chosen = read_answer(
        ["n2", "n3"], {"chosen_options": ["n2"], "responded_by_user": user, "responded_at": at}
    )
    assert (
        chosen.approved == ("n2",)
        and chosen.held == ("n3",)
        and chosen.by == "Alice"
        and not chosen.timed_out
    )
    assert chosen.at == at.isoformat() and "answered by Alice" in chosen.how
    contradictory = read_answer(["n2"], {"chosen_options": ["n2", HOLD_ALL], "responded_by_user": user})
    assert contradictory.approved == ()
    timed_out = read_answer(
        ["n2"], {"chosen_options": [HOLD_ALL], "responded_by_user": None, "responded_at": at}
    )
    assert timed_out.timed_out and timed_out.approved == () and "default, hold" in timed_out.how
    missing = read_answer(["n2"], None)
    assert not missing.received and missing.held == ("n2",)
    stranger = read_answer(["n2"], {"chosen_options": ["n9"], "responded_by_user": user})
    assert stranger.approved == ()
    assert Answer.from_json(chosen.to_json()) == chosen


def test_what_happens_to_each_node() -> None:
    answer = read_answer(["n2", "n3"], {"chosen_options": ["n3"], "responded_by_user": {"name": "bob"}})
    decisions = {n: decide_node(g, answer) for n, g in REPORT.nodes.items()}
    assert {n: (d.admit, d.state) for n, d in decisions.items() if d} == {
        "n1": (True, "passed"),
        "n2": (False, "held"),
        "n3": (True, "approved"),
        "n4": (False, "held"),
    }
    assert decisions["n2"] is not None and "not approved: answered by bob" in decisions["n2"].why
    assert decide_node(REPORT.nodes["n2"], None) is None  # a warned node waits for the answer
    held = decide_node(REPORT.nodes["n4"], None)
    assert held is not None and held.why == REPORT.nodes["n4"].reason
