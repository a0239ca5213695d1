"""DAG parse cost per file: each DAG file through a `DagBag` in a fresh interpreter, against a bare
`import airflow.sdk` in a fresh interpreter, and against reference DAG files, over several
alternating rounds.

Each round starts one fresh process per side: the bare `import airflow.sdk` (the reference the
target is set against); `DagBag` imported but given no file (Airflow's parsing machinery before
any DAG file); `DagBag(<file>)` over three reference DAG files written for the bench — an empty
DAG (one `@dag`, no task), a DAG with one `@task`, a DAG with one `@task` and one
KubernetesPodOperator (what any DAG using those features costs, whoever wrote it) — and over each
DAG file. Rounds alternate the order (forward, then reversed), so a drift in the machine's load
hits every side alike. Per file it prints the median of the paired differences (file − reference
of the same round) and their spread, in the child's CPU seconds (user + system: what the parse
costs the machine, less moved by other work on a shared machine than the wall clock) and in wall
seconds: over the bare import (the goal as posed), over the empty DAG, and over the reference
with the same features (the KubernetesPodOperator one when the file names the operator's module,
else the `@task` one): what the file itself adds.

Inside each file's process it also times what the dag-processor pays per file: its manager
imports the `airflow.*` modules a DAG file names at top level (`parsing_pre_import_modules`, on
by default) and forks the file's parse from itself, so a parse pays only what the file imports
beyond those. The child does the same (pre-import, then `DagBag(file)`) and reports, in CPU
seconds, the pre-import, then of the parse: the `fleetval` / `fleetval_airflow` modules the file
names (imported first, timed alone) and the rest (running the file, building the DAG).

No database: the metadata DB URL points at a closed port, and a parse that touched it would fail.
Prints the load average with each round, then the headline last (target: <= +0.3 s per file over
the bare import).

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
KPO_MODULE = "airflow.providers.cncf.kubernetes.operators.pod"

REFERENCES = {
    "empty DAG": """
from airflow.sdk import dag


@dag(schedule=None)
def reference_empty() -> None:
    pass


reference_empty()
""",
    "one @task": """
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.sdk import dag, task


@dag(schedule=None)
def reference_task() -> None:
    @task
    def one() -> None:
        pass

    one()


reference_task()
""",
    "one @task + KubernetesPodOperator": """
import airflow.providers.cncf.kubernetes.operators.pod  # noqa: F401
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import dag, task


@dag(schedule=None)
def reference_kpo() -> None:
    @task
    def one() -> None:
        pass

    one() >> KubernetesPodOperator(task_id="pod", name="pod", image="busybox", cmds=["true"])


