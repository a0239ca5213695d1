"""Persistence of the Xid inbox (`xid_inbox`): kernel lines received, reserved for one DAG run,
claimed per node. The raw evidence is never deleted; receiving a line twice and claiming twice
are no-ops, so sources and tasks can retry.

All the inbox SQL lives here: the Xid suite decides and acts on what these functions return, and
the sources (the simulator, node-problem-detector Events) and the Airflow trigger write through
them.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import Engine, and_, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from fleetval.store.models import XidInbox

# A dispatched batch whose run never claimed it (triggerer died between reserving and firing)
# is handed to the next run after this long.
STALE_DISPATCH: Final = dt.timedelta(minutes=10)


def receive_lines(engine: Engine, rows: Sequence[tuple[str, str, str, str]], *, at: dt.datetime) -> int:
    """Append (source_key, node, line, source) rows; a row already received is ignored."""
    if not rows:
        return 0
    values = [
        {"source_key": k, "node": n, "line": line, "source": s, "received_at": at} for k, n, line, s in rows
    ]
    with engine.begin() as conn:
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(XidInbox).on_conflict_do_nothing(index_elements=["source_key"])
        # An INSERT's rowcount is kept only when asked for (psycopg 3 closes its cursor at once).
        result = conn.execute(stmt, values, execution_options={"preserve_rowcount": True})
        return int(result.rowcount or 0)


def dispatch_pending(engine: Engine, *, now: dt.datetime) -> dict[str, Any] | None:
    """Reserve every undispatched (or stale-dispatched, unclaimed) row for one run."""
    dispatch_id = uuid.uuid4().hex
    with engine.begin() as conn:
        result = conn.execute(
            update(XidInbox)
            .where(XidInbox.claimed_run_id.is_(None), _pending_or_stale(now))
            .values(dispatch_id=dispatch_id, dispatched_at=now)
        )
        if not result.rowcount:
            return None
        nodes = conn.execute(
            select(XidInbox.node).where(XidInbox.dispatch_id == dispatch_id).distinct()
        ).all()
    return {"dispatch_id": dispatch_id, "lines": int(result.rowcount), "nodes": len(nodes)}


def dispatched_lines(engine: Engine, dispatch_id: str) -> dict[str, list[str]]:
    """node → the lines reserved by `dispatch_id`, in arrival order (what the trigger cordons on
    as soon as it has read them, before any DAG run exists)."""
    return _lines_where(engine, XidInbox.dispatch_id == dispatch_id)


def _lines_where(engine: Engine, condition: Any) -> dict[str, list[str]]:
    """node → the inbox lines matching `condition`, in arrival order."""
    with engine.connect() as conn:
        rows = conn.execute(select(XidInbox.node, XidInbox.line).where(condition).order_by(XidInbox.id)).all()
    lines: dict[str, list[str]] = defaultdict(list)
    for node, line in rows:
        lines[node].append(line)
    return dict(lines)


def _pending_or_stale(now: dt.datetime) -> Any:
    return or_(
        XidInbox.dispatch_id.is_(None),
        and_(XidInbox.dispatched_at.is_not(None), XidInbox.dispatched_at < now - STALE_DISPATCH),
    )


def claim(
    engine: Engine, run_id: int, *, dispatch_ids: Sequence[str] | None, now: dt.datetime, max_nodes: int
) -> dict[str, list[str]]:
    """Take this run's rows, at most `max_nodes` nodes (the rest wait for the next run, which
    keeps a run under max_map_length); returns node → lines in arrival order. Idempotent: rows
    this run already claimed are returned again."""
    with engine.begin() as conn:
        unclaimed = XidInbox.claimed_run_id.is_(None)
        if dispatch_ids is None:
            scope = and_(unclaimed, _pending_or_stale(now))
        else:
            scope = and_(unclaimed, XidInbox.dispatch_id.in_(list(dispatch_ids)))
        nodes = [
            n
            for (n,) in conn.execute(
                select(XidInbox.node)
                .where(scope)
                .group_by(XidInbox.node)
                .order_by(XidInbox.node)
                .limit(max_nodes)
            )
        ]
        if nodes:
            conn.execute(
                update(XidInbox).where(scope, XidInbox.node.in_(nodes)).values(claimed_run_id=run_id)
            )
    return claimed_lines(engine, run_id)


def claimed_lines(engine: Engine, run_id: int) -> dict[str, list[str]]:
    """node → the lines run `run_id` claimed, in arrival order."""
    return _lines_where(engine, XidInbox.claimed_run_id == run_id)


def first_received(engine: Engine, run_id: int) -> dict[str, dt.datetime]:
    """node → when the inbox first received a line run `run_id` claimed (UTC-aware: SQLite
    returns naive datetimes)."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(XidInbox.node, XidInbox.received_at).where(XidInbox.claimed_run_id == run_id)
        )
        out: dict[str, dt.datetime] = {}
        for node, at in rows:
            at = at if at.tzinfo else at.replace(tzinfo=dt.UTC)
            out[node] = min(out.get(node, at), at)
        return out
