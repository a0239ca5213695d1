"""Evidence is stored losslessly, and what cannot be stored fails alone.

PostgreSQL's TEXT refuses NUL, its JSONB refuses `\\u0000`, lone surrogates and NaN, and psycopg2
refuses to send lone surrogates (what `surrogateescape` makes of bytes that are not UTF-8). One such
character in one node's output used to fail the whole wave's ingest, on every retry. Each test runs
on the real PostgreSQL and on SQLite (the `store` fixture) unless it says otherwise.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
from typing import Any

import pytest
import sqlalchemy as sa

from fleetval.records import Result, Verdict
from fleetval.store import xid_inbox
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.models import ESCAPE_MARK, Measurement, Probe, VerdictRow, XidInbox
from fleetval.store.repository import MeasurementIn, ProbeIn, RowsNotStored, Store

NOT_UTF8 = b"GPU 0: \xff\xfe\xc3( garbage \x80\n".decode("utf-8", "surrogateescape")
RAWS = {
    "nul": "Xid 79\x00 on GPU 0\n",
    "not-utf8": NOT_UTF8,
    "lone-surrogate": "no bytes made this: \ud800 \udfff\n",
    "both-kinds-of-surrogate": "\udcff then \ud800\n",
    "escape-mark": ESCAPE_MARK + "s starts like an escaped string\n",
    "controls": 'WARNING: not json\n{"a":\t"tab\\u00e9"}\r\nback\\slash\r\x1b[0m\x7f\n',
    "empty": "",
    "multi-byte": "温度 ⚠ 🔥\n",
}
VERDICT = Verdict(
    "D-DEV-03",
    "r01-n01",
    Result.FAIL,
    "cordon_quarantine_schedule_r3",
    "dev.weekly.fail",
    "r2 failed",
    {"findings": [{"test": "memory", "gpus": ["5"]}]},
    {"policy_version": "node-health/test"},
)
AT = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def _probe(key: str, node: str, raw: str = "{}\n", **kwargs: Any) -> ProbeIn:
    return ProbeIn(
        probe_key=key,
        tool="dcgm",
        raw=raw,
        nodes=(node,),
        measurements=(MeasurementIn(node, "dcgm.test_result", 1.0, gpu="0"),),
        verdicts=(dataclasses.replace(VERDICT, subject=node),),
        **kwargs,
    )


@pytest.mark.parametrize("raw", RAWS.values(), ids=RAWS.keys())
def test_raw_output_reads_back_exactly_as_ingested(store: Store, raw: str) -> None:
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    report = store.ingest(run_id, [_probe("r/p", "n1", raw)])
    assert (report.probes, report.unjudged, report.rejected) == (1, {}, {})
    [row] = store.probes(run_id, with_raw=True)
    assert row["raw"] == raw and type(row["raw"]) is str
    assert store.probe_raw(row["id"]) == raw
    assert "raw" not in store.probes(run_id, with_raw=False)[0]
    assert store.count(Measurement) == 1 and store.count(VerdictRow) == 1  # judged as usual


def test_the_stored_bytes_are_the_tools_bytes_and_the_hash_is_theirs(store: Store) -> None:
    """What a tool printed, not UTF-8 or not, is the column's content: an auditor can hash it in SQL."""
    printed = b"DCGM \x00\xff\xfe r2\r\n"
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    store.ingest(run_id, [_probe("r/p", "n1", printed.decode("utf-8", "surrogateescape"))])
    with store.engine.connect() as conn:
        stored, digest = conn.execute(sa.select(Probe.raw, Probe.raw_sha256)).one()
    assert stored == printed
    assert digest == hashlib.sha256(printed).hexdigest()


def test_one_unstorable_probe_fails_alone_and_is_reported(store: Store) -> None:
    """A GPU id no column can hold (a lone surrogate from garbage output) in one probe of a wave:
    the others are stored whole; the bad one keeps its raw output and a `store_error`, so its node
    counts as not swept instead of vanishing."""
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    wave = [_probe(f"r/n{i:02d}", f"n{i:02d}", f"output {i}\x00\n") for i in range(40)]
    bad = dataclasses.replace(
        wave[17], measurements=(MeasurementIn("n17", "dcgm.test_result", 1.0, gpu="\udcff"),)
    )
    wave[17] = bad
    report = store.ingest(run_id, wave)
    assert set(report.unjudged) == {"r/n17"} and report.rejected == {}
    assert (report.probes, report.measurements, report.verdicts) == (40, 39, 39)
    rows = {p["probe_key"]: p for p in store.probes(run_id)}
    assert len(rows) == 40 and rows["r/n17"]["raw"] == "output 17\x00\n"
    assert "store_error" in rows["r/n17"]["spec"] and "store_error" not in rows["r/n16"]["spec"]
    assert store.count(Measurement) == 39 and store.count(VerdictRow) == 39
    assert "n17" not in store.probed_nodes(run_id, completed_only=True)
    assert len(store.probed_nodes(run_id, completed_only=True)) == 39
    # A retry (the same wave again) ends in the same rows: nothing duplicated, nothing lost.
    assert store.ingest(run_id, wave).unjudged.keys() == {"r/n17"}
    assert store.count(Probe) == 40 and store.count(Measurement) == 39 and store.count(VerdictRow) == 39


