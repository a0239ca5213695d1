"""The PostgreSQL bulk paths (COPY through psycopg 3, for waves of at least COPY_MIN_ROWS probes and
more than 500 verdicts) keep what the row-by-row paths guarantee: exact raw bytes, idempotent
re-ingest, a refused value failing alone (refused by psycopg or by the server, mid-COPY), a key
stored meanwhile falling back to the upsert, the COPY inside the caller's transaction, and the
converted values equal to the bound ones."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from fleetval.records import Result, Verdict
from fleetval.store import bulk
from fleetval.store.engine import make_engine, store_url
from fleetval.store.migrate import upgrade
from fleetval.store.models import ESCAPE_MARK, Measurement, Probe, VerdictRow, escape_json
from fleetval.store.repository import MeasurementIn, ProbeIn, Store

WAVE = max(bulk.COPY_MIN_ROWS, 120)
RAW = 'GPU 0: \\x \t tab\r\n{"a": "\\u00e9"}\x00 \udcff\udcfe end\n'  # escapes, NUL, not-UTF-8 bytes
VERDICT = Verdict(
    "D-DEV-03",
    "n",
    Result.FAIL,
    "cordon_quarantine_schedule_r3",
    "dev.weekly.fail",
    "r2 failed\ttab",
    {"findings": [{"test": "memory", "gpus": ["5"]}], "note": "back\\slash\nline"},
    {"policy_version": "node-health/test"},
)


def _probe(i: int, raw: str = RAW, value: float = 1.0) -> ProbeIn:
    node = f"n{i:03d}"
    return ProbeIn(
        probe_key=f"r/{node}",
        tool="dcgm",
        raw=raw + node,
        nodes=(node,),
        exit_code=0,
        started_at=dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
        measurements=tuple(MeasurementIn(node, "dcgm.test_result", value, gpu=str(g)) for g in range(2)),
        verdicts=tuple(dataclasses.replace(VERDICT, subject=f"{node}/{k}") for k in range(5)),
    )


@pytest.mark.parametrize(
    "url", ["postgresql://h/db", "postgres://h/db", "postgresql+psycopg2://u:p@h:5433/db?sslmode=require"]
)
def test_postgresql_is_opened_through_psycopg_3(url: str) -> None:
    """Whichever PostgreSQL driver a URL names (Airflow Connections say psycopg2), the store uses
    psycopg 3, whose COPY the bulk paths need; the rest of the URL is kept."""
    parsed = store_url(url)
    assert parsed.drivername == "postgresql+psycopg"
    assert (parsed.host, parsed.database) == ("h", "db")
    assert make_engine(url).dialect.driver == "psycopg"
    assert store_url("postgresql+psycopg2://u:p@h:5433/db?sslmode=require").render_as_string(False) == (
        "postgresql+psycopg://u:p@h:5433/db?sslmode=require"
    )


def test_no_statement_is_prepared_on_the_server(pg_url: str) -> None:
    """A plan psycopg 3 prepares is cached with the table as it was then: a sweep's per-probe
    lookups scanned whole tables as they grew (quadratic). The store never prepares, as psycopg2
    did not, whatever else the caller's connect_args say."""
    for engine in (make_engine(pg_url), make_engine(pg_url, connect_args={"application_name": "t"})):
        with engine.connect() as conn:
            for _ in range(8):  # past psycopg's default threshold (5)
                conn.exec_driver_sql("SELECT EXISTS (SELECT 1 FROM pg_class WHERE oid = %s::oid)", (1,))
            assert conn.connection.dbapi_connection.prepare_threshold is None  # type: ignore[union-attr]
            prepared = conn.exec_driver_sql("SELECT count(*) FROM pg_prepared_statements").scalar()
            assert prepared == 0
        engine.dispose()


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    engine = make_engine(pg_url)
    upgrade(engine)
    yield Store(engine)
    engine.dispose()


