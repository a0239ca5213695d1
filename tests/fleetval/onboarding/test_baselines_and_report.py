"""Baseline candidates (promoted only by an answer), the summary report and where it is read back."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fleetval.nccl.judge_stored import METRIC
from fleetval.onboarding import baselines
from fleetval.onboarding.approval import Decision, read_answer
from fleetval.onboarding.gate import ASK, Finding, GateReport, NodeGate
from fleetval.onboarding.plan import plan_onboarding
from fleetval.onboarding.report import build_report, render
from fleetval.onboarding.request import OnboardingRequest
from fleetval.records import Result
from fleetval.store.onboarding import SUITE, onboarding_report, onboarding_reports
from tests.fleetval.onboarding.helpers import PROFILE, node, row

CANDIDATES = [
    baselines.Candidate(7, 1, PROFILE, "intra-8", 478.2, ("a", "b"), (), 0.004),
    baselines.Candidate(8, 1, PROFILE, "inter-2x8", 369.9, ("a+b",), ("c+a",), None),
]


def test_what_is_missing_a_baseline() -> None:
    no_baseline = {
        "rule_id": "nccl.busbw.no_baseline",
        "judged_against": {"profile": PROFILE, "scope": "intra-8"},
    }
    rows = [row("D-NET-NCCL-01", "a", "inconclusive") | no_baseline, row("D-NET-NCCL-01", "b", "pass")]
    assert baselines.missing_baselines(rows * 2) == [(PROFILE, "intra-8")]


def test_the_question_and_its_answers() -> None:
    asked = baselines.question(CANDIDATES, rack="r01", timeout_minutes=30, refused={"x y": "no usable rows"})
    assert asked is not None
    assert asked["options"] == [c.label for c in CANDIDATES] + [baselines.PROMOTE_NONE]
    assert asked["defaults"] == [baselines.PROMOTE_NONE] and asked["response_timeout"] == dt.timedelta(
        minutes=30
    )
    assert (
        "478.20 GB/s" in asked["body"] and "c+a" in asked["body"] and "x y: no usable rows" in asked["body"]
    )
    assert baselines.question([], rack="r01", timeout_minutes=30) is None
    by = {"name": "alice"}
    assert baselines.chosen(
        CANDIDATES, {"chosen_options": [CANDIDATES[1].label], "responded_by_user": by}
    ) == [CANDIDATES[1]]
    both = [c.label for c in CANDIDATES]
    assert (
        baselines.chosen(
            CANDIDATES, {"chosen_options": [*both, baselines.PROMOTE_NONE], "responded_by_user": by}
        )
        == []
    )
    assert (
        baselines.chosen(CANDIDATES, {"chosen_options": both, "responded_by_user": None}) == []
    )  # a timeout
    assert baselines.chosen(CANDIDATES, None) == []
    assert baselines.Candidate.from_json(CANDIDATES[0].to_json()) == CANDIDATES[0]


def test_promotion_is_idempotent(store: Any) -> None:
    made = store.add_baseline_candidate(
        profile=PROFILE, metric=METRIC, scope="intra-8", value=478.2, unit="GB/s", stats={}, source={}
    )
    candidate = baselines.Candidate(made[0], made[1], PROFILE, "intra-8", 478.2, ("a",), (), None)
    assert baselines.promote(store, [candidate]) == [made[0]]
    assert baselines.promote(store, [candidate]) == [made[0]]  # a retried task
    assert store.promoted_baseline(profile=PROFILE, metric=METRIC, scope="intra-8")["id"] == made[0]


def report_for(dry_run: bool = False) -> dict[str, Any]:
    request = OnboardingRequest(rack="r01", dry_run=dry_run)
    plan = plan_onboarding(request, [node("a"), node("b"), node("c"), node("d", taint=None)], max_nodes=10)
    finding = Finding("dcgm", "D-DEV-01", "b", Result.WARN, "dev.onboarding.warn", "r2 warned", {})
    gate = GateReport(
        {
            "a": NodeGate("a", Result.PASS, "admit", (), {"dcgm": "pass"}),
            "b": NodeGate("b", Result.WARN, ASK, (finding,), {"dcgm": "warn"}),
            "c": NodeGate("c", Result.FAIL, "hold", (), {"dcgm": "fail"}),
        }
    )
    answer = read_answer(
        ["b"], {"chosen_options": ["b"], "responded_by_user": {"name": "alice"}, "responded_at": "t"}
    )
    decisions = {
        "a": Decision("a", True, "passed", "every stage passed"),
        "b": Decision("b", True, "approved", "warned; approved"),
        "c": Decision("c", False, "held", "r2 failed"),
    }
    return build_report(
        run_key="rack_onboarding/x",
        request=request,
        plan=plan,
        gate=gate,
        decisions=decisions,
        answer=answer,
        baselines={
            "candidates": [c.to_json() for c in CANDIDATES],
            "promoted": [7],
            "how": "answered by alice",
        },
        stages={"dcgm": {"enabled": True, "nodes": ["a", "b", "c"], "rounds": 1, "stopped": {}}},
        still_cordoned=["a"],
    )


def test_the_report_says_what_was_done_and_why() -> None:
    report = report_for()
    assert report["admitted"] == ["a", "b"] and report["held"] == ["c"]
    assert report["counts"] == {"pass": 1, "warn": 1, "fail": 1}
    assert report["nodes"]["b"]["findings"][0]["criterion"] == "D-DEV-01"
    assert "already in service" in report["refused"]["d"]
    assert report["stages"] == {"dcgm": {"enabled": True, "nodes": ["a", "b", "c"], "rounds": 1}}
    text = render(report)
    assert (
        "a                        pass          admitted          every stage passed (still cordoned)" in text
    )
    assert (
        "approval: answered by alice" in text
        and "#7 NVIDIA-H100-80GB-HBM3 intra-8 478.20 GB/s v1: promoted" in text
    )
    assert "#8" in text and "left a candidate" in text
    dry = report_for(dry_run=True)
    assert "dry run" in render(dry) and dry["nodes"]["a"]["decision"] == "would be admitted"
    assert dry["admitted"] == ["a", "b"]


def test_reports_are_read_back_newest_first(store: Any) -> None:
    ids = []
    for i, rack in enumerate(("r01", "r02", "r01")):
        run_id = store.ensure_run(
            f"rack_onboarding/run{i}", suite=SUITE, backend="test", meta={"request": {"rack": rack}}
        )
        store.update_run_meta(run_id, report={"rack": rack, "n": i})
        ids.append(run_id)
    store.ensure_run(
        "weekly_health_sweep/x", suite="weekly", backend="test", meta={"request": {"rack": "r01"}}
    )
    running = store.ensure_run(
        "rack_onboarding/run3", suite=SUITE, backend="test", meta={"request": {"rack": "r01"}}
    )
    newest = onboarding_reports(store)
    assert [r["run_id"] for r in newest] == [running, *reversed(ids)]
    assert newest[0]["report"] is None and newest[1]["report"] == {"rack": "r01", "n": 2}
    assert [r["run_id"] for r in onboarding_reports(store, rack="r01", limit=2)] == [running, ids[2]]
    assert onboarding_report(store, ids[1]) == {"rack": "r02", "n": 1}
    assert onboarding_report(store, 10_000) is None
