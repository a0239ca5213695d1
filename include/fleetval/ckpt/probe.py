"""The drill on a cluster: one pod per run on the platform's storage (a PersistentVolumeClaim),
and the evidence read back from what the pods printed. Pure: specs out, evidence in.

Pods (`ProbeSpec`, run by the `checkpoint_resume_drill` DAG as KubernetesPodOperator tasks), all
on one node and one claim, each scenario in its own directory `/ckpt/<drill>/<scenario>`:

    reference                                  the training image, N steps
    kill_in_save, sigterm, corrupt             the training image, interrupted (see drill.py)
    corrupt.damage                             the drill image's fleetval-ckpt-corrupt
    <scenario>.inspect                         the drill image's fleetval-ckpt-inspect
    <scenario>.resume                          the training image, resumed to N

The kill and the preemption are pod deletions (grace period 0, and the drill's grace period),
made by the DAG's interrupter tasks, which follow the interrupted pod's log and keep it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Final

from fleetval.ckpt import contract
from fleetval.ckpt.drill import REFERENCE, RESUME_SUFFIX, DrillPlan
from fleetval.ckpt.judge import (
    CORRUPT,
    KILL,
    SIGTERM,
    DrillEvidence,
    Interruption,
    RunRecord,
    ScenarioEvidence,
)
from fleetval.ckpt.parse import parse_listing, parse_run_log
from fleetval.errors import ParseError
from fleetval.probes.pod import CLAIM_MOUNT, ProbeSpec

TOOL: Final = "ckpt"
SUITE: Final = "ckpt"
INSPECT_SUFFIX: Final = ".inspect"
DAMAGE: Final = f"{CORRUPT}.damage"
INTERRUPTED: Final = (KILL, SIGTERM)


@dataclass(frozen=True, slots=True)
class DrillTarget:
    """What is drilled: the training image (the reference job by default), where, on what storage."""

    node: str
    claim: str
    image: str = contract.DRILL_IMAGE
    command: tuple[str, ...] = ()  # empty: the image's entrypoint
    gpus: int = 0
    tool_image: str = contract.DRILL_IMAGE  # the inspect and corrupt tools

    def subject(self) -> str:
        return f"{self.image}@{self.claim}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "command": list(self.command)}


def drill_id(run_key: str) -> str:
    """A short directory name for one drill (a run key has characters a path should not)."""
    return "drill-" + hashlib.sha256(run_key.encode()).hexdigest()[:12]


def run_names() -> list[str]:
    names = [REFERENCE]
    for scenario in (KILL, SIGTERM, CORRUPT):
        names.append(scenario)
        if scenario == CORRUPT:
            names.append(DAMAGE)
        names += [scenario + INSPECT_SUFFIX, scenario + RESUME_SUFFIX]
    return names


def drill_specs(run_key: str, plan: DrillPlan, target: DrillTarget) -> dict[str, ProbeSpec]:
    """One ProbeSpec per pod of the drill, by run name (`run_names()`)."""
    root = f"{CLAIM_MOUNT}/{drill_id(run_key)}"
    specs: dict[str, ProbeSpec] = {}
    for name in run_names():
        scenario = name.split(".")[0]
        directory = f"{root}/{scenario}"
        tool_run = name.endswith(INSPECT_SUFFIX) or name == DAMAGE
        spec = ProbeSpec(
            probe_key=f"{run_key}/{name}",
            tool=TOOL,
            node=target.node,
            image=target.image,
            command=target.command,
            env={} if tool_run else plan.env(name, directory),
            gpus=target.gpus,
            timeout_s=int(plan.run_timeout_s),
            params={"run": name, "scenario": scenario, "directory": directory},
            claim=target.claim,
        )
        if tool_run:
            tool = contract.INSPECT_COMMAND if name.endswith(INSPECT_SUFFIX) else contract.CORRUPT_COMMAND
            spec = replace(spec, image=target.tool_image, command=(*tool, directory), env={}, gpus=0)
        specs[name] = spec
    return specs


@dataclass(frozen=True, slots=True)
class StoredRun:
    """What the store holds for one pod: its raw output, exit code and harness error."""

    raw: str
    exit_code: int | None
    error: str | None


def _record(stored: StoredRun | None) -> RunRecord:
    if stored is None:
        return RunRecord(parse_run_log(""), None, "its task left no output")
    return RunRecord(parse_run_log(stored.raw), stored.exit_code, stored.error)


def evidence(
    plan: DrillPlan,
    target: DrillTarget,
    stored: Mapping[str, StoredRun],
    interruptions: Mapping[str, Mapping[str, Any]],
) -> DrillEvidence:
    """The drill's evidence from the stored pod outputs and the interrupters' reports."""
    scenarios: dict[str, ScenarioEvidence] = {}
    for scenario in (KILL, SIGTERM, CORRUPT):
        listing, listing_error = None, None
        inspected = stored.get(scenario + INSPECT_SUFFIX)
        if inspected is None or inspected.error:
            listing_error = inspected.error if inspected else "the inspect pod left no output"
        else:
            try:
                listing = parse_listing(inspected.raw)
            except ParseError as exc:
                listing_error = str(exc)
        if scenario == CORRUPT:
            damage = stored.get(DAMAGE)
            corrupted: dict[str, Any] = {}
            if damage is not None and not damage.error:
                try:
                    found = json.loads(damage.raw.strip().splitlines()[-1])
                    corrupted = found if isinstance(found, dict) else {}
                except (ValueError, IndexError):
                    corrupted = {}
            interruption = Interruption(landed=bool(corrupted.get("checkpoint")), corrupted=corrupted)
        else:
            report = interruptions.get(scenario) or {}
            interruption = Interruption(
                landed=bool(report.get("landed")),
                at_step=report.get("at_step"),
                grace_s=report.get("grace_s"),
                seconds_to_exit=report.get("seconds_to_exit"),
                killed_after_grace=bool(report.get("killed_after_grace")),
            )
        scenarios[scenario] = ScenarioEvidence(
            _record(stored.get(scenario)),
            interruption,
            listing,
            _record(stored.get(scenario + RESUME_SUFFIX)),
            listing_error,
        )
    return DrillEvidence(target.subject(), plan.steps, _record(stored.get(REFERENCE)), scenarios)
