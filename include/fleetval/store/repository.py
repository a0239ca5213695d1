"""The store's write and read paths. Every write is idempotent on a natural key:

- runs on `run_key`, probes on `(run_id, probe_key)`, verdicts on `(run_id, criterion, subject)`,
  node events on `event_key`, baselines on `(profile, metric, scope, version)`;
- measurements belong to their probe: re-ingesting a probe replaces its measurements.

Bulk paths use PostgreSQL COPY through psycopg 3 (through a staging table where a conflict rule
is needed), so a 16k-node sweep ingests at close to raw COPY speed; SQLite uses executemany.

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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    TypeDecorator,
    any_,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
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
    return isinstance(exc, UnicodeError | OverflowError)  # lone surrogates; an int SQLite cannot hold


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


# One encoder for every document: json.dumps with options builds a new one per call, and
# JSONEncoder.encode a new C encoder per call; this is the one it would build (ASCII, compact,
# NaN refused), reused. Without the C accelerator, the same through JSONEncoder.
def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_make_encoder = getattr(json.encoder, "c_make_encoder", None)  # not in the type stubs
_c_encoder = (
    None
    if _make_encoder is None
    else _make_encoder(
        None, _not_json, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False
    )
)
_JSON = json.JSONEncoder(separators=(",", ":")).encode


def _json_strict(value: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> str:
    if _c_encoder is None:
        return json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode(value)
    return "".join(_c_encoder(value, 0))


def _json_text(value: Any) -> str:
    """A `LosslessJson` value as the JSON text the column stores: what binding
    `escape_json(value)` sends.

    json.dumps (ASCII, NaN refused) shows at once whether escaping can change anything: only a
    non-finite float or a string that dumps as a `\\u` escape (NUL, a surrogate, the escape mark,
    any non-ASCII) can. Such documents, and rare top-level scalars, take the walk."""
    if isinstance(value, dict | list | tuple):
        try:
            text = _json_strict(value)
        except ValueError:
            pass
        else:
            if "\\u" not in text:
                return text
    return _JSON(escape_json(value))


def copy_rows(
    conn: Connection,
    table_name: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    types_of: Table | None = None,
) -> None:
    """PostgreSQL COPY FROM STDIN (text format) in the connection's transaction, through psycopg 3.

    `types_of`: the table whose column types convert the values first (COPY bypasses them), so
    lossless columns get their escaped form (`_converted`). psycopg formats each row in C
    (`write_row`) and sends the data as it goes, so the server's work (parse, index, TOAST)
    overlaps this process's. A value that cannot be formatted or encoded (a lone surrogate:
    UnicodeEncodeError; NUL in text: DataError) ends the COPY and is raised as itself, and the
    caller's transaction rolls back what was sent. The driver's errors come back as SQLAlchemy's
    (a lost connection is an OperationalError, a refused value a DataError), as for any statement.
    """
    converts = [_bind_conversion(conn, types_of, c) for c in columns]
    statement = f"COPY {table_name} ({', '.join(columns)}) FROM STDIN"
    dbapi = conn.dialect.loaded_dbapi
    dbapi_conn = conn.connection.dbapi_connection
    assert dbapi_conn is not None
    cursor = dbapi_conn.cursor()
    try:
        with cursor.copy(statement) as copy:
            write_row = copy.write_row
            for block in _converted(converts, rows):
                for row in block:
                    write_row(row)
    except dbapi.Error as exc:
        raise sa_exc.DBAPIError.instance(
            statement,
            None,
            exc,
            dbapi.Error,
            connection_invalidated=conn.dialect.is_disconnect(exc, dbapi_conn, cursor),
            dialect=conn.dialect,
        ) from exc
    finally:
        cursor.close()


# Rows converted at once, column by column.
_COPY_BLOCK_ROWS: Final = 1000


def _converted(
    converts: Sequence[Callable[[Any], Any] | None], rows: Iterable[Sequence[Any]]
) -> Iterator[Iterable[Sequence[Any]]]:
    """`rows` with each value through its column's conversion (None: as it is), a block at a time,
    column by column: a Python call per value only for converted columns; a JSON column converts
    each document once (`_json_column`), a converted text column (a verdict's reason) each
    distinct string once."""
    width = len(converts)
    it = iter(rows)
    if all(c is None for c in converts):
        while block := list(itertools.islice(it, _COPY_BLOCK_ROWS)):
            _check_width(block, width)
            yield block
        return
    while block := list(itertools.islice(it, _COPY_BLOCK_ROWS)):
        _check_width(block, width)
        out: list[Iterable[Any]] = []
        for convert, column in zip(converts, zip(*block, strict=True), strict=True):
            if convert is None:
                out.append(column)
            elif convert is _json_text:
                out.append(_json_column(column))
            elif set(map(type, column)) == {str}:
                converted = {v: convert(v) for v in set(column)}
                out.append(map(converted.__getitem__, column))
            else:
                out.append(map(convert, column))
        yield zip(*out, strict=True)


# Dict values a document is recognised by: not floats (0.0 == -0.0, and their JSON differs).
_MEMO_SCALARS: Final = frozenset({str, int, bool, type(None)})


def _json_column(column: Sequence[Any]) -> list[str]:
    """`_json_text` of each value, each document converted once per block: the same object (a
    judgement's `judged_against`, shared by its verdicts) or a flat dict of the same str keys and
    scalars (a measurement's attrs: a few distinct ones in thousands) reuses its text."""
    by_id: dict[int, str] = {}  # the block holds every value: an id is not reused meanwhile
    by_items: dict[tuple[tuple[str, type, Any], ...], str] = {}
    out = []
    for value in column:
        text = by_id.get(id(value))
        if text is None:
            if type(value) is dict and all(
                type(k) is str and type(v) in _MEMO_SCALARS for k, v in value.items()
            ):
                items = tuple([(k, type(v), v) for k, v in value.items()])
                text = by_items.get(items)
                if text is None:
                    text = by_items[items] = _json_text(value)
            else:
                text = _json_text(value)
            by_id[id(value)] = text
        out.append(text)
    return out


def _check_width(block: Sequence[Sequence[Any]], width: int) -> None:
    if set(map(len, block)) != {width}:
        raise ValueError(f"rows of {sorted(set(map(len, block)))} values for {width} columns")


def _bind_conversion(conn: Connection, table: Table | None, column: str) -> Callable[[Any], Any] | None:
    """The column's bind conversion, which COPY bypasses (None: the value as it is)."""
    kind = table.c[column].type if table is not None else None
    if isinstance(kind, LosslessJson):
        return _json_text
    if isinstance(kind, TypeDecorator):
        dialect = conn.dialect
        return lambda value: kind.process_bind_param(value, dialect)
    return None


def _can_copy(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg"


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
# A verdict judged again to the same outcome is left as it is (its first judged_at kept): a retried
# task rewrites nothing it already stored.
VERDICT_COMPARED = tuple(c for c in VERDICT_UPDATABLE if c != "judged_at")
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


VerdictValues = tuple[Any, ...]  # a verdict's row: its values in VERDICT_COLUMNS order


def verdict_values(
    run_id: int, verdict: Verdict, *, probe_id: int | None, node: str | None, judged_at: dt.datetime
) -> VerdictValues:
    against = verdict.judged_against
    baseline_id = against.get("baseline_id")
    return (
        run_id,
        probe_id,
        verdict.criterion,
        verdict.subject,
        node,
        verdict.result.value,
        verdict.action,
        verdict.rule_id,
        verdict.reason,
        verdict.evidence,
        against,
        against.get("policy_version"),
        baseline_id if isinstance(baseline_id, int) else None,
        judged_at,
    )


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
        probe_ids, unchanged = self._upsert_probes(conn, run_id, probes)
        # Measurements are parsed from the raw output: a probe stored again with the same bytes
        # and no results (a retried probe task, results to come) keeps those parsed from them.
        self._replace_measurements(
            conn, [p for p in probes if p.measurements or p.probe_key not in unchanged], probe_ids
        )
        rows = [
            verdict_values(
                run_id, v, probe_id=probe_ids[p.probe_key], node=_single(p.nodes), judged_at=utcnow()
            )
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
                    verdict_values(run_id, v, probe_id=ids[key], node=node, judged_at=now)
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
        rows = [verdict_values(run_id, v, probe_id=probe_id, node=node, judged_at=now) for v in verdicts]
        refused: dict[str, str] = {}

        def write(batch: Sequence[VerdictValues]) -> None:
            with self.engine.begin() as conn:
                self._upsert_verdicts(conn, batch)

        def failed(row: VerdictValues, why: str) -> None:
            refused[f"{row[2]} {row[3]!r}"] = why

        _isolating(rows, write, failed)
        if refused:
            first, why = next(iter(refused.items()))
            raise RowsNotStored(
                f"{len(refused)} of {len(rows)} verdicts of run {run_id} not stored ({first}: {why})"
            )
        return len(rows)

    def _upsert_probes(
        self, conn: Connection, run_id: int, probes: Sequence[ProbeIn]
    ) -> tuple[dict[str, int], set[str]]:
        """Upsert the probes; returns their ids and the keys whose stored raw output was already
        these bytes."""
        if not probes:
            return {}, set()
        stored = _stored_raw(conn, run_id, [p.probe_key for p in probes])
        rows = []
        unchanged = set()
        for p in probes:
            raw, codec = encode_raw(p.raw)
            sha = hashlib.sha256(raw).hexdigest()
            if stored.get(p.probe_key) == (sha, codec):
                unchanged.add(p.probe_key)
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
                    "raw_sha256": sha,
                    "exit_code": p.exit_code,
                    "started_at": p.started_at,
                    "finished_at": p.finished_at,
                }
            )
        if _can_copy(conn) and len(rows) >= COPY_MIN_ROWS:
            return _copy_upsert_probes(conn, rows, stored, unchanged), unchanged
        return _plain_upsert_probes(conn, rows), unchanged

    def _replace_measurements(
        self, conn: Connection, probes: Sequence[ProbeIn], probe_ids: Mapping[str, int]
    ) -> None:
        ids = [probe_ids[p.probe_key] for p in probes]
        rows = (
            (probe_ids[p.probe_key], seq, m.node, m.gpu, m.metric, m.value, m.unit, m.attrs)
            for p in probes
            for seq, m in enumerate(p.measurements)
        )
        if _can_copy(conn):
            _copy_replace_measurements(conn, ids, rows)
            return
        for chunk in _chunks(ids, 5000):
            conn.execute(delete(Measurement).where(_one_of(conn, Measurement.probe_id, chunk)))
        dict_rows = [dict(zip(MEASUREMENT_COLUMNS, r, strict=True)) for r in rows]
        for chunk_rows in _chunks(dict_rows, 5000):
            conn.execute(insert(Measurement), chunk_rows)

    def _upsert_verdicts(self, conn: Connection, rows: Sequence[VerdictValues]) -> None:
        if not rows:
            return
        unique = _last_per_key(rows)
        if _can_copy(conn) and len(rows) > 500:
            table: Table = VerdictRow.__table__  # type: ignore[assignment]
            if _verdicts_of_new_probes(conn, unique) and _copy_if_new(
                conn, "verdicts", VERDICT_COLUMNS, unique, table
            ):
                return
            # COPY into a staging table, then one set-based upsert: conflict handling at COPY speed.
            cols = ", ".join(VERDICT_COLUMNS)
            sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in VERDICT_UPDATABLE)
            with _staged(conn, "verdicts", VERDICT_COLUMNS, unique, table) as stage:
                conn.exec_driver_sql(
                    f"INSERT INTO verdicts ({cols}) SELECT {cols} FROM {stage} "
                    f"ON CONFLICT (run_id, criterion, subject) DO UPDATE SET {sets} "
                    f"WHERE {_changed('verdicts', VERDICT_COMPARED)}"
                )
            return
        stored = VerdictRow.__table__.c
        stmt = _dialect_insert(conn, VerdictRow.__table__)  # type: ignore[arg-type]
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id", "criterion", "subject"],
            set_={c: stmt.excluded[c] for c in VERDICT_UPDATABLE},
            where=or_(*(stored[c].is_distinct_from(stmt.excluded[c]) for c in VERDICT_COMPARED)),
        )
        for chunk in _chunks([dict(zip(VERDICT_COLUMNS, r, strict=True)) for r in unique], 2000):
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
            result = conn.execute(
                stmt.on_conflict_do_nothing(index_elements=["event_key"]),
                execution_options={"preserve_rowcount": True},  # an INSERT's is kept only if asked
            )
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


def _changed(table_name: str, columns: Sequence[str]) -> str:
    """An upsert's condition that the row differs in `columns` from the one it would replace."""
    stored = ", ".join(f"{table_name}.{c}" for c in columns)
    return f"({stored}) IS DISTINCT FROM ({', '.join(f'EXCLUDED.{c}' for c in columns)})"


def _copy_replace_measurements(
    conn: Connection, probe_ids: Sequence[int], rows: Iterable[Sequence[Any]]
) -> None:
    """The probes' measurements become `rows`. Probes with none stored (a first ingest): COPY
    straight into the table. Else COPY into a staging table, delete the stored rows it does not
    have, and upsert the rest, skipping rows that did not change: a retried task's identical
    measurements are not rewritten (deleting and re-inserting them would also leave a dead row
    behind each, which every insert of the same key then has to check)."""
    table: Table = Measurement.__table__  # type: ignore[assignment]
    stored = conn.exec_driver_sql(
        "SELECT EXISTS (SELECT 1 FROM measurements WHERE probe_id = ANY(%s::bigint[]))", (list(probe_ids),)
    ).scalar()
    if not stored:
        copy_rows(conn, "measurements", MEASUREMENT_COLUMNS, rows, types_of=table)
        return
    cols = ", ".join(MEASUREMENT_COLUMNS)
    values = MEASUREMENT_COLUMNS[2:]
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in values)
    with _staged(conn, "measurements", MEASUREMENT_COLUMNS, rows, table) as stage:
        conn.exec_driver_sql(
            f"DELETE FROM measurements m WHERE m.probe_id = ANY(%s::bigint[]) AND NOT EXISTS "
            f"(SELECT 1 FROM {stage} s WHERE s.probe_id = m.probe_id AND s.seq = m.seq)",
            (list(probe_ids),),
        )
        conn.exec_driver_sql(
            f"INSERT INTO measurements ({cols}) SELECT {cols} FROM {stage} "
            f"ON CONFLICT (probe_id, seq) DO UPDATE SET {sets} WHERE {_changed('measurements', values)}"
        )


