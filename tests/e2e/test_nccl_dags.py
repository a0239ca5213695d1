"""End to end, on the one real path: `post_upgrade_nccl_sweep` and `baseline_backfill` on a running
Airflow 3 (LocalExecutor), against the simulated `netlab` cluster (`fleetval sim serve`: its
kubelets run nccl-tests with the fleet's NCCL faults, its mpi-operator runs MPIJobs that Kueue
admits, its GPU Operator rolls drivers out), verdicts in the real PostgreSQL.

Baselines are measured, never typed in: the sweep DAG runs on healthy reference nodes first and
the baselines are established and promoted from that run through the store. Then a driver is
rolled out through the ClusterPolicy, and the sweep of the upgraded nodes catches every fault on
the right node (intra-node probe pods, pair MPIJobs, isolation rounds of MPIJobs), labels the
nodes, pauses the rollout on the cluster, and marks what it swept; once the rollout is resumed, a
run with no nodes sweeps what is still pending. The backfill re-derives a mistaken baseline from
a sweep's stored measurements and reports what changes."""

from __future__ import annotations

import argparse
import datetime as dt
import time
from typing import Any

import pytest

from fleetval.fleet.spec import load_fleet_spec
from fleetval.nccl import gate as nccl_gate
from fleetval.nccl import judge_stored as nccl_judge
from fleetval.nccl import mpijob
from fleetval.nccl import plan as nccl_plan
from fleetval.sim.cli import _nccl_reference_baselines
from fleetval.store.models import Run
from fleetval.store.repository import Store
from tests.nccl_lab import NETLAB

FLEET = load_fleet_spec(NETLAB.read_text())
DAG = "post_upgrade_nccl_sweep"
WAVE_DAG = "post_upgrade_nccl_sweep_wave"
PROFILE = "NVIDIA-H100-80GB-HBM3"  # a node's profile is GPU feature discovery's gpu.product label
REFERENCE = ["r01-n01", "r01-n03", "r01-n05", "r02-n02", "r02-n04", "r02-n06"]
DRIVER = "570.172.08"
POLICY = ("nvidia.com", "v1", "clusterpolicies", "cluster-policy")

# Minutes of Airflow waves: in make test-all, not in make test (CI stays under 20 min).
pytestmark = pytest.mark.e2e_long


def runs(store: Store, suite: str) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        rows = conn.execute(Run.__table__.select().where(Run.suite == suite).order_by(Run.id))
        return [dict(r._mapping) for r in rows]


def run_dag(airflow: Any, dag_id: str, conf: dict[str, Any]) -> str:
    run_id = airflow.trigger(dag_id, conf)
    assert airflow.wait_run(dag_id, run_id, timeout_s=1200) == "success"
    return str(run_id)


def fv_run(store: Store, run_id: str) -> int:
    found = store.run_id(f"{DAG}/{run_id}")
    assert found is not None
    return found


def roll_out(kube: Any, **policy: Any) -> None:
    """Change the ClusterPolicy (driver version, upgrade policy) and let the GPU Operator act."""
    kube.custom.patch_cluster_custom_object(*POLICY, {"spec": {"driver": policy}})