def test_a_probe_that_cannot_be_stored_at_all_is_rejected_alone(store: Store) -> None:
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    report = store.ingest(run_id, [_probe("r/ok", "n1"), _probe("r/\ud800", "n2"), _probe("r/ok2", "n3")])
    assert list(report.rejected) == ["r/\ud800"] and report.probes == 2
    assert sorted(p["probe_key"] for p in store.probes(run_id)) == ["r/ok", "r/ok2"]


def test_one_bad_probe_in_a_copy_sized_wave_on_postgresql(pg_url: str) -> None:
    """Over the COPY threshold: COPY refuses NUL in a measurement's node; the driver's error comes
    back as a DataError and the wave is split around the bad probe."""
    engine = make_engine(pg_url)
    upgrade(engine)
    store = Store(engine)
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    wave = [_probe(f"r/n{i:03d}", f"n{i:03d}") for i in range(700)]
    wave[333] = dataclasses.replace(
        wave[333], measurements=(MeasurementIn("n333\x00", "dcgm.test_result", 1.0, attrs={"k": "\x00"}),)
    )
    wave[600] = dataclasses.replace(wave[600], exit_code=2**40)  # out of range for the column
    report = store.ingest(run_id, wave)
    assert set(report.unjudged) == {"r/n333"} and set(report.rejected) == {"r/n600"}
    assert store.count(Probe) == 699 and store.count(Measurement) == 698 and store.count(VerdictRow) == 698
    engine.dispose()


EVIDENCE = {
    "excerpt": "near: 'GPU\x00 0'",
    "garbage": NOT_UTF8,
    "surrogate": "\ud800",
    "key\x00": ["\x00", "\udcff", ESCAPE_MARK + "f nan"],
    ESCAPE_MARK + "s": ESCAPE_MARK,
    "numbers": [1.5, 0, -2, 10**15, True, None],
    "nested": {"deep": [{"x": "\x00\x00"}]},
}


def test_verdict_evidence_and_reason_read_back_exactly(store: Store) -> None:
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    verdict = dataclasses.replace(
        VERDICT,
        reason="parse error near: 'r2\x00'" + NOT_UTF8,
        evidence={**EVIDENCE, "busbw": math.nan, "limit": math.inf, "floor": -math.inf},
        judged_against={"policy_version": "p", "tables": ["\x00", NOT_UTF8], "baseline_id": "b"},
    )
    store.add_verdicts(run_id, [verdict])
    [row] = store.verdicts(run_id)
    assert row["reason"] == verdict.reason
    evidence = dict(row["evidence"])
    assert math.isnan(evidence.pop("busbw")) and evidence.pop("limit") == math.inf
    assert evidence.pop("floor") == -math.inf
    assert evidence == EVIDENCE
    assert row["judged_against"] == verdict.judged_against


def test_verdict_evidence_over_the_copy_threshold_on_postgresql(pg_url: str) -> None:
    engine = make_engine(pg_url)
    upgrade(engine)
    store = Store(engine)
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    verdicts = [
        dataclasses.replace(VERDICT, subject=f"n{i}", reason="\x00", evidence={**EVIDENCE, "nan": math.nan})
        for i in range(600)
    ]
    store.add_verdicts(run_id, verdicts)
    rows = store.verdicts(run_id)
    assert len(rows) == 600 and all(r["reason"] == "\x00" for r in rows)
    assert all(math.isnan(r["evidence"].pop("nan")) and r["evidence"] == EVIDENCE for r in rows)
    engine.dispose()


def test_a_verdict_the_store_refuses_fails_alone_and_loudly(store: Store) -> None:
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    verdicts = [dataclasses.replace(VERDICT, subject=f"n{i}") for i in range(9)]
    verdicts[4] = dataclasses.replace(VERDICT, subject="GPU-\udcff")
    with pytest.raises(
        RowsNotStored, match=r"1 of 9 verdicts of run \d+ not stored \(D-DEV-03 'GPU-\\udcff'"
    ):
        store.add_verdicts(run_id, verdicts)
    assert sorted(r["subject"] for r in store.verdicts(run_id)) == [f"n{i}" for i in (0, 1, 2, 3, 5, 6, 7, 8)]


