"""Bulk writes of the store's rows: probes, their measurements and verdicts, a wave at a time.

On PostgreSQL through psycopg 3, a wave goes through COPY (into a staging table where a conflict
rule is needed): the rows are streamed instead of binding a statement's parameters per row, so a
16k-node sweep ingests at close to raw COPY speed. Smaller batches of probes or verdicts, and
SQLite, take chunked executemany upserts. COPY bypasses the columns' types, so values get their
bound form first (`copy_rows`).

Rows are tuples in their table's `*_COLUMNS` order (probes: dicts keyed by them); the facade that
builds them from records is fleetval.store.repository.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

from sqlalchemy import Connection, Table, TypeDecorator, any_, bindparam, delete, insert, or_, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite

from fleetval.store.models import LosslessJson, Measurement, Probe, VerdictRow, escape_json

# Row layouts: the column order of the rows the writers below take.
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


def upsert_probes(
    conn: Connection,
    rows: Sequence[dict[str, Any]],
    stored: Mapping[str, tuple[str, str]],
    unchanged: set[str],
) -> dict[str, int]:
    """Upsert probe rows (dicts of PROBE_COLUMNS); returns probe key → id. `stored`: what
    `stored_raw` found for these keys; `unchanged`: the keys whose stored raw output is already
    these bytes (not sent again)."""
    if _can_copy(conn) and len(rows) >= COPY_MIN_ROWS:
        return _copy_upsert_probes(conn, rows, stored, unchanged)
    return _plain_upsert_probes(conn, rows)


def replace_measurements(conn: Connection, probe_ids: Sequence[int], rows: Iterable[Sequence[Any]]) -> None:
    """The probes' measurements become `rows` (MEASUREMENT_COLUMNS order)."""
    if _can_copy(conn):
        _copy_replace_measurements(conn, probe_ids, rows)
        return
    for chunk in _chunks(probe_ids, 5000):
        conn.execute(delete(Measurement).where(_one_of(conn, Measurement.probe_id, chunk)))
    dict_rows = [dict(zip(MEASUREMENT_COLUMNS, r, strict=True)) for r in rows]
    for chunk_rows in _chunks(dict_rows, 5000):
        conn.execute(insert(Measurement), chunk_rows)


def upsert_verdicts(conn: Connection, rows: Sequence[VerdictValues]) -> None:
    """Upsert verdict rows on (run_id, criterion, subject); the last row of a key wins."""
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
    stmt = dialect_insert(conn, VerdictRow.__table__)  # type: ignore[arg-type]
    stmt = stmt.on_conflict_do_update(
        index_elements=["run_id", "criterion", "subject"],
        set_={c: stmt.excluded[c] for c in VERDICT_UPDATABLE},
        where=or_(*(stored[c].is_distinct_from(stmt.excluded[c]) for c in VERDICT_COMPARED)),
    )
    for chunk in _chunks([dict(zip(VERDICT_COLUMNS, r, strict=True)) for r in unique], 2000):
        conn.execute(stmt, chunk)


def stored_raw(conn: Connection, run_id: int, keys: Sequence[str]) -> dict[str, tuple[str, str]]:
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


def probe_ids_by_key(conn: Connection, run_id: int, keys: Sequence[str]) -> dict[str, int]:
    """probe key → id of the keys stored."""
    ids: dict[str, int] = {}
    for chunk_keys in _chunks(keys, 5000):
        found = conn.execute(
            select(Probe.probe_key, Probe.id).where(
                Probe.run_id == run_id, _one_of(conn, Probe.probe_key, chunk_keys)
            )
        )
        ids.update({key: int(pid) for key, pid in found})
    return ids


def dialect_insert(conn: Connection, table: Table) -> Any:
    """An INSERT of the connection's dialect: the one with ON CONFLICT clauses."""
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
    stmt = dialect_insert(conn, Probe.__table__)  # type: ignore[arg-type]
    stmt = stmt.on_conflict_do_update(
        index_elements=["run_id", "probe_key"],
        set_={c: stmt.excluded[c] for c in PROBE_UPDATABLE},
    )
    for chunk in _chunks(rows, 2000):
        conn.execute(stmt, chunk)
    return probe_ids_by_key(conn, rows[0]["run_id"], [r["probe_key"] for r in rows])


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
        return probe_ids_by_key(conn, run_id, list(last))
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


def _one_of(conn: Connection, column: Any, values: Sequence[Any]) -> Any:
    """`column IN values`; on PostgreSQL `= ANY(array)`: one parameter, not one per value (a wave
    has thousands), so neither side parses a statement the size of the list."""
    if conn.dialect.name == "postgresql":
        return column == any_(bindparam(None, list(values), type_=postgresql.ARRAY(column.type)))
    return column.in_(values)


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _last_per_key(rows: Sequence[VerdictValues]) -> list[VerdictValues]:
    # One statement may not touch a conflict key twice; the last judgement wins.
    return list({(r[0], r[2], r[3]): r for r in rows}.values())  # run_id, criterion, subject