@contextmanager
def _staged(
    conn: Connection, table_name: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], table: Table
) -> Iterator[str]:
    """A temporary table with `columns` of `table_name` (their types; no default, constraint or
    index, so it draws no ids), holding `rows` by COPY; dropped after use (its transaction may
    stage again)."""
    stage = f"{table_name}_stage"
    conn.exec_driver_sql(
        f"CREATE TEMP TABLE IF NOT EXISTS {stage} ON COMMIT DROP "
        f"AS SELECT {', '.join(columns)} FROM {table_name} WITH NO DATA"
    )
    copy_rows(conn, stage, columns, rows, types_of=table)
    yield stage
    conn.exec_driver_sql(f"DROP TABLE {stage}")


def _verdicts_of_new_probes(conn: Connection, rows: Sequence[VerdictValues]) -> bool:
    """Whether every row belongs to a probe that has no verdict yet (a first judgement): then a
    plain COPY is likely to meet no stored key. A cheap test (an index probe per probe, not per
    verdict); a key it misses makes the COPY fail, and `_copy_if_new` falls back."""
    probe_ids = {r[1] for r in rows}
    if None in probe_ids:
        return False
    found = conn.exec_driver_sql(
        "SELECT EXISTS (SELECT 1 FROM verdicts WHERE probe_id = ANY(%s::bigint[]))", (sorted(probe_ids),)
    )
    return not found.scalar()


