"""The shipped onboarding stages (registered in `fleetval.onboarding.registry.STAGES`) and the
steps that run any stage: plan it for the nodes still in, list a round's probes, judge it.

- `OPERATOR`: D-OP-01 (operand pods), D-OP-02 and D-GPU-TS-01 (advertised GPUs, disclosed sharing)
  from the API, and D-OP-03 from one no-GPU probe pod per node class, as `gpu_operator_validation`
  runs them, on the onboarded nodes only;
- `DCGM`: `dcgmi diag -r <level>` on every GPU of each node, judged at the onboarding gate of the
  node health policy (D-DEV-01: r2 must pass, a warning holds the node for approval);
- `NCCL_INTRA`: all_reduce on each node, three repeats in three node-disjoint rounds
  (D-NET-NCCL-01, 03, 04, transport), judged against the promoted baseline of its profile;
- `NCCL_PAIRS`: node pairs as Kueue-admitted MPIJobs, three repeats (D-NET-NCCL-02, 03, 04,
  transport); an odd node is paired twice, in a round of its own (six rounds at most).

Everything a stage stores goes into the onboarding run, as the layers' own DAGs store it (raw
output first, then the verdicts).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final

from fleetval import criteria
from fleetval.dcgm.parser import parse_dcgm
from fleetval.dcgm.probe import dcgm_diag_probe
from fleetval.dcgm.steps import judge_stored_dcgm
from fleetval.errors import ParseError
from fleetval.gpu_operator import suite as operator_suite
from fleetval.nccl import judge_stored as nccl_judge
from fleetval.nccl import plan as nccl_plan
from fleetval.nvidia_smi.parser import split_gpu_list
from fleetval.onboarding.gate import StageRun, still_in
from fleetval.onboarding.plan import OnboardingPlan, node_infos
from fleetval.onboarding.registry import STAGES, StageContext, StageImpl, StageSpec, load, subject_nodes
from fleetval.probes import outputs as probe_outputs
from fleetval.probes.pod import ProbeSpec
from fleetval.records import Verdict

OPERATOR_CRITERIA: Final = ("D-OP-01", "D-OP-02", "D-OP-03", "D-GPU-TS-01")
NCCL_CRITERIA: Final = (
    "D-NET-NCCL-01",
    "D-NET-NCCL-02",
    "D-NET-NCCL-03",
    "D-NET-NCCL-04",
    "D-NET-NCCL-TRANSPORT",
)
REPEATS: Final = int(criteria.get("D-NET-NCCL-04").parameters["min_repeats"])
# Rounds (node-disjoint waves) a stage needs for a plan of at most max_map_length nodes: one batch
# per repeat on each node; for pairs, the node-disjoint pairs then the odd node's pair. The
# registry gives the DAG as many.
INTRA_ROUNDS: Final = REPEATS
PAIR_ROUNDS: Final = 2 * REPEATS


def _counts(results: Iterable[str]) -> dict[str, Any]:
    return {"results": dict(Counter(results))}


# --- operator and isolation ----------------------------------------------------------------------


def _operator_prepare(ctx: StageContext) -> dict[str, Any]:
    specs = operator_suite.isolation_probes(
        node_infos(ctx.plan, ctx.nodes), run_key=ctx.run_key, image=ctx.image("isolation")
    )
    return {"rounds": 1, "isolation": [s.to_json() for s in specs]}


def _operator_round(ctx: StageContext, state: Mapping[str, Any], k: int) -> list[ProbeSpec]:
    return [ProbeSpec.from_json(s) for s in state.get("isolation") or ()] if k == 0 else []


def _operator_judge(ctx: StageContext, state: Mapping[str, Any]) -> dict[str, Any]:
    wanted = set(ctx.nodes)
    verdicts: list[Verdict] = []
    verdicts += operator_suite.check_operands(
        ctx.store,
        ctx.run_id,
        ctx.core,
        run_key=ctx.run_key,
        nodes=list(ctx.nodes),
        namespace=ctx.request.operator_namespace,
    )
    nodes = [n for n in operator_suite.gpu_nodes(ctx.core) if n["metadata"]["name"] in wanted]
    verdicts += operator_suite.check_advertised(ctx.store, ctx.run_id, nodes, run_key=ctx.run_key)
    verdicts += operator_suite.judge_isolation_probes(ctx.store, ctx.run_id, _operator_round(ctx, state, 0))
    return _counts(v.result.value for v in verdicts)


def _operator_nodes_of(row: Mapping[str, Any], plan: OnboardingPlan, tested: Collection[str]) -> list[str]:
    """D-OP-03 runs on one node per class (profile): its verdict is every tested node's of the class."""
    subject = str(row["subject"])
    if row["criterion"] == "D-OP-03" and subject in plan.nodes:
        return plan.profile_nodes(plan.nodes[subject].profile, tested)
    return subject_nodes(row, plan, tested)


