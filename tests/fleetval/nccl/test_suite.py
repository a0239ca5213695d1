"""The network suite's steps, composed the way the DAG sequences them (tests/nccl_lab.py), on the
simulated `netlab` fleet: raw output from the simulator's nccl-tests model (what a pod or MPIJob on
the simulated cluster prints), inventory and labels from a stand-in for the cluster. Baselines
measured on healthy reference nodes, every injected NCCL fault caught by the criterion it violates
on the right node or pair, healthy nodes passing, fault isolation in rounds (resumable, stopped by
a harness error, never blaming a node on a probe that did not run), the gate and its labels,
reruns. The DAGs run end to end in tests/e2e/test_nccl_dags.py."""

from __future__ import annotations

import pathlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from fleetval.nccl import baselines as nccl_baselines
from fleetval.nccl import gate as nccl_gate
from fleetval.nccl import isolation as nccl_isolation
from fleetval.nccl import judge_stored as nccl_judge
from fleetval.nccl import plan as nccl_plan
from fleetval.nccl.baseline_stats import BaselineError
from fleetval.nodes import NodeInfo
from fleetval.records import Result
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.models import Measurement, NodeEvent, Probe, VerdictRow
from fleetval.store.repository import Store
from tests.nccl_lab import DRIVER, PROFILE, Lab, isolate, sweep

REFERENCE = ["r01-n01", "r01-n03", "r01-n05", "r02-n02", "r02-n04", "r02-n06"]
# node → criteria its intra-node run must fail (and may fail: flaky may also dip below 90 %)
INTRA_FAULTS: dict[str, tuple[set[str], set[str]]] = {
    "r01-n02": ({"D-NET-NCCL-01"}, set()),  # nvlink_degraded
    "r01-n04": ({"D-NET-NCCL-TRANSPORT"}, set()),  # socket_fallback
    "r01-n06": ({"D-NET-NCCL-04"}, {"D-NET-NCCL-01"}),  # flaky
    "r02-n05": ({"D-NET-NCCL-03"}, set()),  # hang
    "r02-n07": ({"D-NET-NCCL-03"}, set()),  # wrong
}
# node → criteria a pair with it must fail
PAIR_FAULTS: dict[str, tuple[set[str], set[str]]] = {
    "r01-n02": ({"D-NET-NCCL-02"}, set()),
    "r01-n04": ({"D-NET-NCCL-TRANSPORT", "D-NET-NCCL-02"}, set()),
    "r01-n06": ({"D-NET-NCCL-04"}, {"D-NET-NCCL-02"}),
    "r02-n03": ({"D-NET-NCCL-03"}, set()),  # IB errors: invisible intra-node
    "r02-n05": ({"D-NET-NCCL-03"}, set()),
    "r02-n07": ({"D-NET-NCCL-03"}, set()),
}
FAULTY = set(PAIR_FAULTS)
NODE_CRITERIA = ("D-NET-NCCL-01", "D-NET-NCCL-03", "D-NET-NCCL-TRANSPORT", "D-NET-NCCL-04")


@pytest.fixture
def lab(pg_url: str) -> Iterator[tuple[Store, Lab]]:
    """The whole sweep on the product's store, PostgreSQL (the other tests here run on the SQLite
    default, so both dialects stay covered without running the longest test twice)."""
    engine = make_engine(pg_url)
    upgrade(engine)
    yield Store(engine), Lab()
    engine.dispose()


@pytest.fixture
def lite(tmp_path: pathlib.Path) -> Iterator[tuple[Store, Lab]]:
    engine = make_engine(f"sqlite:///{tmp_path}/fleetval.db")
    upgrade(engine)
    yield Store(engine), Lab()
    engine.dispose()


def establish_reference_baselines(store: Store, lab: Lab) -> dict[str, int]:
    ref_run = sweep(store, lab, run_key="reference", nodes=REFERENCE, dry_run=True)
    ids = {}
    for scope in ("intra-8", "inter-2x8"):
        made = nccl_baselines.establish_baseline(store, ref_run, PROFILE, scope)
        store.promote_baseline(made.baseline_id)
        ids[scope] = made.baseline_id
    return ids


