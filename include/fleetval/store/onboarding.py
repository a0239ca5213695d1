"""Reads of rack onboardings: their summaries (kept in the run's meta as `report`), newest first.

A run of suite `rack_onboarding` is one DAG run; `meta["report"]` is written by its last task
(`fleetval.onboarding.report`). A run whose report is missing is still running, or its report
task did not complete.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import select

from fleetval.store.models import Run
from fleetval.store.repository import Store

SUITE: Final = "rack_onboarding"


def _row(row: Any) -> dict[str, Any]:
    meta = row.meta or {}
    return {
        "run_id": int(row.id),
        "run_key": str(row.run_key),
        "started_at": row.started_at,
        "finished_at": row.finished_at,
        "rack": (meta.get("request") or {}).get("rack"),
        "report": meta.get("report"),
    }


def onboarding_reports(store: Store, *, limit: int = 20, rack: str | None = None) -> list[dict[str, Any]]:
    """The newest onboardings (of one rack, when given), each with its report (None while running)."""
    query = (
        select(Run.id, Run.run_key, Run.started_at, Run.finished_at, Run.meta)
        .where(Run.suite == SUITE)
        .order_by(Run.id.desc())
    )
    with store.engine.connect() as conn:
        if rack is None:
            return [_row(r) for r in conn.execute(query.limit(limit))]
        # The rack is read from the meta here: meta is JSON text on SQLite, JSONB on PostgreSQL.
        found = []
        for r in conn.execute(query):
            row = _row(r)
            if row["rack"] == rack:
                found.append(row)
                if len(found) == limit:
                    break
        return found


def onboarding_report(store: Store, run_id: int) -> dict[str, Any] | None:
    """One onboarding's report, or None (no such onboarding run, or no report yet)."""
    query = select(Run.id, Run.run_key, Run.started_at, Run.finished_at, Run.meta).where(
        Run.suite == SUITE, Run.id == run_id
    )
    with store.engine.connect() as conn:
        row = conn.execute(query).first()
    return _row(row)["report"] if row is not None else None
