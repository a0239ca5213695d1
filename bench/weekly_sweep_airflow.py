"""The weekly sweep of N simulated nodes through Airflow, on the one real path, vs the same probes
without Airflow.

Pipeline side: `weekly_health_sweep` on a local Airflow 3 (LocalExecutor, `--parallelism`
workers), its waves as runs of `weekly_health_sweep_wave`, one KubernetesPodOperator task per
node, against `fleetval sim serve` with instant probes (`time_scale 0`), verdicts in PostgreSQL.
Timed from the trigger to the sweep's success.

Reference side, in the same run and on the same simulated cluster: one pod per node created with
the kubernetes client in waves of the same size, each awaited, its log read and its raw output
stored with `Store.ingest` — the pods and the store, without Airflow. The difference per node is
the pipeline's own overhead. The two sides alternate (A B B A …) over `--samples` pairs.

Prints the load average, each sample, then the figure last: the sweep's sustained nodes/s, and
that rate over the 0.19 nodes/s needed to sweep 16,384 nodes in 24 h (target >= 10x).

    python bench/weekly_sweep_airflow.py [--nodes 1024] [--samples 1] [--parallelism 4]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

import sqlalchemy as sa
from kubernetes import client, config

from fleetval.dcgm.probe import dcgm_diag_probe
from fleetval.fleet.spec import load_fleet_spec
from fleetval.probes.pod import kpo_kwargs
from fleetval.sim.airflow_run import LocalAirflow
from fleetval.sim.kube.cluster import SimKubeCluster
from fleetval.sim.kube.server import KubeApiServer
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import ProbeIn, Store

ROOT = pathlib.Path(__file__).resolve().parents[1]
NEEDED_NODES_PER_S = 16_384 / 86_400
NODES_PER_RACK = 16


def fleet(nodes: int) -> dict[str, Any]:
    racks = max(1, nodes // NODES_PER_RACK)
    return {
        "name": f"bench{nodes}",
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
        "racks": [{"name": f"r{i:03d}", "profile": "h100", "nodes": NODES_PER_RACK} for i in range(racks)],
        "faults": [{"node": "r000-n03", "kind": "dcgm.memory", "gpu": 5}],
    }


def fresh_db(admin_url: str) -> str:
    name = f"fleetval_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def drop_db(admin_url: str, url: str) -> None:
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{sa.make_url(url).database}" WITH (FORCE)'))
    admin.dispose()


def start_cluster(spec: dict[str, Any], url: str) -> KubeApiServer:
    engine = make_engine(url)
    upgrade(engine)
    cluster = SimKubeCluster(load_fleet_spec(spec), engine, time_scale=0.0)
    cluster.reset()
    server = KubeApiServer(cluster)
    server.start()
    return server


def sweep_through_airflow(airflow: LocalAirflow, wave_fraction: float) -> float:
    conf = {
        "max_fleet_fraction": wave_fraction,
        "max_rack_fraction": 1.0,
        "max_action_fraction": 0.05,
        "dry_run": False,
    }
    started = time.perf_counter()
    run_id = airflow.trigger("weekly_health_sweep", conf)
    state = airflow.wait_run("weekly_health_sweep", run_id, timeout_s=7200)
    took = time.perf_counter() - started
    if state != "success":
        sys.exit(f"error: the sweep ended {state}; see {airflow.log_path}")
    return took


def sweep_direct(kubeconfig: pathlib.Path, url: str, nodes: list[str], wave: int) -> float:
    """One pod per node, in waves: create, await, read the log, store the raw output."""
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    store = Store(make_engine(url))
    run = store.ensure_run(f"bench-direct/{uuid.uuid4().hex}", suite="weekly", backend="kubernetes")
    started = time.perf_counter()
    for first in range(0, len(nodes), wave):
        specs = [
            dcgm_diag_probe(n, level=2, gpus=8, run_key=f"direct{first}") for n in nodes[first : first + wave]
        ]
        names = []
        for spec in specs:
            kw = kpo_kwargs(spec)
            body = {
                "metadata": {"generateName": kw["name"] + "-", "labels": kw["labels"]},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": kw["node_selector"],
                    "containers": [
                        {
                            "name": "base",
                            "image": spec.image,
                            "command": list(spec.command),
                            "args": list(spec.args),
                            "resources": {"limits": {"nvidia.com/gpu": str(spec.gpus)}},
                        }
                    ],
                },
            }
            names.append(core.create_namespaced_pod("fleetval", body).metadata.name)
        raws = []
        for name, spec in zip(names, specs, strict=True):
            while core.read_namespaced_pod(name, "fleetval").status.phase not in ("Succeeded", "Failed"):
                time.sleep(0.05)
            raw = core.read_namespaced_pod_log(name, "fleetval", _preload_content=False).data.decode()
            raws.append(ProbeIn(spec.probe_key, "dcgm", raw, (spec.node,)))
            core.delete_namespaced_pod(name, "fleetval")
        store.ingest(run, raws)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument(
        "--samples", type=int, default=1, help="pairs of (Airflow, direct) runs, order alternating"
    )
    ap.add_argument("--parallelism", type=int, default=4, help="LocalExecutor workers")
    ap.add_argument("--wave-fraction", type=float, default=0.10, help="max_fleet_fraction of the sweep")
    ap.add_argument(
        "--db",
        default=os.environ.get(
            "FLEETVAL_TEST_DB_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
        ),
    )
    args = ap.parse_args()

    spec = fleet(args.nodes)
    nodes = [f"r{r:03d}-n{i:02d}" for r in range(len(spec["racks"])) for i in range(1, NODES_PER_RACK + 1)]
    wave = max(1, int(len(nodes) * args.wave_fraction))
    print(f"load average at start: {os.getloadavg()}")
    print(f"{len(nodes)} nodes, waves of {wave}, LocalExecutor parallelism {args.parallelism}")
    airflow_s: list[float] = []
    direct_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="fleetval-bench-") as tmp:
        home = pathlib.Path(tmp)
        url = fresh_db(args.db)
        server = start_cluster(spec, url)
        airflow = LocalAirflow(
            home,
            url,
            server.write_kubeconfig(home / "kubeconfig"),
            parallelism=args.parallelism,
            deferrable_probes=False,
        )
        try:
            airflow.start()
            for sample in range(args.samples):
                order = ("airflow", "direct") if sample % 2 == 0 else ("direct", "airflow")
                for side in order:
                    # Each side sweeps a fresh cluster: the previous sweep's cordons would skip nodes.
                    server.stop()
                    server = start_cluster(spec, url)
                    server.write_kubeconfig(airflow.kubeconfig)
                    if side == "airflow":
                        airflow_s.append(sweep_through_airflow(airflow, args.wave_fraction))
                    else:
                        direct_s.append(sweep_direct(airflow.kubeconfig, url, nodes, wave))
                    took = (airflow_s if side == "airflow" else direct_s)[-1]
                    print(
                        f"sample {sample + 1} {side:7s}: {took:8.1f} s  ({len(nodes) / took:6.2f} nodes/s)"
                        f"  load {os.getloadavg()[0]:.2f}"
                    )
        finally:
            airflow.stop()
            server.stop()
            drop_db(args.db, url)
    a, d = statistics.median(airflow_s), statistics.median(direct_s)
    rate = len(nodes) / a
    print(f"load average at end: {os.getloadavg()}")
    overhead_ms = 1000 * (a - d) / len(nodes)
    print(f"median: Airflow {a:.1f} s, direct {d:.1f} s; pipeline overhead {overhead_ms:.0f} ms/node")
    target = 10 * NEEDED_NODES_PER_S
    print(f"needed for 16,384 nodes in 24 h: {NEEDED_NODES_PER_S:.2f} nodes/s (target: 10x = {target:.2f})")
    print(
        f"weekly sweep through Airflow: {rate:.2f} nodes/s = {rate / NEEDED_NODES_PER_S:.1f}x the needed rate"
    )


if __name__ == "__main__":
    main()
