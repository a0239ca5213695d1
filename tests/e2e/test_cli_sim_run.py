"""`fleetval sim run` runs the same DAGs as production: it serves the fleet as a Kubernetes API,
starts a local Airflow against it, triggers the suite's DAG and prints the verdicts of that run.
(Each suite's conf and first step: tests/fleetval/test_cli.py; the nccl reference step on a
running Airflow: tests/e2e/test_nccl_dags.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.paths import ROOT

MINI = ROOT / "include" / "fleetval" / "sim" / "fleets" / "mini.yaml"

# Minutes of Airflow waves: in make test-all, not in make test (CI stays under 20 min).
pytestmark = pytest.mark.e2e_long


def sim_run(fleet: Path, pg_url: str, cwd: Path, *options: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "fleetval.cli", "sim", "run", str(fleet), "--db", pg_url, *options],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data: dict[str, Any] = json.loads(out.stdout)
    assert data["airflow_state"] == "success"
    return data


def test_sim_run_weekly_runs_the_dags(pg_url: str, tmp_path: Path) -> None:
    budgets = ["--max-fleet-fraction", "1", "--max-rack-fraction", "1", "--max-action-fraction", "1"]
    data = sim_run(MINI, pg_url, tmp_path, "--suite", "weekly", *budgets)
    assert data["run_key"].startswith("weekly_health_sweep/manual__")
    node = {v["subject"]: v["result"] for v in data["verdicts"] if v["criterion"] == "D-DEV-03"}
    assert node == {
        "r01-n01": "pass",
        "r01-n02": "fail",
        "r01-n03": "pass",
        "r01-n04": "pass",
        "cluster": "pass",
    }
