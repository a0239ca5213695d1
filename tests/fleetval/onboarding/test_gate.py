"""The gate: node by node over the stages' verdicts; missing evidence is never a pass."""

from __future__ import annotations

from typing import Any

from fleetval.onboarding.gate import ADMIT, ASK, HOLD, GateReport, StageRun, decide, still_in
from fleetval.onboarding.plan import plan_onboarding
from fleetval.onboarding.registry import STAGES, load
from fleetval.onboarding.request import OnboardingRequest
from fleetval.records import Result
from tests.fleetval.onboarding.helpers import node, row

NODES = ["a", "b", "c", "d"]
PLAN = plan_onboarding(
    OnboardingRequest(rack="r01"),
    [*[node(n) for n in NODES], node("e", profile="NVIDIA-A100-SXM4-80GB")],
    max_nodes=10,
)


def runs(**states: Any) -> list[StageRun]:
    """Every stage tested `NODES` (and `e`) unless a state says otherwise."""
    default = {"enabled": True, "nodes": [*NODES, "e"]}
    return [StageRun(spec, load(spec), states.get(spec.name, default)) for spec in STAGES]


def passing(nodes: list[str], pairs: list[str]) -> list[dict[str, Any]]:
    rows = []
    for n in nodes:
        rows += [row("D-OP-01", n, "pass"), row("D-OP-02", n, "pass"), row("D-GPU-TS-01", n, "pass")]
        rows += [row("D-DEV-01", n, "pass"), row("D-DEV-04", f"GPU-{n}-0", "pass", node=n)]
        rows += [row(c, n, "pass") for c in ("D-NET-NCCL-01", "D-NET-NCCL-03", "D-NET-NCCL-04")]
    rows += [row("D-OP-03", "a", "pass"), row("D-OP-03", "e", "pass")]
    for pair in pairs:
        rows += [row(c, pair, "pass") for c in ("D-NET-NCCL-02", "D-NET-NCCL-03", "D-NET-NCCL-04")]
    return rows


def replace(
    rows: list[dict[str, Any]], criterion: str, subject: str, result: str, **kw: Any
) -> list[dict[str, Any]]:
    return [
        row(criterion, subject, result, **kw) if (r["criterion"], r["subject"]) == (criterion, subject) else r
        for r in rows
    ]


def gate(rows: list[dict[str, Any]], **states: Any) -> GateReport:
    return decide(PLAN, rows, runs(**states))


PAIRS = ["a+c", "b+d", "e+a"]


def test_every_stage_passed_admits() -> None:
    report = gate(passing([*NODES, "e"], PAIRS))
    assert {n: g.action for n, g in report.nodes.items()} == dict.fromkeys([*NODES, "e"], ADMIT)
    assert report.nodes["a"].reason == "every stage passed"
    assert report.nodes["a"].stages == {
        **dict.fromkeys(["operator", "dcgm", "nccl_intra", "nccl_pairs"], "pass"),
        "mig": "not applicable",  # not a MIG pool node
    }


def test_warn_asks_fail_holds_and_stops_the_funnel() -> None:
    rows = replace(
        passing([*NODES, "e"], PAIRS),
        "D-DEV-01",
        "b",
        "warn",
        findings=[{"test": "memory", "result": "warn", "gpus": ["3"]}],
    )
    rows = replace(rows, "D-DEV-01", "c", "fail")
    report = gate(rows)
    b, c = report.nodes["b"], report.nodes["c"]
    assert (b.result, b.action) == (Result.WARN, ASK)
    assert b.findings[0].numbers == {"findings": ["memory: warn on GPU 3"]}
    assert (c.result, c.action) == (Result.FAIL, HOLD)
    assert c.findings[0].criterion == "D-DEV-01" and c.stages["nccl_intra"] == "not run: stopped at dcgm"
    assert report.with_action(ASK) == ["b"] and report.counts() == {"pass": 3, "warn": 1, "fail": 1}


def test_a_failed_verdict_outweighs_a_broken_harness() -> None:
    rows = replace(passing([*NODES, "e"], PAIRS), "D-OP-01", "a", "error")
    assert gate(rows).nodes["a"].result is Result.ERROR
    rows = replace(rows, "D-OP-02", "a", "fail")
    assert gate(rows).nodes["a"].result is Result.FAIL  # a finding stands beside an error
    assert gate(rows).nodes["a"].findings[0].criterion == "D-OP-02"