OPERATOR: Final = StageImpl(
    criteria=OPERATOR_CRITERIA,
    prepare=_operator_prepare,
    round_probes=_operator_round,
    judge=_operator_judge,
    claims=lambda row: row["criterion"] in OPERATOR_CRITERIA,
    nodes_of=_operator_nodes_of,
    needs_cluster=True,
)


# --- DCGM ----------------------------------------------------------------------------------------

GATE: Final = "onboarding"


def _dcgm_specs(ctx: StageContext) -> list[ProbeSpec]:
    image = ctx.image("dcgm")
    return [
        dcgm_diag_probe(
            node,
            level=ctx.request.dcgm_level,
            gpus=ctx.plan.nodes[node].gpus,
            run_key=ctx.run_key,
            **({"image": image} if image else {}),
        )
        for node in ctx.nodes
    ]


def _dcgm_judge(ctx: StageContext, state: Mapping[str, Any]) -> dict[str, Any]:
    specs = _dcgm_specs(ctx)
    probe_outputs.record_missing_probes(ctx.store, ctx.run_id, specs)
    decisions = judge_stored_dcgm(
        ctx.store, ctx.run_id, [s.probe_key for s in specs], gate=GATE, level=ctx.request.dcgm_level
    )
    return _counts(d.result.value for d in decisions)


def dcgm_messages(ctx: StageContext) -> dict[str, list[str]]:
    """What DCGM itself said about each node's warnings and failures (its message text carries
    the numbers: seconds of thermal violation, error counts), read from the stored output."""
    specs = _dcgm_specs(ctx)
    found: dict[str, list[str]] = {}
    for probe in ctx.store.probes(ctx.run_id, [s.probe_key for s in specs]):
        try:
            report = parse_dcgm(split_gpu_list(probe["raw"])[1])
        except ParseError:
            continue
        messages = [
            f"{test.name}: {w.message}" + (f" (GPU {w.gpu})" if w.gpu is not None else "")
            for test in report.tests
            if test.result in ("warn", "fail")
            for w in test.warnings
        ]
        if messages:
            found[probe["nodes"][0]] = messages
    return found


DCGM: Final = StageImpl(
    criteria=("D-DEV-01",),
    prepare=lambda ctx: {"rounds": 1},
    round_probes=lambda ctx, state, k: _dcgm_specs(ctx) if k == 0 else [],
    judge=_dcgm_judge,
    claims=lambda row: row["criterion"] == "D-DEV-01",
)


# --- NCCL ------------------------------------------------------------------------------------------


def _nccl_prepare(ctx: StageContext, kind: nccl_plan.Kind) -> dict[str, Any]:
    plan = nccl_plan.plan_sweep(
        node_infos(ctx.plan, ctx.nodes),
        repeats=REPEATS,
        only=list(ctx.nodes),
        max_wave_size=ctx.max_map_length,
        max_waves=PAIR_ROUNDS,  # the larger: plan_sweep plans pairs too (prepare_stage checks the rounds)
    )
    notes = dict(plan.skipped)
    if kind == "pairs":
        paired = {n for pair in plan.pairs for n in pair}
        for node in ctx.nodes:
            if node not in paired:
                notes[node] = (
                    f"no NCCL pair: the only node of profile {ctx.plan.nodes[node].profile!r} in this run "
                    "(onboard it with another node of its profile, or turn pairs off)"
                )
    return {"rounds": len(plan.waves(kind)), "nccl_plan": plan.to_json(), "notes": notes}


def _nccl_round(ctx: StageContext, state: Mapping[str, Any], k: int, kind: nccl_plan.Kind) -> list[ProbeSpec]:
    plan = nccl_plan.NcclPlan.from_json(state["nccl_plan"])
    if k >= len(plan.waves(kind)):
        return []
    return nccl_plan.wave_specs(plan, kind, k, run_key=ctx.run_key, image=ctx.image("nccl"))


def _nccl_judge(ctx: StageContext, state: Mapping[str, Any], kind: nccl_plan.Kind) -> dict[str, Any]:
    rounds = int(state.get("rounds") or 0)
    specs = [s for k in range(rounds) for s in _nccl_round(ctx, state, k, kind)]
    if not specs:
        return _counts(())
    outcomes = nccl_judge.judge_sweep(
        ctx.store, ctx.run_id, specs, lookup=nccl_judge.promoted_lookup(ctx.store)
    )
    return _counts(o.result.value for o in outcomes)


def _is_pair(row: Mapping[str, Any]) -> bool:
    return "+" in str(row["subject"])


