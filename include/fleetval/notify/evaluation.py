"""One evaluation against the store: read the fleet (the metrics' reader, `read_snapshot`, and the
recorded rollout halts), diff it with the ledger's open incidents, plan, and record the plan with
each notice's payload in one transaction. The sender delivers what it recorded as pending."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sqlalchemy import Engine

from fleetval.notify import events as ev
from fleetval.notify.payloads import render
from fleetval.notify.policy import Channel, Incident, Ledger, Notice, NotificationPolicy, Plan, plan
from fleetval.remediation import R3_REQUESTED_LABEL
from fleetval.store import fleet_health as fh
from fleetval.store import notifications as ledger_store
from fleetval.store.metrics import NODE_CRITERIA, read_snapshot


def read_fleet(
    engine: Engine, policy: NotificationPolicy, now: dt.datetime, *, horizon_days: int | None
) -> ev.FleetState:
    snap = read_snapshot(
        engine, criteria=NODE_CRITERIA, r3_label=R3_REQUESTED_LABEL, horizon_days=horizon_days, now=now
    )
    halts = ledger_store.rollout_halts(engine, now - policy.halt_lookback)
    return ev.fleet_state(snap, halts, now=now, coverage_max_age=policy.coverage_max_age)


def read_ledger(engine: Engine, policy: NotificationPolicy, now: dt.datetime) -> Ledger:
    rows = ledger_store.read_ledger(
        engine,
        resolved_since=now - policy.flap_window,
        counted_since=now - policy.rate_window,
        shadow=policy.shadow,
    )
    incidents = {}
    for row in rows.incidents:  # oldest first: the newest per kind and subject wins
        incident = Incident(
            ev.Kind(row.kind),
            row.subject,
            row.dedup_key,
            row.opened_at,
            row.last_opened_at,
            row.resolved_at,
            row.count,
            ev.Evidence.from_json(row.evidence),
            row.announced,
        )
        incidents[(incident.kind, incident.subject)] = incident
    return Ledger(incidents, {c: tuple(sorted(t)) for c, t in rows.sent.items()}, rows.held)


def _notice_row(notice: Notice, *, shadow: bool) -> ledger_store.NoticeRow:
    status = (
        ledger_store.SUPPRESSED
        if notice.suppressed
        else ledger_store.SHADOW
        if shadow
        else ledger_store.PENDING
    )
    return ledger_store.NoticeRow(
        notice.channel.value,
        notice.kind,
        "resolve" if notice.resolves else "trigger",
        notice.dedup_key,
        list(notice.subjects),
        notice.count,
        render(notice),
        status,
        bool(notice.held_back),
    )


def _incident_row(incident: Incident) -> ledger_store.IncidentRow:
    return ledger_store.IncidentRow(
        incident.dedup_key,
        incident.kind.value,
        incident.subject,
        incident.opened_at,
        incident.last_opened_at,
        incident.resolved_at,
        incident.count,
        incident.evidence.to_json(),
        dict(incident.announced),
    )


def record(engine: Engine, planned: Plan) -> list[int]:
    return ledger_store.record(
        engine,
        evaluated_at=planned.evaluated_at,
        policy_id=planned.policy_id,
        shadow=planned.shadow,
        notices=[_notice_row(n, shadow=planned.shadow) for n in planned.notices],
        incidents=[_incident_row(i) for i in planned.incidents],
    )


def evaluate(
    engine: Engine,
    policy: NotificationPolicy,
    channels: Iterable[Channel],
    now: dt.datetime | None = None,
    *,
    horizon_days: int | None = fh.DEFAULT_HORIZON_DAYS,
) -> Plan:
    """The fleet now against the ledger, planned for `channels` (those with a receiver) and recorded."""
    now = now or dt.datetime.now(dt.UTC)
    ledger = read_ledger(engine, policy, now)
    found = ev.diff(ledger.known(), read_fleet(engine, policy, now, horizon_days=horizon_days))
    found = ev.with_verdict_ids(found, ledger_store.newest_verdict_ids(engine, ev.verdict_lookups(found)))
    planned = plan(found, ledger, policy, now, tuple(channels))
    record(engine, planned)
    return planned
