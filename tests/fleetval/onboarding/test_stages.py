"""The stage registry and the shipped stages: node-disjoint rounds, the funnel, the taint tolerated."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest

from fleetval.nccl.mpijob import mpijob_manifest
from fleetval.nodes import ONBOARDING_TAINT
from fleetval.onboarding import stages
from fleetval.onboarding.plan import plan_onboarding
from fleetval.onboarding.registry import STAGES, StageContext, StageImpl, load, stage_spec
from fleetval.onboarding.request import OnboardingRequest
from fleetval.probes.pod import kpo_kwargs
from fleetval.records import Result, Verdict
from tests.fleetval.onboarding.helpers import node

NODES = ["r01-n01", "r01-n02", "r01-n03"]


def context(
    store: Any, names: list[str] = NODES, *, max_map_length: int = 1024, **request: Any
) -> StageContext:
    request_ = OnboardingRequest(rack="r01", **request)
    plan = plan_onboarding(request_, [node(n) for n in names], max_nodes=1024)
    run_id = store.ensure_run(
        f"rack_onboarding/{len(names)}-{sorted(request)}", suite="rack_onboarding", backend="test"
    )
    return StageContext(store, run_id, "rack_onboarding/x", plan, request_, (), max_map_length=max_map_length)


def rounds(spec_name: str, ctx: StageContext, state: dict[str, Any]) -> list[list[Any]]:
    spec = stage_spec(spec_name)
    return [stages.round_probes(spec, ctx, state, k) for k in range(spec.rounds)]


def test_every_registered_stage_loads() -> None:
    names = [s.name for s in STAGES]
    assert len(set(names)) == len(names) and names[:4] == ["operator", "dcgm", "nccl_intra", "nccl_pairs"]
    for spec in STAGES:
        assert isinstance(load(spec), StageImpl)
        assert spec.runner in ("pod", "mpijob", "group")
        assert (spec.rounds >= 1) == (spec.runner != "group") and bool(spec.group) == (spec.runner == "group")
        assert re.fullmatch(r"[a-z][a-z0-9_]*", spec.name)  # a task group id
        assert "task.spec.node" in spec.map_index
    assert isinstance(stages.MIG, StageImpl)  # ready for its registry entry
    assert stage_spec("nccl_intra").rounds == stages.INTRA_ROUNDS
    assert stage_spec("nccl_pairs").rounds == stages.PAIR_ROUNDS


def test_nccl_on_each_node_three_node_disjoint_rounds(store: Any) -> None:
    ctx = context(store)
    state = stages.prepare_stage(stage_spec("nccl_intra"), ctx, {})
    assert state["nodes"] == NODES and state["rounds"] == 3
    probes = rounds("nccl_intra", ctx, state)
    for k, probes_k in enumerate(probes):
        assert sorted(p.node for p in probes_k) == NODES  # each node once per round
        assert {p.params["repeat"] for p in probes_k} == {k}


def test_nccl_pairs_cover_every_node_and_never_use_a_node_twice_in_a_round(store: Any) -> None:
    ctx = context(store)
    state = stages.prepare_stage(stage_spec("nccl_pairs"), ctx, {})
    probes = rounds("nccl_pairs", ctx, state)
    assert state["rounds"] == 6 and all(len(r) == 1 for r in probes)  # 3 nodes: one node pairs twice
    for probes_k in probes:
        used = [n for p in probes_k for n in p.params["nodes"]]
        assert len(used) == len(set(used))
    per_pair = Counter(p.node for r in probes for p in r)
    assert set(per_pair.values()) == {3} and {n for p in per_pair for n in p.split("+")} == set(NODES)
    even = context(store, NODES[:2])
    even_state = stages.prepare_stage(stage_spec("nccl_pairs"), even, {})
    assert even_state["rounds"] == 3 and rounds("nccl_pairs", even, even_state)[3:] == [[], [], []]


def test_pairs_off_or_no_partner(store: Any) -> None:
    off = stages.prepare_stage(stage_spec("nccl_pairs"), context(store, run_pairs=False), {})
    assert off == {"enabled": False, "nodes": [], "rounds": 0}
    alone = stages.prepare_stage(stage_spec("nccl_pairs"), context(store, NODES[:1]), {})
    assert alone["rounds"] == 0 and "no NCCL pair" in alone["notes"]["r01-n01"]


def test_a_node_leaves_the_funnel_at_its_first_failure(store: Any) -> None:
    ctx = context(store)
    failed = Verdict("D-DEV-01", "r01-n02", Result.FAIL, "reject", "dev.onboarding.fail", "r2 failed")
    passed = [
        Verdict("D-DEV-01", n, Result.PASS, "admit", "dev.onboarding.pass", "r2 passed")
        for n in ("r01-n01", "r01-n03")
    ]
    store.add_verdicts(ctx.run_id, [failed, *passed])
    states = {
        "operator": {"enabled": True, "nodes": []},
        "dcgm": {"enabled": True, "nodes": NODES, "rounds": 1},
    }
    state = stages.prepare_stage(stage_spec("nccl_intra"), ctx, states)
    assert state["nodes"] == ["r01-n01", "r01-n03"]
    assert "D-DEV-01 fail" in state["stopped"]["r01-n02"]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 8])
def test_whatever_a_plan_holds_fits_in_the_dags_rounds(store: Any, size: int) -> None:
    """A plan holds at most max_map_length nodes: then every stage fits its static rounds, one
    batch of probes per round (no round holds more probe tasks than max_map_length)."""
    names = [f"r01-n{i:02d}" for i in range(1, size + 1)]
    ctx = context(store, names, max_map_length=size)
    for name in ("nccl_intra", "nccl_pairs"):
        state = stages.prepare_stage(stage_spec(name), ctx, {})
        assert state["rounds"] <= stage_spec(name).rounds
        assert all(len(r) <= size for r in rounds(name, ctx, state))


def test_dcgm_probes_every_gpu_at_the_requested_level(store: Any) -> None:
    ctx = context(store, dcgm_level=3)
    state = stages.prepare_stage(stage_spec("dcgm"), ctx, {})
    [probes] = rounds("dcgm", ctx, state)
    assert [(p.node, p.gpus, p.params["level"]) for p in probes] == [(n, 8, 3) for n in NODES]
    assert "dcgmi diag -r 3" in probes[0].args[0]


def test_probe_pods_and_mpijob_workers_tolerate_the_onboarding_taint(store: Any) -> None:
    ctx = context(store)
    state = stages.prepare_stage(stage_spec("nccl_pairs"), ctx, {})
    [pair] = rounds("nccl_pairs", ctx, state)[0]
    workers = mpijob_manifest(pair)["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"]
    assert {"key": ONBOARDING_TAINT, "operator": "Exists"} in workers
    [probe] = rounds("dcgm", ctx, stages.prepare_stage(stage_spec("dcgm"), ctx, {}))[0][:1]
    assert any(t.key == ONBOARDING_TAINT and t.operator == "Exists" for t in kpo_kwargs(probe)["tolerations"])