def _plain_upsert_probes(conn: Connection, rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    stmt = _dialect_insert(conn, Probe.__table__)  # type: ignore[arg-type]
    stmt = stmt.on_conflict_do_update(
        index_elements=["run_id", "probe_key"],
        set_={c: stmt.excluded[c] for c in PROBE_UPDATABLE},
    )
    for chunk in _chunks(rows, 2000):
        conn.execute(stmt, chunk)
    return _probe_ids(conn, rows[0]["run_id"], [r["probe_key"] for r in rows])


def _copy_upsert_probes(
    conn: Connection,
    rows: Sequence[dict[str, Any]],
    stored: Mapping[str, tuple[str, str]],
    unchanged: set[str],
) -> dict[str, int]:
    """None of the keys stored (a first ingest): COPY straight into the table. Else COPY into a
    staging table, then set-based statements that return the ids: a wave's raw output (the
    largest part of a sweep) at close to COPY speed instead of a statement's parameters per row.
    Raw output already stored byte for byte is not sent again: its stage row holds NULL, and the
    stored row is updated but for its raw output, where the stored hash is still the one sent (a
    row that changed meanwhile takes the plain upsert). The stage has the columns' types and no
    default or NOT NULL, so it draws no ids."""
    last = {r["probe_key"]: r for r in rows}  # one statement may not touch a key twice
    run_id = rows[0]["run_id"]
    table: Table = Probe.__table__  # type: ignore[assignment]
    values = [[r[c] for c in PROBE_COLUMNS] for r in last.values()]
    if not stored and _copy_if_new(conn, "probes", PROBE_COLUMNS, values, table):
        return _probe_ids(conn, run_id, list(last))
    raw_at = PROBE_COLUMNS.index("raw")
    for row in values:
        if row[1] in unchanged:
            row[raw_at] = None
    cols = ", ".join(PROBE_COLUMNS)
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in PROBE_UPDATABLE)
    but_raw = ", ".join(f"{c} = s.{c}" for c in PROBE_UPDATABLE if c != "raw")
    with _staged(conn, "probes", PROBE_COLUMNS, values, table) as stage:
        found = list(
            conn.exec_driver_sql(
                f"INSERT INTO probes ({cols}) SELECT {cols} FROM {stage} WHERE raw IS NOT NULL "
                f"ON CONFLICT (run_id, probe_key) DO UPDATE SET {sets} RETURNING probe_key, id"
            )
        )
        found += conn.exec_driver_sql(
            f"UPDATE probes p SET {but_raw} FROM {stage} s WHERE s.raw IS NULL "
            "AND p.run_id = s.run_id AND p.probe_key = s.probe_key "
            "AND p.raw_sha256 = s.raw_sha256 AND p.raw_codec = s.raw_codec RETURNING p.probe_key, p.id"
        )
    ids = {str(key): int(pid) for key, pid in found}
    if missing := [r for key, r in last.items() if key not in ids]:
        ids |= _plain_upsert_probes(conn, missing)
    return ids