def test_a_wave_reads_back_exactly_and_re_ingest_replaces_it(pg_store: Store) -> None:
    run_id = pg_store.ensure_run("r", suite="weekly", backend="sim")
    wave = [_probe(i) for i in range(WAVE)]
    first = pg_store.ingest(run_id, wave)
    assert (first.probes, first.measurements, first.verdicts) == (WAVE, 2 * WAVE, 5 * WAVE)
    ids = {p["probe_key"]: p["id"] for p in pg_store.probes(run_id, with_raw=False)}
    assert [p["raw"] for p in pg_store.probes(run_id)] == [p.raw for p in wave]
    assert pg_store.verdicts(run_id)[0]["evidence"] == VERDICT.evidence
    assert pg_store.verdicts(run_id)[0]["reason"] == VERDICT.reason

    again = [_probe(i, raw="second\n", value=2.0) for i in range(WAVE)]
    pg_store.ingest(run_id, again)  # every key stored: the staging upserts
    assert {p["probe_key"]: p["id"] for p in pg_store.probes(run_id, with_raw=False)} == ids
    assert {p["raw"] for p in pg_store.probes(run_id)} == {p.raw for p in again}
    assert pg_store.count(Probe) == WAVE and pg_store.count(VerdictRow) == 5 * WAVE
    with pg_store.engine.connect() as conn:
        values = conn.execute(sa.select(Measurement.value)).scalars().all()
    assert values == [2.0] * (2 * WAVE)


def _stored(store: Store, query: str) -> dict[Any, Any]:
    with store.engine.connect() as conn:
        return {tuple(r[:-1]) if len(r) > 2 else r[0]: r[-1] for r in conn.exec_driver_sql(query)}


def test_a_re_ingest_rewrites_only_what_changed(pg_store: Store) -> None:
    """Measurements become exactly the new ones (fewer, more, changed), and rows that did not
    change are not rewritten (same row version, `xmin`); an unchanged verdict keeps its first
    judgement, a changed one is replaced."""
    run_id = pg_store.ensure_run("r", suite="weekly", backend="sim")
    wave = [_probe(i) for i in range(WAVE)]
    pg_store.ingest(run_id, wave)
    measured = "SELECT probe_id, seq, node, gpu, value, xmin::text FROM measurements"
    judged = "SELECT subject, reason, judged_at, xmin::text FROM verdicts"
    before_m, before_v = _stored(pg_store, measured), _stored(pg_store, judged)

    again = list(wave)
    again[0] = dataclasses.replace(wave[0], measurements=wave[0].measurements[:1])
    extra = MeasurementIn("n001", "dcgm.test_result", 1.0, gpu="7")
    again[1] = dataclasses.replace(wave[1], measurements=(*wave[1].measurements, extra))
    again[2] = dataclasses.replace(wave[2], measurements=(wave[2].measurements[0], extra))
    again[3] = dataclasses.replace(
        wave[3], verdicts=tuple(dataclasses.replace(v, reason="changed") for v in wave[3].verdicts)
    )
    pg_store.ingest(run_id, again)

    after_m, after_v = _stored(pg_store, measured), _stored(pg_store, judged)
    ids = {p["probe_key"]: p["id"] for p in pg_store.probes(run_id, with_raw=False)}
    expected = {
        (ids[p.probe_key], seq, m.node, m.gpu, m.value) for p in again for seq, m in enumerate(p.measurements)
    }
    assert set(after_m) == expected
    kept = set(before_m) & set(after_m)
    assert len(kept) == len(expected) - 2  # probe 1's new row, probe 2's changed one
    assert all(after_m[k] == before_m[k] for k in kept)
    changed = {k for k in after_v if k[0].startswith("n003/")}
    assert len(changed) == 5 and all(k[1] == "changed" for k in changed)
    assert all(after_v[k] == before_v[k] for k in set(after_v) - changed)
    assert all(k[2] > max(j for _, _, j in before_v) for k in changed)


