"""The simulated `netlab` fleet as the NCCL suite's steps see a cluster, for tests that compose
the steps without Airflow: node inventory and labels, probes answered by the simulator's
nccl-tests model (what a pod or MPIJob on the simulated cluster prints), and `sweep`, the steps in
the order `post_upgrade_nccl_sweep` runs them."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from fleetval.fleet.spec import load_fleet_spec
from fleetval.nccl import gate as nccl_gate
from fleetval.nccl import isolation as nccl_isolation
from fleetval.nccl import judge_stored as nccl_judge
from fleetval.nccl import plan as nccl_plan
from fleetval.nccl.simulated_run import nccl_output
from fleetval.nodes import NodeInfo, ProbeOutput
from fleetval.probes import outputs as probe_outputs
from fleetval.probes.pod import ProbeSpec
from fleetval.store.repository import Store
from tests.paths import ROOT

NETLAB = ROOT / "include" / "fleetval" / "sim" / "fleets" / "netlab.yaml"
FLEET = load_fleet_spec(NETLAB.read_text())
PROFILE = "h100-sxm-ndr"
DRIVER = "570.172.08"


class Lab:
    """The netlab fleet as the suite sees a cluster: its nodes (labels as GPU feature discovery
    and fleetval leave them) and the node operations; probes answered by the simulator's model."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        for name, rack in FLEET.nodes():
            profile = FLEET.profiles[rack.profile]
            labels = {
                nccl_plan.FABRIC_LABEL: profile.fabric,
                nccl_plan.DRIVER_VERSION_LABEL: profile.driver_version,
            }
            self.nodes[name] = NodeInfo(name, rack.name, profile.name, profile.gpus, labels=labels)
        self.probed: list[list[ProbeSpec]] = []  # what ran, one list per wave or round
        self.broken: Callable[[ProbeSpec], str | None] = lambda _spec: None  # harness failures

    def list_nodes(self) -> list[NodeInfo]:
        return list(self.nodes.values())

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        merged = {**self.nodes[node].labels, **labels}
        self.nodes[node] = dataclasses.replace(
            self.nodes[node], labels={k: v for k, v in merged.items() if v is not None}
        )

    def cordon(self, node: str) -> None:
        raise AssertionError("the NCCL gate never cordons")

    uncordon = cordon

    def add_taint(self, node: str, key: str, value: str, effect: str) -> None:
        raise AssertionError("the NCCL gate never taints")

    def remove_taint(self, node: str, key: str) -> None:
        raise AssertionError("the NCCL gate never taints")

    def busy(self, node: str, pods: int = 1) -> None:
        self.nodes[node] = dataclasses.replace(self.nodes[node], gpu_pods=pods)

    def upgrade_driver(self, driver: str = DRIVER) -> None:
        """What GPU feature discovery and the operator's upgrade controller leave on upgraded nodes."""
        for node in self.nodes:
            self.set_labels(
                node,
                {
                    nccl_plan.DRIVER_VERSION_LABEL: driver,
                    nccl_plan.UPGRADE_STATE_LABEL: nccl_plan.UPGRADE_DONE,
                },
            )

    def run(self, store: Store, run_id: int, specs: Sequence[ProbeSpec]) -> None:
        """Run probes (node-disjoint, as a wave or a round is) and store their raw output."""
        members = [n for s in specs for n in s.params["nodes"]]
        assert len(members) == len(set(members)), f"a node probed twice at once: {members}"
        self.probed.append(list(specs))
        outputs: list[ProbeOutput] = []
        for spec in specs:
            error = self.broken(spec)
            raw = "" if error else nccl_output(FLEET, spec, seed_salt=spec.probe_key)
            outputs.append(
                probe_outputs.probe_output(
                    spec, raw, exit_code=None if error else 0, error=error, finished_at=time.time()
                )
            )
        probe_outputs.store_probe_outputs(store, run_id, outputs)


def sweep(
    store: Store,
    lab: Lab,
    *,
    run_key: str,
    nodes: Sequence[str] | None,
    repeats: int = 3,
    dry_run: bool = False,
) -> int:
    """What `post_upgrade_nccl_sweep` does, task by task: plan, waves, judge, isolation rounds, gate."""
    run_id = store.ensure_run(run_key, suite=nccl_plan.SUITE, backend="test", meta={"dry_run": dry_run})
    plan = nccl_plan.plan_sweep(lab.list_nodes(), repeats=repeats, only=nodes)
    store.update_run_meta(run_id, plan=plan.to_json())
    for kind in nccl_plan.KINDS:
        for wave in range(len(plan.waves(kind))):
            lab.run(store, run_id, nccl_plan.wave_specs(plan, kind, wave, run_key=run_key))
    lookup = nccl_judge.promoted_lookup(store)
    nccl_judge.judge_sweep(store, run_id, nccl_plan.sweep_specs(plan, run_key=run_key), lookup=lookup)
    report = isolate(store, lab, run_id=run_id, run_key=run_key, plan=plan)
    decision = nccl_gate.decide_gate(store.verdicts(run_id), plan)
    nccl_gate.apply_gate(store, lab, run_id=run_id, run_key=run_key, decision=decision, dry_run=dry_run)
    marked = nccl_gate.mark_swept(lab, plan, nccl_gate.swept_nodes(store, run_id), dry_run=dry_run)
    store.update_run_meta(run_id, isolation=report.to_json(), gate=decision.to_json(), swept=marked)
    store.finish_run(run_id)
    return run_id


def isolate(
    store: Store, lab: Lab, *, run_id: int, run_key: str, plan: nccl_plan.NcclPlan, max_rounds: int = 200
) -> nccl_isolation.IsolationReport:
    lookup = nccl_judge.promoted_lookup(store)
    for _ in range(max_rounds):
        step = nccl_isolation.isolation_step(store, run_id=run_id, run_key=run_key, plan=plan, lookup=lookup)
        if step.report is not None:
            return step.report
        assert step.probes
        lab.run(store, run_id, step.probes)
    raise AssertionError("isolation did not finish")
