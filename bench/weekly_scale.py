"""The weekly sweep's own cost per node at 1k, 4k and 16k simulated nodes, without Airflow.

What the sweep's tasks do, called as the tasks call them, on one simulated fleet per size (racks
of 16 nodes; one node in 64 with a DCGM fault, so judging cordons some and the action budget
withholds none), in a fresh PostgreSQL database per sample:

- plan: `KubeCluster.list_nodes` (over an in-memory API: the nodes the simulator serves, already
  deserialized), `weekly.plan_sweep` under the default budget and max_map_length 1024, the run
  and its plan stored (`plan_waves`);
- map: per wave, the plan read back and each node's probe arguments (`wave_probes`), and per node
  the probe spec and pod arguments a mapped ProbePodOperator builds (`kpo_kwargs`);
- store: per node, the raw output stored the moment its pod completes (one transaction each, as
  each probe task does);
- judge: per wave, `weekly.judge_wave` (parse, judge, verdicts, node actions on an in-memory
  cluster), then the coverage verdict (`report_coverage`).

The reference, measured in the same run beside it, is the least a sweep could do per node and is
linear by construction: generate the simulated output (`nvidia-smi -L` + `dcgmi diag -r 2 -j` as
the simulator prints them) and keep it, one single-row INSERT and commit per node into a plain
table of a fresh database (the pipeline commits once per node too, as each probe task does).
Its ms/node moves with the machine's load and commit latency as the pipeline's does. Sides
alternate (reference first, then pipeline first) over `--samples`.

Prints the load average with each sample, ms/node per stage and N, and last the pipeline's
16k/1k ratio of ms/node (target: within 20 %, i.e. <= 1.2).

    python bench/weekly_scale.py [--nodes 1024 4096 16384] [--samples 3] [--db URL]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from kubernetes.client import ApiClient, V1ListMeta, V1NodeList, V1PodList

from fleetval.dcgm import weekly
from fleetval.fleet.spec import FleetSpec, load_fleet_spec
from fleetval.k8s.cluster import KubeCluster
from fleetval.policy.blast_radius import ActionBudget, DiagnosisBudget
from fleetval.probes import outputs as probe_outputs
from fleetval.probes.pod import ProbeSpec, kpo_kwargs
from fleetval.sim.images import dcgm_exit_code, dcgm_report, gpu_uuids
from fleetval.sim.kube.nodes import fleet_nodes
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import Store

NODES_PER_RACK = 16
FAULT_EVERY = 64
MAX_MAP_LENGTH = 1024  # Airflow's default [core] max_map_length, as plan_waves reads it
STAGES = ("plan", "map", "store", "judge")
TARGET_RATIO = 1.2


def fleet(nodes: int) -> FleetSpec:
    racks = max(1, nodes // NODES_PER_RACK)
    names = [f"r{r:04d}-n{i:02d}" for r in range(racks) for i in range(1, NODES_PER_RACK + 1)]
    kinds = ("dcgm.memory", "dcgm.thermal_warn", "dcgm.pcie")
    return load_fleet_spec(
        {
            "name": f"scale{nodes}",
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
            "racks": [
                {"name": f"r{i:04d}", "profile": "h100", "nodes": NODES_PER_RACK} for i in range(racks)
            ],
            "faults": [
                {"node": n, "kind": kinds[k % len(kinds)], "gpu": k % 8}
                for k, n in enumerate(names[FAULT_EVERY // 2 :: FAULT_EVERY])
            ],
        }
    )


def simulated_outputs(spec: FleetSpec) -> dict[str, tuple[str, int]]:
    """node → (raw output, exit code) of the DCGM r2 probe, as the simulator's pod prints them."""
    out: dict[str, tuple[str, int]] = {}
    for node, _rack in spec.nodes():
        profile = spec.profile_of(node)
        name = profile.gpu_product.replace("-", " ")
        listing = "".join(
            f"GPU {i}: {name} (UUID: {u})\n" for i, u in enumerate(gpu_uuids(spec, node, range(profile.gpus)))
        )
        report = dcgm_report(spec, node, 2)
        out[node] = (listing + report, dcgm_exit_code(report))
    return out


class InMemoryCore:
    """The two CoreV1Api lists `KubeCluster.list_nodes` makes, paged, over deserialized nodes."""

    def __init__(self, nodes: list[Any]) -> None:
        self.nodes = nodes

    def list_node(self, *, label_selector: str, limit: int, _continue: str | None) -> V1NodeList:
        start = int(_continue or 0)
        more = start + limit < len(self.nodes)
        return V1NodeList(
            items=self.nodes[start : start + limit],
            metadata=V1ListMeta(_continue=str(start + limit) if more else None),
        )

    def list_pod_for_all_namespaces(self, **_: Any) -> V1PodList:
        return V1PodList(items=[], metadata=V1ListMeta())