def test_raw_output_stored_again_is_not_sent_again_and_keeps_its_results(pg_store: Store) -> None:
    """A wave of probe tasks retried (same bytes, no results yet): the rows are updated, the raw
    output is kept as stored, the measurements parsed from it stay; changed bytes replace both."""
    run_id = pg_store.ensure_run("r", suite="weekly", backend="sim")
    wave = [_probe(i) for i in range(WAVE)]
    pg_store.ingest(run_id, wave)
    later = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
    retried = [dataclasses.replace(p, measurements=(), verdicts=(), started_at=later) for p in wave]
    retried[7] = dataclasses.replace(retried[7], raw="new bytes \udcff")
    sent: list[Any] = []
    original = bulk.copy_rows

    def spy(conn: Any, table_name: str, columns: Any, rows: Any, **kwargs: Any) -> None:
        rows = list(rows)
        sent.extend(r for r in rows if table_name == "probes_stage")
        original(conn, table_name, columns, rows, **kwargs)

    bulk.copy_rows = spy  # type: ignore[assignment]
    try:
        pg_store.ingest(run_id, retried)
    finally:
        bulk.copy_rows = original  # type: ignore[assignment]
    raw_at = bulk.PROBE_COLUMNS.index("raw")
    assert [r[1] for r in sent if r[raw_at] is not None] == [wave[7].probe_key]
    stored = pg_store.probes(run_id)
    assert [p["raw"] for p in stored] == [p.raw for p in retried]
    assert {p["started_at"] for p in stored} == {later}
    assert pg_store.count(Measurement) == 2 * (WAVE - 1) and pg_store.count(VerdictRow) == 5 * WAVE


def test_raw_output_changed_meanwhile_is_written_whole(pg_store: Store) -> None:
    """The stored hash no longer the one the caller saw (another attempt wrote meanwhile): the row
    takes the plain upsert with its bytes, never a raw output that does not match its hash."""
    run_id = pg_store.ensure_run("r", suite="weekly", backend="sim")
    pg_store.ingest(run_id, [_probe(i, raw="first ") for i in range(WAVE)])
    rows = []
    for i in range(WAVE):
        raw = f"second n{i:03d}".encode()
        rows.append(
            {
                "run_id": run_id,
                "probe_key": f"r/n{i:03d}",
                "tool": "dcgm",
                "tool_version": None,
                "nodes": [],
                "spec": {},
                "raw": raw,
                "raw_codec": "utf-8/surrogateescape",
                "raw_sha256": hashlib.sha256(raw).hexdigest(),
                "exit_code": 0,
                "started_at": None,
                "finished_at": None,
            }
        )
    believed = {r["probe_key"]: (r["raw_sha256"], r["raw_codec"]) for r in rows}  # stale
    with pg_store.engine.begin() as conn:
        ids = bulk._copy_upsert_probes(conn, rows, believed, set(believed))
    assert len(ids) == WAVE
    assert [p["raw"] for p in pg_store.probes(run_id)] == [f"second n{i:03d}" for i in range(WAVE)]


def test_a_wave_partly_stored_before_is_upserted(pg_store: Store) -> None:
    run_id = pg_store.ensure_run("r", suite="weekly", backend="sim")
    pg_store.ingest(run_id, [_probe(i) for i in range(0, WAVE, 7)])  # small: row by row
    pg_store.ingest(run_id, [_probe(i) for i in range(WAVE)])
    assert pg_store.count(Probe) == WAVE
    assert pg_store.count(VerdictRow) == 5 * WAVE and pg_store.count(Measurement) == 2 * WAVE


def test_copy_into_a_table_holding_a_key_writes_nothing_and_says_so(pg_store: Store) -> None:
    run_id = pg_store.ensure_run("r", suite="weekly", backend="sim")
    pg_store.ingest(run_id, [_probe(5)])
    table: Any = Probe.__table__
    with pg_store.engine.begin() as conn:
        rows: list[list[Any]] = [
            [
                run_id,
                f"r/n{i:03d}",
                "dcgm",
                None,
                [],
                {},
                b"x",
                "utf-8/surrogateescape",
                "0" * 64,
                0,
                None,
                None,
            ]
            for i in range(10)
        ]
        assert not bulk._copy_if_new(conn, "probes", bulk.PROBE_COLUMNS, rows, table)
        assert conn.execute(sa.select(sa.func.count()).select_from(Probe)).scalar_one() == 1  # usable
    assert pg_store.count(Probe) == 1


def test_a_value_that_cannot_be_encoded_fails_alone_mid_copy(pg_store: Store) -> None:
    """The COPY stream ends at the lone surrogate; the error surfaces, the batch is split."""
    run_id = pg_store.ensure_run("r", suite="weekly", backend="sim")
    wave = [_probe(i) for i in range(WAVE)]
    bad = WAVE // 2
    wave[bad] = dataclasses.replace(
        wave[bad], measurements=(MeasurementIn("n\ud800", "dcgm.test_result", 1.0),)
    )
    report = pg_store.ingest(run_id, wave)
    assert set(report.unjudged) == {wave[bad].probe_key}
    assert pg_store.count(Probe) == WAVE and pg_store.count(Measurement) == 2 * (WAVE - 1)


