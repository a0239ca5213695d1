"""Bench: the checkpoint drill's wall time (`fleetval drill run`, what a QA engineer runs) vs the
training it contains, run as one plain process.

Side A: `fleetval drill run` with the reference job (seven runs: reference, killed inside a save,
preempted with SIGTERM, corrupted, and three resumes; inspect and corrupt tools; the judges).
Side B: the same job trained uninterrupted for as many steps as the drill's runs train in total
(the reference job's own process, PyTorch import included), on the same disk.

The sides alternate (A B, B A, ...) for `--samples` rounds; medians are compared. The load average
is printed before and after. The ratio A/B is the last line: what the drill costs over the training
it has to do anyway. Measured, not asserted.

    .venv/bin/python bench/ckpt_drill.py [--samples 3] [--steps 150]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleetval.ckpt.drill import DrillPlan

ROOT = Path(__file__).resolve().parents[1]
FLEETVAL = ROOT / ".venv" / "bin" / "fleetval"


def drill_steps(plan: DrillPlan) -> int:
    """Steps the drill trains: the reference run, each interrupted run up to its interruption,
    each resume from the checkpoint it falls back to (see fleetval.ckpt.drill)."""
    kill = plan.kill_in_save_at + (plan.steps - (plan.kill_in_save_at - plan.save_every))
    sigterm = plan.hold_at_step + (plan.steps - plan.hold_at_step)
    corrupt = plan.corrupt_after + (plan.steps - (plan.corrupt_after - plan.save_every))
    return plan.steps + kill + sigterm + corrupt


def run_drill(steps: int) -> float:
    started = time.monotonic()
    out = subprocess.run(
        [str(FLEETVAL), "drill", "run", "--steps", str(steps)], capture_output=True, text=True
    )
    elapsed = time.monotonic() - started
    if out.returncode != 0:
        sys.exit(f"drill failed: {out.stderr}")
    results = {v["criterion"]: v["result"] for v in json.loads(out.stdout)["verdicts"]}
    if set(results.values()) != {"pass"}:
        print(f"  note: not every criterion passed: {results}")
    return elapsed


def run_training(total_steps: int, save_every: int, step_ms: int) -> float:
    with tempfile.TemporaryDirectory(prefix="fleetval-bench-") as scratch:
        env = {
            **os.environ,
            "FLEETVAL_CKPT_DIR": scratch,
            "FLEETVAL_STEPS": str(total_steps),
            "FLEETVAL_SAVE_EVERY": str(save_every),
            "FLEETVAL_STEP_MS": str(step_ms),  # paced as the drill paces them
        }
        started = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "fleetval_ckpt_job.train"], env=env, capture_output=True, text=True
        )
        elapsed = time.monotonic() - started
        if out.returncode != 0:
            sys.exit(f"training failed: {out.stderr[-500:]}")
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    plan = DrillPlan() if args.steps == DrillPlan().steps else DrillPlan.for_steps(args.steps)
    total = drill_steps(plan)
    print(f"load average before: {os.getloadavg()}")
    print(
        f"drill: {plan.steps} steps per run, {total} steps trained in all; baseline: {total} steps in one run"
    )
    drills, trainings = [], []
    for i in range(args.samples):
        order = ("drill", "train") if i % 2 == 0 else ("train", "drill")
        for side in order:
            if side == "drill":
                drills.append(run_drill(plan.steps))
            else:
                trainings.append(run_training(total, plan.save_every, plan.step_ms))
        print(f"  sample {i + 1}: drill {drills[-1]:.2f} s, training alone {trainings[-1]:.2f} s")
    print(f"load average after: {os.getloadavg()}")
    drill, train = statistics.median(drills), statistics.median(trainings)
    print(f"drill median {drill:.2f} s; the same training in one process {train:.2f} s")
    print(f"drill wall time / training alone = {drill / train:.2f} ({drill:.2f} s / {train:.2f} s)")


if __name__ == "__main__":
    main()
