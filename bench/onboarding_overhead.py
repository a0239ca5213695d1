"""Rack onboarding of N simulated nodes through Airflow: where the time goes.

`rack_onboarding` on a local Airflow 3 (LocalExecutor) against `fleetval sim serve` with instant
probes (`time_scale 0`: a probe's own time is ~0, so what is measured is the pipeline), dry run (no
question waits for a person), NCCL pairs on, verdicts in PostgreSQL. Each sample onboards a fresh
cluster whose rack registered with the onboarding taint.

Per sample: the wall time from the trigger to the run's end; the task instances; the time at least
one task instance was running (the union of their start-end intervals) and the rest, the time no
task ran at all: the scheduler and executor between one task's end and the next's start, pure
overhead. The reference, measured in the same run on the same Airflow, is a chain of as many
sequential steps made of empty tasks (`fleetval_bench_chain`, one task per step): Airflow's own
floor for that many dependent steps. Sizes alternate (2, 16, 16, 2, …) over `--samples` rounds.

With `--compare-preimport` each sample runs twice, on an Airflow with deploy/airflow_local_settings.py
(the Kubernetes clients imported once per worker) and on one without (imported by every task),
order alternating.

Prints the load average, each sample, then the figures last: wall per size, idle share, the
onboarding's wall over the empty chain's and, compared, the ratio without / with the pre-import.

    python bench/onboarding_overhead.py [--sizes 2 16] [--samples 1] [--compare-preimport]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from kubernetes import client, config
from weekly_sweep_airflow import NODES_PER_RACK, drop_db, fleet, fresh_db, start_cluster

from fleetval.sim.airflow_run import LocalAirflow, default_dags_folder

DAG = "rack_onboarding"
CHAIN_DAG = "fleetval_bench_chain"
TAINT = "fleetval.io/onboarding"
# An empty task per step; `steps` sequential ones (the DAG file is written into the bench's DAG folder).
CHAIN_FILE = """
from airflow.sdk import chain, dag, task

@task
def step() -> None:
    return None

@dag(dag_id="{dag_id}", schedule=None, catchup=False)
def bench_chain() -> None:
    chain(*[step.override(task_id=f"s{{i:03d}}")() for i in range({steps})])

