"""The network suite end to end in-process on the simulated `netlab` fleet: baselines measured on
healthy reference nodes, every injected NCCL fault caught by the criterion it violates on the
right node or pair, healthy nodes passing, fault isolation, the gate and its labels, reruns."""

from __future__ import annotations

import pathlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from fleetval.backends import NodeInfo
from fleetval.baselines.nccl import BaselineError
from fleetval.sim.cluster import SimCluster
from fleetval.sim.spec import load_fleet_spec
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.models import Measurement, NodeEvent, Probe, VerdictRow
from fleetval.store.repository import Store
from fleetval.suites import nccl
from tests.paths import ROOT

NETLAB = ROOT / "include" / "fleetval" / "sim" / "fleets" / "netlab.yaml"
PROFILE = "h100-sxm-ndr"
REFERENCE = ["r01-n01", "r01-n03", "r01-n05", "r02-n02", "r02-n04", "r02-n06"]
DRIVER = "570.172.08"
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


def _load(engine: Any) -> SimCluster:
    return SimCluster.load(engine, load_fleet_spec(NETLAB.read_text()))


def upgrade_driver(cluster: SimCluster, driver: str = DRIVER) -> None:
    """What GPU feature discovery and the operator's upgrade controller leave on upgraded nodes."""
    for node in cluster.list_nodes():
        cluster.set_labels(
            node.name, {nccl.DRIVER_VERSION_LABEL: driver, nccl.UPGRADE_STATE_LABEL: nccl.UPGRADE_DONE}
        )


@pytest.fixture
def lab(store: Store) -> tuple[Store, SimCluster]:
    return store, _load(store.engine)


@pytest.fixture
def lite(tmp_path: pathlib.Path) -> Iterator[tuple[Store, SimCluster]]:
    engine = make_engine(f"sqlite:///{tmp_path}/fleetval.db")
    upgrade(engine)
    yield Store(engine), _load(engine)
    engine.dispose()


def establish_reference_baselines(store: Store, cluster: SimCluster) -> dict[str, int]:
    ref_run = nccl.run_sweep(store, cluster, run_key="reference", nodes=REFERENCE)
    ids = {}
    for scope in ("intra-8", "inter-2x8"):
        made = nccl.establish_baseline(store, ref_run, PROFILE, scope)
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


def test_sweep_catches_every_nccl_fault_on_the_right_subject(lab: tuple[Store, SimCluster]) -> None:
    store, cluster = lab
    baseline_ids = establish_reference_baselines(store, cluster)
    intra_row = store.promoted_baseline(profile=PROFILE, metric=nccl.METRIC, scope="intra-8")
    inter_row = store.promoted_baseline(profile=PROFILE, metric=nccl.METRIC, scope="inter-2x8")
    assert intra_row and inter_row
    # measured on our reference nodes, not copied from the profile's truth, but close to it
    assert intra_row["value"] == pytest.approx(480, rel=0.03) and intra_row["value"] != 480
    assert inter_row["value"] == pytest.approx(370, rel=0.03)
    assert set(intra_row["source"]["reference_subjects"]) == set(REFERENCE)

    upgrade_driver(cluster)
    assert len(nccl.pending_upgrade_nodes(cluster.list_nodes())) == 16
    run_id = nccl.run_sweep(store, cluster, run_key="post-upgrade/1", nodes=None)
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

    plan = nccl.NcclPlan.from_json(store.run_meta(run_id)["plan"])
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

    # the bad node behind each failing pair is located, named under D-NET-NCCL-02
    isolation = store.run_meta(run_id)["isolation"]
    assert sorted(isolation["bad"]) == sorted(FAULTY) and isolation["undetermined"] == []
    located = {r["subject"]: r for r in rows if r["rule_id"] == "nccl.isolation.located"}
    assert set(located) == FAULTY
    assert located["r02-n03"]["evidence"]["failed_criteria"] == ["D-NET-NCCL-03"]
    assert all(r["result"] == "fail" and r["criterion"] == "D-NET-NCCL-02" for r in located.values())

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
        assert labels[node][nccl.GATE_LABEL] == ("fail" if node in FAULTY else "pass"), node
        assert labels[node][nccl.SWEPT_LABEL] == DRIVER
    assert nccl.pending_upgrade_nodes(cluster.list_nodes()) == {}
    halts = store.node_events(kind="rollout_halt")
    assert len(halts) == 1 and "autoUpgrade=false" in halts[0]["details"]["mechanism"]

    # a rerun under the same run key adds nothing
    counts = [store.count(m) for m in (VerdictRow, Probe, Measurement, NodeEvent)]
    nccl.run_sweep(store, cluster, run_key="post-upgrade/1", nodes=None)
    assert [store.count(m) for m in (VerdictRow, Probe, Measurement, NodeEvent)] == counts


def test_without_a_promoted_baseline_busbw_is_inconclusive(lite: tuple[Store, SimCluster]) -> None:
    store, cluster = lite
    run_id = nccl.run_sweep(store, cluster, run_key="first", nodes=["r01-n01", "r02-n02"])
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
        n.labels.get(nccl.GATE_LABEL) for n in cluster.list_nodes() if n.name in ("r01-n01", "r02-n02")
    } == {"inconclusive"}


