"""Store ingest of a 16,384-node DCGM r2 sweep vs a raw PostgreSQL COPY of the same rows.

Probes are stored first (as the pipeline does: raw before judging); then the measurements and
verdicts of every node go through `Store.attach_results` in waves of 1,024 nodes. The reference
is `COPY … FROM STDIN` of exactly the same rows into the same (emptied) tables, in the same run.
Prints rows/s for both and, last, the ratio store / COPY (target >= 0.5).

    python bench/store_ingest.py [--nodes 16384] [--db postgresql+psycopg2://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import io
import time
import uuid

import sqlalchemy as sa

from fleetval.dcgm.judge import judge_dcgm
from fleetval.dcgm.parser import parse_dcgm
from fleetval.dcgm.simulated import DcgmFault, render_dcgm
from fleetval.dcgm.steps import dcgm_measurements
from fleetval.fleet.gpus import gpu_uuid
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import (
    MEASUREMENT_COLUMNS,
    VERDICT_COLUMNS,
    ProbeIn,
    Store,
    _copy_escape,
    verdict_row,
)

WAVE = 1024


def node_results(n_nodes: int) -> list[tuple[str, list, list]]:
    """Per node: (node, measurements, verdicts), from real parse + judge of simulator output."""
    templates = []
    for faults in ([], [DcgmFault(gpu=5, kind="memory")], [DcgmFault(gpu=3, kind="thermal_warn")]):
        uuids = [gpu_uuid(1, "tmpl", i) for i in range(8)]
        report = parse_dcgm(
            render_dcgm(level=2, gpu_count=8, gpu_uuids=uuids, driver_version="570.133.20", faults=faults)
        )
        templates.append(report)
    out = []
    for i in range(n_nodes):
        node = f"r{i // 32:03d}-n{i % 32:02d}"
        report = templates[0 if i % 50 else (1 if i % 100 else 2)]
        uuids = {str(g): gpu_uuid(1, node, g) for g in range(8)}
        judgement = judge_dcgm(report, gate="weekly", node=node, gpu_uuids=uuids, level=2)
        out.append((node, dcgm_measurements(node, report, 2), list(judgement.verdicts)))
    return out


def copy_text(rows: list) -> str:
    return "".join("\t".join(_copy_escape(v) for v in row) + "\n" for row in rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=16384)
    ap.add_argument("--db", default="postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")
    args = ap.parse_args()

    name = f"fleetval_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(args.db, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(args.db).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url)
    try:
        upgrade(engine)
        store = Store(engine)
        t0 = time.perf_counter()
        results = node_results(args.nodes)
        print(f"prepared {args.nodes} nodes (parse+judge) in {time.perf_counter() - t0:.1f}s")
        run_key = "bench/weekly"
        run_id = store.ensure_run(run_key, suite="weekly", backend="sim")
        store.ingest(run_id, [ProbeIn(f"{run_key}/{n}", "dcgm", "{}", (n,)) for n, _, _ in results])
        n_meas = sum(len(m) for _, m, _ in results)
        n_verd = sum(len(v) for _, _, v in results)
        print(f"rows: {n_meas} measurements + {n_verd} verdicts")

        t0 = time.perf_counter()
        for start in range(0, len(results), WAVE):
            store.attach_results(
                run_id, [(f"{run_key}/{n}", m, v, n) for n, m, v in results[start : start + WAVE]]
            )
        store_s = time.perf_counter() - t0

        # The reference: the same rows, COPYed straight into the emptied tables.
        with engine.begin() as conn:
            probe_ids = dict(conn.execute(sa.text("SELECT probe_key, id FROM probes")).all())
            conn.execute(sa.text("TRUNCATE measurements, verdicts"))
        now = dt.datetime.now(dt.UTC)
        meas_rows = [
            (probe_ids[f"{run_key}/{n}"], seq, m.node, m.gpu, m.metric, m.value, m.unit, m.attrs)
            for n, ms, _ in results
            for seq, m in enumerate(ms)
        ]
        verd_rows = [
            [
                verdict_row(
                    run_id,
                    dataclasses.replace(v),
                    probe_id=probe_ids[f"{run_key}/{n}"],
                    node=n,
                    judged_at=now,
                )[c]
                for c in VERDICT_COLUMNS
            ]
            for n, _, vs in results
            for v in vs
        ]
        # Serialised before the clock starts: the reference is the server-side COPY alone.
        meas_text = copy_text(meas_rows)
        verd_text = copy_text(verd_rows)
        t0 = time.perf_counter()
        with engine.begin() as conn:
            cursor = conn.connection.dbapi_connection.cursor()
            for table, columns, text in (
                ("measurements", MEASUREMENT_COLUMNS, meas_text),
                ("verdicts", VERDICT_COLUMNS, verd_text),
            ):
                cursor.copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN", io.StringIO(text))
        copy_s = time.perf_counter() - t0

        total = n_meas + n_verd
        print(f"store.attach_results: {store_s:.2f}s = {total / store_s:,.0f} rows/s")
        print(f"raw COPY:             {copy_s:.2f}s = {total / copy_s:,.0f} rows/s")
        print(f"store ingest throughput / COPY throughput = {copy_s / store_s:.2f} (target >= 0.5)")
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    main()
