"""The weekly idle-node health sweep (D-DEV-03, D-DEV-04): DCGM r2 on every idle GPU node, in
waves that respect the diagnosis budget; failures are cordoned and quarantined within the action
budget; a coverage verdict says which nodes were not swept and why.

The `weekly_health_sweep` DAG is the only sequencing of these steps: it plans the waves once
per run (a rerun keeps the first attempt's plan), and each wave is a run of
`weekly_health_sweep_wave`, one probe pod task per node, then one judge step for the wave.
`fleetval sim run --suite weekly` runs the same DAGs against the simulated cluster.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.dcgm import steps as dcgm_steps
from fleetval.dcgm.probe import dcgm_diag_probe
from fleetval.nodes import NodeActions, NodeInfo
from fleetval.policy.blast_radius import ActionBudget, DiagnosisBudget, plan_waves
from fleetval.probes import outputs as probe_outputs
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Result, Verdict
from fleetval.remediation import BUDGET_EVENT_KIND, budget_taken, take_actions
from fleetval.store.repository import Store

LEVEL: Final = 2
GATE: Final = "weekly"


@dataclass(frozen=True, slots=True)
class SweepPlan:
    waves: list[list[str]]
    skipped: dict[str, str]
    rack_of: dict[str, str]
    fleet_size: int
    rack_sizes: dict[str, int]
    gpus: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "waves": self.waves,
            "skipped": self.skipped,
            "rack_of": self.rack_of,
            "fleet_size": self.fleet_size,
            "rack_sizes": self.rack_sizes,
            "gpus": self.gpus,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SweepPlan:
        return cls(
            waves=[list(w) for w in data["waves"]],
            skipped=dict(data["skipped"]),
            rack_of=dict(data["rack_of"]),
            fleet_size=int(data["fleet_size"]),
            rack_sizes=dict(data["rack_sizes"]),
            gpus=dict(data["gpus"]),
        )


def why_not_idle(node: NodeInfo) -> str | None:
    """Why a node is not swept this week, or None when it is an idle GPU node."""
    if not node.is_gpu_node:
        return "no GPUs"
    if node.quarantined:
        return "quarantined"
    if node.onboarding:
        return "being onboarded (rack_onboarding)"
    if node.unschedulable:
        return "cordoned"
    if node.gpu_pods:
        return f"busy ({node.gpu_pods} GPU pods)"
    if node.allocatable_gpus is not None and node.allocatable_gpus < node.gpus:
        # A probe asks for every GPU; with one withdrawn (an Xid) it could never be scheduled.
        return "GPU withdrawn by the device plugin"
    return None


def plan_sweep(
    nodes: Sequence[NodeInfo], budget: DiagnosisBudget, *, max_waves: int, max_wave_size: int | None = None
) -> SweepPlan:
    """Idle GPU nodes in waves within `budget`; a wave holds at most `max_wave_size` nodes (one
    mapped probe task each) and there are at most `max_waves` waves (one mapped trigger each)."""
    gpu_nodes = [n for n in nodes if n.is_gpu_node]
    skipped = {n.name: reason for n in nodes if (reason := why_not_idle(n)) is not None}
    idle = [n.name for n in gpu_nodes if n.name not in skipped]
    rack_of = {n.name: n.rack for n in gpu_nodes}
    rack_sizes = dict(Counter(n.rack for n in gpu_nodes))
    waves = plan_waves(
        idle,
        rack_of,
        fleet_size=len(gpu_nodes),
        rack_sizes=rack_sizes,
        budget=budget,
        max_waves=max_waves,
        max_wave_size=max_wave_size,
    )
    return SweepPlan(waves, skipped, rack_of, len(gpu_nodes), rack_sizes, {n.name: n.gpus for n in gpu_nodes})


def wave_probes(
    plan: SweepPlan, wave_index: int, *, run_key: str, image: str | None = None
) -> list[ProbeSpec]:
    """One DCGM r2 probe per node of the wave, each requesting all the node's GPUs (capacity)."""
    extra = {"image": image} if image else {}
    return [
        dcgm_diag_probe(node, level=LEVEL, gpus=plan.gpus[node], run_key=run_key, **extra)
        for node in plan.waves[wave_index]
    ]


def judge_wave(
    store: Store,
    nodes: NodeActions,
    *,
    run_id: int,
    run_key: str,
    plan: SweepPlan,
    wave_index: int,
    action_budget: ActionBudget,
    dry_run: bool,
    as_of: dt.datetime,
    image: str | None = None,
) -> dict[str, Any]:
    """Judge the wave's stored probes, act, store verdicts and node events. A node whose probe
    never stored its output (its task failed before the pod completed) gets an `error` verdict,
    never a pass.

    One read (probes, the run's cordons), the judgement, the node patches, then one write of
    everything. A crash between the patches and the write leaves the store as this step found
    it: the retry re-judges the same stored raw output against the same cordons, so it plans
    the same actions within the same budget, repeats the patches (idempotent; none in dry-run)
    and records them then."""
    specs = wave_probes(plan, wave_index, run_key=run_key, image=image)
    stored = store.judgement_inputs(run_id, [s.probe_key for s in specs], event_kind=BUDGET_EVENT_KIND)
    missing = probe_outputs.missing_probe_outputs(
        specs, {p["probe_key"] for p in stored.probes}, finished_at=time.time()
    )
    # Judged as they will read back once stored: stored ones first, as ordered by id.
    probes = [*stored.probes, *(dataclasses.asdict(m) for m in missing)]
    decisions, results = dcgm_steps.judge_dcgm_probes(probes, gate=GATE, level=LEVEL)
    taken = take_actions(
        dcgm_steps.planned_actions(decisions, plan.rack_of),
        nodes=nodes,
        taken=budget_taken(stored.node_events),
        run_id=run_id,
        run_key=run_key,
        budget=action_budget,
        fleet_size=plan.fleet_size,
        rack_sizes=plan.rack_sizes,
        dry_run=dry_run,
        as_of=as_of,
    )
    store.record_judgement(
        run_id,
        outputs=missing,
        results=results,
        node_events=taken.events,
        verdicts=taken.alerts,
    )
    return {
        "nodes": len(specs),
        "results": dict(Counter(d.result.value for d in decisions)),
        "withheld": [a.subject for a in taken.alerts],
    }


def coverage_verdict(plan: SweepPlan, swept: Sequence[str], *, as_of: dt.datetime) -> Verdict:
    """D-DEV-03 for the fleet: every idle GPU node got r2 in this sweep; what was skipped and why."""
    idle = {n for wave in plan.waves for n in wave}
    missed = sorted(idle - set(swept))
    result = Result.PASS if not missed and idle else (Result.FAIL if missed else Result.INCONCLUSIVE)
    reasons = Counter(plan.skipped.values())
    return Verdict(
        "D-DEV-03",
        "cluster",
        result,
        "none" if result is Result.PASS else "investigate_coverage",
        "weekly.coverage",
        f"{len(swept)} of {len(idle)} idle GPU nodes swept",
        {
            "idle": len(idle),
            "swept": len(swept),
            "missed": missed[:50],
            "fleet_gpu_nodes": plan.fleet_size,
            "skipped_by_reason": dict(reasons),
            "as_of": as_of.isoformat(),
        },
        {"policy": "weekly r2 on idle nodes"},
    )
