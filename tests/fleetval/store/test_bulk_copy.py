"""The PostgreSQL bulk paths (waves of at least COPY_MIN_ROWS probes, more than 500 verdicts) keep
what the row-by-row paths guarantee: exact raw bytes, idempotent re-ingest, a refused value failing
alone, a key stored meanwhile falling back to the upsert, COPY text equal to the bound values."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from fleetval.records import Result, Verdict
from fleetval.store import repository as repo
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.models import ESCAPE_MARK, Measurement, Probe, VerdictRow, escape_json
from fleetval.store.repository import COPY_MIN_ROWS, MeasurementIn, ProbeIn, Store

WAVE = max(COPY_MIN_ROWS, 120)
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
        assert not repo._copy_if_new(conn, "probes", repo.PROBE_COLUMNS, rows, table)
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


def _old_copy_escape(value: Any) -> str:
    """The format before the fast paths (every value through the same chain)."""
    if value is None:
        return "\\N"
    if isinstance(value, dict | list):
        value = json.dumps(value, separators=(",", ":"))
    elif isinstance(value, dt.datetime):
        value = value.isoformat()
    text = str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


DOCS = [
    {"a": 1, "b": [1.5, None, True], "c": {"d": "plain"}},
    {"nul": "\x00", "surrogate": "\ud800", ESCAPE_MARK + "s": ESCAPE_MARK},
    {"nan": math.nan, "inf": [math.inf, -math.inf]},
    {"path": "C:\\users\\x", "ctl": "tab\tnew\nline\rcr", "é": "温度"},
    {1: "int key", "t": (1, 2)},
    [],
    ["x", {"y": "\udcff"}],
    "a top-level string\t",
    42,
    None,
]


@pytest.mark.parametrize("doc", DOCS, ids=range(len(DOCS)))
def test_copy_json_is_the_bound_value_in_copy_format(doc: Any) -> None:
    assert repo._copy_json(doc) == _old_copy_escape(escape_json(doc))


@pytest.mark.parametrize(
    "value",
    ["plain", "tab\there", "back\\slash", "cr\r lf\n", "", 0, -7, 2**40, 1.5, math.nan, True, None, "温度"],
)
def test_copy_escape_keeps_its_format(value: Any) -> None:
    assert repo._copy_escape(value) == _old_copy_escape(value)


def test_bytes_are_bytea_hex_in_copy_format() -> None:
    assert repo._copy_escape(b"\x00\xff\\") == "\\\\x00ff5c"


def test_column_by_column_blocks_are_the_per_value_format() -> None:
    formats = [repo._copy_escape, repo._copy_escape, repo._copy_escape, repo._copy_json, repo._copy_escape]
    rows: list[tuple[Any, ...]] = [
        (1, 1.5, "plain", {"a": 1}, None),
        (2, 2, "tab\there", {"b": "\x00"}, True),
        (None, math.nan, "", [], b"\x01"),
        (2**40, -0.0, "back\\slash", {"c": math.inf}, dt.datetime(2026, 12, 1, tzinfo=dt.UTC)),
    ]
    rows += [(i, float(i), f"s{i}", {"i": i}, "x") for i in range(2500)]  # more than one block
    expected = "".join("\t".join(f(v) for f, v in zip(formats, row, strict=True)) + "\n" for row in rows)
    assert "".join(repo._copy_blocks(formats, rows)) == expected
    clean: list[tuple[Any, ...]] = [
        (i, float(i), f"s{i}", {}, "x") for i in range(10)
    ]  # every column takes its shortcut
    assert "".join(repo._copy_blocks(formats, clean)) == "".join(
        "\t".join(f(v) for f, v in zip(formats, row, strict=True)) + "\n" for row in clean
    )
    with pytest.raises(ValueError, match="values for 5 columns"):
        list(repo._copy_blocks(formats, [(1, 2)]))


def test_null_holding_and_converted_text_columns_in_blocks() -> None:
    class _Conn:
        dialect = sa.create_engine("sqlite://").dialect

    reason = repo._copy_formatter(_Conn(), VerdictRow.__table__, "reason")  # type: ignore[arg-type]
    formats = [repo._copy_escape, repo._copy_escape, reason, repo._copy_escape]
    rows: list[tuple[Any, ...]] = [
        (None, "a", "same reason", None),
        (1, None, "nul\x00 reason", None),
        (2.5, "b", "same reason", None),
        (None, "c\td", "same reason", None),  # a COPY special: the column goes value by value
    ]
    for block in (rows[:3], rows):
        expected = "".join("\t".join(f(v) for f, v in zip(formats, row, strict=True)) + "\n" for row in block)
        assert "".join(repo._copy_blocks(formats, block)) == expected
