"""R3ProbeOperator (the `dcgm_r3` task of `xid_remediation`) against the simulated cluster: it never
runs r3 under the job that hit the Xid, and once the node is free it probes and decides at once."""

from __future__ import annotations

from typing import Any

import pytest

from fleetval.dcgm.probe import dcgm_diag_probe
from tests.fleetval_airflow.test_probe_pod import context
from tests.paths import DEMO_FLEET


@pytest.fixture
def kube(sim_kube: Any) -> Any:
    kube = sim_kube(DEMO_FLEET)
    kube.run = kube.store.ensure_run("r3-test", suite="xid", backend="kubernetes")
    return kube


def operator(kube: Any, node: str) -> Any:
    from fleetval_airflow.xid_tasks import R3ProbeOperator

    spec = dcgm_diag_probe(node, level=3, gpus=8, run_key="xid_remediation/manual__r3")
    return R3ProbeOperator(task_id="dcgm_r3", probe=spec.to_json(), fv_run=kube.run, deferrable=False)


def r3_context() -> dict[str, Any]:
    ctx = context("dcgm_r3")
    ctx["dag"].dag_id = "xid_remediation"
    ctx["params"] = {"dry_run": False}
    return ctx


def test_r3_waits_while_the_job_runs_and_creates_no_pod(kube: Any) -> None:
    from fleetval_airflow.xid_tasks import NodeBusy

    kube.run_workload("r01-n04", 2)
    kube.cluster.cordon("r01-n04")  # what decide_and_cordon did
    with pytest.raises(NodeBusy, match="still runs 1 GPU pods"):
        operator(kube, "r01-n04").execute(r3_context())
    assert not kube.core.list_namespaced_pod("fleetval").items
    assert not kube.store.probes(kube.run)


def test_once_the_node_is_free_r3_runs_and_returns_it_to_service(kube: Any) -> None:
    job = kube.run_workload("r01-n04", 2)
    kube.cluster.cordon("r01-n04")
    kube.core.delete_namespaced_pod(job, "default", grace_period_seconds=0)  # the job ended
    operator(kube, "r01-n04").execute(r3_context())
    [probe] = kube.store.probes(kube.run)
    assert probe["nodes"] == ["r01-n04"] and probe["spec"]["params"]["level"] == 3
    [verdict] = [v for v in kube.store.verdicts(kube.run) if v["subject"] == "r01-n04"]
    assert (verdict["criterion"], verdict["result"]) == ("D-DEV-02", "pass")
    node = kube.node("r01-n04")
    assert not node.spec.unschedulable
    assert node.metadata.labels["fleetval.io/xid-remediation"] == "done"