bench_chain()
"""


def _time(value: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def timeline(airflow: LocalAirflow, dag_id: str, run_id: str) -> dict[str, Any]:
    """Task instances, their busy union and the sequential steps (distinct start times' chain)."""
    tis = airflow.task_states(dag_id, run_id)
    spans = sorted(
        (s, e)
        for ti in tis
        if (s := _time(ti.get("start_date"))) is not None and (e := _time(ti.get("end_date"))) is not None
    )
    busy = 0.0
    cur_s: dt.datetime | None = None
    cur_e: dt.datetime | None = None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_s is not None and cur_e is not None:
                busy += (cur_e - cur_s).total_seconds()
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_s is not None and cur_e is not None:
        busy += (cur_e - cur_s).total_seconds()
    ran = [t for t in tis if t.get("start_date")]
    return {"instances": len(tis), "ran": len(ran), "tasks": len({t["task_id"] for t in ran}), "busy_s": busy}


def onboard(airflow: LocalAirflow, server: Any, nodes: list[str]) -> tuple[float, dict[str, Any]]:
    config.load_kube_config(str(airflow.kubeconfig))
    core = client.CoreV1Api()
    for node in nodes:  # what --register-with-taints leaves on a new node
        core.patch_node(
            node, {"spec": {"taints": [{"key": TAINT, "value": "pending", "effect": "NoSchedule"}]}}
        )
    conf = {"rack": "r000", "nodes": nodes, "dry_run": True, "run_pairs": True}
    started = time.perf_counter()
    run_id = airflow.trigger(DAG, conf)
    state = airflow.wait_run(DAG, run_id, timeout_s=3600)
    took = time.perf_counter() - started
    if state != "success":
        sys.exit(f"error: onboarding ended {state}; see {airflow.log_path}")
    return took, timeline(airflow, DAG, run_id)


def empty_chain(airflow: LocalAirflow) -> float:
    started = time.perf_counter()
    run_id = airflow.trigger(CHAIN_DAG)
    state = airflow.wait_run(CHAIN_DAG, run_id, timeout_s=3600)
    if state != "success":
        sys.exit(f"error: the empty chain ended {state}; see {airflow.log_path}")
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 16])
    ap.add_argument("--samples", type=int, default=1, help="rounds over the sizes, order alternating")
    ap.add_argument("--steps", type=int, default=20, help="sequential steps of the reference chain")
    ap.add_argument("--parallelism", type=int, default=4, help="LocalExecutor workers")
    ap.add_argument(
        "--compare-preimport",
        action="store_true",
        help="also run without deploy/airflow_local_settings.py (each task imports the Kubernetes clients)",
    )
    ap.add_argument(
        "--db",
        default=os.environ.get(
            "FLEETVAL_TEST_DB_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
        ),
    )
    args = ap.parse_args()
    if max(args.sizes) > NODES_PER_RACK or min(args.sizes) < 1:
        sys.exit(f"error: sizes are 1..{NODES_PER_RACK} (one rack)")
    spec = fleet(NODES_PER_RACK)
    spec["faults"] = []
    print(f"load average at start: {os.getloadavg()}")
    sides = ("preimport", "plain") if args.compare_preimport else ("preimport",)
    walls: dict[tuple[str, int], list[float]] = {(side, n): [] for side in sides for n in args.sizes}
    idle: dict[tuple[str, int], list[float]] = {key: [] for key in walls}
    chains: dict[str, list[float]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="fleetval-bench-") as tmp:
        home = pathlib.Path(tmp)
        dags = home / "dags"
        shutil.copytree(default_dags_folder(), dags)
        shutil.copy(default_dags_folder().parent / "pools.json", home)  # LocalAirflow imports it from there
        (dags / "bench_chain.py").write_text(CHAIN_FILE.format(dag_id=CHAIN_DAG, steps=args.steps))
        url = fresh_db(args.db)
        server = start_cluster(spec, url)
        try:
            for sample in range(args.samples):
                order = sides if sample % 2 == 0 else tuple(reversed(sides))
                sizes = args.sizes if sample % 2 == 0 else list(reversed(args.sizes))
                for side in order:
                    # "plain": no airflow_local_settings, each task imports the Kubernetes clients itself
                    airflow = LocalAirflow(
                        home / f"af-{side}-{sample}",
                        url,
                        server.write_kubeconfig(home / "kubeconfig"),
                        dags_folder=dags,
                        parallelism=args.parallelism,
                        deferrable_probes=False,
                        **({} if side == "preimport" else {"local_settings": None}),
                    )
                    try:
                        airflow.start()
                        chains[side].append(empty_chain(airflow))
                        print(
                            f"sample {sample + 1} {side}: empty chain of {args.steps} steps "
                            f"{chains[side][-1]:6.1f} s"
                        )
                        for n in sizes:
                            server.stop()  # a fresh cluster: the previous run's labels and taints gone
                            server = start_cluster(spec, url)
                            server.write_kubeconfig(airflow.kubeconfig)
                            nodes = [f"r000-n{i:02d}" for i in range(1, n + 1)]
                            took, tl = onboard(airflow, server, nodes)
                            walls[(side, n)].append(took)
                            idle[(side, n)].append(max(0.0, took - tl["busy_s"]))
                            print(
                                f"sample {sample + 1} {side}: {n:2d} nodes {took:6.1f} s, {tl['ran']} task "
                                f"instances ran ({tl['tasks']} tasks), "
                                f"some task running {tl['busy_s']:.1f} s, "
                                f"none {idle[(side, n)][-1]:.1f} s  load {os.getloadavg()[0]:.2f}"
                            )
                    finally:
                        airflow.stop()
        finally:
            server.stop()
            drop_db(args.db, url)
    print(f"load average at end: {os.getloadavg()}")
    for side in sides:
        chain = statistics.median(chains[side])
        per_step = chain / args.steps
        print(f"{side}: empty chain {chain:.1f} s for {args.steps} steps = {per_step:.2f} s a dependent step")
        for n in args.sizes:
            w, i = statistics.median(walls[(side, n)]), statistics.median(idle[(side, n)])
            print(
                f"{side}: onboarding {n:2d} nodes {w:.1f} s wall (median of {len(walls[(side, n)])}), "
                f"no task running {i:.1f} s ({100 * i / w:.0f} %), = {w / per_step:.0f} empty-chain steps"
            )
    if args.compare_preimport:
        for n in args.sizes:
            pre, plain = statistics.median(walls[("preimport", n)]), statistics.median(walls[("plain", n)])
            print(
                f"onboarding {n:2d} nodes: {pre:.1f} s with the pre-import vs {plain:.1f} s without "
                f"= {plain / pre:.2f}x"
            )


if __name__ == "__main__":
    main()