def _stored_raw(conn: Connection, run_id: int, keys: Sequence[str]) -> dict[str, tuple[str, str]]:
    """probe key → (raw_sha256, raw_codec) of the keys already stored."""
    found: dict[str, tuple[str, str]] = {}
    for chunk_keys in _chunks(keys, 5000):
        rows = conn.execute(
            select(Probe.probe_key, Probe.raw_sha256, Probe.raw_codec).where(
                Probe.run_id == run_id, _one_of(conn, Probe.probe_key, chunk_keys)
            )
        )
        found.update({key: (sha, codec) for key, sha, codec in rows})
    return found


def _probe_ids(conn: Connection, run_id: int, keys: Sequence[str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    for chunk_keys in _chunks(keys, 5000):
        found = conn.execute(
            select(Probe.probe_key, Probe.id).where(
                Probe.run_id == run_id, _one_of(conn, Probe.probe_key, chunk_keys)
            )
        )
        ids.update({key: int(pid) for key, pid in found})
    return ids


def _one_of(conn: Connection, column: Any, values: Sequence[Any]) -> Any:
    """`column IN values`; on PostgreSQL `= ANY(array)`: one parameter, not one per value (a wave
    has thousands), so neither side parses a statement the size of the list."""
    if conn.dialect.name == "postgresql":
        return column == any_(bindparam(None, list(values), type_=postgresql.ARRAY(column.type)))
    return column.in_(values)


def _single(nodes: Sequence[str]) -> str | None:
    return nodes[0] if len(nodes) == 1 else None


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _last_per_key(rows: Sequence[VerdictValues]) -> list[VerdictValues]:
    # One statement may not touch a conflict key twice; the last judgement wins.
    return list({(r[0], r[2], r[3]): r for r in rows}.values())  # run_id, criterion, subject
