"""A notice in each receiver's own format, exactly what goes over the wire (less the secrets the
Airflow connection adds: the PagerDuty routing key, Opsgenie's API key header).

- Slack incoming webhook: `{"text", "blocks"}`; `text` is the notification's fallback. Limits:
  header text 150 characters, section text 3000, 10 context elements, and `&`, `<`, `>` escaped
  (docs.slack.dev/reference/block-kit/blocks, docs.slack.dev/messaging/formatting-message-text).
- PagerDuty Events API v2: `{"event_action", "dedup_key", "payload": {"summary", "source",
  "severity", "component", "group", "class", "custom_details"}}`; summary at most 1024 characters,
  dedup_key 255, severity one of critical/error/warning/info (developer.pagerduty.com/docs/events-api-v2,
  and airflow.providers.pagerduty.hooks.pagerduty_events.prepare_event_data). A resolve needs only
  the key; the provider's notifier sends the payload along, which PagerDuty ignores.
- Opsgenie alert API (a generic webhook that speaks it): create `POST v2/alerts` with `message`
  (at most 130 characters), `alias` (the dedup key, 512), `description` (15000), `priority` P1-P5,
  `tags` (20, of 50 characters each), `details` (string values, 8000 characters in all), `entity`,
  `source`; close `POST v2/alerts/<alias>/close?identifierType=alias` with `source` and `note`
  (docs.opsgenie.com/docs/alert-api, docs.opsgenie.com/docs/alerts-and-alert-fields).
"""

from __future__ import annotations

import json
from typing import Any, Final
from urllib.parse import quote

from fleetval.notify.events import Kind
from fleetval.notify.policy import DIGEST, Channel, Notice

SOURCE: Final = "fleetval"
SLACK_HEADER_MAX: Final = 150
SLACK_SECTION_MAX: Final = 3000
PAGERDUTY_SUMMARY_MAX: Final = 1024
OPSGENIE_MESSAGE_MAX: Final = 130
OPSGENIE_DESCRIPTION_MAX: Final = 15000
OPSGENIE_TAGS_MAX: Final = 20
OPSGENIE_TAG_MAX: Final = 50
OPSGENIE_DETAILS_MAX: Final = 8000  # keys and values together
OPSGENIE_ENTITY_MAX: Final = 512
OPSGENIE_NOTE_MAX: Final = 25000
OPSGENIE_PRIORITY: Final = {"critical": "P1", "error": "P2", "warning": "P3", "info": "P5"}
SLACK_ICON: Final = {
    "critical": ":rotating_light:",
    "error": ":red_circle:",
    "warning": ":warning:",
    "info": ":white_check_mark:",
}
# What part of the fleet each kind is about: PagerDuty's `component`.
COMPONENT: Final = {
    Kind.QUARANTINE.value: "gpu-node",
    Kind.RETURN_TO_SERVICE.value: "gpu-node",
    Kind.COVERAGE_MISSED.value: "gpu-node",
    Kind.BREAKER_TRIP.value: "blast-radius-breaker",
    Kind.ROLLOUT_HALT.value: "driver-rollout",
    Kind.SCENARIO_FAIL.value: "kueue",
    DIGEST: "fleetval-notifications",
}


def render(notice: Notice) -> dict[str, Any]:
    """The payload `notice`'s channel receives."""
    if notice.channel is Channel.SLACK:
        return slack_message(notice)
    if notice.channel is Channel.PAGERDUTY:
        return pagerduty_event(notice)
    return opsgenie_request(notice)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _details(notice: Notice) -> dict[str, Any]:
    """What the on-call reads beside the summary: the evidence, the sample, what was held back."""
    out: dict[str, Any] = {
        "kind": notice.kind,
        "subjects": list(notice.subjects),
        "count": notice.count,
        "criteria": list(notice.evidence.criteria),
        "verdict_ids": list(notice.evidence.verdict_ids),
        "domain": notice.evidence.domain,
    }
    if notice.opened > 1:
        out["times_opened"] = notice.opened
    if notice.held_back:
        out["held_back_by_rate_limit"] = dict(notice.held_back)
    out.update({k: v for k, v in notice.evidence.details.items() if k not in out})
    return out


