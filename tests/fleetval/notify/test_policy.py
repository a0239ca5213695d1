"""The notification policy, evaluation after evaluation (pure): one storm is one summary per
channel, a flapping node is one incident, an unchanged fleet says nothing, the rate limit holds
back and then reports, and each kind of condition opens and resolves its incident."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from fleetval.errors import SpecError
from fleetval.notify.events import Kind, diff
from fleetval.notify.payloads import render
from fleetval.notify.policy import DEFAULT_POLICY, DIGEST, Channel, policy_from_settings, storm_key
from fleetval.settings import NotifySettings
from fleetval.store.metrics import Breaker
from fleetval.store.notifications import RolloutHalt
from tests.fleetval.notify.sim import T0, Notifier, node_names, snapshot

MIN = dt.timedelta(minutes=1)
NODES = node_names(64)


def test_a_storm_of_40_quarantines_is_one_summary_per_channel() -> None:
    notifier = Notifier()
    storm = NODES[:40]
    planned = notifier.evaluate(snapshot(NODES, storm, now=T0), T0)

    assert sorted(n.channel for n in planned.notices) == sorted(Channel)  # one each, nothing else
    key = storm_key(Kind.QUARANTINE, T0)
    for notice in planned.notices:
        assert (notice.kind, notice.resolves, notice.suppressed) == ("quarantine", False, False)
        assert notice.count == 40 and notice.dedup_key == key
        assert notice.subjects == tuple(storm[:10])  # the sample, in natural order
        assert (
            notice.title.startswith("40 nodes quarantined: r01-n01, r01-n02")
            and "and 30 more" in notice.title
        )
    pd = render(next(n for n in planned.notices if n.channel is Channel.PAGERDUTY))
    assert pd["event_action"] == "trigger" and pd["dedup_key"] == key
    assert pd["payload"]["custom_details"]["count"] == 40
    assert pd["payload"]["custom_details"]["by_domain"] == {"r01": 8, "r02": 8, "r03": 8, "r04": 8, "r05": 8}
    # every node still has its own incident, announced under the storm's key
    incidents = [i for i in notifier.ledger.incidents.values() if i.kind is Kind.QUARANTINE]
    assert len(incidents) == 40 and len({i.dedup_key for i in incidents}) == 40
    assert {k for i in incidents for k in i.announced.values()} == {key}

    # the same sweep read again: nothing new
    assert notifier.evaluate(snapshot(NODES, storm, now=T0 + 10 * MIN), T0 + 10 * MIN).notices == ()

    # 39 return: the summary's alert stays open while one of its nodes is out
    assert notifier.evaluate(snapshot(NODES, storm[39:], now=T0 + 20 * MIN), T0 + 20 * MIN).notices == ()
    # the last returns: one resolve of the summary's key per channel
    last = notifier.evaluate(snapshot(NODES, [], now=T0 + 30 * MIN), T0 + 30 * MIN)
    assert sorted(n.channel for n in last.notices) == sorted(Channel)
    assert {(n.resolves, n.dedup_key, n.kind) for n in last.notices} == {(True, key, "return_to_service")}
    assert (
        render(next(n for n in last.notices if n.channel is Channel.PAGERDUTY))["event_action"] == "resolve"
    )
    close = render(next(n for n in last.notices if n.channel is Channel.WEBHOOK))
    assert close["path"].endswith("/close?identifierType=alias")


def test_below_the_storm_threshold_each_node_is_its_own_notice() -> None:
    notifier = Notifier()
    planned = notifier.evaluate(snapshot(NODES, NODES[:4], now=T0), T0)
    pd = [n for n in planned.notices if n.channel is Channel.PAGERDUTY]
    assert sorted(n.subjects for n in pd) == [(n,) for n in NODES[:4]]
    assert len({n.dedup_key for n in pd}) == 4


def test_a_flapping_node_is_one_incident_with_one_key() -> None:
    notifier = Notifier()
    node = NODES[3]
    at = T0
    for _ in range(3):  # quarantined, back in service ten minutes later, quarantined again…
        notifier.evaluate(snapshot(NODES, [node], now=at), at)
        notifier.evaluate(snapshot(NODES, [], now=at + 10 * MIN), at + 10 * MIN)
        at += 20 * MIN
    notifier.evaluate(snapshot(NODES, [node], now=at), at)

    [incident] = [i for i in notifier.ledger.incidents.values() if i.subject == node]
    assert incident.count == 4 and incident.is_open and incident.opened_at == T0
    pd = [render(n) for n in notifier.sent(Channel.PAGERDUTY)]
    assert [e["event_action"] for e in pd] == ["trigger", "resolve"] * 3 + ["trigger"]
    assert {e["dedup_key"] for e in pd} == {incident.dedup_key}  # one PagerDuty incident throughout
    assert pd[-1]["payload"]["custom_details"]["times_opened"] == 4
    slack = notifier.sent(Channel.SLACK)
    assert "again: opened 4 times" in slack[-1].title

    # back in service for longer than the flap window: a new quarantine is a new incident
    later = at + 10 * MIN
    notifier.evaluate(snapshot(NODES, [], now=later), later)
    much_later = later + DEFAULT_POLICY.flap_window + MIN
    planned = notifier.evaluate(snapshot(NODES, [node], now=much_later), much_later)
    [fresh] = [n for n in planned.notices if n.channel is Channel.PAGERDUTY]
    assert fresh.dedup_key != incident.dedup_key and fresh.opened == 1


def test_an_unchanged_fleet_says_nothing() -> None:
    notifier = Notifier()
    snap = snapshot(NODES, NODES[:2], now=T0)
    assert notifier.evaluate(snap, T0).notices
    for i in range(1, 6):
        assert notifier.evaluate(snap, T0 + i * 10 * MIN).notices == ()
    assert diff(notifier.ledger.known(), notifier.state(snap, T0)) == []


def test_the_rate_limit_holds_back_counts_and_reports() -> None:
    policy = dataclasses.replace(DEFAULT_POLICY, rate_limit=3, storm_threshold=50)
    notifier = Notifier(policy, channels=(Channel.SLACK,))
    out: list[str] = []

    first = notifier.evaluate(snapshot(NODES, out := NODES[:5], now=T0), T0)
    assert [n.suppressed for n in first.notices] == [False, False, False, True, True]
    assert notifier.ledger.held == {"slack": {"quarantine": 2}}
    # still within the hour: a new quarantine is held back too
    t = T0 + 10 * MIN
    second = notifier.evaluate(snapshot(NODES, out := [*out, NODES[5]], now=t), t)
    assert [n.suppressed for n in second.notices] == [True]
    assert notifier.ledger.held == {"slack": {"quarantine": 3}}

    # the hour has passed: the next notice reports the three held back, never silently dropped
    t = T0 + 61 * MIN
    third = notifier.evaluate(snapshot(NODES, [*out, NODES[6]], now=t), t)
    [notice] = third.notices
    assert not notice.suppressed and notice.held_back == {"quarantine": 3}
    assert "held back by the rate limit since the last notice: quarantine 3" in str(render(notice)["blocks"])
    assert notifier.ledger.held == {}


def test_held_back_notices_are_reported_alone_when_nothing_else_goes_out() -> None:
    policy = dataclasses.replace(DEFAULT_POLICY, rate_limit=1, storm_threshold=50)
    notifier = Notifier(policy, channels=(Channel.SLACK,))
    notifier.evaluate(snapshot(NODES, NODES[:3], now=T0), T0)
    assert notifier.ledger.held == {"slack": {"quarantine": 2}}
    t = T0 + 61 * MIN
    [digest] = notifier.evaluate(snapshot(NODES, NODES[:3], now=t), t).notices
    assert digest.kind == DIGEST and digest.count == 2 and digest.held_back == {"quarantine": 2}
    assert notifier.ledger.held == {}


def test_a_resolve_is_never_held_back_on_a_stateful_channel() -> None:
    policy = dataclasses.replace(DEFAULT_POLICY, rate_limit=1, storm_threshold=50)
    notifier = Notifier(policy, channels=(Channel.PAGERDUTY,))
    first = notifier.evaluate(snapshot(NODES, NODES[:2], now=T0), T0)
    announced, held = first.notices
    assert not announced.suppressed and held.suppressed
    back = notifier.evaluate(snapshot(NODES, [], now=T0 + 10 * MIN), T0 + 10 * MIN)
    # the budget is spent, yet the page that went out is resolved; the held one was never opened
    assert [(n.dedup_key, n.resolves, n.suppressed) for n in back.notices] == [
        (announced.dedup_key, True, False)
    ]


def test_routes_keep_coverage_and_scenarios_off_the_pager() -> None:
    notifier = Notifier()
    stale = T0 - dt.timedelta(days=9)
    snap = snapshot(NODES[:2], now=T0, covered_at=stale, scenarios={("d-sched-05-preempt", "D-SCHED-05"): 3})
    planned = notifier.evaluate(snap, T0)
    kinds = {(n.channel, n.kind) for n in planned.notices}
    assert (Channel.SLACK, "coverage_missed") in kinds and (Channel.WEBHOOK, "scenario_fail") in kinds
    assert not [n for n in planned.notices if n.channel is Channel.PAGERDUTY]
    [scenario] = [n for n in planned.notices if n.kind == "scenario_fail" and n.channel is Channel.SLACK]
    assert scenario.evidence.criteria == ("D-SCHED-05",) and scenario.severity == "warning"
    # covered again, passing again: both resolve
    fixed = notifier.evaluate(snapshot(NODES[:2], now=T0 + 10 * MIN), T0 + 10 * MIN)
    assert {n.kind for n in fixed.notices if n.resolves} == {"coverage_missed", "scenario_fail"}


def test_a_breaker_opens_with_its_trip_and_resolves_when_its_window_passes() -> None:
    notifier = Notifier()
    trip = Breaker("r02", "safety.action_budget.exceeded", T0 - 5 * MIN, None)
    planned = notifier.evaluate(snapshot(NODES[:16], now=T0, breakers=[trip]), T0)
    [pd] = [n for n in planned.notices if n.channel is Channel.PAGERDUTY]
    assert pd.kind == "breaker_trip" and pd.severity == "critical" and pd.evidence.criteria == ("F-SAFE-01",)
    assert render(pd)["payload"]["group"] == "r02"
    later = T0 + dt.timedelta(hours=1)  # the default window (an hour) has passed
    closed = notifier.evaluate(snapshot(NODES[:16], now=later, breakers=[trip]), later)
    assert {(n.channel, n.resolves) for n in closed.notices} == {(c, True) for c in Channel}


def test_a_rollout_halt_pages_once_and_ages_out_quietly() -> None:
    notifier = Notifier()
    halt = RolloutHalt("nccl/run-1/nccl-rollout-halt", T0, "D-NET-NCCL-01 failed on r01-n02", ("r01-n02",))
    planned = notifier.evaluate(snapshot(NODES[:8], now=T0), T0, halts=[halt])
    assert {(n.channel, n.kind) for n in planned.notices} == {(c, "rollout_halt") for c in Channel}
    assert (
        notifier.evaluate(snapshot(NODES[:8], now=T0 + 10 * MIN), T0 + 10 * MIN, halts=[halt]).notices == ()
    )
    aged = notifier.evaluate(snapshot(NODES[:8], now=T0 + dt.timedelta(days=2)), T0 + dt.timedelta(days=2))
    assert aged.notices == ()  # a person lifts a halt: its record ageing out is no news
    assert not notifier.ledger.incidents[(Kind.ROLLOUT_HALT, halt.key)].is_open


def test_shadow_quarantines_and_shadow_mode() -> None:
    # a dry-run quarantine did nothing to the node: no condition
    notifier = Notifier()
    assert notifier.evaluate(snapshot(NODES[:8], now=T0, shadow_quarantined=["r01-n01"]), T0).notices == ()
    # shadow mode plans the same notices, marked as shadow (the recorder stores them as such)
    shadow = Notifier(dataclasses.replace(DEFAULT_POLICY, shadow=True))
    planned = shadow.evaluate(snapshot(NODES, NODES[:40], now=T0), T0)
    assert planned.shadow and len(planned.notices) == len(Channel)


def test_policy_from_settings_names_what_it_changed() -> None:
    assert policy_from_settings(NotifySettings()) == DEFAULT_POLICY
    tuned = policy_from_settings(NotifySettings(storm_threshold=10, shadow=True))
    assert (
        tuned.storm_threshold == 10 and tuned.shadow and tuned.id == DEFAULT_POLICY.id + ";storm_threshold=10"
    )
    with pytest.raises(SpecError):
        dataclasses.replace(DEFAULT_POLICY, storm_threshold=1)
    with pytest.raises(ValueError, match="FLEETVAL_NOTIFY_RATE_LIMIT"):
        NotifySettings.from_env({"FLEETVAL_NOTIFY_RATE_LIMIT": "0"})
    with pytest.raises(ValueError, match="FLEETVAL_NOTIFY_CHANNELS"):
        NotifySettings.from_env({"FLEETVAL_NOTIFY_CHANNELS": "slack,email"})
    assert NotifySettings.from_env(
        {"FLEETVAL_NOTIFY_CHANNELS": "slack", "FLEETVAL_NOTIFY_SHADOW": "true"}
    ) == (NotifySettings(channels=("slack",), shadow=True))
