"""Post-upgrade NCCL sweeps stored the way the sweep stores them: simulated nccl-tests output
(`fleetval.nccl.simulated`) parsed and judged by `judge_stored.evaluate_subject` against a baseline,
the verdicts written through the store. Node `decl` creeps down toward `min_ratio` over the last
five sweeps, `flat` holds its level, the pair `decl+flat` was measured in the last three only; a
baseline-backfill re-judgement in between must not count as a sweep."""

from __future__ import annotations

from collections.abc import Sequence

from fleetval.nccl import plan as nccl_plan
from fleetval.nccl.backfill import SUITE as BACKFILL_SUITE
from fleetval.nccl.judge import NcclBaseline
from fleetval.nccl.judge_stored import BaselineRef, Repeat, evaluate_subject
from fleetval.nccl.parser import parse_nccl
from fleetval.nccl.simulated import render_nccl_tests
from fleetval.records import Verdict
from fleetval.store.repository import Store

PROFILE = "h100-sxm"
BASELINE_GBPS = {1: 480.0, 2: 400.0}  # intra-node, pair
DECLINING = [1.0, 1.0, 0.995, 1.0, 1.0, 0.985, 0.965, 0.95, 0.935, 0.92]  # still >= 0.90 at the end
FLAT = [0.98, 0.985, 0.975, 0.98, 0.98, 0.978, 0.982, 0.98, 0.976, 0.981]


def judged(nodes: Sequence[str], ratio: float, *, seed: int, repeats: int = 3) -> list[Verdict]:
    """One subject's verdicts for one sweep: `repeats` runs at `ratio` x the baseline."""
    n = len(nodes)
    baseline = BASELINE_GBPS[n]
    scope = "intra-8" if n == 1 else "inter-2x8"
    reps = [
        Repeat(
            probe_key=f"{'+'.join(nodes)}/r{i}",
            probe_id=None,
            repeat=i,
            run=parse_nccl(
                render_nccl_tests(
                    nranks=8 * n,
                    nnodes=n,
                    busbw_gbps=baseline * ratio,
                    seed=seed * 10 + i,
                    transport="NVLink" if n == 1 else "IB",
                    hosts=list(nodes),
                    cv=0.002,
                )
            ),
        )
        for i in range(repeats)
    ]
    ref = BaselineRef(PROFILE, scope, NcclBaseline(f"{PROFILE}-{scope}", 1, PROFILE, scope, baseline), None)
    return list(evaluate_subject(nodes, reps, ref=ref, expected_fabric="ib").verdicts)


def store_sweeps(store: Store) -> list[int]:
    """Ten post-upgrade sweeps (and one backfill run after the fifth); their run ids, oldest first."""
    runs = []
    for k, (decl, flat) in enumerate(zip(DECLINING, FLAT, strict=True)):
        run = store.ensure_run(f"post_upgrade_nccl_sweep/sweep{k}", suite=nccl_plan.SUITE, backend="test")
        verdicts = judged(["decl"], decl, seed=k) + judged(["flat"], flat, seed=100 + k)
        if k >= 7:
            verdicts += judged(["decl", "flat"], 0.97, seed=200 + k)
        if k == 9:
            verdicts += judged(["new"], 1.0, seed=300)
        store.add_verdicts(run, verdicts)
        runs.append(run)
        if k == 4:  # a re-judgement of old probes against another baseline: not a sweep
            backfill = store.ensure_run("baseline_backfill/x", suite=BACKFILL_SUITE, backend="store")
            store.add_verdicts(backfill, judged(["flat"], 0.5, seed=999))
    return runs