def test_attached_results_the_store_refuses_fail_alone(store: Store) -> None:
    run_id = store.ensure_run("r", suite="weekly", backend="sim")
    store.ingest(run_id, [ProbeIn(f"r/n{i}", "dcgm", "raw", (f"n{i}",)) for i in range(5)])
    results = [
        (
            f"r/n{i}",
            [MeasurementIn(f"n{i}", "m", 1.0)],
            [dataclasses.replace(VERDICT, subject=f"n{i}")],
            f"n{i}",
        )
        for i in range(5)
    ]
    results[2] = ("r/n2", [MeasurementIn("n2", "m", 1.0, unit="\ud800")], [], "n2")
    assert store.attach_results(run_id, results) == 4
    assert store.count(Measurement) == 4 and store.count(VerdictRow) == 4
    spec = {p["probe_key"]: p["spec"] for p in store.probes(run_id, with_raw=False)}
    assert "store_error" in spec["r/n2"] and "store_error" not in spec["r/n1"]
    assert store.probed_nodes(run_id, completed_only=True) == ["n0", "n1", "n3", "n4"]


XID_LINES = [
    "NVRM: Xid (PCI:0000:3a:00): 79, pid=1\x00, GPU has fallen off the bus.",
    "kernel: " + NOT_UTF8.strip(),
    "lone \ud800 surrogate",
    ESCAPE_MARK + "s\\x00",
    "plain line",
]


def test_xid_inbox_lines_read_back_exactly(store: Store) -> None:
    rows = [(f"k{i}", "r01-n01", line, "sim") for i, line in enumerate(XID_LINES)]
    assert xid_inbox.receive_lines(store.engine, rows, at=AT) == len(XID_LINES)
    run_id = store.ensure_run("xid", suite="xid", backend="sim")
    claimed = xid_inbox.claim(store.engine, run_id, dispatch_ids=None, now=AT, max_nodes=10)
    assert claimed == {"r01-n01": XID_LINES}


def test_migration_0005_keeps_every_existing_row(db_url: str) -> None:
    """A store written at 0004 (raw as TEXT) reads back the same after 0005, including values that
    start with the escape mark, which 0005 escapes."""
    engine = make_engine(db_url)
    upgrade(engine, "0004")
    raw = "plain ascii\n温度 ⚠\r\n" + ESCAPE_MARK + "mark\n"
    marked = ESCAPE_MARK + "s\\x00 not an escape"
    insert = {
        "runs (run_key, suite, backend, started_at, meta)": {
            "run_key": "r", "suite": "weekly", "backend": "sim", "started_at": AT,
            "meta": json.dumps({"note": marked}),
        },
        "probes (run_id, probe_key, tool, nodes, spec, raw, raw_sha256)": {
            "run_id": 1, "probe_key": "r/p", "tool": "dcgm", "nodes": json.dumps(["n1"]),
            "spec": json.dumps({"params": {"k": marked}}), "raw": raw, "raw_sha256": "x",
        },
        "verdicts (run_id, probe_id, criterion, subject, result, action, rule_id, reason, evidence, "
        "judged_against, judged_at)": {
            "run_id": 1, "probe_id": 1, "criterion": "D-DEV-03", "subject": "n1", "result": "fail",
            "action": "cordon", "rule_id": "r", "reason": marked,
            "evidence": json.dumps({marked: [marked, 1]}), "judged_against": "{}", "judged_at": AT,
        },
        "xid_inbox (source_key, node, line, source, received_at)": {
            "source_key": "k", "node": "n1", "line": marked, "source": "sim", "received_at": AT,
        },
        "measurements (probe_id, seq, node, metric, attrs)": {
            "probe_id": 1, "seq": 0, "node": "n1", "metric": "m", "attrs": json.dumps({"plain": "é"}),
        },
    }  # fmt: skip
    # Ids are not given (PostgreSQL's sequences would not know them): each is the table's first, 1.
    with engine.begin() as conn:
        for table, values in insert.items():
            conn.execute(
                sa.text(f"INSERT INTO {table} VALUES ({', '.join(':' + k for k in values)})"), values
            )
    upgrade(engine)
    store = Store(engine)
    [probe] = store.probes(1)
    assert probe["raw"] == raw and probe["spec"] == {"params": {"k": marked}}
    [verdict] = store.verdicts(1)
    assert verdict["reason"] == marked and verdict["evidence"] == {marked: [marked, 1]}
    assert store.run_meta(1) == {"note": marked}
    with engine.connect() as conn:
        assert conn.execute(sa.select(XidInbox.line)).scalar_one() == marked
        assert conn.execute(sa.text("SELECT line FROM xid_inbox")).scalar_one() != marked  # escaped now
        assert conn.execute(sa.select(Probe.raw)).scalar_one() == raw.encode()
        assert conn.execute(sa.select(Measurement.attrs)).scalar_one() == {"plain": "é"}
    store.ingest(1, [_probe("r/new", "n2", "\x00")])  # the migrated table takes new evidence
    assert {p["probe_key"]: p["raw"] for p in store.probes(1)} == {"r/p": raw, "r/new": "\x00"}
    engine.dispose()
