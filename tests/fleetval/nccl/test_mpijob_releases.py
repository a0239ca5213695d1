"""The NCCL MPIJob for each mpi-operator release fleetval supports (v0.4, v0.5+), validated by the
project's API-server validator against that release's real CRD (k8s/crds/, provenance in
SOURCES.md): the v0.5 form is refused by v0.4's CRD under fieldValidation=Strict, with the 400 the
runner recognises to fall back to the v0.4 form, whose launcher waits for its workers itself."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from fleetval.k8s.validation import ApiError, Crd, check_custom, load_crd_release, load_crds
from fleetval.nccl import mpijob
from fleetval.nccl.mpijob import MPI_OPERATOR_V04, MPI_OPERATOR_V05, mpijob_manifest
from fleetval.nccl.probe import nccl_probe

PAIR = ["r01-n01", "r02-n01"]


def crd(release: str) -> Crd:
    """The MPIJob CRD of an upstream release; `current` is the one the simulator serves (v0.8.0)."""
    if release == "current":
        return load_crds()[("kubeflow.org", "mpijobs")]
    return load_crd_release("kubeflow.org", "mpijobs", release)


def body(mpi_operator: str, **params: Any) -> dict[str, Any]:
    probe = nccl_probe(PAIR, gpus_per_node=8, repeat=0, run_key="k", **params)
    return mpijob_manifest(probe, mpi_operator=mpi_operator, worker_devices=[("rdma/ib", "1")])


def strict(job: dict[str, Any], release: str) -> dict[str, Any]:
    kept, warnings = check_custom(copy.deepcopy(job), crd(release), "v2beta1", field_validation="Strict")
    assert warnings == []
    return kept


@pytest.mark.parametrize(
    ("mpi_operator", "release"),
    [(MPI_OPERATOR_V04, "v0.4.0"), (MPI_OPERATOR_V05, "v0.5.0"), (MPI_OPERATOR_V05, "current")],
)
@pytest.mark.parametrize("layout", ["process_per_node", "rank_per_gpu"])
def test_each_releases_mpijob_is_valid_for_its_crd_under_strict(
    mpi_operator: str, release: str, layout: str
) -> None:
    job = body(mpi_operator, layout=layout)
    kept = strict(job, release)
    # Nothing pruned, nothing the CRD does not know: what fleetval sends is what the cluster keeps.
    assert kept["spec"]["mpiReplicaSpecs"] == job["spec"]["mpiReplicaSpecs"]
    assert kept["spec"].get("launcherCreationPolicy") == job["spec"].get("launcherCreationPolicy")


def test_the_v05_mpijob_is_refused_by_the_v04_crd_with_the_400_the_runner_falls_back_on() -> None:
    job = body(MPI_OPERATOR_V05)
    assert job["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    with pytest.raises(ApiError) as refused:
        strict(job, "v0.4.0")
    assert refused.value.code == 400
    status = refused.value.body
    assert status["reason"] == "BadRequest"
    assert status["message"] == (
        'MPIJob in version "v2beta1" cannot be handled as a MPIJob: strict decoding error: '
        'unknown field "spec.launcherCreationPolicy"'
    )
    assert mpijob.rejects_launcher_creation_policy(400, json.dumps(status))
    # Without Strict the field would be dropped with a warning: a launcher started before its workers.
    kept, warnings = check_custom(copy.deepcopy(job), crd("v0.4.0"), "v2beta1")
    assert "launcherCreationPolicy" not in kept["spec"]
    assert warnings == ['unknown field "spec.launcherCreationPolicy"']


def test_the_v04_mpijob_leaves_the_field_out_and_both_launchers_wait_for_the_workers() -> None:
    v04, v05 = body(MPI_OPERATOR_V04), body(MPI_OPERATOR_V05)
    assert "launcherCreationPolicy" not in v04["spec"]
    launcher_v04 = v04["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    launcher_v05 = v05["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert launcher_v04["containers"] == launcher_v05["containers"]  # mpirun, its log and exit code
    # v0.5+ starts the launcher of a job created suspended (Kueue's) at once too (mpi-operator#615).
    assert launcher_v04["initContainers"] == launcher_v05["initContainers"]
    [wait] = launcher_v04["initContainers"]
    assert wait["name"] == mpijob.WAIT_FOR_WORKERS and wait["image"] == launcher_v05["containers"][0]["image"]
    assert wait["volumeMounts"] == [{"name": "mpi-job-config", "mountPath": "/etc/mpi", "readOnly": True}]
    script = wait["args"][0]
    assert "cut -d' ' -f1 /etc/mpi/hostfile" in script and "/dev/tcp/$host/22" in script
    assert f"SECONDS + {mpijob.WORKERS_READY_TIMEOUT_S}" in script and "exit 1" in script
    # The rest of the job is the same: workers, Kueue's suspend and label, the run policy.
    assert v04["spec"]["mpiReplicaSpecs"]["Worker"] == v05["spec"]["mpiReplicaSpecs"]["Worker"]
    assert v04["spec"]["runPolicy"] == v05["spec"]["runPolicy"]
    assert v04["metadata"] == v05["metadata"]


@pytest.mark.parametrize(
    ("status", "message", "v04"),
    [
        (400, 'strict decoding error: unknown field "spec.launcherCreationPolicy"', True),
        (400, 'strict decoding error: unknown field "spec.noSuchField"', False),
        (422, 'spec.launcherCreationPolicy: Unsupported value: "x"', False),
        (404, "the server could not find the requested resource", False),
    ],
)
def test_only_v04s_strict_refusal_of_the_field_means_v04(status: int, message: str, v04: bool) -> None:
    body = json.dumps({"kind": "Status", "code": status, "message": message})
    assert mpijob.rejects_launcher_creation_policy(status, body) is v04
    assert mpijob.rejects_launcher_creation_policy(status, body.encode()) is v04  # bytes as well
    assert mpijob.rejects_launcher_creation_policy(status, message) is v04  # a bare message


def test_release_crds_are_loaded_on_request_only() -> None:
    """The served CRD stays the newest; an older release's file never replaces it."""
    served = crd("current").schemas["v2beta1"]["properties"]["spec"]["properties"]
    v04 = crd("v0.4.0").schemas["v2beta1"]["properties"]["spec"]["properties"]
    v05 = crd("v0.5.0").schemas["v2beta1"]["properties"]["spec"]["properties"]
    assert "launcherCreationPolicy" in served and "launcherCreationPolicy" in v05
    assert "launcherCreationPolicy" not in v04
    assert mpijob.MPI_OPERATOR_VERSIONS == (MPI_OPERATOR_V04, MPI_OPERATOR_V05)
    with pytest.raises(ValueError, match="mpi_operator must be one of"):
        body("v0.3")