def test_a_value_the_server_refuses_mid_copy_fails_alone(pg_store: Store) -> None:
    """PostgreSQL refuses a row in the middle of the stream (a GPU id longer than its column, NUL
    in a plain text column): the COPY ends, the transaction rolls back, the batch is split."""
    run_id = pg_store.ensure_run("r", suite="weekly", backend="sim")
    wave = [_probe(i) for i in range(WAVE)]
    too_long, nul = WAVE // 3, 2 * WAVE // 3
    wave[too_long] = dataclasses.replace(
        wave[too_long], measurements=(MeasurementIn("n", "dcgm.test_result", 1.0, gpu="g" * 65),)
    )
    wave[nul] = dataclasses.replace(
        wave[nul], verdicts=(dataclasses.replace(VERDICT, subject="nul\x00subject"),) * 600
    )
    report = pg_store.ingest(run_id, wave)
    assert set(report.unjudged) == {wave[too_long].probe_key, wave[nul].probe_key}
    assert "StringDataRightTruncation" in report.unjudged[wave[too_long].probe_key]
    assert "NUL" in report.unjudged[wave[nul].probe_key]
    assert pg_store.count(Probe) == WAVE
    assert pg_store.count(Measurement) == 2 * (WAVE - 2)
    assert pg_store.count(VerdictRow) == 5 * (WAVE - 2)


def test_a_copy_is_part_of_the_callers_transaction(pg_store: Store) -> None:
    """Rows a COPY sent are undone with the transaction that sent them (a retried task starts
    from what was committed, never from half a wave)."""
    run_id = pg_store.ensure_run("r", suite="weekly", backend="sim")
    table: Any = Probe.__table__
    rows = [
        [run_id, f"r/n{i}", "dcgm", None, [], {}, b"x", "utf-8/surrogateescape", "0" * 64, 0, None, None]
        for i in range(bulk.COPY_MIN_ROWS)
    ]

    def fail_after_the_copy() -> None:
        with pg_store.engine.begin() as conn:
            bulk.copy_rows(conn, "probes", bulk.PROBE_COLUMNS, rows, types_of=table)
            sent = conn.execute(sa.select(sa.func.count()).select_from(Probe)).scalar_one()
            raise RuntimeError(f"the task fails after the COPY of {sent} rows")

    with pytest.raises(RuntimeError, match=f"COPY of {bulk.COPY_MIN_ROWS} rows"):
        fail_after_the_copy()
    assert pg_store.count(Probe) == 0


# Values COPY's text format must escape or convert, and values the lossless columns escape.
AWKWARD_TEXT = ["plain", "tab\there", "back\\slash", "cr\r lf\n", "", "\\N", "温度", "end\\"]
AWKWARD_BYTES = [b"", b"\x00\xff\\", b"\\x41", bytes(range(256))]
DOCS = [
    {"a": 1, "b": [1.5, None, True], "c": {"d": "plain"}},
    {"nul": "\x00", "surrogate": "\ud800", ESCAPE_MARK + "s": ESCAPE_MARK},
    {"nan": math.nan, "inf": [math.inf, -math.inf]},
    {"path": "C:\\users\\x", "ctl": "tab\tnew\nline\rcr", "é": "温度", "n": "\\N"},
    [],
    ["x", {"y": "\udcff"}],
    "a top-level string\t",
    42,
    None,
]


