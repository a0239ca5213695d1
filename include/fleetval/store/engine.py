"""Engines for the verdict store: PostgreSQL in production and tests, SQLite as the embedded default."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy import exc as sa_exc

from fleetval.errors import FleetvalError

DEFAULT_URL = "sqlite:///fleetval.db"

P = ParamSpec("P")
R = TypeVar("R")


class StoreUnavailable(FleetvalError):
    """The verdict store could not be reached (PostgreSQL restarting, network down). Nothing is
    half-written that a retry would duplicate: every write is idempotent per run."""


def _is_outage(exc: BaseException) -> bool:
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError))


@contextmanager
def outage_as_error() -> Iterator[None]:
    """Turn a lost store connection into one line (StoreUnavailable), not the driver's chain of
    tracebacks; other database errors (a bug, a constraint) pass through untouched."""
    try:
        yield
    except sa_exc.DBAPIError as exc:
        if not _is_outage(exc):
            raise
        reason = str(exc.orig or exc).strip().splitlines()
        raise StoreUnavailable(
            "the fleetval store is unreachable: " + (reason[0] if reason else type(exc).__name__)
        ) from None


def outage_is_one_line(fn: Callable[P, R]) -> Callable[P, R]:
    """`outage_as_error` around a whole function (an Airflow task: its retry redoes the step)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with outage_as_error():
            return fn(*args, **kwargs)

    return wrapper


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
