"""Store ingest of a 16,384-node DCGM r2 sweep vs PostgreSQL COPY of the same rows.

What a sweep writes, through the calls the pipeline makes: each probe's raw output (its pod
task's `store_probe_outputs`, here a wave of 1,024 per call), then the measurements and verdicts
of every node (the judge task's `Store.attach_results`, one call per wave of 1,024). The raw
output is `nvidia-smi -L` plus the simulator's `dcgmi diag -r 2 -j` JSON (three templates:
healthy, a memory fault, a thermal warning); measurements and verdicts come from real parse +
judge of it.

The reference is `COPY … FROM STDIN` of exactly the same rows (probes with their raw bytes,
measurements, verdicts) into the same tables with the same indexes, serialised before its clock
starts (the server-side COPY alone: its text is the server's own `COPY … TO STDOUT` of the rows).
Three cases:

- first ingest: both sides start from emptied tables;
- re-ingest, re-judged: the tables hold the sweep; the store ingests the same probe keys again
  with the same raw output and measurements (what a retried or cleared wave stores) and every
  verdict re-judged (another policy version in `judged_against`), so every verdict row is
  replaced; COPY writes the same rows as another run into the same filled tables (then they are
  deleted, untimed);
- re-ingest, new outputs: as above, but every raw output and every measurement differs too (a
  line appended to each output, each value moved), so nothing the store holds can be kept.

Each case takes `--pairs` samples (default 5) in alternating order (store first, then COPY
first, ...), VACUUM ANALYZE and a CHECKPOINT before each side; every sample is printed with the
load average (the machine may be shared). Then the medians and the median of the per-pair ratios
COPY time / store time (store throughput as a share of COPY's). The last line is the lowest of
the cases' median ratios. Target: >= 0.7.

    python bench/store_ingest.py [--nodes 16384] [--pairs 5] [--db postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from fleetval.dcgm.judge import judge_dcgm
from fleetval.dcgm.parser import parse_dcgm
from fleetval.dcgm.probe import dcgm_diag_probe
from fleetval.dcgm.simulated import DcgmFault, render_dcgm
from fleetval.dcgm.steps import dcgm_measurements
from fleetval.fleet.gpus import gpu_uuid
from fleetval.probes.outputs import probe_output, store_probe_outputs
from fleetval.store.bulk import MEASUREMENT_COLUMNS, PROBE_COLUMNS, VERDICT_COLUMNS
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.models import encode_raw, escape_json, escape_text
from fleetval.store.repository import Store, verdict_values

WAVE = 1024
Payload = list[tuple[str, Sequence[str], bytes]]  # (table, columns, COPY text)
TABLES = "probes, measurements, verdicts"


@dataclasses.dataclass
class Node:
    name: str
    raw: str
    measurements: list[Any]
    verdicts: list[Any]


def sweep(n_nodes: int) -> list[Node]:
    """Per node: raw output, measurements and verdicts, from real parse + judge of simulator output."""
    templates = []
    for faults in ([], [DcgmFault(gpu=5, kind="memory")], [DcgmFault(gpu=3, kind="thermal_warn")]):
        uuids = [gpu_uuid(1, "tmpl", i) for i in range(8)]
        text = render_dcgm(level=2, gpu_count=8, gpu_uuids=uuids, driver_version="570.133.20", faults=faults)
        listing = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: {u})\n" for i, u in enumerate(uuids))
        templates.append((listing + text, parse_dcgm(text)))
    out = []
    for i in range(n_nodes):
        node = f"r{i // 32:03d}-n{i % 32:02d}"
        raw, report = templates[0 if i % 50 else (1 if i % 100 else 2)]
        node_uuids = {str(g): gpu_uuid(1, node, g) for g in range(8)}
        judgement = judge_dcgm(report, gate="weekly", node=node, gpu_uuids=node_uuids, level=2)
        out.append(Node(node, raw, dcgm_measurements(node, report, 2), list(judgement.verdicts)))
    return out


def variant(nodes: Sequence[Node], k: int, *, new_outputs: bool) -> list[Node]:
    """The sweep judged again (every verdict's `judged_against` names version `k`) and, with
    `new_outputs`, other raw output and measurements (a line appended, each value moved by `k`)."""
    out = []
    for n in nodes:
        verdicts = [
            dataclasses.replace(v, judged_against={**v.judged_against, "rejudged": k}) for v in n.verdicts
        ]
        raw, measurements = n.raw, n.measurements
        if new_outputs:
            raw = f"{n.raw}# sample {k}\n"
            measurements = [
                dataclasses.replace(m, value=None if m.value is None else m.value + k) for m in n.measurements
            ]
        out.append(Node(n.name, raw, measurements, verdicts))
    return out


def spec_of(run_key: str, node: str) -> Any:
    return dcgm_diag_probe(node, level=2, gpus=8, run_key=run_key)


def store_sweep(store: Store, run_id: int, run_key: str, nodes: Sequence[Node]) -> None:
    """The pipeline's writes: raw output per probe, then the judge's results per wave."""
    now = time.time()
    for start in range(0, len(nodes), WAVE):
        wave = nodes[start : start + WAVE]
        store_probe_outputs(
            store,
            run_id,
            [
                probe_output(spec_of(run_key, n.name), n.raw, exit_code=0, error=None, finished_at=now)
                for n in wave
            ],
        )
    for start in range(0, len(nodes), WAVE):
        wave = nodes[start : start + WAVE]
        store.attach_results(
            run_id,
            [(spec_of(run_key, n.name).probe_key, n.measurements, n.verdicts, n.name) for n in wave],
        )


def dump(doc: Any) -> str:
    return json.dumps(escape_json(doc))


def copy_payload(
    engine: sa.Engine, run_id: int, run_key: str, nodes: Sequence[Node], first_probe_id: int
) -> Payload:
    """(table, columns, COPY text) for the same rows the store writes; probe ids given, as COPY has
    no RETURNING. The text is the server's own: the rows go once into a scratch table of the same
    columns, and `COPY … TO STDOUT` of it is what the reference sends."""
    now = dt.datetime.now(dt.UTC)
    probes: list[Sequence[Any]] = []
    meas: list[Sequence[Any]] = []
    verd: list[Sequence[Any]] = []
    for k, n in enumerate(nodes):
        pid = first_probe_id + k
        spec = spec_of(run_key, n.name)
        raw, codec = encode_raw(n.raw)
        probes.append(
            (
                pid,
                run_id,
                spec.probe_key,
                "dcgm",
                None,
                dump([n.name]),
                dump({**spec.to_json(), "harness_error": None}),
                raw,
                codec,
                hashlib.sha256(raw).hexdigest(),
                0,
                now,
                now,
            )
        )
        meas.extend(
            (pid, seq, m.node, m.gpu, m.metric, m.value, m.unit, dump(m.attrs))
            for seq, m in enumerate(n.measurements)
        )
        for v in n.verdicts:
            row = list(verdict_values(run_id, v, probe_id=pid, node=n.name, judged_at=now))
            for column, convert in (("reason", escape_text), ("evidence", dump), ("judged_against", dump)):
                at = VERDICT_COLUMNS.index(column)
                row[at] = convert(row[at])
            verd.append(row)
    tables = (
        ("probes", ("id", *PROBE_COLUMNS), probes),
        ("measurements", MEASUREMENT_COLUMNS, meas),
        ("verdicts", VERDICT_COLUMNS, verd),
    )
    payload: Payload = []
    with engine.begin() as conn:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        for table, columns, rows in tables:
            cols = ", ".join(columns)
            cursor.execute(
                f"CREATE TEMP TABLE scratch ON COMMIT DROP AS SELECT {cols} FROM {table} WITH NO DATA"
            )
            with cursor.copy(f"COPY scratch ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            text = bytearray()
            with cursor.copy(f"COPY scratch ({cols}) TO STDOUT") as copy:
                for chunk in copy:
                    text += chunk
            cursor.execute("DROP TABLE scratch")
            payload.append((table, columns, bytes(text)))
    return payload


def run_copy(engine: sa.Engine, payload: Payload) -> None:
    with engine.begin() as conn:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        for table, columns, text in payload:
            with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                copy.write(text)


def vacuum(admin_url: str) -> None:
    """The same start for either side: no dead rows, fresh statistics, and a checkpoint, so the WAL
    the previous side wrote is not flushed on the next side's clock."""
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f"VACUUM ANALYZE {TABLES}"))
        conn.execute(sa.text("CHECKPOINT"))
    engine.dispose()


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def pairs_of(
    name: str, pairs: int, rows: int, store_side: Callable[[], float], copy_side: Callable[[], float]
) -> float:
    """Median of COPY time / store time over alternating pairs; prints every sample."""
    print(f"\n[{name}]")
    store_times, copy_times, ratios = [], [], []
    for k in range(pairs):
        if k % 2 == 0:
            s, c = store_side(), copy_side()
        else:
            c = copy_side()
            s = store_side()
        store_times.append(s)
        copy_times.append(c)
        ratios.append(c / s)
        first = "store first" if k % 2 == 0 else "COPY first"
        print(f"  pair {k + 1} ({first}): store {s:.2f} s, COPY {c:.2f} s, ratio {c / s:.2f}; {load()}")
    s, c, r = statistics.median(store_times), statistics.median(copy_times), statistics.median(ratios)
    print(f"  store: median {s:.2f} s = {rows / s:,.0f} rows/s")
    print(f"  COPY:  median {c:.2f} s = {rows / c:,.0f} rows/s")
    verdict = "met" if r >= 0.7 else "MISSED"
    print(f"  [{name}] median ratio COPY time / store time: {r:.2f} (target >= 0.7: {verdict})")
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=16384)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--db", default="postgresql://postgres@127.0.0.1:5432/postgres")
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
        nodes = sweep(args.nodes)
        run_key, other_key = "bench/weekly", "bench/copy"
        run_id = store.ensure_run(run_key, suite="weekly", backend="sim")
        other_id = store.ensure_run(other_key, suite="weekly", backend="sim")
        n_meas = sum(len(n.measurements) for n in nodes)
        n_verd = sum(len(n.verdicts) for n in nodes)
        raw_mib = sum(len(n.raw.encode()) for n in nodes) / (1 << 20)
        rows = len(nodes) + n_meas + n_verd
        print(
            f"prepared {len(nodes)} nodes (parse+judge) in {time.perf_counter() - t0:.1f} s: "
            f"{len(nodes)} probes ({raw_mib:.0f} MiB raw output) + {n_meas} measurements + "
            f"{n_verd} verdicts = {rows:,} rows; {load()} (shared machine: see each sample)"
        )
        # Ids far above the store's, so COPY never collides with a row the store wrote.
        first_payload = copy_payload(engine, run_id, run_key, nodes, first_probe_id=10_000_000)
        other_payload = copy_payload(engine, other_id, other_key, nodes, first_probe_id=20_000_000)

        def empty() -> None:
            with engine.begin() as conn:
                conn.execute(sa.text(f"TRUNCATE {TABLES}"))
            vacuum(url)

        def store_first() -> float:
            empty()
            return timed(lambda: store_sweep(store, run_id, run_key, nodes))

        def copy_first() -> float:
            empty()
            return timed(lambda: run_copy(engine, first_payload))

        first = pairs_of("first ingest", args.pairs, rows, store_first, copy_first)

        empty()
        store_sweep(store, run_id, run_key, nodes)  # the filled tables: one sweep

        def copy_again() -> float:
            vacuum(url)
            took = timed(lambda: run_copy(engine, other_payload))
            with engine.begin() as conn:
                conn.execute(sa.text("DELETE FROM verdicts WHERE run_id = :r"), {"r": other_id})
                conn.execute(sa.text("DELETE FROM probes WHERE run_id = :r"), {"r": other_id})
            return took

        ratios = {"first ingest": first}
        for case, new_outputs in (("re-ingest, re-judged", False), ("re-ingest, new outputs", True)):
            # Alternating versions: every sample differs from what the previous one stored.
            versions = [variant(nodes, k, new_outputs=new_outputs) for k in (1, 2)]
            samples = iter(range(2 * args.pairs))

            def store_again(versions: list[list[Node]] = versions, samples: Any = samples) -> float:
                again = versions[next(samples) % 2]
                vacuum(url)
                return timed(lambda: store_sweep(store, run_id, run_key, again))

            ratios[case] = pairs_of(case + " over filled tables", args.pairs, rows, store_again, copy_again)
        print(
            "\nmedian ratios COPY time / store time: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items())
        )
        print("store ingest throughput / COPY throughput, the lowest of the cases (target >= 0.7):")
        print(f"{min(ratios.values()):.2f}")
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    main()