reference_kpo()
""",
}

CHILD = """
import ast, importlib, json, sys, time
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
    ours = []
    for node in ast.parse(open(path, "rb").read()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            ours += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            ours += [a.name for a in node.names]
    for module in ours:
        if module.split(".")[0] in ("fleetval", "fleetval_airflow"):
            try:
                importlib.import_module(module)
            except ModuleNotFoundError:  # `from pkg import name`: a name, not a module
                pass
    t3 = time.process_time()
    bag = DagBag(dag_folder=path)
    t4 = time.process_time()
    if bag.import_errors or not bag.dag_ids:
        sys.exit(f"{path}: {bag.import_errors or 'no DAG'}")
    out |= {"pre_import_s": t2 - t1, "ours_s": t3 - t2, "rest_s": t4 - t3, "dags": sorted(bag.dag_ids)}
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


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=10, help="rounds, alternating order (>= 10 for the goal)")
    ap.add_argument(
        "--dags", type=Path, default=ROOT / "dags", help="the DAG folder (default: the repository's)"
    )
    args = ap.parse_args()

    files = sorted(str(p) for p in args.dags.glob("*.py"))
    with tempfile.TemporaryDirectory(prefix="fleetval-parse-") as home:
        refs = {}
        for name, source in REFERENCES.items():
            path = Path(home) / f"reference_{len(refs)}.py"
            path.write_text(source)
            refs[name] = str(path)
        sides = [BARE, DAGBAG, *refs.values(), *files]
        label = (
            {BARE: BARE, DAGBAG: DAGBAG} | {p: n for n, p in refs.items()} | {f: Path(f).name for f in files}
        )
        clocks: dict[str, dict[str, list[float]]] = {
            "CPU": {s: [] for s in sides},
            "wall": {s: [] for s in sides},
        }
        inside: dict[str, dict[str, list[float]]] = {
            s: {"pre_import_s": [], "ours_s": [], "rest_s": []} for s in [*refs.values(), *files]
        }
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
        print(f"load average at start: {load()}")
        print(
            f"{len(files)} DAG files, {len(refs)} reference DAGs, {args.samples} rounds,"
            " one fresh process per side"
        )
        for sample in range(args.samples):
            order = sides if sample % 2 == 0 else sides[::-1]
            for side in order:
                wall, cpu, measured = run_side(side, env)
                clocks["wall"][side].append(wall)
                clocks["CPU"][side].append(cpu)
                if side in inside:
                    for key, values in inside[side].items():
                        values.append(measured[key])
            cpus = clocks["CPU"]
            print(
                f"round {sample + 1:2d} ({'forward' if sample % 2 == 0 else 'reversed'}), load {load()}:"
                f" CPU s: bare {cpus[BARE][-1]:.2f}, DagBag only {cpus[DAGBAG][-1]:.2f}, references "
                + " ".join(f"{cpus[p][-1]:.2f}" for p in refs.values())
                + ", files "
                + " ".join(f"{cpus[f][-1]:.2f}" for f in files)
            )
    print(f"load average at end: {load()}")

    def feature_reference(path: str) -> str:
        return refs[
            "one @task + KubernetesPodOperator" if KPO_MODULE in Path(path).read_text() else "one @task"
        ]

    for clock, runs in clocks.items():
        bare = runs[BARE]
        print(
            f"\n{clock} seconds, fresh process: bare `import airflow.sdk`"
            f" median {statistics.median(bare):.2f}"
            f" [{min(bare):.2f}..{max(bare):.2f}]; over it (median [spread] of the paired differences):"
        )
        for side in [DAGBAG, *refs.values()]:
            diff = paired(runs[side], bare)
            print(f"  {label[side]:36s} {statistics.median(diff):+.2f} [{spread(diff)}]")
        print(f"  {'DAG file':36s} {'over bare':>19s} {'over empty DAG':>15s} {'over its features':>19s}")
        for f in files:
            diff = paired(runs[f], bare)
            empty = paired(runs[f], runs[refs["empty DAG"]])
            ref = feature_reference(f)
            feat = paired(runs[f], runs[ref])
            print(
                f"  {label[f]:36s} {statistics.median(diff):+.2f} [{spread(diff)}]"
                f" {statistics.median(empty):+15.2f} {statistics.median(feat):+8.2f} ({label[ref]})"
                f"  {'MISS' if statistics.median(diff) > TARGET_S else 'ok'}"
            )
    print(
        "\nin the dag-processor (CPU s, median): the manager pre-imports the file's airflow.* modules;"
        " a parse"
    )
    print("then pays fleetval's modules the file names, and the rest (running the file, building the DAG)")
    for side in [*refs.values(), *files]:
        m = {k: statistics.median(v) for k, v in inside[side].items()}
        print(
            f"  {label[side]:36s} pre-import {m['pre_import_s']:.3f}"
            f"  per parse {m['ours_s'] + m['rest_s']:.3f}"
            f" (fleetval modules {m['ours_s']:.3f}, rest {m['rest_s']:.3f})"
        )
    headline = []
    for clock, runs in clocks.items():
        diffs = {label[f]: statistics.median(paired(runs[f], runs[BARE])) for f in files}
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
