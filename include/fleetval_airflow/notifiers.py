"""The channels of `fleet_notifications`: the Slack and PagerDuty providers' notifiers, and a
generic webhook notifier that speaks Opsgenie's alert API (Opsgenie itself, or any receiver that
accepts its requests). Each sends a payload exactly as `fleetval.notify.payloads` rendered and the
ledger recorded it.

Connections:
- `fleetval_slack` (type `slackwebhook`): the webhook token (`T…/B…/…`) as password; host
  `hooks.slack.com/services` unless a relay's.
- `fleetval_pagerduty` (type `pagerduty_events`): the Events API v2 integration (routing) key as password.
- `fleetval_webhook` (type `http`): host (and schema, port) of the receiver, e.g.
  `https://api.opsgenie.com`; the password, if any, goes out as `Authorization: GenieKey <password>`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final

from airflow.sdk import BaseNotifier, Connection
from airflow.sdk.exceptions import AirflowNotFoundException

from fleetval.notify.policy import Channel

log = logging.getLogger(__name__)

CONN_IDS: Final = {
    Channel.SLACK: "fleetval_slack",
    Channel.PAGERDUTY: "fleetval_pagerduty",
    Channel.WEBHOOK: "fleetval_webhook",
}


class OpsgenieWebhookNotifier(BaseNotifier):
    """POST a recorded Opsgenie alert request (`{"path", "body"}`) to the `webhook_conn_id`
    connection's base URL, through the HTTP provider's hook (its retries, proxies, TLS settings)."""

    template_fields = ()  # sent as recorded: a node name is never a Jinja template

    def __init__(self, *, webhook_conn_id: str, path: str, body: Mapping[str, Any]) -> None:
        super().__init__()
        self.webhook_conn_id = webhook_conn_id
        self.path = path
        self.body = dict(body)

    def notify(self, context: Any) -> None:
        from airflow.providers.http.hooks.http import HttpHook

        hook = HttpHook(method="POST", http_conn_id=self.webhook_conn_id)
        headers = {"Content-Type": "application/json"}
        conn = hook.get_connection(self.webhook_conn_id)
        if conn.password and not conn.login:  # Opsgenie's API key scheme
            headers["Authorization"] = f"GenieKey {conn.password}"
        hook.run(endpoint=self.path, json=self.body, headers=headers)


def notifier_for(channel: str, payload: Mapping[str, Any]) -> BaseNotifier:
    """The notifier that sends `payload` on `channel`; call its `notify` (not the notifier itself:
    that would render the payload as Jinja templates)."""
    if channel == Channel.SLACK:
        from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

        return SlackWebhookNotifier(
            slack_webhook_conn_id=CONN_IDS[Channel.SLACK], text=payload["text"], blocks=payload["blocks"]
        )
    if channel == Channel.PAGERDUTY:
        from airflow.providers.pagerduty.notifications.pagerduty import PagerdutyNotifier

        event = payload["payload"]
        return PagerdutyNotifier(
            pagerduty_events_conn_id=CONN_IDS[Channel.PAGERDUTY],
            summary=event["summary"],
            severity=event["severity"],
            source=event["source"],
            action=payload["event_action"],
            dedup_key=payload["dedup_key"],
            custom_details=event.get("custom_details"),
            group=event.get("group"),
            component=event.get("component"),
            class_type=event.get("class"),
        )
    if channel == Channel.WEBHOOK:
        return OpsgenieWebhookNotifier(
            webhook_conn_id=CONN_IDS[Channel.WEBHOOK], path=payload["path"], body=payload["body"]
        )
    raise ValueError(f"no notifier for channel {channel!r}")


def configured(channels: Iterable[str]) -> list[Channel]:
    """The channels asked for whose connection exists; the others are skipped, with a log line."""
    out = []
    for name in channels:
        channel = Channel(name)
        try:
            Connection.get(CONN_IDS[channel])
        except AirflowNotFoundException:
            log.info("notifications: channel %s skipped: no connection %r", channel.value, CONN_IDS[channel])
            continue
        out.append(channel)
    return out
