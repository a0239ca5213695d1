"""The simulated mpi-operator plays the release the fleet spec names (`mpi_operator: v0.4`, v0.5+ by
default): its API server validates MPIJobs against that release's CRD, and v0.4 creates the
launcher in the sync that creates the workers where v0.5's WaitForWorkersReady waits for them."""

from __future__ import annotations

from typing import Any

import pytest

from fleetval.errors import SpecError
from fleetval.fleet.spec import load_fleet_spec
from fleetval.k8s.validation import ApiError
from fleetval.nccl.mpijob import MPI_OPERATOR_V04, MPI_OPERATOR_V05, QUEUE_LABEL, mpijob_manifest
from fleetval.nccl.probe import nccl_probe
from fleetval.sim.controlplane.cluster import product_crds
from fleetval.sim.kube import mpi_operator
from fleetval.sim.kube.cluster import SimKubeCluster
from fleetval.sim.kube.resources import by_kind

NS = "fleetval"
MPIJOB = by_kind("MPIJob")
FLEET = """
name: mpi
seed: 3
profiles:
  h100:
    gpu_product: NVIDIA-H100-80GB-HBM3
    gpus: 8
    intra_busbw_gbps: 480
    inter_busbw_gbps: 370
    fabric: ib
racks:
  - {{name: r01, profile: h100, nodes: 2}}
{release}
"""


def cluster(release: str | None) -> SimKubeCluster:
    sim = SimKubeCluster(load_fleet_spec(FLEET.format(release=f"mpi_operator: {release}" if release else "")))
    sim.start()
    return sim


def body(mpi_operator: str, *, queued: bool = True) -> dict[str, Any]:
    probe = nccl_probe(["r01-n01", "r01-n02"], gpus_per_node=8, repeat=0, run_key="t")
    job = mpijob_manifest(probe, mpi_operator=mpi_operator)
    if not queued:  # not Kueue's: created unsuspended, so the creation policy decides
        del job["metadata"]["labels"][QUEUE_LABEL]
        job["spec"]["runPolicy"]["suspend"] = False
    return job


def test_the_fleet_spec_names_the_release_v05_by_default() -> None:
    assert mpi_operator.release(cluster(None).spec) == mpi_operator.V05 == MPI_OPERATOR_V05
    assert mpi_operator.release(cluster("v0.4").spec) == mpi_operator.V04 == MPI_OPERATOR_V04
    with pytest.raises(SpecError, match=r"mpi_operator: must be one of \['v0.4', 'v0.5'\], got 'v0.3'"):
        load_fleet_spec(FLEET.format(release="mpi_operator: v0.3"))
    # The real control plane installs the release's CRD too.
    assert "kubeflow.org_mpijobs.yaml" in product_crds(cluster(None).spec)
    v04 = product_crds(cluster("v0.4").spec)
    assert "kubeflow.org_mpijobs.v0.4.0.yaml" in v04 and "kubeflow.org_mpijobs.yaml" not in v04


def test_a_v04_api_server_refuses_launcher_creation_policy_under_strict() -> None:
    v04, v05 = cluster("v0.4"), cluster(None)
    with pytest.raises(ApiError) as refused:
        v04.create(MPIJOB, NS, body(MPI_OPERATOR_V05), field_validation="Strict")
    assert refused.value.code == 400
    assert 'unknown field "spec.launcherCreationPolicy"' in refused.value.body["message"]
    created, warnings = v04.create(MPIJOB, NS, body(MPI_OPERATOR_V04), field_validation="Strict")
    assert warnings == [] and "launcherCreationPolicy" not in created["spec"]
    created, _ = v05.create(MPIJOB, NS, body(MPI_OPERATOR_V05), field_validation="Strict")
    assert created["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"


@pytest.mark.parametrize(
    ("version", "policy", "workers_ready", "due"),
    [
        (mpi_operator.V04, None, False, True),  # v0.4.0 mpi_job_controller.go L600: at once
        (mpi_operator.V05, "AtStartup", False, True),
        (mpi_operator.V05, "WaitForWorkersReady", False, False),  # v0.5.0 L660
        (mpi_operator.V05, "WaitForWorkersReady", True, True),
    ],
)
def test_when_the_launcher_is_created(
    version: str, policy: str | None, workers_ready: bool, due: bool
) -> None:
    assert mpi_operator.launcher_due(version, policy, workers_ready) is due


def sync_once(sim: SimKubeCluster, job: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Store the job and run the mpi-operator's sync once (no scheduler, no kubelet): its launcher
    Job, if created, and its workers as created."""
    with sim.lock:  # as the cluster runs its controllers
        stored = sim.insert(MPIJOB, NS, job)
        mpi_operator.reconcile_mpijobs(sim)
    name = stored["metadata"]["name"]
    workers = [
        p
        for p in sim.stored(by_kind("Pod"), NS)
        if (p["metadata"].get("labels") or {}).get(mpi_operator.JOB_NAME_LABEL) == name
    ]
    return sim.lookup(by_kind("Job"), NS, f"{name}-launcher"), workers


def test_v04_creates_the_launcher_with_the_workers_v05_waits_for_them_ready() -> None:
    launcher, workers = sync_once(cluster("v0.4"), body(MPI_OPERATOR_V04, queued=False))
    assert len(workers) == 2 and launcher is not None  # workers not even scheduled yet
    [wait] = launcher["spec"]["template"]["spec"]["initContainers"]  # fleetval's own wait
    assert wait["name"] == "wait-for-workers"
    launcher, workers = sync_once(cluster(None), body(MPI_OPERATOR_V05, queued=False))
    assert len(workers) == 2 and launcher is None


def test_v04_names_the_workers_service_job_worker() -> None:
    sim = cluster("v0.4")
    job = body(MPI_OPERATOR_V04, queued=False)
    _, workers = sync_once(sim, job)
    name = job["metadata"]["name"]
    assert {w["spec"]["subdomain"] for w in workers} == {f"{name}-worker"}
    assert all("dnsConfig" not in w["spec"] for w in workers)
    config = sim.lookup(by_kind("ConfigMap"), NS, f"{name}-config")
    assert config is not None
    assert config["data"]["hostfile"] == "".join(
        f"{name}-worker-{i}.{name}-worker.{NS}.svc slots=1\n" for i in range(2)
    )
