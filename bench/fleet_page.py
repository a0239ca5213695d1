"""The fleet-health page at 16,384 nodes: each view's query + render against PostgreSQL COPY of the
rows that view reads, measured in the same run.

`fill` writes a fleet's verdict history through the store's own write path (`Store.ingest`,
`add_verdicts`, `record_node_event`, baselines): racks of 16 nodes of 8 GPUs, `--weekly` weekly r2
sweeps a week apart (a D-DEV-03 verdict per node, a D-DEV-04 record per GPU, the coverage verdict,
about 3 % of nodes busy each week and 0.2 % never idle; 1/64 fail, 1/200 warn, 1/500 inconclusive,
1/1000 error), `--nccl` post-upgrade NCCL sweeps (three intra-node repeats per node and a pair per
two nodes across racks, 31 message sizes each, with their busbw measurements and D-NET-NCCL
verdicts), Xid runs on 1 % of the nodes (decision, time-to-cordon, r3, cordon/uncordon or
quarantine events), a Kueue run per week (11 scenarios) and two onboarding runs. Raw outputs are
short synthetic text (the page never reads them); times are spread over the weeks.

Each view (`plugins/fleet_health/pages.py`, the HTML a browser gets, without HTTP) is timed
against a reference: `COPY (SELECT … ) TO STDOUT` of the rows the view's queries read — the
verdict columns of the horizon's runs for the heatmap (which itself reads their counts in
`verdict_groups`, kept by triggers since migration 0007), the r2 verdicts for the coverage, one
node's verdicts and events, the measurements of one NCCL subject, and so on. The heatmap and
coverage are timed cold (a fresh `FleetCells`: the first load after the api-server starts), warm
(nothing judged since the last load) and after a new Xid run is written (not timed). Sides
alternate over `--samples`; the load average is printed with each sample, the table of medians and
ratios after, the heatmap's figures last.

    python bench/fleet_page.py [--nodes 16384] [--weekly 4] [--nccl 2] [--samples 5] [--db URL]
                               [--keep | --reuse URL]
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from fleetval.records import Result, Verdict
from fleetval.store import fleet_health as fh
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import MeasurementIn, ProbeIn, Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))
from fleet_health import pages

NODES_PER_RACK = 16
GPUS = 8
PROFILE = "h100-sxm-ndr"
SIZES = [8 << i for i in range(31)]  # nccl-tests -b 8 -e 8G -f 2
INTRA_GBPS, INTER_GBPS = 480.0, 370.0
KUEUE_SCENARIOS = (
    ("d-sched-01-02-quota", ("D-SCHED-01", "D-SCHED-02", "D-SCHED-07")),
    ("d-sched-03-04-borrow-reclaim", ("D-SCHED-03", "D-SCHED-04", "D-SCHED-07")),
    ("d-sched-04-no-reclaim", ("D-SCHED-04",)),
    ("d-sched-05-preempt-resume", ("D-SCHED-05",)),
    ("d-sched-06-gang", ("D-SCHED-06",)),
    ("x-01-priority-order", ("D-SCHED-02",)),
    ("x-02-strict-fifo", ("D-SCHED-01", "D-SCHED-07")),
    ("x-03-lending-limit", ("D-SCHED-03",)),
    ("x-06-mig-profiles", ("D-GPU-MIG-05",)),
    ("x-07-two-flavors", ("D-SCHED-01",)),
    ("x-08-misconfigured", ("D-SCHED-07",)),
)
BATCH = 1024


def node_names(nodes: int) -> dict[str, str]:
    racks = max(1, nodes // NODES_PER_RACK)
    return {
        f"r{r:04d}-n{i:02d}": f"r{r:04d}"
        for r in range(racks)
        for i in range(1, min(nodes, NODES_PER_RACK) + 1)
    }


def _result(rng: random.Random) -> Result:
    x = rng.random()
    if x < 1 / 1000:
        return Result.ERROR
    if x < 1 / 1000 + 1 / 500:
        return Result.INCONCLUSIVE
    if x < 1 / 1000 + 1 / 500 + 1 / 200:
        return Result.WARN
    if x < 1 / 1000 + 1 / 500 + 1 / 200 + 1 / 64:
        return Result.FAIL
    return Result.PASS


def _backdate(store: Store, run_id: int, at: dt.datetime) -> None:
    """Runs and verdicts carry the time they happened; the store stamps now, so move them."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE runs SET started_at = :at, finished_at = :end WHERE id = :r"),
            {"at": at, "end": at + dt.timedelta(hours=2), "r": run_id},
        )
        conn.execute(
            sa.text("UPDATE verdicts SET judged_at = :at WHERE run_id = :r"), {"at": at, "r": run_id}
        )