def test_establish_baseline_drops_a_sick_reference_node(lite: tuple[Store, SimCluster]) -> None:
    store, cluster = lite
    run_id = nccl.run_sweep(store, cluster, run_key="ref", nodes=[*REFERENCE, "r01-n02"])
    made = nccl.establish_baseline(store, run_id, PROFILE, "intra-8")
    assert made.source["excluded_outliers"] == ["r01-n02"]
    assert made.value == pytest.approx(480, rel=0.03)
    row = store.promoted_baseline(profile=PROFILE, metric=nccl.METRIC, scope="intra-8")
    assert row is None  # a candidate until promoted explicitly
    # rows of runs that errored or used the wrong transport are not measurements to learn from
    run2 = nccl.run_sweep(store, cluster, run_key="ref2", nodes=["r01-n04", "r02-n05"])
    with pytest.raises(BaselineError, match="no usable"):
        nccl.establish_baseline(store, run2, PROFILE, "intra-8")


def test_dry_run_labels_nothing_and_records_what_it_would_do(lite: tuple[Store, SimCluster]) -> None:
    store, cluster = lite
    establish_reference_baselines(store, cluster)
    before = {n.name: dict(n.labels) for n in cluster.list_nodes()}
    nodes = ["r01-n02", "r01-n01", "r01-n03"]
    run_id = nccl.run_sweep(store, cluster, run_key="dry", nodes=nodes, dry_run=True)
    assert {n.name: n.labels for n in cluster.list_nodes()} == before
    events = store.node_events(run_id=run_id)
    assert events and all(e["dry_run"] for e in events)
    assert {e["kind"] for e in events} == {"label", "rollout_halt"}
    meta = store.run_meta(run_id)
    assert meta["gate"]["node_labels"] == {"r01-n01": "pass", "r01-n02": "fail", "r01-n03": "pass"}
    assert meta["isolation"]["bad"] == ["r01-n02"]
    assert meta["swept"] == dict.fromkeys(nodes, "unknown")  # what would be marked; nothing was


def test_a_pair_that_cannot_be_told_apart_is_undetermined(lite: tuple[Store, SimCluster]) -> None:
    store, cluster = lite
    establish_reference_baselines(store, cluster)
    run_id = nccl.run_sweep(store, cluster, run_key="two", nodes=["r01-n01", "r02-n03"])
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


def _info(name: str, rack: str, **kw: Any) -> NodeInfo:
    return NodeInfo(name=name, rack=rack, profile=kw.pop("profile", "p"), gpus=kw.pop("gpus", 8), **kw)


def test_plan_covers_every_node_in_pairs_and_fits_the_map_length() -> None:
    nodes = [_info(f"r{r:02d}-n{i:03d}", f"r{r:02d}") for r in range(31) for i in range(101)]  # 3131
    nodes += [
        _info("busy", "r99", gpu_pods=2),
        _info("q", "r99", labels={"fleetval.io/quarantine": "x"}),
        _info("cpu", "r99", gpus=0),
        _info("other-1", "r98", profile="a100"),
    ]
    plan = nccl.plan_sweep(nodes, max_batches=64)
    assert plan.skipped == {"busy": "busy (2 GPU pods)", "q": "quarantined", "cpu": "no GPUs"}
    assert len(plan.intra_batches) <= 64 and len(plan.pair_batches) <= 64
    assert sorted(n for b in plan.intra_batches for n in b) == sorted(plan.nodes)
    paired = {n for p in plan.pairs for n in p}
    assert paired == set(plan.nodes) - {"other-1"}  # a lone node of its profile has no partner
    assert all(len(p) == 2 and plan.nodes[p[0]].profile == plan.nodes[p[1]].profile for p in plan.pairs)
    # disjoint pairs in the big batches; the odd node out's pair (sharing a node) in its own batch
    for batch in plan.pair_batches[:-1]:
        members = [n for p in batch for n in p]
        assert len(members) == len(set(members))
    assert plan.pair_batches[-1] == [[nodes[3130].name, nodes[0].name]]
    # pairs cross racks
    assert sum(plan.nodes[a].rack != plan.nodes[b].rack for a, b in plan.pairs) > 0.9 * len(plan.pairs)
    assert nccl.NcclPlan.from_json(plan.to_json()) == plan


def test_plan_of_named_nodes_and_pending_upgrades() -> None:
    done = {nccl.UPGRADE_STATE_LABEL: nccl.UPGRADE_DONE, nccl.DRIVER_VERSION_LABEL: "570.1"}
    nodes = [
        _info("a", "r1", labels=done),
        _info("b", "r1", labels={**done, nccl.SWEPT_LABEL: "570.1"}),  # swept on this driver
        _info("c", "r1", labels={**done, nccl.SWEPT_LABEL: "550.54.15"}),  # swept on the old one
        _info("d", "r1", labels={nccl.UPGRADE_STATE_LABEL: "pod-restart-required"}),
        _info("e", "r1", labels={nccl.UPGRADE_STATE_LABEL: nccl.UPGRADE_DONE}),  # no GFD label
    ]
    assert nccl.pending_upgrade_nodes(nodes) == {"a": "570.1", "c": "570.1", "e": "unknown"}
    plan = nccl.plan_sweep(nodes, only=["c", "a", "zz"], repeats=2)
    assert plan.skipped == {"zz": "unknown node"}
    assert plan.pairs == [["a", "c"]] and plan.repeats == 2
    specs = nccl.probe_specs(plan, plan.pairs, run_key="k", purpose="sweep")
    assert [s.probe_key for s in specs] == ["k/nccl-inter/a+c/r0", "k/nccl-inter/a+c/r1"]
    assert specs[0].params["scope"] == "inter-2x8" and specs[0].params["profile"] == "p"
    assert nccl.label_value("570.172.08+custom/x") == "570.172.08-custom-x"
