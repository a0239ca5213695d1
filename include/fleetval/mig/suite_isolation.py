"""The isolation probes' side of the suite (D-GPU-MIG-03, -04): which taken nodes can be probed,
the probes of a phase (`baseline`, `during`), the filler on the probed instance's neighbours, and
the judgement from what the probes and the filler left in the run's record."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Final

from fleetval.mig import isolation
from fleetval.mig.suite_plan import MigPlan
from fleetval.mig.suite_pods import delete_pod, fill_pod, logs, start_pods
from fleetval.mig.suite_run import ACTIONS, MigRun
from fleetval.probes import outputs as probe_outputs
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Result, Verdict
from fleetval.store.repository import Store

_NO_NEIGHBOUR: Final = "the layout holds no profile twice on one GPU: no neighbour to fill"


def probe_ready(run: MigRun) -> dict[str, str]:
    """The taken nodes the isolation probes can run on (node -> "") and why not on the others: the
    node must advertise every instance of the probed profile (the filler asks for all but one)."""
    ready: dict[str, str] = {}
    for node in run.taken:
        planned = run.plan.node(node)
        if not planned.probe_profile or planned.probe_instances < 2:
            ready[node] = _NO_NEIGHBOUR
            continue
        resource = isolation.resource_name(planned.probe_profile)
        body = run.core.api_client.sanitize_for_serialization(run.core.read_node(node))
        have = str(((body.get("status") or {}).get("allocatable") or {}).get(resource, "0"))
        count = int(have) if have.isascii() and have.isdigit() else 0
        wanted = planned.probe_instances
        ready[node] = (
            "" if count >= wanted else f"the node advertises {resource}={have}, not the {wanted} made"
        )
    return ready


def isolation_probes(
    mig_plan: MigPlan, taken: Sequence[str], phase: str, *, run_key: str, image: str | None
) -> list[ProbeSpec]:
    """The workload probe of `phase` on each of `taken` whose layout holds its profile twice (pure:
    the probe pods are the DAG's to run)."""
    return [
        isolation.workload_probe(n, str(p.probe_profile), phase, run_key=run_key, image=image)
        for n in taken
        if (p := mig_plan.node(n)).probe_profile and p.probe_instances >= 2
    ]


def start_fill(run: MigRun, probed: Sequence[str]) -> dict[str, str]:
    """The filler on each of the `probed` nodes with a probe profile: every instance of it but one;
    the fillers' names."""
    pods = {
        n: fill_pod(run, n, str(p.probe_profile), p.probe_instances - 1, what="fill")
        for n in probed
        if (p := run.plan.node(n)).probe_profile and p.probe_instances >= 2
    }
    return start_pods(run, pods)


def stop_fill(run: MigRun, fills: Mapping[str, str]) -> None:
    """Store each filler's log (`fills`: node -> pod) as raw evidence, then delete the fillers."""
    now = time.time()
    outputs = []
    for node, name in sorted(fills.items()):
        raw = logs(run, name)
        spec = ProbeSpec(
            probe_key=f"{run.run_key}/{isolation.FILL_TOOL}/{node}",
            tool=isolation.FILL_TOOL,
            node=node,
            image="",
            command=("python3", "-c", "<FILL_SCRIPT>"),
        )
        outputs.append(
            probe_outputs.probe_output(
                spec, raw, exit_code=None, error=None if raw else "no log from the filler", finished_at=now
            )
        )
    probe_outputs.store_probe_outputs(run.store, run.run_id, outputs)
    for name in fills.values():
        delete_pod(run, name)


def judge_isolation(
    store: Store,
    run_id: int,
    mig_plan: MigPlan,
    taken: Sequence[str],
    *,
    run_key: str,
    not_probed: Mapping[str, str] | None = None,
) -> list[Verdict]:
    """D-GPU-MIG-03 and -04 per taken node from the stored probes and filler logs; a node in
    `not_probed` (node -> why) is inconclusive on both. It only reads and writes the run's record
    (no `MigRun`), so its task needs no cluster client."""
    skip = {n: why for n, why in (not_probed or {}).items() if why}
    probed = [n for n in taken if n not in skip]
    baseline = isolation_probes(mig_plan, probed, "baseline", run_key=run_key, image=None)
    during = isolation_probes(mig_plan, probed, "during", run_key=run_key, image=None)
    probe_outputs.record_missing_probes(store, run_id, [*baseline, *during])
    keys = [s.probe_key for s in (*baseline, *during)] + [
        f"{run_key}/{isolation.FILL_TOOL}/{n}" for n in taken
    ]
    rows = {r["probe_key"]: r for r in store.probes(run_id, keys)}

    def evidence(key: str) -> isolation.Evidence | None:
        row = rows.get(key)
        if row is None:
            return None
        return isolation.Evidence(row["raw"], row["exit_code"], (row.get("spec") or {}).get("harness_error"))

    verdicts = []
    for node in taken:
        planned = mig_plan.node(node)
        if node in skip or not planned.probe_profile or planned.probe_instances < 2:
            why = skip.get(node) or _NO_NEIGHBOUR
            judged = [
                Verdict(c, node, Result.INCONCLUSIVE, ACTIONS[Result.INCONCLUSIVE], r, why)
                for c, r in (
                    (isolation.CRITERION_FILL, isolation.RULE_FILL),
                    (isolation.CRITERION_VISIBILITY, isolation.RULE_VISIBILITY),
                )
            ]
        else:
            b = evidence(f"{run_key}/{isolation.TOOL}/baseline/{node}")
            d = evidence(f"{run_key}/{isolation.TOOL}/during/{node}")
            f = evidence(f"{run_key}/{isolation.FILL_TOOL}/{node}")
            judged = [isolation.judge_fill(node, b, d, f), isolation.judge_visibility(node, d)]
        row = rows.get(f"{run_key}/{isolation.TOOL}/during/{node}")
        store.add_verdicts(run_id, judged, probe_id=int(row["id"]) if row else None, node=node)
        verdicts += judged
    return verdicts