def _ingest(store: Store, run_id: int, probes: list[ProbeIn]) -> None:
    for start in range(0, len(probes), BATCH):
        report = store.ingest(run_id, probes[start : start + BATCH])
        assert not report.rejected and not report.unjudged, report


def fill(
    store: Store, *, nodes: int, weekly: int, nccl: int, seed: int = 7, now: dt.datetime | None = None
) -> dict[str, int]:
    """Write the fleet's history (see the module doc); returns row counts."""
    rng = random.Random(seed)
    now = now or dt.datetime.now(dt.UTC)
    rack_of = node_names(nodes)
    names = list(rack_of)
    never_idle = set(rng.sample(names, max(1, len(names) // 500)))
    for w in range(weekly):
        at = now - dt.timedelta(days=7 * (weekly - 1 - w), hours=3)
        busy = {n for n in names if rng.random() < 0.03} | never_idle
        swept = [n for n in names if n not in busy]
        run_key = f"weekly_health_sweep/scheduled__{at:%Y-%m-%dT%H:%M:%S}+00:00"
        plan = {
            "waves": [swept[i : i + 1024] for i in range(0, len(swept), 1024)],
            "skipped": dict.fromkeys(sorted(busy), "busy (8 GPU pods)"),
            "rack_of": rack_of,
            "fleet_size": len(names),
            "rack_sizes": dict.fromkeys(set(rack_of.values()), NODES_PER_RACK),
            "gpus": dict.fromkeys(names, GPUS),
        }
        run_id = store.ensure_run(
            run_key, suite="weekly", backend="kubernetes", meta={"plan": plan, "run_key": run_key}
        )
        probes = []
        for n in swept:
            result = _result(rng)
            gpus = [f"GPU-{uuid.UUID(int=rng.getrandbits(128))}" for _ in range(GPUS)]
            bad = rng.randrange(GPUS)
            verdicts = [
                Verdict(
                    "D-DEV-03",
                    n,
                    result,
                    "none" if result is Result.PASS else "cordon_quarantine_schedule_r3",
                    f"dev.weekly.{result.value}",
                    f"r2 {result.value}",
                    {"level": 2},
                    {"policy_version": "node-health-1"},
                ),
                *(
                    Verdict(
                        "D-DEV-04",
                        g,
                        result if i == bad else Result.PASS,
                        "record",
                        "dev.record",
                        "",
                        {"gpu": g, "level": 2},
                        {},
                    )
                    for i, g in enumerate(gpus)
                ),
            ]
            measurements = tuple(
                MeasurementIn(n, f"dcgm.{test}", 1.0, gpu=g, attrs={"level": 2})
                for g in gpus
                for test in ("memory", "diagnostic", "pcie")
            )
            probes.append(
                ProbeIn(
                    f"{run_key}/dcgm_r2/{n}",
                    "dcgm",
                    f"synthetic dcgmi diag -r 2 of {n}\n",
                    (n,),
                    measurements=measurements,
                    verdicts=tuple(verdicts),
                )
            )
        _ingest(store, run_id, probes)
        store.add_verdicts(
            run_id,
            [
                Verdict(
                    "D-DEV-03",
                    "cluster",
                    Result.PASS,
                    "none",
                    "dev.coverage",
                    "coverage",
                    {"swept": len(swept)},
                    {},
                )
            ],
        )
        _backdate(store, run_id, at)
    baselines = _baselines(store)
    for s in range(nccl):
        at = now - dt.timedelta(days=3 + 10 * (nccl - 1 - s))
        _nccl_sweep(store, rng, names, rack_of, baselines, at, s)
    _xid(store, rng, names, rack_of, now)
    for w in range(weekly):
        at = now - dt.timedelta(days=7 * (weekly - 1 - w), hours=1)
        run_id = store.ensure_run(f"kueue/{at:%Y%m%dT%H%M%S}", suite="kueue_contention", backend="kubernetes")
        verdicts = [
            Verdict(
                c,
                f"kueue/{name}",
                Result.FAIL if (name == "d-sched-04-no-reclaim" and w == weekly - 1) else Result.PASS,
                "none",
                "kueue-scenario-v1",
                "expectations held",
                {"title": name},
                {"kueue_version": "v0.19.2", "scenario": name},
            )
            for name, criteria in KUEUE_SCENARIOS
            for c in criteria
        ]
        store.add_verdicts(run_id, verdicts)
        _backdate(store, run_id, at)
    for o, rack in enumerate(sorted(set(rack_of.values()))[:2]):
        at = now - dt.timedelta(days=20 - o)
        members = [n for n in names if rack_of[n] == rack]
        run_id = store.ensure_run(
            f"rack_onboarding/manual__{rack}",
            suite="rack_onboarding",
            backend="kubernetes",
            meta={
                "request": {"rack": rack},
                "report": {"rack": rack, "nodes": len(members), "in_service": len(members) - o, "held": o},
            },
        )
        store.add_verdicts(
            run_id,
            [
                Verdict("D-DEV-01", n, Result.PASS, "in_service", "dev.onboarding.pass", "r2 pass", {}, {})
                for n in members
            ],
        )
        _backdate(store, run_id, at)
    with store.engine.connect() as conn:
        return {
            t: int(conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one())
            for t in ("runs", "probes", "measurements", "verdicts", "node_events", "baselines")
        }


def _baselines(store: Store) -> dict[str, int]:
    ids = {}
    for scope, gbps, versions in (("intra-8", INTRA_GBPS, 2), ("inter-2x8", INTER_GBPS, 1)):
        for v in range(versions):
            value = gbps * (0.98 + 0.02 * v)
            stats = {
                "sizes": [
                    {
                        "size": s,
                        "min_gbps": _curve(s, value) * 0.97,
                        "q1_gbps": _curve(s, value) * 0.99,
                        "median_gbps": _curve(s, value),
                        "q3_gbps": _curve(s, value) * 1.01,
                        "max_gbps": _curve(s, value) * 1.03,
                    }
                    for s in SIZES
                ],
                "headline": {"busbw_gbps": value, "min_size_bytes": 1 << 30},
            }
            bid, _ = store.add_baseline_candidate(
                profile=PROFILE,
                metric="nccl.busbw",
                scope=scope,
                value=value,
                unit="GB/s",
                stats=stats,
                source={"method": "bench", "run_ids": []},
            )
            store.promote_baseline(bid)
            ids[scope] = bid
    store.add_baseline_candidate(
        profile=PROFILE,
        metric="nccl.busbw",
        scope="intra-8",
        value=INTRA_GBPS * 1.01,
        unit="GB/s",
        stats={},
        source={"method": "bench"},
    )
    return ids


def _curve(size: int, peak: float) -> float:
    return peak * size / (size + (1 << 25))


def _nccl_sweep(
    store: Store,
    rng: random.Random,
    names: list[str],
    rack_of: dict[str, str],
    baselines: dict[str, int],
    at: dt.datetime,
    index: int,
) -> None:
    run_key = f"post_upgrade_nccl_sweep/manual__{at:%Y-%m-%dT%H:%M:%S}"
    run_id = store.ensure_run(run_key, suite=fh.NCCL_SUITE, backend="kubernetes")
    half = len(names) // 2
    pairs = [(names[i], names[(i + half) % len(names)]) for i in range(half)]
    probes: list[ProbeIn] = []
    for scope, subjects in (("intra-8", [(n,) for n in names]), ("inter-2x8", pairs)):
        peak = INTRA_GBPS if scope == "intra-8" else INTER_GBPS
        for members in subjects:
            subject = "+".join(members)
            slow = rng.random() < 0.01
            keys = [f"{run_key}/nccl-{scope}/{subject}/r{k}" for k in range(3)]
            for k, key in enumerate(keys):
                factor = (0.75 if slow else 1.0) * rng.uniform(0.98, 1.02)
                ms = tuple(
                    MeasurementIn(
                        members[0],
                        "nccl.busbw",
                        round(_curve(s, peak) * factor, 2),
                        unit="GB/s",
                        attrs={"size": s, "scope": scope, "profile": PROFILE, "repeat": k, "usable": True},
                    )
                    for s in SIZES
                )
                verdicts: tuple[Verdict, ...] = ()
                if k == 2:
                    result = Result.FAIL if slow else Result.PASS
                    crit = "D-NET-NCCL-01" if scope == "intra-8" else "D-NET-NCCL-02"
                    against = {"profile": PROFILE, "scope": scope, "baseline_id": baselines[scope]}
                    verdicts = (
                        Verdict(
                            crit,
                            subject,
                            result,
                            "none",
                            "nccl.busbw",
                            f"busbw {result.value}",
                            {
                                "repeats": [{"repeat": r, "probe_key": keys[r]} for r in range(3)],
                                "min_ratio": 0.9,
                            },
                            against,
                        ),
                        Verdict(
                            "D-NET-NCCL-03",
                            subject,
                            Result.PASS,
                            "none",
                            "nccl.errors",
                            "no errors",
                            {},
                            against,
                        ),
                        Verdict(
                            "D-NET-NCCL-04", subject, Result.PASS, "none", "nccl.cv", "cv ok", {}, against
                        ),
                        Verdict(
                            "D-NET-NCCL-TRANSPORT",
                            subject,
                            Result.PASS,
                            "none",
                            "nccl.transport",
                            "ib",
                            {},
                            against,
                        ),
                    )
                probes.append(
                    ProbeIn(
                        key,
                        "nccl",
                        f"synthetic all_reduce_perf of {subject}\n",
                        members,
                        measurements=ms,
                        verdicts=verdicts,
                    )
                )
    _ingest(store, run_id, probes)
    _backdate(store, run_id, at)


def _xid(
    store: Store,
    rng: random.Random,
    names: list[str],
    rack_of: dict[str, str],
    now: dt.datetime,
    *,
    count: int | None = None,
    backdate: bool = True,
) -> None:
    """Xid runs on `count` nodes (default 1 %), at times over the 60 days before `now` (or now)."""
    for n in rng.sample(names, count or max(1, len(names) // 100)):
        at = now - dt.timedelta(days=rng.uniform(0, 60)) if backdate else now
        run_key = f"xid_remediation/asset_triggered__{n}-{at:%Y%m%dT%H%M%S}"
        run_id = store.ensure_run(run_key, suite="xid", backend="kubernetes")
        ttc = rng.uniform(1.5, 6.5)
        r3 = Result.FAIL if rng.random() < 0.3 else Result.PASS
        store.add_verdicts(
            run_id,
            [
                Verdict(
                    "D-DEV-06", n, Result.FAIL, "cordon", "xid.79", "Xid 79 on GPU 2: cordon", {"xid": 79}, {}
                ),
                Verdict(
                    "D-DEV-05",
                    n,
                    Result.PASS,
                    "none",
                    "xid.time_to_cordon",
                    f"cordoned {ttc:.1f}s after the first Xid",
                    {"time_to_cordon_s": round(ttc, 3), "dry_run": False},
                    {"target_p90_s": 15.0},
                ),
            ],
            node=n,
        )
        store.add_verdicts(
            run_id,
            [
                Verdict(
                    "D-DEV-02",
                    n,
                    r3,
                    "uncordon" if r3 is Result.PASS else "quarantine",
                    "dev.post_xid",
                    f"r3 {r3.value}",
                    {},
                    {},
                )
            ],
            node=n,
        )
        store.record_node_event(
            f"{run_key}/cordon",
            node=n,
            kind="cordon",
            reason="Xid 79",
            dry_run=False,
            run_id=run_id,
            details={"rack": rack_of[n]},
            at=at,
        )
        kind = "uncordon" if r3 is Result.PASS else "quarantine"
        store.record_node_event(
            f"{run_key}/{kind}",
            node=n,
            kind=kind,
            reason=f"r3 {r3.value}",
            dry_run=False,
            run_id=run_id,
            details={"rack": rack_of[n]},
            at=at + dt.timedelta(minutes=40),
        )
        if backdate:
            _backdate(store, run_id, at)


# --- the measurement ------------------------------------------------------------------------------
def copy_seconds(engine: sa.Engine, sql: str) -> float:
    """Wall seconds for PostgreSQL to send the rows of `sql` (COPY … TO STDOUT, into memory)."""
    raw = engine.raw_connection()
    try:
        cur = raw.driver_connection.cursor()  # type: ignore[union-attr]
        statement = f"COPY ({sql}) TO STDOUT"
        start = time.perf_counter()
        if hasattr(cur, "copy_expert"):  # psycopg2
            cur.copy_expert(statement, io.BytesIO())
        else:  # psycopg 3
            with cur.copy(statement) as copy:
                for _block in copy:
                    pass
        took = time.perf_counter() - start
        cur.close()
    finally:
        raw.close()
    return took


def views(store: Store, nodes: list[str], cache: fh.FleetCells) -> dict[str, tuple[Callable[[], str], str]]:
    """view → (render, the reference's SELECT of the rows the view reads). `cache`: the page's
    incremental cells, shared by the warm views."""
    engine = store.engine
    since = dt.datetime.now(dt.UTC) - dt.timedelta(days=fh.DEFAULT_HORIZON_DAYS)
    first = fh.first_run_since(engine, since)
    failing = next((v["node"] for v in store.verdicts(criterion="D-DEV-02") if v["node"]), nodes[0])
    nccl = fh.nccl_subjects(engine, profile=PROFILE, scope="intra-8")
    subject = nccl["subjects"][0]["subject"] if nccl["subjects"] else nodes[0]
    nccl_run = nccl["run"] or {"id": 0, "run_key": ""}
    nccl_keys = ", ".join(f"'{nccl_run['run_key']}/nccl-intra-8/{subject}/r{k}'" for k in range(3))
    horizon_rows = (
        f"SELECT node, subject, criterion, run_id, result, judged_at FROM verdicts WHERE run_id >= {first}"
    )
    return {
        # cold: computed from the horizon's verdicts (the first load after the api-server starts)
        "heatmap_cold": (
            lambda: pages.fleet(engine, base="/fleet", cache=fh.FleetCells(engine)),
            horizon_rows,
        ),
        # warm: what every later load costs while nothing was judged
        "heatmap_warm": (lambda: pages.fleet(engine, base="/fleet", cache=cache), horizon_rows),
        # after a new Xid run (written before the clock starts): that run is folded in
        "heatmap_new_run": (
            lambda: pages.fleet(engine, base="/fleet", cache=cache),
            horizon_rows,
        ),
        "heatmap_problems": (
            lambda: pages.fleet(engine, base="/fleet", layer="device", problems=True, cache=cache),
            horizon_rows,
        ),
        "node": (
            lambda: pages.node(engine, failing, base="/fleet"),
            "SELECT v.*, r.run_key FROM verdicts v JOIN runs r ON r.id = v.run_id "
            f"WHERE v.node = '{failing}' OR v.subject = '{failing}'",
        ),
        "nccl": (
            lambda: pages.nccl(engine, base="/fleet", profile=PROFILE, scope="intra-8", subject=subject),
            "SELECT m.value, m.attrs FROM measurements m WHERE m.probe_id IN (SELECT id FROM probes "
            f"WHERE run_id = {nccl_run['id']} AND probe_key IN ({nccl_keys}))",
        ),
        "baselines": (lambda: pages.baselines(engine, base="/fleet"), "SELECT * FROM baselines"),
        "coverage_cold": (
            lambda: pages.coverage(engine, base="/fleet", cache=fh.FleetCells(engine)),
            "SELECT node, judged_at, result, criterion FROM verdicts "
            f"WHERE run_id >= {first} AND criterion IN ('D-DEV-01', 'D-DEV-03') AND node IS NOT NULL",
        ),
        "coverage_warm": (
            lambda: pages.coverage(engine, base="/fleet", cache=cache),
            "SELECT node, judged_at, result, criterion FROM verdicts "
            f"WHERE run_id >= {first} AND criterion IN ('D-DEV-01', 'D-DEV-03') AND node IS NOT NULL",
        ),
        "criteria": (
            lambda: pages.criteria(engine, base="/fleet"),
            "SELECT criterion, result FROM verdicts WHERE run_id = (SELECT max(id) FROM runs)",
        ),
        "kueue": (
            lambda: pages.kueue(engine, base="/fleet"),
            "SELECT v.* FROM verdicts v JOIN runs r ON r.id = v.run_id WHERE r.suite = 'kueue_contention'",
        ),
        "onboarding": (
            lambda: pages.onboarding(engine, base="/fleet"),
            "SELECT v.* FROM verdicts v JOIN runs r ON r.id = v.run_id WHERE r.suite = 'rack_onboarding'",
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=16384)
    ap.add_argument("--weekly", type=int, default=4)
    ap.add_argument("--nccl", type=int, default=2)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument(
        "--db",
        default=os.environ.get(
            "FLEETVAL_TEST_DB_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
        ),
    )
    ap.add_argument("--keep", action="store_true", help="keep the filled database (its URL is printed)")
    ap.add_argument("--reuse", help="a database URL filled by an earlier --keep run: skip the fill")
    args = ap.parse_args()

    print(f"load average at start: {os.getloadavg()}")
    admin = sa.create_engine(args.db, isolation_level="AUTOCOMMIT")
    url = args.reuse or sa.make_url(args.db).set(
        database=f"fleetval_bench_page_{os.getpid()}"
    ).render_as_string(hide_password=False)
    if not args.reuse:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{sa.make_url(url).database}"'))
    engine = make_engine(url)
    try:
        store = Store(engine)
        upgrade(engine)
        if not args.reuse:
            start = time.perf_counter()
            counts = fill(store, nodes=args.nodes, weekly=args.weekly, nccl=args.nccl)
            print(f"filled in {time.perf_counter() - start:.0f}s: {counts}")
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(sa.text("VACUUM ANALYZE"))
        nodes = list(node_names(args.nodes))
        cache = fh.FleetCells(engine)
        measured = views(store, nodes, cache)
        rng = random.Random(11)
        ratios: dict[str, list[float]] = {name: [] for name in measured}
        took: dict[str, list[float]] = {name: [] for name in measured}
        refs: dict[str, list[float]] = {name: [] for name in measured}
        for render, _ in measured.values():  # warm: templates compiled, connection pooled
            render()
        for sample in range(args.samples):
            for name, (render, sql) in measured.items():
                order = ("reference", "view") if sample % 2 == 0 else ("view", "reference")
                for side in order:
                    if side == "reference":
                        refs[name].append(copy_seconds(engine, sql))
                    else:
                        if name == "heatmap_new_run":  # not timed: the write the page then folds in
                            now = dt.datetime.now(dt.UTC)
                            _xid(store, rng, nodes, node_names(args.nodes), now, count=1, backdate=False)
                        start = time.perf_counter()
                        html = render()
                        took[name].append(time.perf_counter() - start)
                        assert "<html" in html
                ratios[name].append(took[name][-1] / refs[name][-1])
            print(
                f"sample {sample + 1} ({'reference first' if sample % 2 == 0 else 'view first'}), "
                f"load {os.getloadavg()[0]:.2f}: "
                + ", ".join(f"{n} {1000 * took[n][-1]:.0f} ms" for n in measured)
            )
        print()
        print(f"{'view':18} {'view ms':>9} {'COPY ms':>9} {'ratio':>7}  spread")
        for name in measured:
            print(
                f"{name:18} {1000 * statistics.median(took[name]):9.1f} "
                f"{1000 * statistics.median(refs[name]):9.1f} "
                f"{statistics.median(ratios[name]):7.2f}  {min(ratios[name]):.2f}..{max(ratios[name]):.2f}"
            )
        print(f"load average at end: {os.getloadavg()}")
        if args.keep or args.reuse:
            print(f"store kept: {url}")

        def ms(name: str) -> str:
            return (
                f"{1000 * statistics.median(took[name]):.0f} ms ({statistics.median(ratios[name]):.2f}x COPY)"
            )

        print(
            f"fleet page at {len(nodes)} nodes: heatmap warm {ms('heatmap_warm')}, after a new run "
            f"{ms('heatmap_new_run')}, cold {ms('heatmap_cold')}; coverage warm {ms('coverage_warm')}"
        )
    finally:
        engine.dispose()
        if not (args.keep or args.reuse):
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{sa.make_url(url).database}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
