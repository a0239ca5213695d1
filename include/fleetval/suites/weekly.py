"""The weekly idle-node health sweep (D-DEV-03, D-DEV-04): DCGM r2 on every idle GPU node, in
waves that respect the diagnosis budget; failures are cordoned and quarantined within the action
budget; a coverage verdict says which nodes were not swept and why.

Used by the `weekly_health_sweep` DAG (one task per step, one mapped task per wave) and by
`fleetval sim run --suite weekly` (the same steps in-process).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.backends import Backend, NodeInfo
from fleetval.policy.blast_radius import ActionBudget, DiagnosisBudget, plan_waves
from fleetval.records import Result, Verdict
from fleetval.remediation import apply_actions
from fleetval.store.repository import Store
from fleetval.suites import device

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
    if node.unschedulable:
        return "cordoned"
    if node.gpu_pods:
        return f"busy ({node.gpu_pods} GPU pods)"
    return None


def plan_sweep(nodes: Sequence[NodeInfo], budget: DiagnosisBudget, *, max_waves: int) -> SweepPlan:
    gpu_nodes = [n for n in nodes if n.is_gpu_node]
    skipped = {n.name: reason for n in nodes if (reason := why_not_idle(n)) is not None}
    idle = [n.name for n in gpu_nodes if n.name not in skipped]
    rack_of = {n.name: n.rack for n in gpu_nodes}
    rack_sizes = dict(Counter(n.rack for n in gpu_nodes))
    waves = plan_waves(
        idle, rack_of, fleet_size=len(gpu_nodes), rack_sizes=rack_sizes, budget=budget, max_waves=max_waves
    )
    return SweepPlan(waves, skipped, rack_of, len(gpu_nodes), rack_sizes, {n.name: n.gpus for n in gpu_nodes})


def sweep_wave(
    store: Store,
    backend: Backend,
    *,
    run_id: int,
    run_key: str,
    plan: SweepPlan,
    wave: Sequence[str],
    action_budget: ActionBudget,
    dry_run: bool,
    as_of: dt.datetime,
) -> dict[str, Any]:
    """Probe one wave, store raw output, judge, store verdicts, act. Returns a summary."""
    infos = [NodeInfo(name=n, rack=plan.rack_of[n], profile="", gpus=plan.gpus[n]) for n in wave]
    outputs = backend.run_probes(device.dcgm_specs(infos, level=LEVEL, run_key=run_key))
    keys = device.store_probe_outputs(store, run_id, outputs)
    uuids = getattr(backend, "gpu_uuids", None)
    decisions = device.judge_stored_dcgm(store, run_id, keys, gate=GATE, level=LEVEL, gpu_uuids=uuids)
    alerts = apply_actions(
        device.planned_actions(decisions, plan.rack_of),
        nodes=backend,
        store=store,
        run_id=run_id,
        run_key=run_key,
        budget=action_budget,
        fleet_size=plan.fleet_size,
        rack_sizes=plan.rack_sizes,
        dry_run=dry_run,
        as_of=as_of,
    )
    store.add_verdicts(run_id, alerts)
    return {
        "nodes": len(wave),
        "results": dict(Counter(d.result.value for d in decisions)),
        "withheld": [a.subject for a in alerts],
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


def run_weekly(
    store: Store,
    backend: Backend,
    *,
    run_key: str,
    fleet: str | None,
    diagnosis_budget: DiagnosisBudget,
    action_budget: ActionBudget,
    dry_run: bool,
    as_of: dt.datetime,
    max_waves: int = 1024,
) -> int:
    """The whole sweep in-process (what the DAG does task by task). Returns the run id."""
    run_id = store.ensure_run(
        run_key, suite="weekly", backend=backend.name, fleet=fleet, meta={"dry_run": dry_run}
    )
    plan = plan_sweep(backend.list_nodes(), diagnosis_budget, max_waves=max_waves)
    swept: list[str] = []
    for wave in plan.waves:
        sweep_wave(
            store,
            backend,
            run_id=run_id,
            run_key=run_key,
            plan=plan,
            wave=wave,
            action_budget=action_budget,
            dry_run=dry_run,
            as_of=as_of,
        )
        swept.extend(wave)
    store.add_verdicts(run_id, [coverage_verdict(plan, swept, as_of=as_of)])
    store.finish_run(run_id)
    return run_id
