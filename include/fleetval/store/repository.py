"""The store's write and read paths. Every write is idempotent on a natural key:

- runs on `run_key`, probes on `(run_id, probe_key)`, verdicts on `(run_id, criterion, subject)`,
  node events on `event_key`, baselines on `(profile, metric, scope, version)`;
- measurements belong to their probe: re-ingesting a probe replaces its measurements.

Bulk paths use PostgreSQL COPY (through a staging table where a conflict rule is needed), so a
16k-node sweep ingests at close to raw COPY speed; SQLite uses executemany.

Raw output, evidence text and JSON are stored losslessly (fleetval.store.models). What still
cannot be stored (a GPU id from garbage output longer than its column, NUL in a subject, an exit
code out of range) fails alone: the batch is split until the bad probe is found, the others are
stored, and the bad one is kept with its raw output and a `store_error` in its spec, so it counts
as not swept rather than vanishing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import itertools
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from sqlalchemy import Connection, Engine, Table, TypeDecorator, delete, func, insert, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite

from fleetval.errors import FleetvalError
from fleetval.records import Verdict
from fleetval.store.models import (
    Baseline,
    LosslessJson,
    Measurement,
    NodeEvent,
    Probe,
    Run,
    SimFleet,
    VerdictRow,
    decode_raw,
    encode_raw,
    escape_json,
    utcnow,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class MeasurementIn:
    node: str
    metric: str
    value: float | None
    gpu: str | None = None
    unit: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProbeIn:
    """A probe's raw output and what was parsed and judged from it, ready to store."""

    probe_key: str
    tool: str
    raw: str
    nodes: tuple[str, ...]
    tool_version: str | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    measurements: tuple[MeasurementIn, ...] = ()
    verdicts: tuple[Verdict, ...] = ()


@dataclass(slots=True)
class IngestReport:
    """What `Store.ingest` stored. `unjudged`: probe key → why only its raw output could be stored
    (its measurements and verdicts could not); `rejected`: probe key → why nothing of it could."""

    probes: int = 0
    measurements: int = 0
    verdicts: int = 0
    unjudged: dict[str, str] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)


class RowsNotStored(FleetvalError):
    """Rows the store refused (a value no column can hold); the other rows were stored."""


def sha256_text(text: str) -> str:
    """The hash of `text` as stored: of its bytes (`encode_raw`)."""
    return hashlib.sha256(encode_raw(text)[0]).hexdigest()


def _unstorable(exc: BaseException) -> bool:
    """A value the database or its driver refuses, as opposed to an outage or a bug."""
    if isinstance(exc, sa_exc.DataError):  # too long, out of range, NUL or bad bytes in COPY
        return True
    if isinstance(exc, sa_exc.StatementError) and not isinstance(exc, sa_exc.DBAPIError) and exc.orig:
        exc = exc.orig  # a bind parameter that could not be converted
    if isinstance(exc, UnicodeError | OverflowError):  # lone surrogates; an int SQLite cannot hold
        return True
    return isinstance(exc, ValueError) and "NUL" in str(exc)  # psycopg2 refuses NUL in strings


def _why(exc: BaseException) -> str:
    orig = exc.orig if isinstance(exc, sa_exc.StatementError) and exc.orig is not None else exc
    lines = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {lines[0] if lines else ''}"[:500]


def _isolating(
    items: Sequence[T], write: Callable[[Sequence[T]], None], failed: Callable[[T, str], None]
) -> None:
    """`write(items)`; when the store refuses a value, halve until each refused item is alone and
    hand it to `failed`: one transaction when all is well, a few more per bad item."""
    if not items:
        return
    try:
        write(items)
    except Exception as exc:
        if not _unstorable(exc):
            raise
        if len(items) == 1:
            failed(items[0], _why(exc))
            return
        middle = len(items) // 2
        _isolating(items[:middle], write, failed)
        _isolating(items[middle:], write, failed)


def _dialect_insert(conn: Connection, table: Table) -> Any:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    if conn.dialect.name == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"unsupported database dialect {conn.dialect.name!r}")


