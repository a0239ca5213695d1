"""End to end: `post_upgrade_nccl_sweep` and `baseline_backfill` run with dag.test() on the
simulated `netlab` fleet, the verdict store on the real PostgreSQL, the sim backend chosen through
Airflow Variables. Baselines are measured first on healthy reference nodes (never typed in)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from fleetval.sim.cluster import SimCluster
from fleetval.store.models import Run
from fleetval.store.repository import Store
from fleetval.suites import nccl
from tests.paths import ROOT

NETLAB = ROOT / "include" / "fleetval" / "sim" / "fleets" / "netlab.yaml"
PROFILE = "h100-sxm-ndr"
REFERENCE = ["r01-n01", "r01-n03", "r01-n05", "r02-n02", "r02-n04", "r02-n06"]
DRIVER = "570.172.08"


@pytest.fixture
def netlab(sim_fleet_loader: Any) -> tuple[Store, SimCluster]:
    return sim_fleet_loader(NETLAB)  # type: ignore[no-any-return]


def runs(store: Store, suite: str) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        rows = conn.execute(Run.__table__.select().where(Run.suite == suite).order_by(Run.id))
        return [dict(r._mapping) for r in rows]


def measure_reference_baselines(store: Store, cluster: SimCluster) -> None:
    ref = nccl.run_sweep(store, cluster, run_key="onboarding/reference", nodes=REFERENCE)
    for scope in ("intra-8", "inter-2x8"):
        store.promote_baseline(nccl.establish_baseline(store, ref, PROFILE, scope).baseline_id)


def test_post_upgrade_sweep_gates_on_the_faulty_nodes(
    airflow_db: None, dagbag: Any, netlab: tuple[Store, SimCluster]
) -> None:
    store, cluster = netlab
    measure_reference_baselines(store, cluster)
    for node in cluster.list_nodes():  # the operator finished a driver upgrade everywhere
        cluster.set_labels(
            node.name, {nccl.DRIVER_VERSION_LABEL: DRIVER, nccl.UPGRADE_STATE_LABEL: nccl.UPGRADE_DONE}
        )
    cluster.set_gpu_pods("r02-n08", 1)  # a node already running a job is not swept

    dag = dagbag.dags["post_upgrade_nccl_sweep"]
    first = ["r01-n01", "r01-n02", "r01-n03", "r01-n04", "r02-n01", "r02-n02", "r02-n03", "r02-n08"]
    dag_run = dag.test(run_conf={"nodes": first, "repeats": 3})
    assert dag_run.state == "success"

    [run] = runs(store, nccl.SUITE)[1:]  # after the in-process reference run
    assert run["run_key"] == f"post_upgrade_nccl_sweep/{dag_run.run_id}" and run["finished_at"]
    meta = run["meta"]
    assert meta["node_source"] == "param" and meta["plan"]["skipped"] == {"r02-n08": "busy (1 GPU pods)"}
    rows = store.verdicts(run["id"])
    failed = {(r["criterion"], r["subject"]) for r in rows if r["result"] == "fail"}
    assert ("D-NET-NCCL-01", "r01-n02") in failed  # NVLink degraded
    assert ("D-NET-NCCL-TRANSPORT", "r01-n04") in failed  # socket fallback
    assert ("D-NET-NCCL-02", "r02-n03") in failed  # IB errors: found by isolation, not intra-node
    assert sorted(meta["isolation"]["bad"]) == ["r01-n02", "r01-n04", "r02-n03"]
    healthy = {"r01-n01", "r01-n03", "r02-n01", "r02-n02"}
    assert not {s for _, s in failed} & healthy
    assert {r["result"] for r in rows if r["subject"] in healthy} == {"pass"}

    assert meta["gate"]["result"] == "fail" and meta["gate"]["halt_rollout"] is True
    labels = {n.name: n.labels for n in cluster.list_nodes()}
    for node in set(first) - {"r02-n08"}:
        assert labels[node][nccl.GATE_LABEL] == ("pass" if node in healthy else "fail")
        assert labels[node][nccl.SWEPT_LABEL] == DRIVER
    assert nccl.GATE_LABEL not in labels["r02-n08"] and nccl.SWEPT_LABEL not in labels["r02-n08"]
    assert len(store.node_events(kind="rollout_halt")) == 1

    # a manual run with no nodes sweeps what is still pending: the other nodes, not these again
    # (every key given: in-process dag.test() runs keep the previous run's conf in the DAG's params)
    second = dag.test(run_conf={"nodes": [], "repeats": 3, "dry_run": True})
    assert second.state == "success"
    run2 = runs(store, nccl.SUITE)[-1]
    assert run2["meta"]["node_source"] == "pending"
    swept_now = set(run2["meta"]["plan"]["nodes"])
    pending_before = {n.name for n in cluster.list_nodes()} - set(first)
    assert swept_now == pending_before
    assert {e["dry_run"] for e in store.node_events(run_id=run2["id"])} == {True}


def test_baseline_backfill_rederives_and_reports_changes(
    airflow_db: None, dagbag: Any, netlab: tuple[Store, SimCluster]
) -> None:
    store, cluster = netlab
    # a datasheet number promoted by mistake; the sweep judges healthy nodes against it
    wrong, _ = store.add_baseline_candidate(
        profile=PROFILE, metric=nccl.METRIC, scope="intra-8", value=600.0, unit="GB/s", stats={}, source={}
    )
    store.promote_baseline(wrong)
    sweep = nccl.run_sweep(
        store, cluster, run_key="sweep/1", nodes=["r01-n01", "r01-n02", "r01-n03", "r02-n01"]
    )
    before = sorted((r["id"], r["result"], r["baseline_id"]) for r in store.verdicts(sweep))
    today = dt.datetime.now(dt.UTC).date().isoformat()

    dag = dagbag.dags["baseline_backfill"]
    dag_run = dag.test(
        run_conf={"profile": PROFILE, "scope": "intra-8", "since": today, "until": today, "promote": True}
    )
    assert dag_run.state == "success"
    assert sorted((r["id"], r["result"], r["baseline_id"]) for r in store.verdicts(sweep)) == before

    [top, rejudge] = runs(store, "baseline_backfill")
    assert top["run_key"] == f"baseline_backfill/{dag_run.run_id}/{PROFILE}/intra-8"
    assert rejudge["meta"]["rejudges_run_id"] == sweep
    report = top["meta"]["report"]
    assert report["baseline"]["status"] == "promoted" and report["baseline"]["version"] == 2
    assert report["baseline"]["excluded_outliers"] == ["r01-n02"]
    changes = {(c["criterion"], c["subject"]): c for c in report["changes"]}
    assert set(changes) == {("D-NET-NCCL-01", n) for n in ("r01-n01", "r01-n03", "r02-n01")}
    for c in changes.values():
        assert (c["old"]["result"], c["old"]["baseline_version"]) == ("fail", 1)
        assert (c["new"]["result"], c["new"]["baseline_version"]) == ("pass", 2)
    promoted = store.promoted_baseline(profile=PROFILE, metric=nccl.METRIC, scope="intra-8")
    assert promoted is not None and promoted["version"] == 2

    # Airflow backfill / schedule: no params, the data interval is the range, every series
    # (a manual run at tomorrow 00:00 covers today, the interval a backfill of today covers)
    logical = dt.datetime.combine(dt.date.fromisoformat(today), dt.time(), tzinfo=dt.UTC) + dt.timedelta(
        days=1
    )
    empty = {"profile": None, "scope": None, "since": None, "until": None, "promote": False}
    scheduled = dag.test(logical_date=logical, run_conf=empty)
    assert scheduled.state == "success"
    keys = {r["run_key"] for r in runs(store, "baseline_backfill")}
    assert scheduled.data_interval_end - scheduled.data_interval_start == dt.timedelta(days=1)
    for scope in ("intra-8", "inter-2x8"):
        assert f"baseline_backfill/{scheduled.run_id}/{PROFILE}/{scope}" in keys
