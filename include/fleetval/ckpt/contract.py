"""The checkpoint drill contract: what a training image must do for fleetval to drill it.

The reference job (`jobs/ckpt-reference`, package `fleetval_ckpt_job`) follows it; a platform's
own training image can too (docs/checkpoint.md, "Checkpoint drill contract").

- Configuration from the environment: `FLEETVAL_CKPT_DIR` (the checkpoint directory, on the
  storage under test), `FLEETVAL_STEPS` (train until this step, resuming if a checkpoint exists),
  `FLEETVAL_SAVE_EVERY`, and two optional drill hooks: `FLEETVAL_PAUSE_IN_SAVE` (during the save
  of that step, after the first file is written, print `save_paused` and wait, so a kill lands
  inside the write) and `FLEETVAL_HOLD_AT_STEP` (after that step, print `holding` and wait for a
  signal, so a preemption lands at a known step), and `FLEETVAL_STEP_MS` (a step takes at least
  this long: the reference job's toy step is milliseconds of CPU, and D-JOB-CKPT-05 judges a save
  against the training between two saves, which only means something at a real step's length).
- One JSON object per line on stdout (other lines are ignored): per step `{"step", "loss",
  "seconds", "state": {component: digest}}`; events `start` (`from_step`, and `state` when it
  resumed), `save_started`, `save_paused`, `checkpoint_saved` (`step`, `path`, `seconds`,
  `reason`), `checkpoint_rejected` (`path`, `reason`), `holding`, `sigterm`, `done`.
- Storage: `step-<8 digits>/` directories with a `manifest.json` listing every file's size and
  sha256 and the state components saved, and a `latest` file naming the newest complete one.
- Signals: on SIGTERM, finish the step, save, exit 0 within the grace period.
"""

from __future__ import annotations

from typing import Final

from fleetval.pinned_images import CKPT_DRILL_IMAGE

ENV_DIR: Final = "FLEETVAL_CKPT_DIR"
ENV_STEPS: Final = "FLEETVAL_STEPS"
ENV_SAVE_EVERY: Final = "FLEETVAL_SAVE_EVERY"
ENV_SEED: Final = "FLEETVAL_SEED"
ENV_PAUSE_IN_SAVE: Final = "FLEETVAL_PAUSE_IN_SAVE"
ENV_HOLD_AT_STEP: Final = "FLEETVAL_HOLD_AT_STEP"
ENV_STEP_MS: Final = "FLEETVAL_STEP_MS"
ENV_FAULTS: Final = "FLEETVAL_CKPT_FAULTS"  # the reference job's deliberate defects only
# The drill's defaults (a DAG file reads them at parse time: kept here, away from the judge).
DEFAULT_STEPS: Final = 150
DEFAULT_GRACE_S: Final = 30.0
# 40 ms: a save every 50 steps is then 2 s of training, against which a healthy save (~50 ms with
# its fsyncs; a few hundred on a loaded 2-core machine) is a few per cent and a stalled one is not.
DEFAULT_STEP_MS: Final = 40

COMPONENTS: Final = ("model", "optimizer", "lr_scheduler", "rng", "data_loader")
# The fleet spec's job-layer fault kinds are "ckpt." + one of these (the reference job's flags).
FAULTS: Final = (
    "non_atomic",
    "missing_optimizer",
    "skip_step",
    "no_sigterm_save",
    "slow_save",
    "no_integrity_check",
)
FAULT_PREFIX: Final = "ckpt."

MANIFEST: Final = "manifest.json"
MANIFEST_FORMAT: Final = "fleetval-ckpt/1"
LISTING_FORMAT: Final = "fleetval-ckpt-listing/1"

DRILL_IMAGE: Final = CKPT_DRILL_IMAGE
TRAIN_COMMAND: Final = ("fleetval-ckpt-train",)
INSPECT_COMMAND: Final = ("fleetval-ckpt-inspect",)
CORRUPT_COMMAND: Final = ("fleetval-ckpt-corrupt",)
# The local drill calls the same tools in-process through these entry points.
TRAIN_ENTRY: Final = "fleetval_ckpt_job.train:entrypoint"
INSPECT_ENTRY: Final = "fleetval_ckpt_job.storage:inspect_main"
CORRUPT_ENTRY: Final = "fleetval_ckpt_job.storage:corrupt_main"


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def checkpoint_step(name: str) -> int | None:
    prefix, _, digits = name.partition("-")
    if prefix != "step" or len(digits) != 8 or not digits.isdigit():
        return None
    return int(digits)