# What COPY's text format escapes; most values hold none of it.
_COPY_SPECIAL = re.compile(r"[\\\t\n\r]")


def _copy_text(text: str) -> str:
    if _COPY_SPECIAL.search(text) is None:
        return text
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _copy_escape(value: Any) -> str:
    """`value` in COPY's text format (the commonest types first: this runs for every value)."""
    if value is None:
        return "\\N"
    kind = type(value)
    if kind is str:
        return _copy_text(value)
    if kind is int or kind is float:  # no COPY specials in their str()
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):  # bytea's hex form, its "\\" escaped
        return "\\\\x" + bytes(value).hex()
    if isinstance(value, dict | list):
        value = json.dumps(value, separators=(",", ":"))
    elif isinstance(value, dt.datetime):
        value = value.isoformat()
    return _copy_text(str(value))


# One encoder for every document: json.dumps with options builds a new one per call.
_JSON_STRICT = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _copy_json(value: Any) -> str:
    """A `LosslessJson` value in COPY's text format: what `_copy_escape(escape_json(value))` gives.

    json.dumps (ASCII, NaN refused) shows at once whether escaping can change anything: only a
    non-finite float or a string that dumps as a `\\u` escape (NUL, a surrogate, the escape mark,
    any non-ASCII) can. Such documents, and rare top-level scalars, take the walk."""
    if isinstance(value, dict | list | tuple):
        try:
            text = _JSON_STRICT(value)
        except ValueError:
            pass
        else:
            if "\\u" not in text:
                return _copy_text(text)
    return _copy_escape(escape_json(value))


def copy_rows(
    conn: Connection,
    table_name: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    types_of: Table | None = None,
) -> None:
    """PostgreSQL COPY FROM STDIN (text format) through the psycopg2 cursor.

    `types_of`: the table whose column types convert the values first (COPY bypasses them), so
    lossless columns get their escaped form. The driver's errors come back as SQLAlchemy's (a
    lost connection is an OperationalError, a refused value a DataError), as for any statement.

    The rows are formatted as the server reads them (`_CopySource`), so the server's work (parse,
    index, TOAST) overlaps this process's formatting instead of following it. A value that cannot
    be formatted or encoded ends the COPY early and is raised after it (the caller's transaction
    then rolls back what was sent): a lone surrogate is a UnicodeEncodeError (a refused value),
    not psycopg2's cancelled COPY, which reads like a lost connection."""
    formats = [_copy_formatter(conn, types_of, c) for c in columns]
    source = _CopySource(_copy_blocks(formats, rows))
    statement = f"COPY {table_name} ({', '.join(columns)}) FROM STDIN"
    dbapi_conn = conn.connection.dbapi_connection
    assert dbapi_conn is not None
    cursor = dbapi_conn.cursor()
    try:
        cursor.copy_expert(statement, source, size=_COPY_READ)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise sa_exc.DBAPIError.instance(
            statement,
            None,
            exc,
            conn.dialect.loaded_dbapi.Error,
            connection_invalidated=conn.dialect.is_disconnect(exc, dbapi_conn, cursor),
            dialect=conn.dialect,
        ) from exc
    finally:
        cursor.close()
    if source.error is not None:
        raise source.error


# Bytes psycopg2 asks for per read of a COPY source (its default is 8 KiB), and rows per block
# formatted at once.
_COPY_READ: Final = 1 << 16
_COPY_BLOCK_ROWS: Final = 1000


_TEXT: Final = {str}
_TEXT_OR_NULL: Final = {str, type(None)}
_NUMBERS: Final = {int, float}
_NUMBERS_OR_NULL: Final = {int, float, type(None)}