def failed_by_subject(rows: list[dict[str, Any]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        failed = out[r["subject"]]  # every subject present, failed or not
        if r["result"] == "fail":
            failed.add(r["criterion"])
    return out


@pytest.mark.postgres
def test_sweep_catches_every_nccl_fault_on_the_right_subject(lab: tuple[Store, Lab]) -> None:
    store, cluster = lab
    baseline_ids = establish_reference_baselines(store, cluster)
    intra_row = store.promoted_baseline(profile=PROFILE, metric=nccl_judge.METRIC, scope="intra-8")
    inter_row = store.promoted_baseline(profile=PROFILE, metric=nccl_judge.METRIC, scope="inter-2x8")
    assert intra_row and inter_row
    # measured on our reference nodes, not copied from the profile's truth, but close to it
    assert intra_row["value"] == pytest.approx(480, rel=0.03) and intra_row["value"] != 480
    assert inter_row["value"] == pytest.approx(370, rel=0.03)
    assert set(intra_row["source"]["reference_subjects"]) == set(REFERENCE)

    cluster.upgrade_driver()
    assert len(nccl_plan.pending_upgrade_nodes(cluster.list_nodes())) == 16
    cluster.probed.clear()
    run_id = sweep(store, cluster, run_key="post-upgrade/1", nodes=None)
    rows = store.verdicts(run_id)
    failed = failed_by_subject(rows)

    nodes = [n.name for n in cluster.list_nodes()]
    for node in nodes:
        must, may = INTRA_FAULTS.get(node, (set(), set()))
        assert must <= failed[node] <= must | may | {"D-NET-NCCL-02"}, node  # -02: isolation result
    for node in set(nodes) - FAULTY:
        assert failed[node] == set(), node
        results = {r["criterion"]: r["result"] for r in rows if r["subject"] == node}
        assert results == dict.fromkeys(NODE_CRITERIA, "pass")

    plan = nccl_plan.NcclPlan.from_json(store.run_meta(run_id)["plan"])
    assert {n for p in plan.pairs for n in p} == set(nodes)  # every node in at least one pair
    for pair in plan.pairs:
        subject = "+".join(pair)
        bad = FAULTY & set(pair)
        if not bad:
            assert failed[subject] == set(), subject
            continue
        (node,) = bad
        must, may = PAIR_FAULTS[node]
        assert must <= failed[subject] <= must | may, subject

    # waves: 3 intra (one batch × 3 repeats), then pairs (disjoint batch + the odd-out batch) × 3
    waves = [len(w) for w in cluster.probed[: 3 + len(plan.waves("pairs"))]]
    assert waves[:3] == [16, 16, 16] and sum(waves[3:]) == 3 * len(plan.pairs)

    # the bad node behind each failing pair is located, named under D-NET-NCCL-02
    isolation = store.run_meta(run_id)["isolation"]
    assert sorted(isolation["bad"]) == sorted(FAULTY) and isolation["undetermined"] == []
    assert isolation["harness_errors"] == [] and isolation["probes_used"] == len(isolation["groups"])
    located = {r["subject"]: r for r in rows if r["rule_id"] == "nccl.isolation.located"}
    assert set(located) == FAULTY
    assert located["r02-n03"]["evidence"]["failed_criteria"] == ["D-NET-NCCL-03"]
    assert all(r["result"] == "fail" and r["criterion"] == "D-NET-NCCL-02" for r in located.values())
    # isolation ran one repeat of every pair of a round at once (node-disjoint: Lab.run checks)
    rounds = cluster.probed[3 + len(plan.waves("pairs")) :]
    assert sum(len(r) for r in rounds) == 3 * isolation["probes_used"]
    assert len(rounds) == isolation["rounds"] < 3 * isolation["probes_used"]

    # every busbw verdict names the baseline row and version it was judged against
    busbw = [r for r in rows if r["rule_id"].startswith("nccl.busbw.")]
    assert busbw
    for r in busbw:
        scope = "intra-8" if r["criterion"] == "D-NET-NCCL-01" else "inter-2x8"
        assert r["baseline_id"] == baseline_ids[scope]
        assert r["judged_against"]["baseline_version"] == 1

    # what must be recorded with every measurement
    with store.engine.connect() as conn:
        attrs = conn.execute(Measurement.__table__.select().limit(1)).first()._mapping["attrs"]  # type: ignore[union-attr]
    assert {"nccl_version", "transports", "nccl_env", "scope", "repeat", "size", "profile"} <= set(attrs)

    # the gate: fail, rollout halted, nodes labelled, swept nodes marked
    gate = store.run_meta(run_id)["gate"]
    assert gate["result"] == "fail" and gate["halt_rollout"] is True
    labels = {n.name: n.labels for n in cluster.list_nodes()}
    for node in nodes:
        assert labels[node][nccl_gate.GATE_LABEL] == ("fail" if node in FAULTY else "pass"), node
        assert labels[node][nccl_plan.SWEPT_LABEL] == DRIVER
    assert nccl_plan.pending_upgrade_nodes(cluster.list_nodes()) == {}
    halts = store.node_events(kind="rollout_halt")
    assert len(halts) == 1 and "autoUpgrade=false" in halts[0]["details"]["mechanism"]

    # a rerun under the same run key adds nothing
    counts = [store.count(m) for m in (VerdictRow, Probe, Measurement, NodeEvent)]
    sweep(store, cluster, run_key="post-upgrade/1", nodes=None)
    assert [store.count(m) for m in (VerdictRow, Probe, Measurement, NodeEvent)] == counts


def test_without_a_promoted_baseline_busbw_is_inconclusive(lite: tuple[Store, Lab]) -> None:
    store, cluster = lite
    run_id = sweep(store, cluster, run_key="first", nodes=["r01-n01", "r02-n02"])
    rows = store.verdicts(run_id)
    busbw = [r for r in rows if r["criterion"] in ("D-NET-NCCL-01", "D-NET-NCCL-02")]
    assert {r["subject"] for r in busbw} == {"r01-n01", "r02-n02", "r01-n01+r02-n02"}
    for r in busbw:
        assert r["result"] == "inconclusive" and r["rule_id"] == "nccl.busbw.no_baseline"
        assert PROFILE in r["reason"] and ("intra-8" in r["reason"] or "inter-2x8" in r["reason"])
        assert r["baseline_id"] is None
    assert {r["result"] for r in rows if r["criterion"] == "D-NET-NCCL-03"} == {"pass"}
    gate = store.run_meta(run_id)["gate"]
    assert gate["result"] == "inconclusive" and gate["halt_rollout"] is False
    assert {
        n.labels.get(nccl_gate.GATE_LABEL) for n in cluster.list_nodes() if n.name in ("r01-n01", "r02-n02")
    } == {"inconclusive"}


def test_establish_baseline_drops_a_sick_reference_node(lite: tuple[Store, Lab]) -> None:
    store, cluster = lite
    run_id = sweep(store, cluster, run_key="ref", nodes=[*REFERENCE, "r01-n02"])
    made = nccl_baselines.establish_baseline(store, run_id, PROFILE, "intra-8")
    assert made.source["excluded_outliers"] == ["r01-n02"]
    assert made.value == pytest.approx(480, rel=0.03)
    row = store.promoted_baseline(profile=PROFILE, metric=nccl_judge.METRIC, scope="intra-8")
    assert row is None  # a candidate until promoted explicitly
    # rows of runs that errored or used the wrong transport are not measurements to learn from
    run2 = sweep(store, cluster, run_key="ref2", nodes=["r01-n04", "r02-n05"])
    with pytest.raises(BaselineError, match="no usable"):
        nccl_baselines.establish_baseline(store, run2, PROFILE, "intra-8")


def test_dry_run_labels_nothing_and_records_what_it_would_do(lite: tuple[Store, Lab]) -> None:
    store, cluster = lite
    establish_reference_baselines(store, cluster)
    before = {n.name: dict(n.labels) for n in cluster.list_nodes()}
    nodes = ["r01-n02", "r01-n01", "r01-n03"]
    run_id = sweep(store, cluster, run_key="dry", nodes=nodes, dry_run=True)
    assert {n.name: n.labels for n in cluster.list_nodes()} == before
    events = store.node_events(run_id=run_id)
    assert events and all(e["dry_run"] for e in events)
    assert {e["kind"] for e in events} == {"label", "rollout_halt"}
    meta = store.run_meta(run_id)
    assert meta["gate"]["node_labels"] == {"r01-n01": "pass", "r01-n02": "fail", "r01-n03": "pass"}
    assert meta["isolation"]["bad"] == ["r01-n02"]
    assert meta["swept"] == dict.fromkeys(nodes, "570.133.20")  # what would be marked; nothing was


def test_a_pair_that_cannot_be_told_apart_is_undetermined(lite: tuple[Store, Lab]) -> None:
    store, cluster = lite
    establish_reference_baselines(store, cluster)
    run_id = sweep(store, cluster, run_key="two", nodes=["r01-n01", "r02-n03"])
    rows = {(r["criterion"], r["subject"]): r for r in store.verdicts(run_id)}
    assert rows[("D-NET-NCCL-03", "r01-n01+r02-n03")]["result"] == "fail"
    # two nodes, no known-good partner: which one is bad is not guessed
    for node in ("r01-n01", "r02-n03"):
        assert rows[("D-NET-NCCL-02", node)]["result"] == "inconclusive"
        assert rows[("D-NET-NCCL-02", node)]["rule_id"] == "nccl.isolation.undetermined"
    gate = store.run_meta(run_id)["gate"]
    assert gate["result"] == "fail" and gate["node_labels"] == {
        "r01-n01": "inconclusive",
        "r02-n03": "inconclusive",
    }


def test_a_harness_error_in_isolation_stops_the_search_and_blames_nobody(lite: tuple[Store, Lab]) -> None:
    store, cluster = lite
    establish_reference_baselines(store, cluster)
    # every isolation group probe breaks (say Kueue never admits them): the pairs still fail, but
    # no node is located on a probe that did not run
    cluster.broken = lambda spec: (
        "MPIJob x was not admitted by Kueue" if "/isolate/" in spec.probe_key else None
    )
    nodes = ["r01-n01", "r01-n03", "r01-n05", "r02-n02", "r02-n03", "r02-n04"]
    run_id = sweep(store, cluster, run_key="broken", nodes=nodes)
    isolation = store.run_meta(run_id)["isolation"]
    told_apart = ["r01-n03", "r02-n03"]  # the failing pair: neither was told apart
    assert isolation["bad"] == [] and isolation["undetermined"] == isolation["interrupted"] == told_apart
    # one round: each suspect with a known-good partner, both probes broken
    assert len(isolation["harness_errors"]) == isolation["probes_used"] == 2
    rows = {(r["criterion"], r["subject"]): r for r in store.verdicts(run_id)}
    for node in told_apart:
        verdict = rows[("D-NET-NCCL-02", node)]
        assert (verdict["result"], verdict["rule_id"]) == ("inconclusive", "nccl.isolation.interrupted")
    group = isolation["harness_errors"][0]
    assert rows[("D-NET-NCCL-02", group)]["result"] == "error"
    assert store.run_meta(run_id)["gate"]["result"] == "fail"  # the failing pair still halts


def test_isolation_resumes_from_the_store(lite: tuple[Store, Lab]) -> None:
    """A retried isolation task starts over from the store: what ran is not run again."""
    store, cluster = lite
    establish_reference_baselines(store, cluster)
    nodes = ["r01-n01", "r01-n02", "r01-n03", "r01-n05", "r02-n02", "r02-n04"]
    run_key = "resume"
    run_id = store.ensure_run(run_key, suite=nccl_plan.SUITE, backend="test")
    plan = nccl_plan.plan_sweep(cluster.list_nodes(), only=nodes)
    for kind in nccl_plan.KINDS:
        for wave in range(len(plan.waves(kind))):
            cluster.run(store, run_id, nccl_plan.wave_specs(plan, kind, wave, run_key=run_key))
    lookup = nccl_judge.promoted_lookup(store)
    nccl_judge.judge_sweep(store, run_id, nccl_plan.sweep_specs(plan, run_key=run_key), lookup=lookup)

    first = nccl_isolation.isolation_step(store, run_id=run_id, run_key=run_key, plan=plan, lookup=lookup)
    again = nccl_isolation.isolation_step(store, run_id=run_id, run_key=run_key, plan=plan, lookup=lookup)
    assert first.probes == again.probes and first.report is None  # nothing stored: the same ask
    spec = first.probes[0]  # a round: each suspect of the failing pair with a known-good partner
    assert all(s.params["repeat"] == 0 and s.params["purpose"] == "isolation" for s in first.probes)
    cluster.run(store, run_id, first.probes)
    second = nccl_isolation.isolation_step(
        store, run_id=run_id, run_key=run_key, plan=plan, lookup=lookup
    ).probes
    assert [s.params["nodes"] for s in second] == [s.params["nodes"] for s in first.probes]
    assert all(s.params["repeat"] == 1 for s in second)  # their next repeat
    cluster.probed.clear()
    report = isolate(store, cluster, run_id=run_id, run_key=run_key, plan=plan)
    assert report.bad == ["r01-n02"]
    assert all(s.probe_key != spec.probe_key for r in cluster.probed for s in r)


def test_a_probe_that_left_nothing_is_an_error_never_a_pass(lite: tuple[Store, Lab]) -> None:
    store, cluster = lite
    run_id = store.ensure_run("missing", suite=nccl_plan.SUITE, backend="test")
    plan = nccl_plan.plan_sweep(cluster.list_nodes(), only=["r01-n01", "r01-n03"], repeats=1)
    specs = nccl_plan.sweep_specs(plan, run_key="missing")
    cluster.run(store, run_id, [s for s in specs if s.node == "r01-n01"])  # the rest never ran
    judged = nccl_judge.judge_sweep(store, run_id, specs, lookup=lambda p, s: nccl_judge.BaselineRef(p, s))
    outcomes = {o.subject: o.result for o in judged}
    assert outcomes["r01-n03"] is outcomes["r01-n01+r01-n03"] is Result.ERROR
    assert outcomes["r01-n01"] is not Result.ERROR
    [missing] = store.probes(run_id, [s.probe_key for s in specs if s.node == "r01-n03"])
    assert "without the pod completing" in missing["spec"]["harness_error"]


def _info(name: str, rack: str, **kw: Any) -> NodeInfo:
    return NodeInfo(name=name, rack=rack, profile=kw.pop("profile", "p"), gpus=kw.pop("gpus", 8), **kw)


def test_plan_covers_every_node_in_pairs_and_fits_the_map_length() -> None:
    nodes = [_info(f"r{r:02d}-n{i:03d}", f"r{r:02d}") for r in range(31) for i in range(101)]  # 3131
    nodes += [
        _info("busy", "r99", gpu_pods=2),
        _info("q", "r99", labels={"fleetval.io/quarantine": "x"}),
        _info("cpu", "r99", gpus=0),
        _info("other-1", "r98", profile="a100"),
        _info(
            "new",
            "r99",
            taints=({"key": "fleetval.io/onboarding", "value": "pending", "effect": "NoSchedule"},),
        ),
    ]
    plan = nccl_plan.plan_sweep(nodes, max_wave_size=128, max_waves=128)
    assert plan.skipped == {
        "busy": "busy (2 GPU pods)",
        "q": "quarantined",
        "cpu": "no GPUs",
        "new": "being onboarded (rack_onboarding)",
    }
    for kind in nccl_plan.KINDS:  # one wave DAG run per wave, one mapped task per probe in it
        waves = plan.waves(kind)
        assert len(waves) <= 128
        sizes = [len(nccl_plan.wave_specs(plan, kind, w, run_key="k")) for w in range(len(waves))]
        assert max(sizes) <= 128
    assert sorted(n for b in plan.intra_batches for n in b) == sorted(plan.nodes)
    paired = {n for p in plan.pairs for n in p}
    assert paired == set(plan.nodes) - {"other-1"}  # a lone node of its profile has no partner
    assert all(len(p) == 2 and plan.nodes[p[0]].profile == plan.nodes[p[1]].profile for p in plan.pairs)
    # no wave uses a node twice (the odd node out's pair, sharing a node, is in a batch of its own)
    for batch in [*plan.pair_batches, *plan.intra_batches]:
        members = [n for p in batch for n in ([p] if isinstance(p, str) else p)]
        assert len(members) == len(set(members))
    assert plan.pair_batches[-1] == [[nodes[3130].name, nodes[0].name]]
    # every probe of the sweep is in exactly one wave, every repeat of a subject in a different one
    specs = nccl_plan.sweep_specs(plan, run_key="k")
    assert len(specs) == len({s.probe_key for s in specs}) == 3 * (len(plan.nodes) + len(plan.pairs))
    # pairs cross racks
    assert sum(plan.nodes[a].rack != plan.nodes[b].rack for a, b in plan.pairs) > 0.9 * len(plan.pairs)
    assert nccl_plan.NcclPlan.from_json(plan.to_json()) == plan
    # Airflow's default max_map_length (1024) holds 100k nodes; past what fits, the plan says so
    with pytest.raises(ValueError, match="max_map_length"):
        nccl_plan.plan_sweep(nodes, max_wave_size=16, max_waves=16)


def test_plan_of_named_nodes_and_pending_upgrades() -> None:
    done = {nccl_plan.UPGRADE_STATE_LABEL: nccl_plan.UPGRADE_DONE, nccl_plan.DRIVER_VERSION_LABEL: "570.1"}
    nodes = [
        _info("a", "r1", labels={**done, nccl_plan.FABRIC_LABEL: "roce"}),
        _info("b", "r1", labels={**done, nccl_plan.SWEPT_LABEL: "570.1"}),  # swept on this driver
        _info("c", "r1", labels={**done, nccl_plan.SWEPT_LABEL: "550.54.15"}),  # swept on the old one
        _info("d", "r1", labels={nccl_plan.UPGRADE_STATE_LABEL: "pod-restart-required"}),
        _info("e", "r1", labels={nccl_plan.UPGRADE_STATE_LABEL: nccl_plan.UPGRADE_DONE}),  # no GFD label
    ]
    assert nccl_plan.pending_upgrade_nodes(nodes) == {"a": "570.1", "c": "570.1", "e": "unknown"}
    plan = nccl_plan.plan_sweep(nodes, only=["c", "a", "zz"], repeats=2)
    assert plan.skipped == {"zz": "unknown node"}
    assert plan.pairs == [["a", "c"]] and plan.repeats == 2
    # the fabric a node must use is its label; none (or an unknown one) → the transport is not judged
    assert (plan.nodes["a"].fabric, plan.nodes["c"].fabric) == ("roce", None)
    specs = nccl_plan.probe_specs(plan, plan.pairs, run_key="k", purpose="sweep")
    assert [s.probe_key for s in specs] == ["k/nccl-inter/a+c/r0", "k/nccl-inter/a+c/r1"]
    assert specs[0].params["scope"] == "inter-2x8" and specs[0].params["profile"] == "p"
    assert specs[0].params["fabric"] == "roce"
    assert plan.waves("pairs") == [(0, 0), (0, 1)] and plan.waves("intra") == [(0, 0), (0, 1)]
    assert nccl_plan.label_value("570.172.08+custom/x") == "570.172.08-custom-x"


# --- a bug while judging one probe is that subject's error, never the wave's abort -----------------


def _rejudge(store: Store, run_id: int) -> dict[str, nccl_judge.SubjectOutcome]:
    keys = [p["probe_key"] for p in store.probes(run_id, with_raw=False)]
    outcomes = nccl_judge.judge_stored_nccl(store, run_id, keys, lookup=nccl_judge.promoted_lookup(store))
    return {o.subject: o for o in outcomes}


@pytest.mark.parametrize("where", ["parse", "judge", "subject"])
def test_an_unexpected_exception_on_one_probe_is_an_error_verdict_for_its_subject(
    lite: tuple[Store, Lab], monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    store, cluster = lite
    run_id = sweep(store, cluster, run_key="bug", nodes=["r01-n01", "r02-n02"])
    before = {r["subject"]: r["result"] for r in store.verdicts(run_id) if r["criterion"] == "D-NET-NCCL-03"}
    assert before == {"r01-n01": "pass", "r02-n02": "pass", "r01-n01+r02-n02": "pass"}

    def boom(*_: Any, **__: Any) -> Any:
        raise KeyError("boom")

    if where == "parse":  # r01-n01's own runs: the only raw output without the other host in it
        real_parse = nccl_judge.parse_nccl
        monkeypatch.setattr(
            nccl_judge,
            "parse_nccl",
            lambda text: boom() if "r01-n01:" in text and "r02-n02" not in text else real_parse(text),
        )
    elif where == "judge":
        real_judge = nccl_judge.judge_nccl_run
        monkeypatch.setattr(
            nccl_judge,
            "judge_nccl_run",
            lambda run, **kw: boom() if kw["subject"] == "r01-n01" else real_judge(run, **kw),
        )
    else:
        real_evaluate = nccl_judge.evaluate_subject
        monkeypatch.setattr(
            nccl_judge,
            "evaluate_subject",
            lambda nodes, reps, **kw: (
                boom() if list(nodes) == ["r01-n01"] else real_evaluate(nodes, reps, **kw)
            ),
        )
    outcomes = _rejudge(store, run_id)

    broken = outcomes["r01-n01"]
    assert broken.result is Result.ERROR
    single_run = [v for v in broken.verdicts if v.criterion != "D-NET-NCCL-04"]
    assert len(single_run) == 3
    for v in single_run:
        assert (v.result, v.rule_id, v.action) == (Result.ERROR, "nccl.internal_error", "investigate-harness")
        assert "KeyError" in v.reason and v.evidence["exception_type"] == "KeyError"
    for subject in ("r02-n02", "r01-n01+r02-n02"):  # judged as before
        assert {v.criterion: v.result for v in outcomes[subject].verdicts}["D-NET-NCCL-03"] is Result.PASS
    stored = {r["subject"]: r["result"] for r in store.verdicts(run_id) if r["criterion"] == "D-NET-NCCL-03"}
    assert stored == {"r01-n01": "error", "r02-n02": "pass", "r01-n01+r02-n02": "pass"}


def test_a_probe_row_with_raw_bytes_is_read_like_its_text(lite: tuple[Store, Lab]) -> None:
    """A probes table row holds the output's bytes and codec; `nccl_queries.probes_by_ids` decodes
    them as `Store.probes` does. Both are the same repeat."""
    from fleetval.nccl.simulated import render_nccl_tests
    from fleetval.store import nccl_queries
    from fleetval.store.repository import ProbeIn

    store, _ = lite
    text = render_nccl_tests(nranks=8, nnodes=1, busbw_gbps=480.0, seed=1, transport="NVLink", hosts=["n"])
    run_id = store.ensure_run("raw-bytes", suite="nccl", backend="k8s")
    store.ingest(run_id, [ProbeIn(probe_key="k", tool="nccl", raw=text + "\x00", nodes=("n",))])
    [probe] = store.probes(run_id)
    [row] = nccl_queries.probes_by_ids(store, [int(probe["id"])])
    as_row = nccl_judge.repeat_from_probe(row)
    as_text = nccl_judge.repeat_from_probe(probe)
    assert row["raw"] == probe["raw"] == text + "\x00"
    assert as_row == as_text and as_row.run is not None and as_row.run.complete
