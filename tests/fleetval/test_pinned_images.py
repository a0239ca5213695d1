"""The pinned images are one list: the deployment guide's mirror table is that list, each tool runs
its pinned image by default, and reading the settings loads no tool package."""

from __future__ import annotations

import re
import subprocess
import sys

from fleetval import pinned_images
from fleetval.ckpt.contract import DRILL_IMAGE
from fleetval.dcgm.probe import dcgm_diag_probe
from fleetval.gpu_operator.isolation import isolation_probe
from fleetval.kueue.job import JOB_IMAGE
from fleetval.mig.isolation import PROBE_IMAGE as MIG_PROBE_IMAGE
from fleetval.nccl.probe import NCCL_TESTS_IMAGE
from fleetval.settings import Settings
from tests.paths import ROOT

_ROW = re.compile(r"^\| `([^`]+)` \| (.+?) \| (.+?) \|$")


def mirror_table() -> list[tuple[str, str, str]]:
    text = (ROOT / "docs" / "deployment.md").read_text()
    section = text.split("## Images to mirror", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if (match := _ROW.match(line)) is not None:
            image, runs, override = match.groups()
            whole_code = override.startswith("`") and override.count("`") == 2  # `FLEETVAL_…`
            rows.append((image, runs, override[1:-1] if whole_code else override))
    return rows


def test_the_deployment_guides_mirror_table_is_the_pinned_list() -> None:
    assert mirror_table() == [(p.ref, p.runs, p.override) for p in pinned_images.PINNED_IMAGES]


def test_each_tool_runs_its_pinned_image_by_default() -> None:
    assert dcgm_diag_probe("n1", level=2, gpus=8, run_key="k").image == pinned_images.DCGM_IMAGE
    assert isolation_probe("n1", "p", run_key="k").image == pinned_images.NCCL_TESTS_IMAGE
    assert NCCL_TESTS_IMAGE == pinned_images.NCCL_TESTS_IMAGE
    assert MIG_PROBE_IMAGE == pinned_images.MIG_WORKLOAD_IMAGE
    assert JOB_IMAGE == pinned_images.KUEUE_JOB_IMAGE
    assert DRILL_IMAGE == pinned_images.CKPT_DRILL_IMAGE
    defaults = Settings.from_env({})
    assert (defaults.dcgm_image, defaults.nccl_image) == (
        pinned_images.DCGM_IMAGE,
        pinned_images.NCCL_TESTS_IMAGE,
    )
    overridden = Settings.from_env({"FLEETVAL_DCGM_IMAGE": "mirror.example/dcgm:4.6.0-1-ubuntu24.04"})
    assert overridden.dcgm_image == "mirror.example/dcgm:4.6.0-1-ubuntu24.04"


def test_reading_the_settings_loads_no_tool_package() -> None:
    script = (
        "import sys, fleetval.settings; print(sorted(m for m in sys.modules if m.startswith('fleetval')))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['fleetval', 'fleetval.pinned_images', 'fleetval.settings']"
    assert (
        "kubernetes"
        not in subprocess.run(
            [sys.executable, "-c", "import sys, fleetval.settings; print(' '.join(sys.modules))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    )
