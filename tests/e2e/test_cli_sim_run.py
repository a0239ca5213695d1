"""`fleetval sim run --suite weekly` runs the same DAGs as production: it serves the fleet as a
Kubernetes API, starts a local Airflow against it, triggers `weekly_health_sweep` and prints the
verdicts of that run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.paths import ROOT

MINI = ROOT / "include" / "fleetval" / "sim" / "fleets" / "mini.yaml"


def test_sim_run_weekly_runs_the_dags(pg_url: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetval.cli",
            "sim",
            "run",
            str(MINI),
            "--db",
            pg_url,
            "--suite",
            "weekly",
            "--max-fleet-fraction",
            "1",
            "--max-rack-fraction",
            "1",
            "--max-action-fraction",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["airflow_state"] == "success" and data["run_key"].startswith("weekly_health_sweep/manual__")
    node = {v["subject"]: v["result"] for v in data["verdicts"] if v["criterion"] == "D-DEV-03"}
    assert node == {
        "r01-n01": "pass",
        "r01-n02": "fail",
        "r01-n03": "pass",
        "r01-n04": "pass",
        "cluster": "pass",
    }