def wait_nodes(kube: Any, check: Any, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(check(n) for n in kube.cluster.list_nodes()):
            return
        time.sleep(0.2)
    raise AssertionError(f"the nodes never {what}")


def busy(kube: Any, node: str) -> None:
    kube.run_workload(node, 8)
    wait_nodes(kube, lambda n: n.name != node or n.gpu_pods == 1, "saw the workload")


def probe_tasks(airflow: Any, run_id: str) -> dict[str, str]:
    """Rendered map index → state of every probe task of the sweep's wave runs."""
    waves = [r for r in airflow.runs(WAVE_DAG) if r["dag_run_id"].startswith(f"{run_id}__")]
    return {
        ti["rendered_map_index"]: ti["state"]
        for wave in waves
        for ti in airflow.task_states(WAVE_DAG, wave["dag_run_id"])
        if ti["task_id"] in ("nccl_intra", "nccl_pair") and ti["map_index"] >= 0
    }


def test_post_upgrade_sweep_gates_on_the_faulty_nodes(e2e: Any) -> None:
    env = e2e(NETLAB)
    kube, airflow = env.kube, env.airflow
    store = kube.store

    # Baselines measured on healthy reference nodes by the sweep itself (a dry run: no labels; one
    # repeat: the baseline is the median over the reference runs).
    # This is `fleetval sim run --suite nccl --reference …`'s first step, on the session's Airflow.
    made = _nccl_reference_baselines(
        argparse.Namespace(reference=REFERENCE, run_key=None), FLEET, store, airflow
    )
    assert {b["scope"]: b["version"] for b in made["baselines"]} == {"intra-8": 1, "inter-2x8": 1}
    intra = store.promoted_baseline(profile=PROFILE, metric=nccl_judge.METRIC, scope="intra-8")
    assert intra is not None and 460 < intra["value"] < 500  # measured, near the profile's 480
    assert intra["source"]["reference_subjects"] == sorted(REFERENCE)
    assert not any(nccl_plan.SWEPT_LABEL in n.labels for n in kube.cluster.list_nodes())

    # The GPU Operator rolls a new driver out to every node.
    roll_out(kube, version=DRIVER, upgradePolicy={"maxParallelUpgrades": 0, "maxUnavailable": "100%"})
    wait_nodes(
        kube,
        lambda n: (
            n.labels.get(nccl_plan.UPGRADE_STATE_LABEL) == nccl_plan.UPGRADE_DONE
            and n.labels.get(nccl_plan.DRIVER_VERSION_LABEL) == DRIVER
        ),
        "finished the driver upgrade",
    )
    assert len(nccl_plan.pending_upgrade_nodes(kube.cluster.list_nodes())) == 16
    busy(kube, "r02-n08")  # a node already running a job is not swept

    first = ["r01-n01", "r01-n02", "r01-n03", "r01-n04", "r02-n01", "r02-n02", "r02-n03", "r02-n08"]
    run_id = run_dag(airflow, DAG, {"nodes": first, "repeats": 3, "dry_run": False})
    run = next(r for r in runs(store, nccl_plan.SUITE) if r["id"] == fv_run(store, run_id))
    assert run["run_key"] == f"{DAG}/{run_id}" and run["finished_at"]
    meta = run["meta"]
    assert meta["node_source"] == "param" and meta["plan"]["skipped"] == {"r02-n08": "busy (1 GPU pods)"}
    rows = store.verdicts(run["id"])
    failed = {(r["criterion"], r["subject"]) for r in rows if r["result"] == "fail"}
    assert ("D-NET-NCCL-01", "r01-n02") in failed  # NVLink degraded
    assert ("D-NET-NCCL-TRANSPORT", "r01-n04") in failed  # socket fallback
    assert ("D-NET-NCCL-02", "r02-n03") in failed  # IB errors: found by isolation, not intra-node
    assert sorted(meta["isolation"]["bad"]) == ["r01-n02", "r01-n04", "r02-n03"]
    assert meta["isolation"]["harness_errors"] == [] and meta["isolation"]["probes_used"] > 0
    healthy = {"r01-n01", "r01-n03", "r02-n01", "r02-n02"}
    assert not {s for _, s in failed} & healthy
    trend = "D-NET-NCCL-TREND-01"
    assert {r["result"] for r in rows if r["subject"] in healthy and r["criterion"] != trend} == {"pass"}
    # the early-warning trend of each node and pair: recorded, one sweep is too short a history
    trends = {r["subject"]: r for r in rows if r["criterion"] == trend}
    assert healthy | {"r01-n02"} <= set(trends) and {r["result"] for r in trends.values()} == {"inconclusive"}
    assert {r["action"] for r in trends.values()} == {"record_only"}
    busbw = [r for r in rows if r["rule_id"].startswith("nccl.busbw.")]
    assert busbw and all(r["judged_against"]["baseline_version"] == 1 for r in busbw)

    # One wave run per repeat of each batch; one probe task per node or pair, named with its repeat.
    plan = nccl_plan.NcclPlan.from_json(meta["plan"])
    tasks = probe_tasks(airflow, run_id)
    expected = {f"{n} r{r}" for n in plan.nodes for r in range(3)}
    expected |= {f"{'+'.join(p)} r{r}" for p in plan.pairs for r in range(3)}
    assert set(tasks) == expected and set(tasks.values()) == {"success"}  # findings are not task failures
    # Raw output of every probe stored: pods (intra) and MPIJobs (pairs, isolation groups).
    probes = store.probes(run["id"], with_raw=False)
    assert len([p for p in probes if "/isolate/" not in p["probe_key"]]) == len(expected)
    assert all(p["spec"].get("mpijob") for p in probes if len(p["nodes"]) > 1)
    # Succeeded jobs deleted; failed ones (nccl-tests reported a failure) kept for forensics.
    kept = kube.custom.list_namespaced_custom_object(
        *(mpijob.GROUP, mpijob.VERSION, "fleetval", mpijob.PLURAL)
    )
    assert kept["items"] and all(mpijob.job_state(j) == "Failed" for j in kept["items"])

    # The gate: failing nodes labelled, the rollout paused on the cluster, swept nodes marked.
    assert meta["gate"]["result"] == "fail" and meta["gate"]["halt_rollout"] is True
    assert meta["gate"]["clusterpolicy"] == [
        {"clusterpolicy": "cluster-policy", "autoUpgrade_before": True, "dry_run": False}
    ]
    policy = kube.custom.get_cluster_custom_object(*POLICY)
    assert policy["spec"]["driver"]["upgradePolicy"]["autoUpgrade"] is False
    labels = {n.name: n.labels for n in kube.cluster.list_nodes()}
    for node in set(first) - {"r02-n08"}:
        assert labels[node][nccl_gate.GATE_LABEL] == ("pass" if node in healthy else "fail")
        assert labels[node][nccl_plan.SWEPT_LABEL] == DRIVER
    assert nccl_gate.GATE_LABEL not in labels["r02-n08"] and nccl_plan.SWEPT_LABEL not in labels["r02-n08"]
    assert len(store.node_events(kind="rollout_halt")) == 1

    # The nodes are fixed and the rollout resumed by hand: the operator labels the nodes done
    # again, and a run with no nodes sweeps what is still pending (a dry run: nothing touched).
    roll_out(kube, upgradePolicy={"autoUpgrade": True})
    wait_nodes(
        kube, lambda n: n.labels.get(nccl_plan.UPGRADE_STATE_LABEL) == nccl_plan.UPGRADE_DONE, "resumed"
    )
    before = {n.name: dict(n.labels) for n in kube.cluster.list_nodes()}
    second = run_dag(airflow, DAG, {"nodes": [], "repeats": 1, "dry_run": True})
    meta2 = store.run_meta(fv_run(store, second))
    assert meta2["node_source"] == "pending"
    assert set(meta2["plan"]["nodes"]) == {n.name for n in kube.cluster.list_nodes()} - set(first)
    assert meta2["plan"]["skipped"] == {"r02-n08": "busy (1 GPU pods)"}
    failed2 = {
        (r["criterion"], r["subject"]) for r in store.verdicts(fv_run(store, second)) if r["result"] == "fail"
    }
    # a hung collective ends at nccl-tests' own -T timeout (a finding), wrong results are one too
    assert {("D-NET-NCCL-03", "r02-n05"), ("D-NET-NCCL-03", "r02-n07")} <= failed2
    assert {e["dry_run"] for e in store.node_events(run_id=fv_run(store, second))} == {True}
    assert {n.name: n.labels for n in kube.cluster.list_nodes()} == before
    assert kube.custom.get_cluster_custom_object(*POLICY)["spec"]["driver"]["upgradePolicy"]["autoUpgrade"]


def test_baseline_backfill_rederives_and_reports_changes(e2e: Any) -> None:
    env = e2e(NETLAB)
    kube, airflow = env.kube, env.airflow
    store = kube.store
    # a datasheet number promoted by mistake; the sweep judges healthy nodes against it
    wrong, _ = store.add_baseline_candidate(
        profile=PROFILE,
        metric=nccl_judge.METRIC,
        scope="intra-8",
        value=600.0,
        unit="GB/s",
        stats={},
        source={},
    )
    store.promote_baseline(wrong)
    nodes = ["r01-n01", "r01-n02", "r01-n03", "r02-n01"]
    sweep_id = run_dag(airflow, DAG, {"nodes": nodes, "repeats": 1, "dry_run": True})
    sweep = fv_run(store, sweep_id)
    before = sorted((r["id"], r["result"], r["baseline_id"]) for r in store.verdicts(sweep))
    today = dt.datetime.now(dt.UTC).date().isoformat()

    conf = {"profile": PROFILE, "scope": "intra-8", "since": today, "until": today, "promote": True}
    backfill_id = run_dag(airflow, "baseline_backfill", conf)
    assert sorted((r["id"], r["result"], r["baseline_id"]) for r in store.verdicts(sweep)) == before

    [top, rejudge] = runs(store, "baseline_backfill")
    assert top["run_key"] == f"baseline_backfill/{backfill_id}/{PROFILE}/intra-8"
    assert rejudge["meta"]["rejudges_run_id"] == sweep
    report = top["meta"]["report"]
    assert report["baseline"]["status"] == "promoted" and report["baseline"]["version"] == 2
    assert report["baseline"]["excluded_outliers"] == ["r01-n02"]
    changes = {(c["criterion"], c["subject"]): c for c in report["changes"]}
    assert set(changes) == {("D-NET-NCCL-01", n) for n in ("r01-n01", "r01-n03", "r02-n01")}
    for c in changes.values():
        assert (c["old"]["result"], c["old"]["baseline_version"]) == ("fail", 1)
        assert (c["new"]["result"], c["new"]["baseline_version"]) == ("pass", 2)
    promoted = store.promoted_baseline(profile=PROFILE, metric=nccl_judge.METRIC, scope="intra-8")
    assert promoted is not None and promoted["version"] == 2

    # A scheduled run or an Airflow backfill: no params, the range is the run's data interval (the
    # day before the run when the timetable gives none), every series measured in it
    logical = dt.datetime.now(dt.UTC).replace(microsecond=0)  # Airflow does not start future runs
    empty = {"profile": None, "scope": None, "since": None, "until": None, "promote": False}
    scheduled = airflow.call(
        "POST", "/api/v2/dags/baseline_backfill/dagRuns", {"logical_date": logical.isoformat(), "conf": empty}
    )
    assert airflow.wait_run("baseline_backfill", scheduled["dag_run_id"]) == "success"
    by_key = {r["run_key"]: r for r in runs(store, "baseline_backfill")}
    for scope in ("intra-8", "inter-2x8"):
        derived = by_key[f"baseline_backfill/{scheduled['dag_run_id']}/{PROFILE}/{scope}"]
        report = derived["meta"]["report"]
        assert report["status"] == "ok" and report["rejudged_runs"][0]["old_run_id"] == sweep
