"""Each receiver's format and limits, whatever the notice holds: PagerDuty's Events API v2,
Opsgenie's alert API, Slack's incoming-webhook blocks."""

from __future__ import annotations

import datetime as dt

from fleetval.notify.events import Evidence, Kind
from fleetval.notify.payloads import opsgenie_request, pagerduty_event, render, slack_message
from fleetval.notify.policy import Channel, Notice, incident_key
from tests.fleetval.notify.sim import T0, Notifier, node_names, snapshot

LONG = "n" * 253  # the longest node name Kubernetes allows


def _notice(channel: Channel, *, resolves: bool = False, severity: str = "error") -> Notice:
    criteria = tuple(f"D-CRIT-{i:02d}" for i in range(40))
    evidence = Evidence(
        f"{LONG} quarantined <rack r1 & more>: " + "x" * 5000,
        criteria,
        tuple(range(100)),
        "r1",
        {"blob": "y" * 9000},
    )
    key = incident_key(Kind.QUARANTINE, LONG, T0)
    return Notice(
        channel, "quarantine", resolves, key, severity, evidence.message, (LONG,), 1, evidence, (key,)
    )


def test_pagerduty_event_fields_and_limits() -> None:
    event = pagerduty_event(_notice(Channel.PAGERDUTY))
    assert set(event) == {"event_action", "dedup_key", "payload"}
    assert event["event_action"] == "trigger" and len(event["dedup_key"]) <= 255
    payload = event["payload"]
    assert set(payload) == {"summary", "source", "severity", "component", "group", "class", "custom_details"}
    assert len(payload["summary"]) == 1024 and payload["summary"].endswith("…")
    assert payload["severity"] in {"critical", "error", "warning", "info"}
    assert (payload["source"], payload["group"], payload["class"]) == (LONG, "r1", "quarantine")
    assert payload["custom_details"]["criteria"][0] == "D-CRIT-00"
    resolve = pagerduty_event(_notice(Channel.PAGERDUTY, resolves=True, severity="info"))
    assert resolve["event_action"] == "resolve" and resolve["dedup_key"] == event["dedup_key"]


def test_opsgenie_alert_fields_and_limits() -> None:
    request = opsgenie_request(_notice(Channel.WEBHOOK, severity="critical"))
    assert request["path"] == "v2/alerts"
    body = request["body"]
    assert len(body["message"]) <= 130 and body["alias"] == incident_key(Kind.QUARANTINE, LONG, T0)
    assert body["priority"] == "P1" and body["source"] == "fleetval"
    assert len(body["tags"]) <= 20 and all(len(t) <= 50 for t in body["tags"])
    assert all(isinstance(v, str) for v in body["details"].values())
    assert sum(len(k) + len(v) for k, v in body["details"].items()) <= 8000
    assert body["details"]["truncated"].startswith("details cut")
    assert len(body["description"]) <= 15000 and len(body["entity"]) <= 512
    close = opsgenie_request(_notice(Channel.WEBHOOK, resolves=True))
    assert close["path"].startswith("v2/alerts/fleetval%2Fquarantine%2F")
    assert close["path"].endswith("/close?identifierType=alias") and set(close["body"]) == {"source", "note"}


def test_slack_message_blocks_and_escaping() -> None:
    message = slack_message(_notice(Channel.SLACK))
    assert set(message) == {"text", "blocks"}
    header, section, context = message["blocks"]
    assert header["type"] == "header" and len(header["text"]["text"]) <= 150
    assert section["text"]["type"] == "mrkdwn" and len(section["text"]["text"]) <= 3000
    assert "&lt;rack r1 &amp; more&gt;" in section["text"]["text"]  # Slack's control characters escaped
    assert "<rack" not in message["text"]
    assert len(context["elements"]) <= 10


def test_every_notice_of_a_busy_evaluation_renders_within_limits() -> None:
    notifier = Notifier()
    nodes = node_names(200)
    stale = T0 - dt.timedelta(days=30)
    planned = notifier.evaluate(snapshot(nodes, nodes[:120], now=T0, covered_at=stale), T0)
    assert planned.notices
    for notice in planned.notices:
        payload = render(notice)
        if notice.channel is Channel.PAGERDUTY:
            assert len(payload["payload"]["summary"]) <= 1024
        elif notice.channel is Channel.WEBHOOK:
            assert len(payload["body"]["message"]) <= 130
        else:
            assert len(payload["blocks"][0]["text"]["text"]) <= 150