class InMemoryNodes:
    """NodeActions that record what would be patched."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def cordon(self, node: str) -> None:
        self.calls.append(("cordon", node))

    def uncordon(self, node: str) -> None:
        self.calls.append(("uncordon", node))

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self.calls.append(("label", node))

    def add_taint(self, node: str, key: str, value: str, effect: str) -> None:
        self.calls.append(("taint", node))

    def remove_taint(self, node: str, key: str) -> None:
        self.calls.append(("untaint", node))

    def cordon_and_taint(
        self, node: str, *, key: str, value: str, effect: str, labels: dict[str, str | None] | None = None
    ) -> None:
        self.calls.append(("cordon", node))


def sweep(
    store: Store, cluster: KubeCluster, outputs: dict[str, tuple[str, int]], clock: Callable[[str], None]
) -> dict[str, Any]:
    """The weekly sweep's task bodies in order; `clock(stage)` closes each stage's timer."""
    run_key = f"weekly_health_sweep/bench-{uuid.uuid4().hex[:8]}"
    budget = DiagnosisBudget()
    fv_run = store.ensure_run(run_key, suite="weekly", backend="kubernetes", meta={"params": {}})
    plan = weekly.plan_sweep(
        cluster.list_nodes(), budget, max_waves=MAX_MAP_LENGTH, max_wave_size=MAX_MAP_LENGTH
    )
    store.update_run_meta(fv_run, plan=plan.to_json(), run_key=run_key, image=None)
    waves = [{"conf": {"fv_run": fv_run, "wave": i}} for i in range(len(plan.waves))]
    clock("plan")
    nodes = InMemoryNodes()
    results: dict[str, int] = {}
    for wave in waves:
        index = wave["conf"]["wave"]
        meta = store.run_meta(fv_run)
        probes: list[dict[str, Any]] = [
            {"probe": s.to_json(), "fv_run": fv_run}
            for s in weekly.wave_probes(
                weekly.SweepPlan.from_json(meta["plan"]), index, run_key=meta["run_key"]
            )
        ]
        specs = [ProbeSpec.from_json(p["probe"]) for p in probes]  # each mapped task's operator
        for spec in specs:
            kpo_kwargs(spec)
        clock("map")
        for spec in specs:
            raw, code = outputs[spec.node]
            finished = time.time()
            probe_outputs.store_probe_outputs(
                store,
                fv_run,
                [probe_outputs.probe_output(spec, raw, exit_code=code, error=None, finished_at=finished)],
            )
        clock("store")
        meta = store.run_meta(fv_run)
        judged = weekly.judge_wave(
            store,
            nodes,
            run_id=fv_run,
            run_key=meta["run_key"],
            plan=weekly.SweepPlan.from_json(meta["plan"]),
            wave_index=index,
            action_budget=ActionBudget(),
            dry_run=False,
            as_of=dt.datetime.now(dt.UTC),
            image=meta.get("image"),
        )
        for result, count in judged["results"].items():
            results[result] = results.get(result, 0) + count
        clock("judge")
    plan = weekly.SweepPlan.from_json(store.run_meta(fv_run)["plan"])
    coverage = weekly.coverage_verdict(
        plan, store.probed_nodes(fv_run, completed_only=True), as_of=dt.datetime.now(dt.UTC)
    )
    store.add_verdicts(fv_run, [coverage])
    store.finish_run(fv_run)
    verdicts = len(store.verdicts(fv_run))
    clock("judge")
    return {
        "waves": len(waves),
        "results": results,
        "coverage": coverage.result.value,
        "verdicts": verdicts,
        "cordons": sum(1 for c in nodes.calls if c[0] == "cordon"),
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


def reference_sample(admin_url: str, spec: FleetSpec) -> dict[str, float]:
    """Generate every node's simulated output, and keep each with one INSERT + commit."""
    url = fresh_db(admin_url)
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text("CREATE TABLE kept (id serial PRIMARY KEY, node text, raw text, exit_code int)")
            )
        insert = sa.text("INSERT INTO kept (node, raw, exit_code) VALUES (:node, :raw, :code)")
        t0 = time.perf_counter()
        outputs = simulated_outputs(spec)
        t1 = time.perf_counter()
        for node, (raw, code) in outputs.items():
            with engine.begin() as conn:
                conn.execute(insert, {"node": node, "raw": raw, "code": code})
        t2 = time.perf_counter()
        return {"simulate": t1 - t0, "commit": t2 - t1}
    finally:
        engine.dispose()
        drop_db(admin_url, url)


