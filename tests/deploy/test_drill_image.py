"""The checkpoint drill image (jobs/ckpt-reference): what it copies exists, its entry point is the
job's script, it runs unprivileged, and hadolint passes."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib

from fleetval.ckpt import contract
from tests.paths import ROOT

JOB = ROOT / "jobs" / "ckpt-reference"


def test_the_drill_image_installs_the_job_whose_scripts_the_drill_calls() -> None:
    text = (JOB / "Dockerfile").read_text()
    for m in re.finditer(r"^COPY (?:--\S+ )*(.+) \S+$", text, re.M):
        for path in m.group(1).split():
            assert (JOB / path).exists(), f"COPY {path}: no such file"
    scripts = tomllib.loads((JOB / "pyproject.toml").read_text())["project"]["scripts"]
    for command in (contract.TRAIN_COMMAND, contract.INSPECT_COMMAND, contract.CORRUPT_COMMAND):
        assert command[0] in scripts
    assert scripts["fleetval-ckpt-train"] == contract.TRAIN_ENTRY
    assert f'ENTRYPOINT ["{contract.TRAIN_COMMAND[0]}"]' in text
    assert re.search(r"^USER [1-9]\d*", text, re.M), "the job runs as a non-root user"


def test_the_drill_image_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(ROOT / ".venv" / "bin" / "hadolint")
    result = subprocess.run([hadolint, "--no-color", "Dockerfile"], cwd=JOB, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_reference_job_reads_every_setting_the_drill_sets() -> None:
    source = (JOB / "src" / "fleetval_ckpt_job" / "train.py").read_text()
    for name in (n for n in dir(contract) if n.startswith("ENV_")):
        assert f'"{getattr(contract, name)}"' in source, name
    assert all(f'"{fault}"' in source for fault in contract.FAULTS)
