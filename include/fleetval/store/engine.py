"""Engines for the verdict store: PostgreSQL in production and tests, SQLite as the embedded default."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, ParamSpec, TypeVar

from sqlalchemy import URL, Engine, create_engine, event, make_url
from sqlalchemy import exc as sa_exc

from fleetval.errors import FleetvalError

DEFAULT_URL = "sqlite:///fleetval.db"
BACKENDS: Final = ("postgresql", "sqlite")
URL_EXAMPLE: Final = "postgresql://user@host/db or sqlite:///path/fleetval.db"
# PostgreSQL is opened through psycopg 3 whichever of its drivers a URL names: its COPY formats rows
# in C (the store's bulk path); psycopg2 URLs (Airflow's usual spelling) keep working.
PG_DRIVERS: Final = ("psycopg", "psycopg2")

P = ParamSpec("P")
R = TypeVar("R")


class StoreUnavailable(FleetvalError):
    """The verdict store could not be reached (PostgreSQL restarting, network down). Nothing is
    half-written that a retry would duplicate: every write is idempotent per run."""


class StoreUrlError(FleetvalError):
    """A database URL that names no store fleetval can open: empty, malformed, another database
    kind, a driver that is not installed, an SQLite file in a folder that does not exist."""


class StoreMissing(FleetvalError):
    """The PostgreSQL server answered, but the database the URL names does not exist on it: a
    retry cannot help, creating it can."""


# libpq's wording (its connection errors carry no SQLSTATE for psycopg to read).
_NO_SUCH_DATABASE: Final = re.compile(r'database "(?P<name>[^"]*)" does not exist')


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
        if missing := _NO_SUCH_DATABASE.search(" ".join(reason)):
            name = missing["name"]
            raise StoreMissing(
                f'the database "{name}" does not exist on that PostgreSQL server: create it '
                f"(`createdb {name}`, or CREATE DATABASE as a role allowed to), then "
                "`fleetval db upgrade --db URL` creates fleetval's tables in it"
            ) from None
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


def store_url(url: str) -> URL:
    """`url` checked before anything connects (StoreUrlError says what is wrong with it). An
    empty URL is refused, never taken to mean a local default."""
    if not url.strip():
        raise StoreUrlError(f"the database URL is empty: give one, e.g. {URL_EXAMPLE}")
    if url.startswith("postgres://"):  # the scheme Heroku-style URLs and some Connections use
        url = "postgresql://" + url.removeprefix("postgres://")
    try:
        parsed = make_url(url)
    except (sa_exc.ArgumentError, ValueError):
        # Not echoed: a URL may hold a password.
        raise StoreUrlError(f"not a database URL: expected e.g. {URL_EXAMPLE}") from None
    backend = parsed.get_backend_name()
    if backend not in BACKENDS:
        raise StoreUrlError(f"fleetval stores its data in PostgreSQL or SQLite, not {backend!r}")
    if backend == "postgresql" and parsed.get_driver_name() in PG_DRIVERS:
        parsed = parsed.set(drivername="postgresql+psycopg")
    try:
        parsed.get_dialect()
    except sa_exc.NoSuchModuleError:
        raise StoreUrlError(f"unknown database driver {parsed.drivername!r}") from None
    if backend == "sqlite":
        _check_sqlite_path(parsed)
    return parsed


def _check_sqlite_path(url: URL) -> None:
    database = url.database or ""
    if database in ("", ":memory:") or url.query.get("uri"):
        return
    path = Path(database)
    if path.is_dir():
        raise StoreUrlError(f"the SQLite store {database} is a folder, not a file")
    if not path.parent.is_dir():
        raise StoreUrlError(f"the SQLite store {database}: its folder {path.parent} does not exist")


def make_engine(url: str | None = None, **kwargs: Any) -> Engine:
    """An engine for `url` (None: DEFAULT_URL; an empty string is refused, see `store_url`);
    SQLite gets WAL and enforced foreign keys, since tasks in separate processes share one file."""
    parsed = store_url(DEFAULT_URL if url is None else url)
    try:
        return _create(parsed, **kwargs)
    except ImportError as exc:
        raise StoreUrlError(f"the driver for {parsed.drivername!r} is not installed ({exc.name})") from None


def _create(url: URL, **kwargs: Any) -> Engine:
    if url.get_backend_name() == "sqlite":
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
    # No server-side prepared statements (psycopg 3 prepares a query at its 5th run): a generic plan
    # cached while a table was small kept scanning it whole as it grew, and the per-probe lookups
    # of a sweep went quadratic (store 3.6 -> 15.8 ms/node from 1k to 16k nodes). psycopg2 never
    # prepared; PgBouncer's transaction pooling needs the same.
    kwargs["connect_args"] = {"prepare_threshold": None, **kwargs.get("connect_args", {})}
    return create_engine(url, **kwargs)