def pipeline_sample(
    admin_url: str, cluster: KubeCluster, outputs: dict[str, tuple[str, int]]
) -> dict[str, Any]:
    url = fresh_db(admin_url)
    engine = make_engine(url)
    try:
        upgrade(engine)
        store = Store(engine)
        took = dict.fromkeys(STAGES, 0.0)
        mark = [time.perf_counter()]

        def clock(stage: str) -> None:
            now = time.perf_counter()
            took[stage] += now - mark[0]
            mark[0] = now

        cpu0 = time.process_time()
        summary = sweep(store, cluster, outputs, clock)
        # This process's CPU alone: what is left of the wall clock is waiting on PostgreSQL.
        return {"took": took, "cpu": time.process_time() - cpu0, **summary}
    finally:
        engine.dispose()
        drop_db(admin_url, url)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--samples", type=int, default=3, help="per N; the two sides' order alternates")
    ap.add_argument(
        "--db",
        default=os.environ.get(
            "FLEETVAL_TEST_DB_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
        ),
    )
    args = ap.parse_args()

    print(f"load average at start: {os.getloadavg()}")
    per_n: dict[int, dict[str, Any]] = {}
    deserialize = ApiClient()._ApiClient__deserialize
    for n in args.nodes:
        spec = fleet(n)
        n = len(spec.rack_of)
        cluster = KubeCluster(InMemoryCore([deserialize(obj, "V1Node") for obj in fleet_nodes(spec)]))
        outputs = simulated_outputs(spec)
        pipe: list[dict[str, Any]] = []
        ref: list[dict[str, float]] = []
        for sample in range(args.samples):
            order = ("reference", "pipeline") if sample % 2 == 0 else ("pipeline", "reference")
            for side in order:
                if side == "reference":
                    ref.append(reference_sample(args.db, spec))
                else:
                    pipe.append(pipeline_sample(args.db, cluster, outputs))
            took = pipe[-1]["took"]
            total = sum(took.values())
            print(
                f"N={n:5d} sample {sample + 1} ({' then '.join(order)}), load {os.getloadavg()[0]:.2f}: "
                f"pipeline {1000 * total / n:.2f} ms/node ("
                + ", ".join(f"{s} {1000 * took[s] / n:.2f}" for s in STAGES)
                + f"; {1000 * pipe[-1]['cpu'] / n:.2f} of it this process's CPU)"
                f", reference {1000 * sum(ref[-1].values()) / n:.2f} ms/node (simulate"
                f" {1000 * ref[-1]['simulate'] / n:.2f}, commit {1000 * ref[-1]['commit'] / n:.2f});"
                f" {pipe[-1]['waves']} waves,"
                f" {pipe[-1]['results']}, {pipe[-1]['cordons']} cordons, coverage {pipe[-1]['coverage']}"
            )
        totals = [sum(p["took"].values()) / n * 1000 for p in pipe]
        per_n[n] = {
            "total": statistics.median(totals),
            "spread": (min(totals), max(totals)),
            "stages": {s: statistics.median(p["took"][s] / n * 1000 for p in pipe) for s in STAGES},
            "ref": statistics.median(sum(r.values()) / n * 1000 for r in ref),
            "cpu": statistics.median(p["cpu"] / n * 1000 for p in pipe),
        }
    print(f"\nload average at end: {os.getloadavg()}")
    print(
        "median ms/node per N (spread of the pipeline's samples); reference: simulate + one commit per node"
    )
    for n, f in per_n.items():
        print(
            f"  N={n:5d}: pipeline {f['total']:.2f} ms/node [{f['spread'][0]:.2f}..{f['spread'][1]:.2f}]  "
            + "  ".join(f"{s} {f['stages'][s]:.2f}" for s in STAGES)
            + f"  (CPU here {f['cpu']:.2f})  | reference {f['ref']:.2f} ms/node"
            f"  | pipeline/reference {f['total'] / f['ref']:.2f}"
        )
    first, last = min(per_n), max(per_n)
    if first != last:
        ratio = per_n[last]["total"] / per_n[first]["total"]
        ref_ratio = per_n[last]["ref"] / per_n[first]["ref"]
        relative = (per_n[last]["total"] / per_n[last]["ref"]) / (per_n[first]["total"] / per_n[first]["ref"])
        verdict = "within" if ratio <= TARGET_RATIO else "MISSED:"
        print(
            f"(the reference's own {last}/{first} ratio: {ref_ratio:.2f}; the pipeline's, over the"
            f" reference of its N: {relative:.2f})"
        )
        print(
            f"weekly sweep pipeline ms/node, {last}/{first} nodes: {ratio:.2f}"
            f" ({verdict} the <= {TARGET_RATIO} target)"
        )


if __name__ == "__main__":
    main()
