"""Time from an Xid to its cordon, with Airflow 3 running (standalone, LocalExecutor) against the
simulated cluster (`fleetval sim serve`) and the verdict store on PostgreSQL: the
`xid_remediation` DAG's AssetWatcher (which cordons as it reads the inbox), its runs, and their
r3 probe pod tasks through the Kubernetes API, as in production.

The clock starts at the Xid line's kernel timestamp. Each node's line reaches the inbox after a
delivery delay drawn from --delivery (a log shipper or node-problem-detector poll; reported
apart), and the clock stops when a watch on the Node objects sees `spec.unschedulable` become
true: the cluster's own account, not when fleetval made the call.

Phases (target: time-to-cordon p90 <= 10 s in each):
  A. one Xid alone, nothing else running (--alone samples, one node each);
  B. --burst nodes of a 192-node fleet log Xid 79 at the same instant (--bursts samples); in
     the first burst, --busy of them still run the job that hit the Xid, so their r3 waits
     (NodeBusy, retried) for the rest of the bench;
  C. one new Xid while the previous burst's remediation (r3 waits and runs) is in flight
     (--during per burst, spaced --during-gap s apart after the burst is cordoned; the r3 tasks
     still unfinished at each injection are printed).
Then the breaker (5 % in a 5 s window; 40 failing) and a 900-line Xid 45 storm (no cordon).

Before phase A, one warm-up Xid, printed but not a sample: right after the DAG is unpaused the
triggerer may not run the watcher yet.

Reference in the same run: the API floor (a cordon patch straight to the API until the watch
sees it) and the delivery delay. The load average is printed: the machine is shared.
    python bench/xid_time_to_cordon.py [--alone 3 --bursts 3 --burst 150 --delivery 1.0-2.0]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml
from kubernetes import client, config, watch

from fleetval.fleet.spec import load_fleet_spec
from fleetval.sim.airflow_run import LocalAirflow
from fleetval.sim.kube.cluster import SimKubeCluster
from fleetval.sim.kube.server import KubeApiServer
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import Store
from fleetval.store.xid_inbox import receive_lines
from fleetval.xid.simulated_source import xid_lines

RACKS, PER_RACK = 24, 8
TARGET_P90_S = 10.0
DAG = "xid_remediation"
UNFINISHED = ("scheduled", "queued", "running", "up_for_retry", "up_for_reschedule", "deferred")


def fleet_spec() -> dict[str, Any]:
    return {
        "name": "bench-xid",
        "seed": 7,
        "profiles": {
            "h100": {
                "gpu_product": "NVIDIA-H100-80GB-HBM3",
                "gpus": 8,
                "intra_busbw_gbps": 480,
                "inter_busbw_gbps": 370,
                "fabric": "ib",
            }
        },
        "racks": [{"name": f"r{r:02d}", "profile": "h100", "nodes": PER_RACK} for r in range(1, RACKS + 1)],
        "faults": [],
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


def stats(values: list[float]) -> str:
    if not values:
        return "no samples"
    return (
        f"p50 {statistics.median(values):.2f}s p90 {percentile(values, 0.9):.2f}s "
        f"max {max(values):.2f}s (n={len(values)})"
    )


class NodeWatch:
    """A watch on the Node objects: when each node last became unschedulable (wall clock)."""

    def __init__(self, kubeconfig: Path) -> None:
        self.core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        self.cond = threading.Condition()
        self.unschedulable: dict[str, bool] = {}
        self.cordoned_at: dict[str, float] = {}
        self._stop = False
        listed = self.core.list_node()
        for node in listed.items:
            self.unschedulable[node.metadata.name] = bool(node.spec.unschedulable)
        self._rv = listed.metadata.resource_version
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                stream = watch.Watch().stream(
                    self.core.list_node, resource_version=self._rv, timeout_seconds=60
                )
                for event in stream:
                    self._seen(event["object"], time.time())
                    if self._stop:
                        return
            except Exception as exc:  # an expired resourceVersion: list again, then watch from there
                print(f"node watch restarted ({type(exc).__name__}: {exc})"[:200])
                listed = self.core.list_node()
                for node in listed.items:
                    self._seen(node, time.time())
                self._rv = listed.metadata.resource_version

    def _seen(self, node: Any, seen: float) -> None:
        self._rv = node.metadata.resource_version
        name, now_unschedulable = node.metadata.name, bool(node.spec.unschedulable)
        with self.cond:
            if now_unschedulable and not self.unschedulable.get(name, False):
                self.cordoned_at[name] = seen
            self.unschedulable[name] = now_unschedulable
            self.cond.notify_all()

    def wait(self, what: str, check: Any, timeout_s: float) -> None:
        deadline = time.time() + timeout_s
        with self.cond:
            while not check():
                left = deadline - time.time()
                if left <= 0:
                    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
                self.cond.wait(min(left, 1.0))

    def free(self, nodes: list[str]) -> list[str]:
        with self.cond:
            return [n for n in nodes if not self.unschedulable.get(n, False)]

    def stop(self) -> None:
        self._stop = True


class Bench:
    def __init__(self, args: argparse.Namespace, engine: sa.Engine, spec: Any, watcher: NodeWatch) -> None:
        self.args, self.engine, self.spec, self.watch = args, engine, spec, watcher
        lo, _, hi = args.delivery.partition("-")
        self.delay = (float(lo), float(hi or lo))
        self.rng = random.Random(args.seed)
        self.tag = 0
        self.delays: list[float] = []

    def xid(self, nodes: list[str], *, code: int = 79, count: int = 1) -> dict[str, float]:
        """Xid `code` on every node at one kernel instant; each node's lines reach the inbox after
        its own delivery delay. Returns node → the kernel timestamp (the clock's start)."""
        self.tag += 1
        kernel = time.time()
        at = dt.datetime.fromtimestamp(kernel, dt.UTC)
        due = sorted((kernel + self.rng.uniform(*self.delay), n) for n in nodes)
        for when, node in due:
            time.sleep(max(0.0, when - time.time()))
            lines = xid_lines(self.spec, node, code=code, gpu=0, count=count, at=at)
            rows = [(f"bench/{self.tag}/{node}/{i}", node, line, "bench") for i, line in enumerate(lines)]
            received = time.time()
            receive_lines(self.engine, rows, at=dt.datetime.fromtimestamp(received, dt.UTC))
            self.delays.append(received - kernel)
        return dict.fromkeys(nodes, kernel)

    def time_to_cordon(self, started: dict[str, float], timeout_s: float = 180) -> list[float]:
        self.watch.wait(
            f"{len(started)} cordons",
            lambda: all(self.watch.cordoned_at.get(n, 0) >= t for n, t in started.items()),
            timeout_s,
        )
        return [self.watch.cordoned_at[n] - t for n, t in started.items()]


def r3_unfinished(airflow: LocalAirflow) -> int:
    query = urllib.parse.urlencode(
        [("task_id", "dcgm_r3"), ("limit", "1"), *[("state", s) for s in UNFINISHED]]
    )
    return int(airflow.call("GET", f"/api/v2/dags/{DAG}/dagRuns/~/taskInstances?{query}")["total_entries"])


def api_floor(watcher: NodeWatch, cluster: Any, nodes: list[str]) -> list[float]:
    """A cordon patch straight to the API until the watch sees it (then undone)."""
    out = []
    for node in nodes:
        start = time.time()
        cluster.cordon(node)
        watcher.wait(f"{node} cordoned", lambda n=node, s=start: watcher.cordoned_at.get(n, 0) >= s, 30)
        out.append(watcher.cordoned_at[node] - start)
        cluster.uncordon(node)
        watcher.wait(f"{node} uncordoned", lambda n=node: not watcher.unschedulable[n], 30)
    return out


def run_workload(core: client.CoreV1Api, node: str) -> None:
    """The job that hit the Xid, still running: r3 waits for it (NodeBusy)."""
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": f"training-{node}"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [
                    {
                        "name": "train",
                        "image": "busybox:1.36",
                        "command": ["/bin/sh", "-c", "sleep infinity"],
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    }
                ],
            },
        },
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--pg", default="postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--delivery", default="1.0-2.0", help="delivery delay node → inbox, seconds (lo-hi)")
    ap.add_argument("--alone", type=int, default=3, help="phase A samples")
    ap.add_argument("--bursts", type=int, default=3, help="phase B samples")
    ap.add_argument("--burst", type=int, default=150, help="nodes per burst")
    ap.add_argument("--busy", type=int, default=2, help="burst-1 nodes whose job keeps running")
    ap.add_argument("--during", type=int, default=3, help="phase C samples per burst")
    ap.add_argument("--during-gap", type=float, default=15.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="keep the Airflow home (logs) and say where")
    args = ap.parse_args()
    print(f"start: {load()}")

    work = Path(tempfile.mkdtemp(prefix="fleetval-ttc-bench-"))
    admin = sa.create_engine(args.pg, isolation_level="AUTOCOMMIT")
    db = f"fleetval_xid_bench_{os.getpid()}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{db}"'))
    db_url = sa.make_url(args.pg).set(database=db).render_as_string(hide_password=False)
    engine = make_engine(db_url)
    upgrade(engine)
    spec = load_fleet_spec(yaml.safe_dump(fleet_spec()))
    store = Store(engine)
    nodes = sorted(name for name, _rack in spec.nodes())
    server = KubeApiServer(SimKubeCluster(spec, engine, time_scale=0.0))
    server.start()
    kubeconfig = server.write_kubeconfig(work / "kubeconfig")
    watcher = NodeWatch(kubeconfig)
    from fleetval.k8s.cluster import KubeCluster

    cluster = KubeCluster(watcher.core)
    bench = Bench(args, engine, spec, watcher)
    airflow = LocalAirflow(
        work,
        db_url,
        kubeconfig,
        port=args.port,
        use_schedules=True,  # asset-triggered runs
        deferrable_probes=False,  # instant simulated r3 (see LocalAirflow.deferrable_probes)
    )  # only xid_remediation is unpaused: the competing work is the phases' own r3 tasks
    burst_nodes = nodes[: args.burst]
    spares = nodes[args.burst :]
    singles = spares[: len(spares) - args.busy]  # A and C
    stand_ins = spares[len(spares) - args.busy :]  # burst >= 2: in place of the busy nodes
    alone: list[float] = []
    bursts: list[list[float]] = []
    during: list[float] = []
    try:
        airflow.start(timeout_s=240)
        airflow.unpause(DAG)
        relaxed = {"max_fleet_fraction": 1.0, "max_rack_fraction": 1.0}
        airflow.call(
            "POST", "/api/v2/variables", {"key": "fleetval_xid_breaker", "value": json.dumps(relaxed)}
        )
        time.sleep(8)  # the triggerer picks the watcher up
        floor = api_floor(watcher, cluster, singles[-3:])
        print(f"reference: cordon patch → seen by the watch, no Airflow: {stats(floor)}")

        # Warm-up, not a sample: the bench's first Xid may come before the triggerer runs the
        # watcher (it picks it up some seconds after the DAG is unpaused).
        warm_node = singles[-4]
        [warm] = bench.time_to_cordon(bench.xid([warm_node]), timeout_s=300)
        print(f"warm-up (not a sample): {warm_node} cordoned {warm:.2f}s after its Xid ({load()})")
        watcher.wait(f"{warm_node} back in service", lambda: not watcher.unschedulable[warm_node], 600)
        airflow.wait_for(
            "no run in flight",
            lambda: all(r["state"] in ("success", "failed") for r in airflow.runs(DAG)),
            600,
        )

        # A. One Xid alone; its run (and r3) ends before the next sample.
        for i in range(args.alone):
            node = singles[i % len(singles)]
            [ttc] = bench.time_to_cordon(bench.xid([node]))
            alone.append(ttc)
            print(f"phase A sample {i + 1}: {node} cordoned {ttc:.2f}s after its Xid ({load()})")
            watcher.wait(f"{node} back in service", lambda n=node: not watcher.unschedulable[n], 300)
            airflow.wait_for(
                "no run in flight",
                lambda: all(r["state"] in ("success", "failed") for r in airflow.runs(DAG)),
                300,
            )

        # B and C.
        cursor = args.alone
        for b in range(args.bursts):
            members = burst_nodes if b == 0 else burst_nodes[: args.burst - args.busy] + stand_ins
            members = watcher.free(members)
            busy = members[len(members) - args.busy :] if b == 0 else []
            for node in busy:
                run_workload(watcher.core, node)
            values = bench.time_to_cordon(bench.xid(members), timeout_s=300)
            bursts.append(values)
            print(f"phase B burst {b + 1}: {len(values)} nodes at once: {stats(values)} ({load()})")
            if args.during:
                airflow.wait_for(
                    "the burst's r3 tasks to be in flight", lambda: r3_unfinished(airflow) > 0, 300
                )
            for _ in range(args.during):
                time.sleep(args.during_gap)
                node = singles[cursor % len(singles)]
                cursor += 1
                in_flight = r3_unfinished(airflow)
                [ttc] = bench.time_to_cordon(bench.xid([node]))
                during.append(ttc)
                print(
                    f"phase C after burst {b + 1}: {node} cordoned {ttc:.2f}s after its Xid, "
                    f"{in_flight} r3 tasks unfinished at the Xid ({load()})"
                )
            if b == args.bursts - 1:
                break  # the last burst's remediation may go on: nothing below needs its nodes
            healthy = [n for n in members if n not in busy]
            watcher.wait(
                f"burst {b + 1}'s nodes back in service",
                lambda h=healthy: not any(watcher.unschedulable[n] for n in h),
                1200,
            )

        # The breaker holds when the budget is smaller than the failure count (read from the
        # cluster and the trigger's node events: the runs may still queue behind r3 work).
        tight = {"max_fleet_fraction": 0.05, "max_rack_fraction": 1.0, "breaker_window_s": 5}
        airflow.call(
            "PATCH",
            "/api/v2/variables/fleetval_xid_breaker",
            {"key": "fleetval_xid_breaker", "value": json.dumps(tight)},
        )
        time.sleep(6)  # earlier cordons leave the 5 s window
        second = watcher.free(nodes)[:40]
        started = time.time()
        bench.xid(second)

        def withheld() -> set[str]:
            return {
                e["node"]
                for e in store.node_events(kind="withheld")
                if e["node"] in second and e["at"].timestamp() >= started - 1
            }

        def cordoned() -> set[str]:
            return {n for n in second if watcher.cordoned_at.get(n, 0) >= started}

        airflow.wait_for(f"{len(second)} decisions", lambda: len(withheld() | cordoned()) >= len(second), 120)
        cap = int(len(nodes) * tight["max_fleet_fraction"])
        got, held = len(cordoned()), len(withheld())
        print(
            f"breaker: budget {cap} nodes / 5 s, {len(second)} failing: {got} cordoned, {held} withheld "
            f"({'holds' if got <= cap and got + held == len(second) else 'BROKEN'})"
        )

        # An Xid 45 storm cordons nothing by itself.
        storm = watcher.free(nodes)[:3]
        started = time.time()
        bench.xid(storm, code=45, count=300)
        with engine.connect() as conn:
            inbox = sa.table("xid_inbox", sa.column("node"), sa.column("dispatch_id"))
            pending = (
                sa.select(sa.func.count())
                .select_from(inbox)
                .where(inbox.c.node.in_(storm), inbox.c.dispatch_id.is_(None))
            )
            airflow.wait_for("the storm to be read", lambda: conn.execute(pending).scalar_one() == 0, 120)
        time.sleep(5)
        new = sum(1 for n in storm if watcher.cordoned_at.get(n, 0) >= started)
        print(f"storm: Xid 45, 900 lines on 3 nodes, read by the trigger: {new} cordons")
    finally:
        airflow.stop()
        watcher.stop()
        server.stop()
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
        if args.keep:
            print(f"Airflow home and logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    burst_all = [v for values in bursts for v in values]
    print(f"delivery delay node → inbox (part of every figure): {stats(bench.delays)}")
    print(f"reference API floor: {stats(floor)}")
    print(f"end: {load()}")
    rows = [
        ("A: one Xid alone", alone),
        ("B: simultaneous burst", burst_all),
        ("C: Xid during remediation", during),
    ]
    for name, values in rows:
        if name.startswith("B"):
            per = "; ".join(f"burst {i + 1} p90 {percentile(v, 0.9):.2f}s" for i, v in enumerate(bursts))
            name = f"B: {args.burst} nodes at once, {len(bursts)} bursts ({per})"
        met = values and percentile(values, 0.9) <= TARGET_P90_S
        print(f"  {name}: {stats(values)} — {'met' if met else 'MISSED'}")
    worst = max((percentile(v, 0.9) for _, v in rows if v), default=float("nan"))
    every = all(v and percentile(v, 0.9) <= TARGET_P90_S for _, v in rows)
    print(
        f"time-to-cordon p90, worst phase: {worst:.2f}s (target <= {TARGET_P90_S:.0f} s: "
        f"{'met in every phase' if every else 'MISSED'}; "
        f"delivery delay p50 {statistics.median(bench.delays):.2f}s of it)"
    )


if __name__ == "__main__":
    main()