def slack_message(notice: Notice) -> dict[str, Any]:
    icon = SLACK_ICON[notice.severity]
    text = f"{icon} {notice.title}"
    lines = [_slack_escape(notice.evidence.message)]
    if notice.evidence.criteria:
        lines.append("criteria: " + ", ".join(notice.evidence.criteria))
    if notice.evidence.verdict_ids:
        lines.append("verdicts: " + ", ".join(str(v) for v in notice.evidence.verdict_ids[:20]))
    if notice.held_back:
        held = ", ".join(f"{k} {n}" for k, n in sorted(notice.held_back.items()))
        lines.append(f"held back by the rate limit since the last notice: {held}")
    context = [f"{notice.kind}", f"severity {notice.severity}", f"key `{_slack_escape(notice.dedup_key)}`"]
    if notice.evidence.domain:
        context.append(f"rack {_slack_escape(notice.evidence.domain)}")
    return {
        "text": _slack_escape(_cut(text, SLACK_SECTION_MAX)),
        "blocks": [
            {
                "type": "header",
                "text": {"type": "plain_text", "text": _cut(text, SLACK_HEADER_MAX), "emoji": True},
            },
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": _cut("\n".join(lines), SLACK_SECTION_MAX)},
            },
            {"type": "context", "elements": [{"type": "mrkdwn", "text": c} for c in context[:10]]},
        ],
    }


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def pagerduty_event(notice: Notice) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "summary": _cut(notice.title, PAGERDUTY_SUMMARY_MAX),
        "source": notice.subjects[0] if notice.count == 1 and notice.subjects else SOURCE,
        "severity": notice.severity,
        "component": COMPONENT[notice.kind],
        "class": notice.kind,
        "custom_details": _details(notice),
    }
    if notice.evidence.domain:
        payload["group"] = notice.evidence.domain
    return {
        "event_action": "resolve" if notice.resolves else "trigger",
        "dedup_key": notice.dedup_key,
        "payload": payload,
    }


def opsgenie_request(notice: Notice) -> dict[str, Any]:
    """`{"path", "body"}`: the request, relative to the receiver's base URL."""
    if notice.resolves:
        return {
            "path": f"v2/alerts/{quote(notice.dedup_key, safe='')}/close?identifierType=alias",
            "body": {"source": SOURCE, "note": _cut(notice.title, OPSGENIE_NOTE_MAX)},
        }
    tags = [notice.kind, f"severity:{notice.severity}", *(f"criterion:{c}" for c in notice.evidence.criteria)]
    if notice.evidence.domain:
        tags.append(f"rack:{notice.evidence.domain}")
    description = "\n".join(
        [notice.evidence.message, *(f"subject: {s}" for s in notice.subjects)]
        + ([f"and {notice.count - len(notice.subjects)} more"] if notice.count > len(notice.subjects) else [])
    )
    return {
        "path": "v2/alerts",
        "body": {
            "message": _cut(notice.title, OPSGENIE_MESSAGE_MAX),
            "alias": notice.dedup_key,
            "description": _cut(description, OPSGENIE_DESCRIPTION_MAX),
            "priority": OPSGENIE_PRIORITY[notice.severity],
            "tags": [_cut(t, OPSGENIE_TAG_MAX) for t in tags[:OPSGENIE_TAGS_MAX]],
            "details": _string_details(_details(notice)),
            "entity": _cut(
                notice.subjects[0] if notice.count == 1 and notice.subjects else notice.kind,
                OPSGENIE_ENTITY_MAX,
            ),
            "source": SOURCE,
        },
    }


def _string_details(details: dict[str, Any]) -> dict[str, str]:
    """Opsgenie's details are strings, 8000 characters in all: what does not fit is left out, said so."""
    out: dict[str, str] = {}
    used = 0
    for key, value in details.items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        if used + len(key) + len(text) > OPSGENIE_DETAILS_MAX - 40:
            out["truncated"] = "details cut to Opsgenie's 8000 characters"
            break
        out[key] = text
        used += len(key) + len(text)
    return out