def test_awkward_values_read_back_exactly_through_copy(pg_store: Store) -> None:
    """What COPY's text format escapes (tab, newline, CR, backslash, a literal `\\N`), bytes of
    every value, NaN, JSON that needs the lossless escapes: each reads back as written."""
    run_id = pg_store.ensure_run("r", suite="weekly", backend="sim")
    table: Any = Measurement.__table__
    values = [math.nan, math.inf, -0.0, 1e-300, None, 2.5]
    rows = [
        (None, seq, AWKWARD_TEXT[seq % len(AWKWARD_TEXT)], None, "m", values[seq % len(values)], None, doc)
        for seq, doc in enumerate(DOCS * 2)
    ]
    probes: Any = Probe.__table__
    with pg_store.engine.begin() as conn:
        raws = [
            [run_id, f"k{i}", "t", None, [], {}, raw, "utf-8/surrogateescape", "0" * 64, None, None, None]
            for i, raw in enumerate(AWKWARD_BYTES)
        ]
        bulk.copy_rows(conn, "probes", bulk.PROBE_COLUMNS, raws, types_of=probes)
        probe_id = conn.execute(sa.select(sa.func.min(Probe.id))).scalar_one()
        bulk.copy_rows(
            conn, "measurements", bulk.MEASUREMENT_COLUMNS, [(probe_id, *r[1:]) for r in rows], types_of=table
        )
    with pg_store.engine.connect() as conn:
        stored_raw = conn.execute(sa.select(Probe.raw).order_by(Probe.id)).scalars().all()
        got = conn.execute(
            sa.select(Measurement.node, Measurement.value, Measurement.attrs).order_by(Measurement.seq)
        ).all()
    assert [bytes(r) for r in stored_raw] == AWKWARD_BYTES
    assert [node for node, _, _ in got] == [r[2] for r in rows]
    assert [repr(value) for _, value, _ in got] == [repr(r[5]) for r in rows]
    assert [json.dumps(attrs, sort_keys=True) for _, _, attrs in got] == [
        json.dumps(r[7], sort_keys=True) for r in rows
    ]


@pytest.mark.parametrize("doc", [*DOCS, {1: "int key", "t": (1, 2)}], ids=range(len(DOCS) + 1))
def test_json_text_is_what_binding_the_escaped_value_sends(doc: Any) -> None:
    assert bulk._json_text(doc) == json.dumps(escape_json(doc), separators=(",", ":"))


def test_a_document_json_cannot_hold_is_refused_as_binding_refuses_it() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        bulk._json_text({"when": dt.datetime(2026, 12, 1)})


def test_a_json_column_converts_each_document_once_and_each_as_alone() -> None:
    """Documents that look alike but are not (1, True and 1.0; 0.0 and -0.0; a NUL to escape)
    keep their own text; one object shared by rows converts once."""
    shared = {"policy_version": "p", "gate": "weekly"}
    column = [
        shared,
        {"level": 1},
        {"level": True},
        {"level": 1.0},
        {"x": 0.0},
        {"x": -0.0},
        {"s": "nul\x00"},
        {1: "int key"},
        {"1": "int key"},
        shared,
        {"level": 1},
        [1, 2],
        None,
    ]
    assert bulk._json_column(column) == [bulk._json_text(v) for v in column]
    calls: list[Any] = []
    original = bulk._json_text

    def counted(value: Any) -> str:
        calls.append(value)
        return original(value)

    bulk._json_text = counted  # type: ignore[assignment]
    try:
        bulk._json_column([shared] * 5 + [{"t": "a", "n": 2} for _ in range(5)])
    finally:
        bulk._json_text = original  # type: ignore[assignment]
    assert calls == [shared, {"t": "a", "n": 2}]


def test_column_by_column_blocks_are_the_per_value_conversion() -> None:
    class _Conn:
        dialect = sa.create_engine("sqlite://").dialect

    table: Any = VerdictRow.__table__
    columns = ("run_id", "reason", "evidence", "subject")
    converts = [bulk._bind_conversion(_Conn(), table, c) for c in columns]  # type: ignore[arg-type]
    assert converts[0] is None and converts[2] is bulk._json_text and converts[3] is None
    rows: list[tuple[Any, ...]] = [
        (1, "same reason", {"a": 1}, "s"),
        (2, "nul\x00 reason", {"b": "\x00"}, None),
        (None, "same reason", [], "tab\t"),
        (3, None, {"c": math.inf}, "s"),  # a NULL: the reason column goes value by value
    ]
    rows += [(i, f"r{i % 7}", {"i": i}, f"s{i}") for i in range(2500)]  # more than one block
    expected = [tuple(v if f is None else f(v) for f, v in zip(converts, row, strict=True)) for row in rows]
    assert [tuple(r) for block in bulk._converted(converts, rows) for r in block] == expected
    plain = [None] * 4
    assert [tuple(r) for block in bulk._converted(plain, rows) for r in block] == rows
    for kinds in (converts, plain):
        with pytest.raises(ValueError, match="values for 4 columns"):
            list(bulk._converted(kinds, [(1, 2)]))
