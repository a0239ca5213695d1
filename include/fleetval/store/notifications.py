"""The on-call notifications' ledger (`notify_incidents`, `notify_notices`) and the facts only they
read: the recorded rollout halts and the verdict ids behind an incident. Everything else about the
fleet is `fleetval.store.metrics.read_snapshot`'s.

Recorded notices are an outbox: `pending` until the sender marks them sent, so a failed delivery
is retried by the next one, and a plan is recorded in one transaction, so a retried evaluation
plans nothing twice. PostgreSQL and SQLite alike.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import Engine, func, insert, or_, select, type_coerce, update
from sqlalchemy.types import JSON

from fleetval.store.models import NodeEvent, NotifyIncident, NotifyNotice, VerdictRow

PENDING: Final = "pending"
SENT: Final = "sent"
FAILED: Final = "failed"
SUPPRESSED: Final = "suppressed"
SHADOW: Final = "shadow"
SKIPPED: Final = "skipped"  # its channel had no connection when it was due
MAX_ATTEMPTS: Final = 5  # deliveries tried (one per run of the sender) before a notice is failed


def _aware(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)  # SQLite: naive UTC


@dataclass(frozen=True, slots=True)
class RolloutHalt:
    """A driver rollout halt the NCCL gate recorded (a `rollout_halt` node event, not a dry run)."""

    key: str  # the event's key: one per halting run
    at: dt.datetime
    reason: str
    failed_subjects: tuple[str, ...]


def rollout_halts(engine: Engine, since: dt.datetime) -> list[RolloutHalt]:
    """The driver rollout halts recorded since `since`."""
    details = type_coerce(NodeEvent.details, JSON)
    query = select(NodeEvent.event_key, NodeEvent.at, NodeEvent.reason, details["failed_subjects"]).where(
        NodeEvent.node == "cluster",  # the gate records a halt against the cluster (an indexed column)
        NodeEvent.kind == "rollout_halt",
        NodeEvent.dry_run.is_(False),
        NodeEvent.at >= since,
    )
    with engine.connect() as conn:
        return [
            RolloutHalt(str(key), _aware(at), str(reason), tuple(str(s) for s in failed or ()))
            for key, at, reason, failed in conn.execute(query)
        ]


def newest_verdict_ids(engine: Engine, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """(node or verdict subject, criterion) → the newest verdict's id, for the pairs asked (one read)."""
    if not pairs:
        return {}
    who = func.coalesce(VerdictRow.node, VerdictRow.subject)
    query = (
        select(who, VerdictRow.criterion, func.max(VerdictRow.id))
        .where(
            who.in_(sorted({w for w, _ in pairs})), VerdictRow.criterion.in_(sorted({c for _, c in pairs}))
        )
        .group_by(who, VerdictRow.criterion)
    )
    wanted = set(pairs)
    with engine.connect() as conn:
        found = {(str(w), str(c)): int(i) for w, c, i in conn.execute(query)}
    return {k: v for k, v in found.items() if k in wanted}


# --- the ledger --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class IncidentRow:
    dedup_key: str
    kind: str
    subject: str
    opened_at: dt.datetime
    last_opened_at: dt.datetime
    resolved_at: dt.datetime | None
    count: int
    evidence: dict[str, Any]
    announced: dict[str, str]  # channel → the key its receivers know the incident by


@dataclass(frozen=True, slots=True)
class LedgerRows:
    incidents: list[IncidentRow]  # oldest opening first: the newest per kind and subject last
    sent: dict[str, list[dt.datetime]] = field(default_factory=dict)  # channel → counted notices
    held: dict[str, dict[str, int]] = field(default_factory=dict)  # channel → kind → held, unreported


@dataclass(frozen=True, slots=True)
class NoticeRow:
    channel: str
    kind: str
    action: str  # trigger or resolve
    dedup_key: str
    subjects: list[str]
    count: int
    payload: dict[str, Any]
    status: str  # pending, suppressed or shadow
    reports_held: bool  # it tells its channel what the rate limit held back before


def _incident(row: Any) -> IncidentRow:
    return IncidentRow(
        str(row.dedup_key),
        str(row.kind),
        str(row.subject),
        _aware(row.opened_at),
        _aware(row.last_opened_at),
        _aware(row.resolved_at) if row.resolved_at is not None else None,
        int(row.count),
        dict(row.evidence or {}),
        {str(k): str(v) for k, v in (row.announced or {}).items()},
    )