def _copy_blocks(formats: Sequence[Callable[[Any], str]], rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    """COPY text for `rows`, a block of lines at a time, formatted column by column: a column of
    plain ints or floats is `str` of each, one of plain strings without a COPY special is itself
    (what `_copy_escape` makes of them; NULLs as `\\N`), a converted text column converts each
    distinct string once; Python calls a formatter per value only for the other columns (JSON,
    datetimes, bytes, mixed types)."""
    plain = [fmt is _copy_escape for fmt in formats]
    width = len(formats)
    it = iter(rows)
    while block := list(itertools.islice(it, _COPY_BLOCK_ROWS)):
        if set(map(len, block)) != {width}:
            raise ValueError(f"rows of {sorted(set(map(len, block)))} values for {width} columns")
        out: list[Iterable[str]] = []
        for fmt, is_plain, column in zip(formats, plain, zip(*block, strict=True), strict=True):
            kinds = set(map(type, column))
            if is_plain:
                if kinds <= _NUMBERS:
                    out.append(map(str, column))
                    continue
                if kinds <= _NUMBERS_OR_NULL:
                    out.append(["\\N" if v is None else str(v) for v in column])
                    continue
                if kinds <= _TEXT_OR_NULL:
                    texts = [v for v in column if v is not None]
                    if _COPY_SPECIAL.search("".join(texts)) is None:
                        out.append(
                            column
                            if len(texts) == len(column)
                            else ["\\N" if v is None else v for v in column]
                        )
                        continue
            elif kinds == _TEXT:  # a converted text column: each distinct string converted once
                converted = {v: fmt(v) for v in set(column)}
                out.append(map(converted.__getitem__, column))
                continue
            out.append(map(fmt, column))
        yield "\n".join(map("\t".join, zip(*out, strict=True))) + "\n"


class _CopySource:
    """A file for psycopg2's `copy_expert`: each read formats and encodes the next blocks. An error
    is kept (`error`) and ends the data, since one raised inside psycopg2's read would reach the
    caller as a failed COPY rather than as itself; only whole lines are ever sent."""

    def __init__(self, blocks: Iterator[str]) -> None:
        self._blocks = blocks
        self.error: Exception | None = None

    def read(self, size: int = -1) -> bytes:
        if self.error is not None:
            return b""
        parts: list[str] = []
        length = 0
        try:
            for block in self._blocks:
                parts.append(block)
                length += len(block)
                if 0 <= size <= length:
                    break
            return "".join(parts).encode("utf-8")
        except Exception as exc:  # re-raised by copy_rows once the COPY has ended
            self.error = exc
            return b""


def _copy_formatter(conn: Connection, table: Table | None, column: str) -> Callable[[Any], str]:
    """The column's bind conversion (COPY bypasses it), then COPY's text format."""
    kind = table.c[column].type if table is not None else None
    if isinstance(kind, LosslessJson):
        return _copy_json
    if isinstance(kind, TypeDecorator):
        dialect = conn.dialect
        return lambda value: _copy_escape(kind.process_bind_param(value, dialect))
    return _copy_escape


def _can_copy(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg2"


VERDICT_COLUMNS = (
    "run_id",
    "probe_id",
    "criterion",
    "subject",
    "node",
    "result",
    "action",
    "rule_id",
    "reason",
    "evidence",
    "judged_against",
    "policy_version",
    "baseline_id",
    "judged_at",
)
VERDICT_UPDATABLE = VERDICT_COLUMNS[1:]
MEASUREMENT_COLUMNS = ("probe_id", "seq", "node", "gpu", "metric", "value", "unit", "attrs")
PROBE_COLUMNS = (
    "run_id",
    "probe_key",
    "tool",
    "tool_version",
    "nodes",
    "spec",
    "raw",
    "raw_codec",
    "raw_sha256",
    "exit_code",
    "started_at",
    "finished_at",
)
PROBE_UPDATABLE = PROBE_COLUMNS[2:]
# From this many rows a bulk write goes through COPY (a staging table where a conflict rule is
# needed); below it, one statement's round trip is cheaper than a staging table's.
COPY_MIN_ROWS = 100


def verdict_row(
    run_id: int, verdict: Verdict, *, probe_id: int | None, node: str | None, judged_at: dt.datetime
) -> dict[str, Any]:
    against = verdict.judged_against
    baseline_id = against.get("baseline_id")
    return {
        "run_id": run_id,
        "probe_id": probe_id,
        "criterion": verdict.criterion,
        "subject": verdict.subject,
        "node": node,
        "result": verdict.result.value,
        "action": verdict.action,
        "rule_id": verdict.rule_id,
        "reason": verdict.reason,
        "evidence": verdict.evidence,
        "judged_against": against,
        "policy_version": against.get("policy_version"),
        "baseline_id": baseline_id if isinstance(baseline_id, int) else None,
        "judged_at": judged_at,
    }


class Store:
    """Repository over one engine. Methods open their own transaction unless given `conn`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- runs -------------------------------------------------------------------------------
    def ensure_run(
        self,
        run_key: str,
        *,
        suite: str,
        backend: str,
        fleet: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        with self.engine.begin() as conn:
            stmt = _dialect_insert(conn, Run.__table__).values(  # type: ignore[arg-type]
                run_key=run_key,
                suite=suite,
                backend=backend,
                fleet=fleet,
                meta=dict(meta or {}),
                started_at=utcnow(),
            )
            conn.execute(stmt.on_conflict_do_nothing(index_elements=["run_key"]))
            return int(conn.execute(select(Run.id).where(Run.run_key == run_key)).scalar_one())

    def find_run(self, run_key: str | None = None) -> tuple[int, str] | None:
        """(id, run_key) of the run with this key, or of the latest run when no key is given."""
        query = select(Run.id, Run.run_key).order_by(Run.id.desc())
        if run_key:
            query = query.where(Run.run_key == run_key)
        with self.engine.connect() as conn:
            row = conn.execute(query.limit(1)).first()
        return (int(row.id), str(row.run_key)) if row is not None else None

    # --- simulated fleets: the spec of each fleet served, so tools can name it ------------------
    def remember_fleet(self, name: str, seed: int, spec: Mapping[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(SimFleet).where(SimFleet.name == name))
            conn.execute(insert(SimFleet).values(name=name, seed=seed, spec=dict(spec)))

    def fleet_spec(self, name: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            found = conn.execute(select(SimFleet.spec).where(SimFleet.name == name)).scalar_one_or_none()
        return dict(found) if found is not None else None

    def run_id(self, run_key: str) -> int | None:
        with self.engine.connect() as conn:
            found = conn.execute(select(Run.id).where(Run.run_key == run_key)).scalar_one_or_none()
        return int(found) if found is not None else None

    def update_run_meta(self, run_id: int, **meta: Any) -> None:
        with self.engine.begin() as conn:
            current = conn.execute(select(Run.meta).where(Run.id == run_id)).scalar_one()
            conn.execute(update(Run).where(Run.id == run_id).values(meta={**(current or {}), **meta}))

    def run_meta(self, run_id: int) -> dict[str, Any]:
        with self.engine.connect() as conn:
            return dict(conn.execute(select(Run.meta).where(Run.id == run_id)).scalar_one() or {})

    def finish_run(self, run_id: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(Run).where(Run.id == run_id).values(finished_at=utcnow()))

    # --- probes, measurements, verdicts -----------------------------------------------------
    def ingest(self, run_id: int, probes: Sequence[ProbeIn]) -> IngestReport:
        """Store probes (raw first), their measurements and verdicts in one transaction.

        Re-ingesting the same probe keys replaces the raw output, measurements and verdicts of
        those probes; nothing is duplicated. A probe the store refuses fails alone (module doc):
        the report names it, and the log says why.
        """
        report = IngestReport()

        def write(batch: Sequence[ProbeIn]) -> None:
            with self.engine.begin() as conn:
                stored = self._write_probes(conn, run_id, batch)
            report.probes += len(batch)
            report.measurements += sum(len(p.measurements) for p in batch)
            report.verdicts += stored

        def raw_only(probe: ProbeIn, why: str) -> None:
            kept = dataclasses.replace(
                probe, measurements=(), verdicts=(), spec={**probe.spec, "store_error": why}
            )
            try:
                with self.engine.begin() as conn:
                    self._write_probes(conn, run_id, [kept])
            except Exception as exc:
                if not _unstorable(exc):
                    raise
                report.rejected[probe.probe_key] = _why(exc)
                log.error("probe %r of run %s not stored: %s", probe.probe_key, run_id, _why(exc))
                return
            report.probes += 1
            report.unjudged[probe.probe_key] = why
            log.error(
                "probe %r of run %s: raw output stored, results refused: %s", probe.probe_key, run_id, why
            )

        _isolating(probes, write, raw_only)
        return report

    def _write_probes(self, conn: Connection, run_id: int, probes: Sequence[ProbeIn]) -> int:
        probe_ids = self._upsert_probes(conn, run_id, probes)
        self._replace_measurements(conn, probes, probe_ids)
        rows = [
            verdict_row(run_id, v, probe_id=probe_ids[p.probe_key], node=_single(p.nodes), judged_at=utcnow())
            for p in probes
            for v in p.verdicts
        ]
        self._upsert_verdicts(conn, rows)
        return len(rows)

    def attach_results(
        self,
        run_id: int,
        results: Sequence[tuple[str, Sequence[MeasurementIn], Sequence[Verdict], str | None]],
    ) -> int:
        """Add measurements and verdicts to probes already stored (raw first, judged after).

        `results` holds (probe_key, measurements, verdicts, node); re-attaching replaces them.
        Results the store refuses fail alone: their probe keeps a `store_error` (so its node
        counts as not swept) and the log says why. Returns the number of verdicts stored.
        """
        keys = [r[0] for r in results]
        with self.engine.connect() as conn:
            ids = _probe_ids(conn, run_id, keys)
        missing = set(keys) - ids.keys()
        if missing:
            raise KeyError(f"probes not stored for run {run_id}: {sorted(missing)[:5]}")
        stored = 0

        def write(
            batch: Sequence[tuple[str, Sequence[MeasurementIn], Sequence[Verdict], str | None]],
        ) -> None:
            nonlocal stored
            with self.engine.begin() as conn:
                probes = [ProbeIn(key, "", "", (), measurements=tuple(m)) for key, m, _, _ in batch]
                self._replace_measurements(conn, probes, ids)
                now = utcnow()
                rows = [
                    verdict_row(run_id, v, probe_id=ids[key], node=node, judged_at=now)
                    for key, _, verdicts, node in batch
                    for v in verdicts
                ]
                self._upsert_verdicts(conn, rows)
            stored += len(rows)

        def refused(
            result: tuple[str, Sequence[MeasurementIn], Sequence[Verdict], str | None], why: str
        ) -> None:
            key = result[0]
            with self.engine.begin() as conn:
                conn.execute(delete(Measurement).where(Measurement.probe_id == ids[key]))
                spec = conn.execute(select(Probe.spec).where(Probe.id == ids[key])).scalar_one()
                conn.execute(
                    update(Probe).where(Probe.id == ids[key]).values(spec={**spec, "store_error": why})
                )
            log.error("probe %r of run %s: results refused by the store: %s", key, run_id, why)

        _isolating(results, write, refused)
        return stored

    def probes(
        self, run_id: int, probe_keys: Sequence[str] | None = None, *, with_raw: bool = True
    ) -> list[dict[str, Any]]:
        """Probe rows as dicts; `raw` is the str that was ingested (decoded from its bytes)."""
        columns = [c for c in Probe.__table__.c if with_raw or c.name not in ("raw", "raw_codec")]
        query = select(*columns).where(Probe.run_id == run_id).order_by(Probe.id)
        if probe_keys is not None:
            query = query.where(Probe.probe_key.in_(list(probe_keys)))
        with self.engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(query)]
        for row in rows:
            if with_raw:
                row["raw"] = decode_raw(row["raw"], row.pop("raw_codec"))
        return rows

    def probed_nodes(self, run_id: int, *, completed_only: bool = False) -> list[str]:
        """Nodes with a stored probe in this run (without loading raw outputs); `completed_only`
        leaves out probes that stand for a harness failure or whose results the store refused."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(Probe.nodes, Probe.spec).where(Probe.run_id == run_id))
            return sorted(
                {
                    node
                    for nodes, spec in rows
                    if not (
                        completed_only
                        and ((spec or {}).get("harness_error") or (spec or {}).get("store_error"))
                    )
                    for node in nodes
                }
            )

    def add_verdicts(
        self,
        run_id: int,
        verdicts: Iterable[Verdict],
        *,
        probe_id: int | None = None,
        node: str | None = None,
    ) -> int:
        """Upsert verdicts; returns how many. Verdicts the store refuses fail alone: the others
        are stored, then RowsNotStored names the refused ones (a verdict is never dropped quietly)."""
        now = utcnow()
        rows = [verdict_row(run_id, v, probe_id=probe_id, node=node, judged_at=now) for v in verdicts]
        refused: dict[str, str] = {}

        def write(batch: Sequence[dict[str, Any]]) -> None:
            with self.engine.begin() as conn:
                self._upsert_verdicts(conn, batch)

        def failed(row: dict[str, Any], why: str) -> None:
            refused[f"{row['criterion']} {row['subject']!r}"] = why

        _isolating(rows, write, failed)
        if refused:
            first, why = next(iter(refused.items()))
            raise RowsNotStored(
                f"{len(refused)} of {len(rows)} verdicts of run {run_id} not stored ({first}: {why})"
            )
        return len(rows)

    def _upsert_probes(self, conn: Connection, run_id: int, probes: Sequence[ProbeIn]) -> dict[str, int]:
        if not probes:
            return {}
        rows = []
        for p in probes:
            raw, codec = encode_raw(p.raw)
            rows.append(
                {
                    "run_id": run_id,
                    "probe_key": p.probe_key,
                    "tool": p.tool,
                    "tool_version": p.tool_version,
                    "nodes": list(p.nodes),
                    "spec": p.spec,
                    "raw": raw,
                    "raw_codec": codec,
                    "raw_sha256": hashlib.sha256(raw).hexdigest(),
                    "exit_code": p.exit_code,
                    "started_at": p.started_at,
                    "finished_at": p.finished_at,
                }
            )
        if _can_copy(conn) and len(rows) >= COPY_MIN_ROWS:
            return self._copy_upsert_probes(conn, rows)
        stmt = _dialect_insert(conn, Probe.__table__)  # type: ignore[arg-type]
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id", "probe_key"],
            set_={c: stmt.excluded[c] for c in PROBE_UPDATABLE},
        )
        for chunk in _chunks(rows, 2000):
            conn.execute(stmt, chunk)
        return _probe_ids(conn, run_id, [p.probe_key for p in probes])

    def _copy_upsert_probes(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> dict[str, int]:
        """COPY into a staging table, then one set-based upsert that returns the ids: a wave's raw
        output (the largest part of a sweep) at close to COPY speed instead of a statement's
        parameters per row. The stage has the columns' types and no default, so it draws no ids."""
        last = {r["probe_key"]: r for r in rows}  # one statement may not touch a key twice
        run_id = rows[0]["run_id"]
        values = [[r[c] for c in PROBE_COLUMNS] for r in last.values()]
        table: Table = Probe.__table__  # type: ignore[assignment]
        if not _probe_ids(conn, run_id, list(last)) and _copy_if_new(
            conn, "probes", PROBE_COLUMNS, values, table
        ):
            return _probe_ids(conn, run_id, list(last))
        cols = ", ".join(PROBE_COLUMNS)
        conn.exec_driver_sql(
            "CREATE TEMP TABLE IF NOT EXISTS probes_stage ON COMMIT DROP "
            f"AS SELECT {cols} FROM probes WITH NO DATA"
        )
        copy_rows(conn, "probes_stage", PROBE_COLUMNS, values, types_of=table)
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in PROBE_UPDATABLE)
        found = conn.exec_driver_sql(
            f"INSERT INTO probes ({cols}) SELECT {cols} FROM probes_stage "
            f"ON CONFLICT (run_id, probe_key) DO UPDATE SET {sets} RETURNING probe_key, id"
        )
        ids = {str(key): int(pid) for key, pid in found}
        conn.exec_driver_sql("DROP TABLE probes_stage")
        return ids

    def _replace_measurements(
        self, conn: Connection, probes: Sequence[ProbeIn], probe_ids: Mapping[str, int]
    ) -> None:
        ids = [probe_ids[p.probe_key] for p in probes]
        for chunk in _chunks(ids, 5000):
            conn.execute(delete(Measurement).where(Measurement.probe_id.in_(chunk)))
        rows = (
            (probe_ids[p.probe_key], seq, m.node, m.gpu, m.metric, m.value, m.unit, m.attrs)
            for p in probes
            for seq, m in enumerate(p.measurements)
        )
        if _can_copy(conn):
            copy_rows(conn, "measurements", MEASUREMENT_COLUMNS, rows, types_of=Measurement.__table__)  # type: ignore[arg-type]
            return
        dict_rows = [dict(zip(MEASUREMENT_COLUMNS, r, strict=True)) for r in rows]
        for chunk_rows in _chunks(dict_rows, 5000):
            conn.execute(insert(Measurement), chunk_rows)

    def _upsert_verdicts(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        if _can_copy(conn) and len(rows) > 500:
            unique = list(_last_per_key(rows))
            values = [[r[c] for c in VERDICT_COLUMNS] for r in unique]
            table: Table = VerdictRow.__table__  # type: ignore[assignment]
            if _verdicts_of_new_probes(conn, unique) and _copy_if_new(
                conn, "verdicts", VERDICT_COLUMNS, values, table
            ):
                return
            # COPY into a staging table, then one set-based upsert: conflict handling at COPY speed.
            cols = ", ".join(VERDICT_COLUMNS)
            conn.exec_driver_sql(
                "CREATE TEMP TABLE IF NOT EXISTS verdicts_stage ON COMMIT DROP "
                f"AS SELECT {cols} FROM verdicts WITH NO DATA"
            )
            copy_rows(conn, "verdicts_stage", VERDICT_COLUMNS, values, types_of=table)
            sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in VERDICT_UPDATABLE)
            conn.exec_driver_sql(
                f"INSERT INTO verdicts ({cols}) SELECT {cols} FROM verdicts_stage "
                f"ON CONFLICT (run_id, criterion, subject) DO UPDATE SET {sets}"
            )
            conn.exec_driver_sql("DROP TABLE verdicts_stage")
            return
        stmt = _dialect_insert(conn, VerdictRow.__table__)  # type: ignore[arg-type]
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id", "criterion", "subject"],
            set_={c: stmt.excluded[c] for c in VERDICT_UPDATABLE},
        )
        for chunk in _chunks(list(_last_per_key(rows)), 2000):
            conn.execute(stmt, chunk)

    # --- node events ------------------------------------------------------------------------
    def record_node_event(
        self,
        event_key: str,
        *,
        node: str,
        kind: str,
        reason: str,
        dry_run: bool,
        run_id: int | None = None,
        details: Mapping[str, Any] | None = None,
        at: dt.datetime | None = None,
    ) -> bool:
        """Record an action on a node; returns False when this event was already recorded."""
        with self.engine.begin() as conn:
            stmt = _dialect_insert(conn, NodeEvent.__table__).values(  # type: ignore[arg-type]
                event_key=event_key,
                node=node,
                kind=kind,
                reason=reason,
                dry_run=dry_run,
                run_id=run_id,
                details=dict(details or {}),
                at=at or utcnow(),
            )
            result = conn.execute(stmt.on_conflict_do_nothing(index_elements=["event_key"]))
            return bool(result.rowcount)

    def node_events(
        self, node: str | None = None, *, run_id: int | None = None, kind: str | None = None
    ) -> list[dict[str, Any]]:
        query = select(*NodeEvent.__table__.c).order_by(NodeEvent.id)
        if node is not None:
            query = query.where(NodeEvent.node == node)
        if run_id is not None:
            query = query.where(NodeEvent.run_id == run_id)
        if kind is not None:
            query = query.where(NodeEvent.kind == kind)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    # --- reads ------------------------------------------------------------------------------
    def verdicts(self, run_id: int | None = None, criterion: str | None = None) -> list[dict[str, Any]]:
        query = select(*VerdictRow.__table__.c).order_by(VerdictRow.id)
        if run_id is not None:
            query = query.where(VerdictRow.run_id == run_id)
        if criterion is not None:
            query = query.where(VerdictRow.criterion == criterion)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def count(self, model: type[Any]) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(model)).scalar_one())

    def probe_raw(self, probe_id: int) -> str:
        with self.engine.connect() as conn:
            raw, codec = conn.execute(select(Probe.raw, Probe.raw_codec).where(Probe.id == probe_id)).one()
        return decode_raw(raw, codec)

    # --- baselines --------------------------------------------------------------------------
    def add_baseline_candidate(
        self,
        *,
        profile: str,
        metric: str,
        scope: str,
        value: float,
        unit: str,
        stats: Mapping[str, Any],
        source: Mapping[str, Any],
    ) -> tuple[int, int]:
        """A new candidate baseline at the next version; returns (id, version)."""
        with self.engine.begin() as conn:
            latest = conn.execute(
                select(func.max(Baseline.version)).where(
                    Baseline.profile == profile, Baseline.metric == metric, Baseline.scope == scope
                )
            ).scalar_one()
            version = int(latest or 0) + 1
            new_id = conn.execute(
                insert(Baseline)
                .values(
                    profile=profile,
                    metric=metric,
                    scope=scope,
                    version=version,
                    status="candidate",
                    value=value,
                    unit=unit,
                    stats=dict(stats),
                    source=dict(source),
                    created_at=utcnow(),
                )
                .returning(Baseline.id)
            ).scalar_one()
            return int(new_id), version

    def promote_baseline(self, baseline_id: int) -> None:
        """Promote a candidate; the previously promoted baseline of its scope is retired atomically."""
        with self.engine.begin() as conn:
            row = conn.execute(select(*Baseline.__table__.c).where(Baseline.id == baseline_id)).one()
            if row.status != "candidate":
                raise ValueError(f"baseline {baseline_id} is {row.status}, only a candidate can be promoted")
            now = utcnow()
            conn.execute(
                update(Baseline)
                .where(
                    Baseline.profile == row.profile,
                    Baseline.metric == row.metric,
                    Baseline.scope == row.scope,
                    Baseline.status == "promoted",
                )
                .values(status="retired", retired_at=now)
            )
            conn.execute(
                update(Baseline).where(Baseline.id == baseline_id).values(status="promoted", promoted_at=now)
            )

    def promoted_baseline(self, *, profile: str, metric: str, scope: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(*Baseline.__table__.c).where(
                    Baseline.profile == profile,
                    Baseline.metric == metric,
                    Baseline.scope == scope,
                    Baseline.status == "promoted",
                )
            ).first()
            return dict(row._mapping) if row else None


