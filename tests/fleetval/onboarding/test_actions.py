"""Node actions: applied then recorded, never in a dry run; the answer stored in the verdicts."""

from __future__ import annotations

from typing import Any

from fleetval.onboarding import actions
from fleetval.onboarding.approval import Decision, read_answer
from fleetval.onboarding.plan import plan_onboarding
from fleetval.onboarding.request import OnboardingRequest
from fleetval.records import Result, Verdict
from tests.fleetval.onboarding.helpers import node

PLAN = plan_onboarding(
    OnboardingRequest(
        rack="r01",
        nodes=("r01-n01", "loose"),
        include_in_service=True,
        max_rack_fraction=1.0,
        max_action_fraction=1.0,
    ),
    [node("r01-n01"), node("loose", "", taint=None)],
    max_nodes=10,
)


class Cluster:
    """NodeActions that remember what was done."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def add_taint(self, node: str, key: str, value: str, effect: str) -> None:
        self.calls.append(("taint", node, key, value, effect))

    def remove_taint(self, node: str, key: str) -> None:
        self.calls.append(("untaint", node, key))

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self.calls.append(("labels", node, labels))

    def cordon(self, node: str) -> None:
        raise AssertionError("onboarding never cordons")

    uncordon = cordon

    def cordon_and_taint(self, node: str, **kwargs: Any) -> None:
        raise AssertionError("onboarding never cordons")


def test_start_taints_pending_and_labels_the_rack_of_an_unlabelled_node(store: Any) -> None:
    run_id = store.ensure_run("rack_onboarding/t1", suite="rack_onboarding", backend="test")
    cluster = Cluster()
    changes = actions.start_changes(PLAN, rack_label="fleetval.io/rack")
    recorded = actions.apply_changes(
        changes, nodes=cluster, store=store, run_id=run_id, run_key="k", phase="start", dry_run=False
    )
    assert recorded == 4
    assert cluster.calls == [
        ("taint", "loose", "fleetval.io/onboarding", "pending", "NoSchedule"),
        (
            "labels",
            "loose",
            {"fleetval.io/onboarding": "pending", "fleetval.io/in-service": None, "fleetval.io/rack": "r01"},
        ),
        ("taint", "r01-n01", "fleetval.io/onboarding", "pending", "NoSchedule"),
        ("labels", "r01-n01", {"fleetval.io/onboarding": "pending", "fleetval.io/in-service": None}),
    ]
    events = store.node_events("loose")
    assert [e["kind"] for e in events] == ["taint", "label"] and "taken out of service" in events[0]["reason"]
    # A rerun patches again (idempotent) and records nothing twice.
    actions.apply_changes(
        changes, nodes=cluster, store=store, run_id=run_id, run_key="k", phase="start", dry_run=False
    )
    assert len(store.node_events(run_id=run_id)) == 4


def test_admit_and_hold(store: Any) -> None:
    run_id = store.ensure_run("rack_onboarding/t2", suite="rack_onboarding", backend="test")
    cluster = Cluster()
    admit = actions.decision_change(Decision("a", True, "approved", "warned; approved"))
    hold = actions.decision_change(Decision("b", False, "held", "r2 failed"))
    actions.apply_changes(
        [admit, hold], nodes=cluster, store=store, run_id=run_id, run_key="k", phase="gate", dry_run=False
    )
    assert cluster.calls == [
        ("untaint", "a", "fleetval.io/onboarding"),
        ("labels", "a", {"fleetval.io/in-service": "true", "fleetval.io/onboarding": "approved"}),
        ("taint", "b", "fleetval.io/onboarding", "held", "NoSchedule"),
        ("labels", "b", {"fleetval.io/onboarding": "held", "fleetval.io/in-service": None}),
    ]
    assert [e["reason"] for e in store.node_events("b")] == ["r2 failed", "r2 failed"]


def test_a_dry_run_touches_nothing_and_says_so(store: Any) -> None:
    run_id = store.ensure_run("rack_onboarding/t3", suite="rack_onboarding", backend="test")
    cluster = Cluster()
    changes = actions.start_changes(PLAN, rack_label="fleetval.io/rack")
    actions.apply_changes(
        changes, nodes=cluster, store=store, run_id=run_id, run_key="k", phase="start", dry_run=True
    )
    assert cluster.calls == []
    events = store.node_events(run_id=run_id)
    assert len(events) == 4 and all(e["dry_run"] for e in events)


def test_the_answer_is_stored_in_the_d_dev_01_verdict(store: Any) -> None:
    run_id = store.ensure_run("rack_onboarding/t4", suite="rack_onboarding", backend="test")
    warned = [
        Verdict(
            "D-DEV-01",
            n,
            Result.WARN,
            "hold_for_approval",
            "dev.onboarding.warn",
            "r2 warned",
            {"level": 2},
            {"policy_version": "p"},
        )
        for n in ("a", "b")
    ]
    store.add_verdicts(run_id, warned)
    answer = read_answer(
        ["a", "b"],
        {
            "chosen_options": ["a"],
            "responded_by_user": {"name": "alice"},
            "responded_at": "2026-12-01T12:00:00+00:00",
        },
    )
    assert actions.store_approval(store, run_id, store.verdicts(run_id), answer) == 2
    rows = {r["subject"]: r for r in store.verdicts(run_id)}
    assert len(rows) == 2  # the same rows, not new ones
    a, b = rows["a"], rows["b"]
    assert a["result"] == "warn" and a["action"] == "admit_approved"
    assert a["evidence"]["level"] == 2 and a["evidence"]["approval"]["by"] == "alice"
    assert a["evidence"]["approval"]["at"] == "2026-12-01T12:00:00+00:00"
    assert b["action"] == "hold_not_approved" and b["evidence"]["approval"]["answer"] == "held"
    assert (
        a["judged_against"]["policy_version"] == "p" and "operator answer" in a["judged_against"]["approval"]
    )
    silence = read_answer(
        ["b"], {"chosen_options": ["Hold every node (approve none)"], "responded_by_user": None}
    )
    actions.store_approval(store, run_id, store.verdicts(run_id), silence)
    b = next(r for r in store.verdicts(run_id) if r["subject"] == "b")
    assert (
        b["evidence"]["approval"]["answer"] == "hold (default)"
        and b["evidence"]["approval"]["timed_out"] is True
    )