def read_ledger(
    engine: Engine, *, resolved_since: dt.datetime, counted_since: dt.datetime, shadow: bool
) -> LedgerRows:
    """The open incidents and those resolved since `resolved_since`; the notices evaluated after
    `counted_since` that count against their channel's rate limit; those held back and not yet
    reported. Notices of the other mode (shadow or not) count for nothing. Three queries."""
    n = NotifyNotice
    sent: dict[str, list[dt.datetime]] = defaultdict(list)
    held: dict[str, Counter[str]] = defaultdict(Counter)
    with engine.connect() as conn:
        incidents = [
            _incident(row)
            for row in conn.execute(
                select(*NotifyIncident.__table__.c)
                .where(
                    or_(NotifyIncident.resolved_at.is_(None), NotifyIncident.resolved_at >= resolved_since)
                )
                .order_by(NotifyIncident.last_opened_at, NotifyIncident.id)
            )
        ]
        for channel, at in conn.execute(
            select(n.channel, n.evaluated_at).where(
                n.shadow.is_(shadow), n.status != SUPPRESSED, n.evaluated_at > counted_since
            )
        ):
            sent[str(channel)].append(_aware(at))
        for channel, kind, count in conn.execute(
            select(n.channel, n.kind, func.count())
            .where(n.shadow.is_(shadow), n.status == SUPPRESSED, n.reported_by.is_(None))
            .group_by(n.channel, n.kind)
        ):
            held[str(channel)][str(kind)] += int(count)
    return LedgerRows(incidents, dict(sent), {c: dict(kinds) for c, kinds in held.items()})


def record(
    engine: Engine,
    *,
    evaluated_at: dt.datetime,
    policy_id: str,
    shadow: bool,
    notices: Sequence[NoticeRow],
    incidents: Sequence[IncidentRow],
) -> list[int]:
    """Write one evaluation in one transaction: its notices, which held-back notices each reports,
    the incidents as they now stand; every open incident is marked seen. Returns the notices' ids."""
    n = NotifyNotice
    ids: list[int] = []
    with engine.begin() as conn:
        unreported: dict[str, list[int]] = defaultdict(list)
        for nid, channel in conn.execute(
            select(n.id, n.channel).where(
                n.shadow.is_(shadow), n.status == SUPPRESSED, n.reported_by.is_(None)
            )
        ):
            unreported[str(channel)].append(int(nid))
        for notice in notices:
            columns = {k: v for k, v in dataclasses.asdict(notice).items() if k != "reports_held"}
            written = insert(n).values(
                **columns, evaluated_at=evaluated_at, policy_id=policy_id, shadow=shadow, attempts=0
            )
            nid = conn.execute(written.returning(n.id)).scalar_one()
            ids.append(int(nid))
            reported = unreported.pop(notice.channel, []) if notice.reports_held else []
            if reported:
                conn.execute(update(n).where(n.id.in_(reported)).values(reported_by=nid))
        keys = [i.dedup_key for i in incidents]
        existing = set(
            conn.execute(select(NotifyIncident.dedup_key).where(NotifyIncident.dedup_key.in_(keys))).scalars()
        )
        for incident in incidents:
            values = {**dataclasses.asdict(incident), "last_seen": evaluated_at}
            if incident.dedup_key in existing:
                conn.execute(
                    update(NotifyIncident)
                    .where(NotifyIncident.dedup_key == incident.dedup_key)
                    .values(**values)
                )
            else:
                conn.execute(insert(NotifyIncident).values(**values))
        open_now = NotifyIncident.resolved_at.is_(None)
        conn.execute(update(NotifyIncident).where(open_now).values(last_seen=evaluated_at))
    return ids


def incidents(engine: Engine) -> list[IncidentRow]:
    with engine.connect() as conn:
        return [
            _incident(r)
            for r in conn.execute(select(*NotifyIncident.__table__.c).order_by(NotifyIncident.id))
        ]


def notices(engine: Engine) -> list[dict[str, Any]]:
    """Every recorded notice, oldest first."""
    with engine.connect() as conn:
        return [
            dict(r._mapping)
            for r in conn.execute(select(*NotifyNotice.__table__.c).order_by(NotifyNotice.id))
        ]


# --- delivery ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Outgoing:
    id: int
    channel: str
    dedup_key: str
    payload: dict[str, Any]
    attempts: int


def pending(engine: Engine) -> list[Outgoing]:
    """The notices still to deliver, oldest first (never the shadow or suppressed ones)."""
    n = NotifyNotice
    query = (
        select(n.id, n.channel, n.dedup_key, n.payload, n.attempts).where(n.status == PENDING).order_by(n.id)
    )
    with engine.connect() as conn:
        return [Outgoing(int(i), str(c), str(k), dict(p), int(a)) for i, c, k, p, a in conn.execute(query)]


def mark(
    engine: Engine, notice: Outgoing, *, now: dt.datetime, error: str | None = None, skipped: bool = False
) -> str:
    """Record one delivery attempt: sent, skipped (its channel has no connection), or failed
    (still pending until its `MAX_ATTEMPTS`th failure). Returns the notice's new status."""
    attempts = notice.attempts + (0 if skipped else 1)
    if skipped:
        status = SKIPPED
    elif error is None:
        status = SENT
    else:
        status = FAILED if attempts >= MAX_ATTEMPTS else PENDING
    with engine.begin() as conn:
        conn.execute(
            update(NotifyNotice)
            .where(NotifyNotice.id == notice.id)
            .values(status=status, attempts=attempts, error=error, sent_at=now if status == SENT else None)
        )
    return status
