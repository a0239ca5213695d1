"""DAG parse cost per file: each DAG file through a `DagBag` in a fresh interpreter, against a bare
`import airflow.sdk` in a fresh interpreter, over several alternating rounds.

Each round starts one fresh process per side: the bare `import airflow.sdk` (the reference the
target is set against), `DagBag` imported but given no file (what Airflow's own parsing machinery
costs before any DAG file), and one `DagBag(<file>)` per DAG file. Rounds alternate the order
(forward, then reversed), so a drift in the machine's load hits both sides alike. Per file it
prints the median of the paired differences (file − bare of the same round) and their spread,
in wall-clock seconds and in the child's CPU seconds (user + system: what the parse costs the
machine, and less moved by other work on a shared machine than the wall clock is).

Inside each file's process it also times what the dag-processor itself pays per file: the
processor's manager imports the `airflow.*` modules a DAG file names (`parsing_pre_import_modules`,
on by default) and forks the file's parser from itself, so a file pays only what it imports
beyond those. The child does the same (pre-import, then `DagBag(file)`) and reports both parts.

No database: the metadata DB URL points at a closed port, and a parse that touched it would fail.
Prints the load average with each round, then the headline last (target: <= +0.3 s per file).

    python bench/dag_parse_cost.py [--samples 10] [--dags DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.3
BARE = "bare import airflow.sdk"
DAGBAG = "DagBag machinery only"

CHILD = """
import importlib, json, sys, time
t0 = time.process_time()
from airflow.dag_processing.dagbag import DagBag
from airflow.utils.file import iter_airflow_imports
t1 = time.process_time()
out = {"dagbag_import_s": t1 - t0}
if len(sys.argv) > 1:
    path = sys.argv[1]
    for module in iter_airflow_imports(path):  # what the dag-processor's manager imports first
        importlib.import_module(module)
    t2 = time.process_time()
    bag = DagBag(dag_folder=path)
    t3 = time.process_time()
    if bag.import_errors or not bag.dag_ids:
        sys.exit(f"{path}: {bag.import_errors or 'no DAG'}")
    out |= {"pre_import_s": t2 - t1, "fill_s": t3 - t2, "dags": sorted(bag.dag_ids)}
print("RESULT " + json.dumps(out))
"""


def run_side(side: str, env: dict[str, str]) -> tuple[float, float, dict[str, float]]:
    """Wall-clock and CPU seconds (user + system) of one fresh process for `side`, and what the
    child measured inside (CPU seconds)."""
    if side == BARE:
        argv = [sys.executable, "-c", "import airflow.sdk"]
    elif side == DAGBAG:
        argv = [sys.executable, "-c", CHILD]
    else:
        argv = [sys.executable, "-c", CHILD, side]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        sys.exit(f"error: {side} failed:\n{done.stderr[-3000:]}")
    inside: dict[str, float] = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            inside = json.loads(line[len("RESULT ") :])
    return wall, cpu, inside


def paired(side: list[float], reference: list[float]) -> list[float]:
    """Per round, side minus the reference measured in the same round."""
    return [s - r for s, r in zip(side, reference, strict=True)]


def spread(values: list[float]) -> str:
    return f"{min(values):+.2f}..{max(values):+.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=10, help="rounds, alternating order (>= 10 for the goal)")
    ap.add_argument(
        "--dags", type=Path, default=ROOT / "dags", help="the DAG folder (default: the repository's)"
    )
    args = ap.parse_args()

    files = sorted(str(p) for p in args.dags.glob("*.py"))
    sides = [BARE, DAGBAG, *files]
    clocks: dict[str, dict[str, list[float]]] = {
        "wall": {s: [] for s in sides},
        "CPU": {s: [] for s in sides},
    }
    fills: dict[str, list[float]] = {f: [] for f in files}
    own_parse: dict[str, list[float]] = {f: [] for f in files}
    with tempfile.TemporaryDirectory(prefix="fleetval-parse-") as home:
        env = {
            **os.environ,
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(args.dags),
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            # Parsing needs no database: a closed port proves it (a parse that connected would fail).
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql+psycopg2://nobody@127.0.0.1:1/none",
        }
        run_side(BARE, env)  # warm the page cache and write the config once, outside the samples
        print(f"load average at start: {os.getloadavg()}")
        print(f"{len(files)} DAG files, {args.samples} rounds, one fresh process per side per round")
        for sample in range(args.samples):
            order = sides if sample % 2 == 0 else sides[::-1]
            for side in order:
                wall, cpu, inside = run_side(side, env)
                clocks["wall"][side].append(wall)
                clocks["CPU"][side].append(cpu)
                if side in fills:
                    fills[side].append(inside["fill_s"])
                    own_parse[side].append(inside["pre_import_s"] + inside["fill_s"])
            walls, cpus = clocks["wall"], clocks["CPU"]
            print(
                f"round {sample + 1:2d} ({'forward' if sample % 2 == 0 else 'reversed'}),"
                f" load {os.getloadavg()[0]:.2f}: wall/CPU s: bare"
                f" {walls[BARE][-1]:.2f}/{cpus[BARE][-1]:.2f},"
                f" DagBag only {walls[DAGBAG][-1]:.2f}/{cpus[DAGBAG][-1]:.2f}, files "
                + " ".join(f"{walls[f][-1]:.2f}/{cpus[f][-1]:.2f}" for f in files)
            )
    print(f"load average at end: {os.getloadavg()}")
    for clock, runs in clocks.items():
        bare = runs[BARE]
        dagbag = paired(runs[DAGBAG], bare)
        print(
            f"\n{clock} seconds: bare `import airflow.sdk` median {statistics.median(bare):.2f}"
            f" [{min(bare):.2f}..{max(bare):.2f}]; DagBag machinery, no file, over bare"
            f" {statistics.median(dagbag):+.2f} [{spread(dagbag)}] (Airflow's own, paid by every file)"
        )
        for f in files:
            diff = paired(runs[f], bare)
            med = statistics.median(diff)
            over_dagbag = statistics.median(paired(runs[f], runs[DAGBAG]))
            print(
                f"  {Path(f).name:34s} over bare {med:+.2f} [{spread(diff)}]  over DagBag machinery"
                f" {over_dagbag:+.2f}  {'MISS' if med > TARGET_S else 'ok'}"
            )
    print("\ninside each file's process (CPU s, median): the file's own parse (pre-import + DagBag fill),")
    print(
        "and what the dag-processor pays per parse (the fill; its manager pre-imported the file's airflow.*)"
    )
    for f in files:
        print(
            f"  {Path(f).name:34s} own parse {statistics.median(own_parse[f]):.3f}"
            f"  in the dag-processor {statistics.median(fills[f]):.3f}"
        )
    headline = []
    for clock, runs in clocks.items():
        diffs = {Path(f).name: statistics.median(paired(runs[f], runs[BARE])) for f in files}
        worst = max(diffs, key=lambda name: diffs[name])
        misses = [name for name, d in diffs.items() if d > TARGET_S]
        headline.append(
            f"{clock}: {len(files) - len(misses)} of {len(files)} within +{TARGET_S} s, worst {worst}"
            f" {diffs[worst]:+.2f} s"
        )
    print(
        f"DAG parse over bare import, per file, fresh process (median of {args.samples} paired rounds): "
        + "; ".join(headline)
    )


if __name__ == "__main__":
    main()
