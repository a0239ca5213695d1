"""DAG parse cost: parsing all DAG files vs a bare `import airflow.sdk`, each in a fresh
interpreter, median of 5 runs. Prints the extra seconds last (target <= +0.5 s)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = 5


def timed(code: str, env: dict[str, str]) -> float:
    samples = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT, capture_output=True)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    with tempfile.TemporaryDirectory() as home:
        env = {
            **os.environ,
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        }
        subprocess.run([sys.executable, "-c", "import airflow.sdk"], check=True, env=env, capture_output=True)
        files = sorted(str(p) for p in (ROOT / "dags").glob("*.py"))
        bare = timed("import airflow.sdk", env)
        parse_all = timed(f"import runpy\nfor f in {files!r}: runpy.run_path(f)", env)
    print(f"bare `import airflow.sdk`: {bare:.2f}s (median of {RUNS})")
    print(f"all {len(files)} DAG files:     {parse_all:.2f}s (median of {RUNS})")
    print(f"DAG parse cost over bare import: {parse_all - bare:+.2f}s (target <= +0.5 s)")


if __name__ == "__main__":
    main()
