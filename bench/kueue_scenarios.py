"""Bench: the Kueue contention scenarios against the simulated cluster, and the cost of the
simulated Kueue's scheduling cycle.

1. The shipped scenario set, run one after another as the `kueue_contention` DAG runs them, each on
   a fresh simulated cluster (a server on 127.0.0.1, the real kubernetes client). Reference: the
   time the timelines themselves impose (their `at` offsets and `hold`s), which any runner must
   wait; the difference is what observing, admitting and cleaning up cost. Several samples.
2. One scheduling cycle of the admission model with W workloads waiting in 10 ClusterQueues of
   one cohort (all pending: the busy case). Reference, measured in the same run: sorting the same
   W workloads by priority and creation time, the least any scheduler does per cycle. Two sizes,
   alternating, to show the growth.

Prints the load average, every sample, and the figures last.

    .venv/bin/python bench/kueue_scenarios.py [--samples 3] [--workloads 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from kubernetes import config

from fleetval.fleet.spec import load_fleet_spec
from fleetval.kueue.scenario import Scenario
from fleetval.kueue.suite import run_scenario, shipped
from fleetval.records import Result
from fleetval.sim.kube.cluster import SimKubeCluster
from fleetval.sim.kube.kueue_model import KueueConfig, KueueModel, gpu_job_workload
from fleetval.sim.kube.server import KubeApiServer

DEMO = Path(__file__).resolve().parents[1] / "include" / "fleetval" / "sim" / "fleets" / "demo.yaml"


def timeline_floor(scenario: Scenario) -> float:
    """Seconds the timeline itself imposes: the last `at`, plus every hold after it."""
    last_at = max((s.at for s in scenario.steps if s.at is not None), default=0.0)
    holds = sum(s.expect.hold for s in scenario.steps if s.expect is not None)
    return last_at + holds


def run_set(scenarios: list[Scenario], folder: Path) -> tuple[float, dict[str, float], int]:
    spec = load_fleet_spec(DEMO.read_text())
    per: dict[str, float] = {}
    not_passed = 0
    began = time.perf_counter()
    for scenario in scenarios:
        server = KubeApiServer(SimKubeCluster(spec, None, time_scale=0.0))
        server.start()
        try:
            api = config.new_client_from_config(
                config_file=str(server.write_kubeconfig(folder / f"{scenario.id}.kubeconfig"))
            )
            t0 = time.perf_counter()
            outcome = run_scenario(api, scenario, "bench")
            per[scenario.id] = time.perf_counter() - t0
            not_passed += sum(v.result != Result.PASS for v in outcome.verdicts)
        finally:
            server.stop()
    return time.perf_counter() - began, per, not_passed


def busy_model(workloads: int) -> KueueModel:
    objects: list[dict[str, object]] = [{"kind": "ResourceFlavor", "metadata": {"name": "gpu"}}]
    for q in range(10):
        objects.append(
            {
                "kind": "ClusterQueue",
                "metadata": {"name": f"cq-{q}"},
                "spec": {
                    "cohortName": "all",
                    "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": "gpu",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "1000"},
                                        {"name": "memory", "nominalQuota": "8Ti"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": "8"},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            }
        )
        objects.append({"kind": "Namespace", "metadata": {"name": f"team-{q}"}})
        objects.append(
            {
                "kind": "LocalQueue",
                "metadata": {"namespace": f"team-{q}", "name": "lq"},
                "spec": {"clusterQueue": f"cq-{q}"},
            }
        )
    model = KueueModel(objects, KueueConfig.v0_19())
    for i in range(workloads):  # 9 GPUs each: none fits its ClusterQueue alone, all stay pending
        q = i % 10
        model.submit(gpu_job_workload(f"team-{q}", f"w{i}", "lq", gpus_per_pod=9, priority=i % 7, created=i))
    return model


def cycle_seconds(workloads: int, cycles: int = 20) -> tuple[float, float]:
    model = busy_model(workloads)
    model.settle()
    t0 = time.perf_counter()
    for _ in range(cycles):
        model._broadcast(None)  # every inadmissible workload back to its heap: the busiest cycle
        model.run_cycle()
    cycle = (time.perf_counter() - t0) / cycles
    keys = [(-(i % 7), i, f"w{i}") for i in range(workloads)]
    t0 = time.perf_counter()
    for _ in range(cycles):
        sorted(keys)
    reference = (time.perf_counter() - t0) / cycles
    return cycle, reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--workloads", type=int, default=1000)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    scenarios = shipped()
    floor = sum(timeline_floor(s) for s in scenarios)
    walls = []
    with tempfile.TemporaryDirectory() as folder:
        for sample in range(args.samples):
            wall, per, not_passed = run_set(scenarios, Path(folder))
            walls.append(wall)
            slowest = max(per, key=lambda k: per[k])
            print(
                f"sample {sample + 1}: {len(scenarios)} scenarios in {wall:.1f} s "
                f"(slowest {slowest} {per[slowest]:.1f} s; {not_passed} verdicts not pass)"
            )
    small, large = args.workloads, args.workloads * 4
    cycles: dict[int, list[tuple[float, float]]] = {small: [], large: []}
    for size in (small, large, small, large):  # alternate the sizes
        cycles[size].append(cycle_seconds(size))
    for size, samples in cycles.items():
        for cycle, reference in samples:
            print(f"{size} waiting: cycle {cycle * 1e3:.2f} ms, sort {reference * 1e3:.3f} ms")
    print(f"load average after: {os.getloadavg()}")
    median_wall = statistics.median(walls)
    c_small = statistics.median(c for c, _ in cycles[small])
    c_large = statistics.median(c for c, _ in cycles[large])
    r_small = statistics.median(r for _, r in cycles[small])
    overhead = median_wall - floor
    print(
        f"scenario set: median {median_wall:.1f} s over {args.samples} samples; the timelines impose "
        f"{floor:.1f} s (overhead {overhead:.1f} s, {overhead / len(scenarios):.2f} s per scenario)"
    )
    print(
        f"model cycle: {c_small * 1e3:.2f} ms with {small} waiting = {c_small / r_small:.0f}x the sort; "
        f"{c_large * 1e3:.2f} ms with {large} ({c_large / c_small:.1f}x for 4x the workloads)"
    )


if __name__ == "__main__":
    main()
