"""The checkpoint drill's plan: which runs, with which settings, interrupted how. Pure data; the
local runner (`fleetval.ckpt.local`) and the `checkpoint_resume_drill` DAG carry it out.

Runs, each in its own checkpoint directory under the drill's root:

- `reference`: N steps, uninterrupted. Its losses and state digests are what every resume must
  reproduce; its save times are the save-time evidence.
- `kill_in_save`: paused inside the save of step `kill_in_save_at` and killed there (SIGKILL, or a
  pod deleted with no grace period), then resumed to N.
- `sigterm`: held after step `hold_at_step` and sent SIGTERM with a grace period (a pod deleted
  with `gracePeriodSeconds`), then resumed to N.
- `corrupt`: run to `corrupt_after`, the newest checkpoint damaged, then resumed to N.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final

from fleetval.ckpt import contract
from fleetval.ckpt.judge import CORRUPT, KILL, SIGTERM
from fleetval.errors import FleetvalError

REFERENCE: Final = "reference"
RESUME_SUFFIX: Final = ".resume"
DEFAULT_STEPS: Final = contract.DEFAULT_STEPS
DEFAULT_GRACE_S: Final = contract.DEFAULT_GRACE_S


class DrillPlanError(FleetvalError):
    pass


@dataclass(frozen=True, slots=True)
class DrillPlan:
    steps: int = DEFAULT_STEPS
    save_every: int = 50
    kill_in_save_at: int = 100
    hold_at_step: int = 75
    corrupt_after: int = 100
    grace_s: float = DEFAULT_GRACE_S
    seed: int = 0
    run_timeout_s: float = 600.0
    step_ms: int = contract.DEFAULT_STEP_MS

    @classmethod
    def for_steps(cls, steps: int, **overrides: Any) -> DrillPlan:
        """A plan scaled to `steps`: saves every third of the run, the kill in the second save,
        the preemption and the corruption between and at it."""
        if steps < 6:
            raise DrillPlanError(f"a drill needs at least 6 steps (two saves before the last), not {steps}")
        every = steps // 3
        values: dict[str, Any] = {
            "steps": steps,
            "save_every": every,
            "kill_in_save_at": 2 * every,
            "hold_at_step": every + max(1, every // 2),
            "corrupt_after": 2 * every,
            **overrides,
        }
        plan = cls(**values)
        plan.check()
        return plan

    def check(self) -> None:
        if self.save_every < 1 or self.steps < 1:
            raise DrillPlanError("steps and save_every must be positive")
        for name, at in (("kill_in_save_at", self.kill_in_save_at), ("corrupt_after", self.corrupt_after)):
            if at % self.save_every or not self.save_every < at < self.steps:
                raise DrillPlanError(
                    f"{name}={at} must be a save step after the first save and before the last step "
                    f"(a multiple of save_every={self.save_every} in ({self.save_every}, {self.steps}))"
                )
        if not 0 < self.hold_at_step < self.steps or self.hold_at_step % self.save_every == 0:
            raise DrillPlanError(
                f"hold_at_step={self.hold_at_step} must be between saves and before the last step"
            )
        if self.grace_s <= 0:
            raise DrillPlanError("grace_s must be positive")
        if self.step_ms < 0:
            raise DrillPlanError("step_ms must not be negative")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def env(self, run: str, directory: str, faults: tuple[str, ...] = ()) -> dict[str, str]:
        """The environment of one run (`run` is a scenario name, or one with RESUME_SUFFIX)."""
        scenario = run.removesuffix(RESUME_SUFFIX)
        resumed = run.endswith(RESUME_SUFFIX)
        steps = self.steps
        values = {
            contract.ENV_DIR: directory,
            contract.ENV_SAVE_EVERY: str(self.save_every),
            contract.ENV_SEED: str(self.seed),
        }
        if self.step_ms:
            values[contract.ENV_STEP_MS] = str(self.step_ms)
        if not resumed:
            if scenario == KILL:
                values[contract.ENV_PAUSE_IN_SAVE] = str(self.kill_in_save_at)
            elif scenario == SIGTERM:
                values[contract.ENV_HOLD_AT_STEP] = str(self.hold_at_step)
            elif scenario == CORRUPT:
                steps = self.corrupt_after
            elif scenario != REFERENCE:
                raise DrillPlanError(f"unknown drill run {run!r}")
        values[contract.ENV_STEPS] = str(steps)
        if faults:
            values[contract.ENV_FAULTS] = ",".join(faults)
        return values


def fault_flags(kinds: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`ckpt.slow_save` → `slow_save`; an unknown kind is an error that lists the known ones."""
    flags = []
    for kind in kinds:
        flag = kind.removeprefix(contract.FAULT_PREFIX)
        if flag not in contract.FAULTS:
            known = ", ".join(contract.FAULT_PREFIX + f for f in contract.FAULTS)
            raise DrillPlanError(f"unknown checkpoint fault {kind!r}; known: {known}")
        flags.append(flag)
    return tuple(dict.fromkeys(flags))