def test_a_per_class_check_and_a_pair_speak_for_every_node_they_cover() -> None:
    rows = replace(passing([*NODES, "e"], PAIRS), "D-OP-03", "a", "fail")
    report = gate(rows)
    assert {n for n, g in report.nodes.items() if g.result is Result.FAIL} == set(NODES)  # not e: A100
    rows = replace(passing([*NODES, "e"], PAIRS), "D-NET-NCCL-02", "b+d", "fail")
    report = gate(rows)
    assert {n for n, g in report.nodes.items() if g.result is Result.FAIL} == {"b", "d"}


def test_missing_evidence_is_never_a_pass() -> None:
    rows = [
        r
        for r in passing([*NODES, "e"], PAIRS)
        if not (r["criterion"] == "D-NET-NCCL-01" and r["subject"] == "d")
    ]
    rows = [r for r in rows if not (r["subject"] == "c" and r["criterion"].startswith("D-NET-NCCL"))]
    report = gate(rows)
    assert report.nodes["d"].result is Result.PASS  # its other intra verdicts stand for the stage
    c = report.nodes["c"]
    assert c.result is Result.INCONCLUSIVE and "left no verdict" in c.reason
    # A stage that never planned, or did not test a node it should have, holds it too.
    assert gate(passing([*NODES, "e"], PAIRS), nccl_pairs=None).nodes["a"].result is Result.INCONCLUSIVE
    partial = {"enabled": True, "nodes": ["a", "b"]}
    assert "did not test" in gate(passing([*NODES, "e"], PAIRS), nccl_intra=partial).nodes["c"].reason


def test_a_stage_turned_off_or_a_note_on_a_node() -> None:
    report = gate(passing([*NODES, "e"], []), nccl_pairs={"enabled": False, "nodes": []})
    assert report.nodes["a"].action == ADMIT and report.nodes["a"].stages["nccl_pairs"] == "off"
    noted = {
        "enabled": True,
        "nodes": [*NODES, "e"],
        "notes": {"e": "no NCCL pair: the only node of its profile"},
    }
    report = gate(passing([*NODES, "e"], PAIRS), nccl_pairs=noted)
    assert report.nodes["e"].result is Result.INCONCLUSIVE and "only node" in report.nodes["e"].reason


def test_no_baseline_holds_at_the_gate_but_does_not_stop_the_funnel() -> None:
    rows = replace(
        passing([*NODES, "e"], PAIRS), "D-NET-NCCL-01", "a", "inconclusive", rule_id="nccl.busbw.no_baseline"
    )
    assert gate(rows).nodes["a"].result is Result.INCONCLUSIVE
    going, stopped = still_in(PLAN, rows, runs()[:3])
    assert "a" in going and stopped == {}
    rows = replace(rows, "D-DEV-01", "b", "inconclusive")
    going, stopped = still_in(PLAN, rows, runs()[:3])
    assert "b" not in going and "D-DEV-01 inconclusive" in stopped["b"]


def test_the_report_round_trips() -> None:
    report = gate(replace(passing([*NODES, "e"], PAIRS), "D-DEV-01", "b", "warn"))
    assert GateReport.from_json(report.to_json()) == report


def test_the_mig_stage_speaks_for_the_mig_pool_only() -> None:
    from fleetval.onboarding.registry import MIG_GROUP, StageSpec

    inventory = [node("m1", labels={"nvidia.com/mig.config": "all-1g.10gb"}), node("p1")]
    plan = plan_onboarding(OnboardingRequest(rack="r01", run_pairs=False), inventory, max_nodes=10)
    mig = StageSpec("mig", "MIG layouts", "group", 0, "fleetval.onboarding.stages:MIG", group=MIG_GROUP)
    stages = [
        *[StageRun(s, load(s), {"enabled": True, "nodes": ["m1", "p1"]}) for s in STAGES[:3]],
        StageRun(STAGES[3], load(STAGES[3]), {"enabled": False, "nodes": []}),
        StageRun(mig, load(mig), {"enabled": True, "nodes": ["m1"]}),
    ]
    rows = [r for r in passing(["m1", "p1"], []) if r["criterion"] != "D-OP-03" or r["subject"] == "a"]
    rows += [row("D-OP-03", "m1", "pass")]
    report = decide(plan, rows, stages)
    assert report.nodes["p1"].stages["mig"] == "not applicable" and report.nodes["p1"].action == ADMIT
    assert report.nodes["m1"].result is Result.INCONCLUSIVE  # a MIG pool node with no MIG verdict
    rows += [
        row("D-GPU-MIG-01", "m1", "pass"),
        row("D-GPU-MIG-03", "m1/restore", "error"),
        row("D-GPU-MIG-05", "mig-pool", "fail"),
    ]
    m1 = decide(plan, rows, stages).nodes["m1"]
    assert m1.result is Result.ERROR and m1.findings[0].subject == "m1/restore"  # not the pool's verdict
