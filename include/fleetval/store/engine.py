"""Engines for the verdict store: PostgreSQL in production and tests, SQLite as the embedded default."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event

DEFAULT_URL = "sqlite:///fleetval.db"


def make_engine(url: str | None = None, **kwargs: Any) -> Engine:
    """An engine for `url`; SQLite gets WAL and enforced foreign keys, since tasks in separate
    processes share one file."""
    url = url or DEFAULT_URL
    if url.startswith("postgres://"):  # the scheme Heroku-style URLs and some Connections use
        url = "postgresql://" + url.removeprefix("postgres://")
    if url.startswith("sqlite"):
        kwargs.setdefault("connect_args", {"timeout": 60})
        engine = create_engine(url, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)