def _copy_if_new(
    conn: Connection, table_name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], table: Table
) -> bool:
    """COPY rows whose keys are not stored yet straight into their table (no staging, no conflict
    rule): a first ingest. False, with nothing written, when a key was stored meanwhile (another
    attempt of the same task): the caller's upsert then handles it."""
    try:
        with conn.begin_nested():
            copy_rows(conn, table_name, columns, rows, types_of=table)
    except sa_exc.IntegrityError:
        return False
    return True


def _verdicts_of_new_probes(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every row belongs to a probe that has no verdict yet (a first judgement): then a
    plain COPY is likely to meet no stored key. A cheap test (an index probe per probe, not per
    verdict); a key it misses makes the COPY fail, and `_copy_if_new` falls back."""
    probe_ids = {r["probe_id"] for r in rows}
    if None in probe_ids:
        return False
    found = conn.exec_driver_sql(
        "SELECT EXISTS (SELECT 1 FROM verdicts WHERE probe_id = ANY(%s))", (sorted(probe_ids),)
    )
    return not found.scalar()


def _probe_ids(conn: Connection, run_id: int, keys: Sequence[str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    for chunk_keys in _chunks(keys, 5000):
        found = conn.execute(
            select(Probe.probe_key, Probe.id).where(Probe.run_id == run_id, Probe.probe_key.in_(chunk_keys))
        )
        ids.update({key: int(pid) for key, pid in found})
    return ids


def _single(nodes: Sequence[str]) -> str | None:
    return nodes[0] if len(nodes) == 1 else None


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _last_per_key(rows: Sequence[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    # One statement may not touch a conflict key twice; the last judgement wins.
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        by_key[(r["run_id"], r["criterion"], r["subject"])] = r
    return by_key.values()