NCCL_INTRA: Final = StageImpl(
    criteria=NCCL_CRITERIA,
    prepare=lambda ctx: _nccl_prepare(ctx, "intra"),
    round_probes=lambda ctx, state, k: _nccl_round(ctx, state, k, "intra"),
    judge=lambda ctx, state: _nccl_judge(ctx, state, "intra"),
    claims=lambda row: row["criterion"] in NCCL_CRITERIA and not _is_pair(row),
    uses_baselines=True,
)

NCCL_PAIRS: Final = StageImpl(
    criteria=NCCL_CRITERIA,
    prepare=lambda ctx: _nccl_prepare(ctx, "pairs"),
    round_probes=lambda ctx, state, k: _nccl_round(ctx, state, k, "pairs"),
    judge=lambda ctx, state: _nccl_judge(ctx, state, "pairs"),
    claims=lambda row: row["criterion"] in NCCL_CRITERIA and _is_pair(row),
    enabled=lambda request: request.run_pairs,
    uses_baselines=True,
)


# --- MIG (a task group of the MIG layer's own: registry.MIG_GROUP) --------------------------------


def _mig_nodes_of(row: Mapping[str, Any], plan: OnboardingPlan, tested: Collection[str]) -> list[str]:
    """A MIG verdict names a node (`node`, `node/restore`) or the pool (`mig-pool`: no node)."""
    node = str(row["subject"]).split("/", 1)[0]
    return [node] if node in tested else []


MIG: Final = StageImpl(
    criteria=("D-GPU-MIG-01", "D-GPU-MIG-02", "D-GPU-MIG-03", "D-GPU-MIG-04", "D-GPU-MIG-05", "D-GPU-MIG-06"),
    prepare=lambda ctx: {"rounds": 0},  # the MIG layer's task group probes and judges
    round_probes=lambda ctx, state, k: [],
    judge=lambda ctx, state: {"judged_by": "the MIG layer's task group"},
    claims=lambda row: str(row["criterion"]).startswith("D-GPU-MIG-"),
    nodes_of=_mig_nodes_of,
    applies=lambda node: node.mig_pool,
)


# --- running any stage -----------------------------------------------------------------------------


def stage_runs(states: Mapping[str, Any], *, upto: str | None = None) -> list[StageRun]:
    """Every registered stage with its state in this run (None: not planned), in order; with
    `upto`, only the stages before that one."""
    runs = []
    for spec in STAGES:
        if spec.name == upto:
            break
        runs.append(StageRun(spec, load(spec), states.get(spec.name)))
    return runs


def prepare_stage(spec: StageSpec, ctx: StageContext, states: Mapping[str, Any]) -> dict[str, Any]:
    """Plan a stage for the nodes still in (pass or warn so far) that it applies to; its state.
    `ctx.nodes` is ignored: the funnel decides them."""
    impl = load(spec)
    if not impl.enabled(ctx.request):
        return {"enabled": False, "nodes": [], "rounds": 0}
    going, stopped = still_in(ctx.plan, ctx.store.verdicts(ctx.run_id), stage_runs(states, upto=spec.name))
    nodes = tuple(n for n in going if impl.applies(ctx.plan.nodes[n]))
    state: dict[str, Any] = {"enabled": True, "nodes": list(nodes), "stopped": stopped, "rounds": 0}
    if nodes:
        state.update(impl.prepare(with_nodes(ctx, nodes)))
    if int(state["rounds"]) > spec.rounds:
        raise ValueError(
            f"stage {spec.name!r} needs {state['rounds']} rounds, the DAG has {spec.rounds}: "
            "onboard fewer nodes per run"
        )
    return state


def with_nodes(ctx: StageContext, nodes: Sequence[str]) -> StageContext:
    return StageContext(
        ctx.store,
        ctx.run_id,
        ctx.run_key,
        ctx.plan,
        ctx.request,
        tuple(nodes),
        ctx.core,
        ctx.images,
        ctx.max_map_length,
    )


def round_probes(spec: StageSpec, ctx: StageContext, state: Mapping[str, Any], k: int) -> list[ProbeSpec]:
    """Round k's probes (0-based) for the nodes the stage planned."""
    if not state.get("nodes") or k >= int(state.get("rounds") or 0):
        return []
    return load(spec).round_probes(with_nodes(ctx, state["nodes"]), state, k)


def judge_stage(spec: StageSpec, ctx: StageContext, state: Mapping[str, Any]) -> dict[str, Any]:
    """Judge what the stage's rounds stored (a probe that stored nothing is an `error`)."""
    if not state.get("nodes"):
        return _counts(())
    return load(spec).judge(with_nodes(ctx, state["nodes"]), state)
