"""Before an NCCL pair's MPIJob is created (`fleetval.nccl.preflight`): the RDMA device resource
found in the nodes' allocatable and requested by the workers (or a configuration error, never a
transport verdict), and the mpi-operator's API found by discovery (kubeflow.org/v2beta1 MPIJob, or
an error saying what the cluster serves instead). Pure rules, then against the simulated API."""

from __future__ import annotations

from typing import Any

import pytest

from fleetval.nccl import mpijob, preflight
from fleetval.nccl.preflight import ProbeConfigError, discover_rdma_resources, mpijob_api_problem
from fleetval.nccl.probe import nccl_probe
from fleetval.probes.pod import ProbeSpec

PAIR = ["r01-n01", "r02-n01"]
GPU = {"nvidia.com/gpu": "8", "cpu": "190", "memory": "2043735076Ki"}


def pair(fabric: str | None = "ib") -> ProbeSpec:
    return nccl_probe(PAIR, gpus_per_node=8, repeat=0, run_key="t", scope="inter-2x8", fabric=fabric)


# --- RDMA device resource: pure --------------------------------------------------------------


@pytest.mark.parametrize(
    ("advertised", "requested"),
    [
        # k8s-rdma-shared-dev-plugin pool (NVIDIA Network Operator's default name): one request shares it
        ({"rdma/rdma_shared_device_a": "63"}, (("rdma/rdma_shared_device_a", "1"),)),
        ({"rdma/ib": "1k"}, (("rdma/ib", "1"),)),  # 1000 shares, as the API server prints it
        ({"vpc.amazonaws.com/efa": "500m"}, ()),  # not a whole count: no device
        # dedicated devices, one per NIC: the worker holds the node, so it takes them all
        ({"nvidia.com/hostdev": "8"}, (("nvidia.com/hostdev", "8"),)),
        ({"vpc.amazonaws.com/efa": "32"}, (("vpc.amazonaws.com/efa", "32"),)),
        # two shared pools (HCAs split across two resources): both
        (
            {"rdma/hca_a": "100", "rdma/hca_b": "100"},
            (("rdma/hca_a", "1"), ("rdma/hca_b", "1")),
        ),
        # zero allocatable is no device; unknown vendors' names are not guessed
        ({"rdma/rdma_shared_device_a": "0", "example.com/nic": "8"}, ()),
    ],
)
def test_the_workers_request_what_the_rdma_device_plugin_advertises(
    advertised: dict[str, str], requested: tuple[tuple[str, str], ...]
) -> None:
    nodes = {n: {**GPU, **advertised} for n in PAIR}
    assert discover_rdma_resources(nodes, fabric=None) == requested
    if requested:
        assert discover_rdma_resources(nodes, fabric="ib") == requested


def test_dedicated_devices_are_requested_as_many_as_every_node_has() -> None:
    nodes = {"a": {"nvidia.com/hostdev": "8"}, "b": {"nvidia.com/hostdev": "7"}}
    assert discover_rdma_resources(nodes, fabric="roce") == (("nvidia.com/hostdev", "7"),)


def test_no_rdma_device_on_the_nodes_is_a_configuration_error_not_a_socket_run() -> None:
    nodes = {n: dict(GPU) for n in PAIR}
    with pytest.raises(ProbeConfigError) as err:
        discover_rdma_resources(nodes, fabric="ib")
    message = str(err.value)
    assert "FLEETVAL_RDMA_RESOURCE is not set" in message and "r01-n01, r02-n01" in message
    assert "rdma/*" in message and "nvidia.com/hostdev" in message and "expects ib" in message
    # A probe that declares no fabric has no transport to fail: it runs as it can.
    assert discover_rdma_resources(nodes, fabric=None) == ()


def test_a_node_without_the_device_its_peers_have_is_a_configuration_error() -> None:
    nodes = {"a": {"rdma/ib": "1000"}, "b": {"rdma/ib": "0"}, "c": {}}
    with pytest.raises(ProbeConfigError, match="rdma/ib missing on b, c"):
        discover_rdma_resources(nodes, fabric="ib")
    with pytest.raises(ProbeConfigError, match="not in the cluster: b"):
        discover_rdma_resources({"a": {"rdma/ib": "1"}, "b": None}, fabric="ib")


class FakeCore:
    def __init__(self, allocatable: dict[str, dict[str, str]]) -> None:
        self.allocatable = allocatable
        self.read: list[str] = []

    def read_node(self, name: str) -> Any:
        from types import SimpleNamespace

        self.read.append(name)
        return SimpleNamespace(status=SimpleNamespace(allocatable=self.allocatable[name]))


def test_an_explicit_setting_wins_and_reads_no_node() -> None:
    core = FakeCore({n: {"rdma/rdma_shared_device_a": "63"} for n in PAIR})
    assert preflight.worker_devices(core, pair(), (("rdma/ib", "1"),)) == (("rdma/ib", "1"),)
    assert core.read == []
    assert preflight.worker_devices(core, pair(), ()) == (("rdma/rdma_shared_device_a", "1"),)
    assert core.read == PAIR


def test_the_mpijob_built_with_the_discovered_device_requests_it_in_every_worker() -> None:
    spec = pair()
    core = FakeCore({n: {**GPU, "rdma/rdma_shared_device_a": "63"} for n in PAIR})
    body = mpijob.mpijob_manifest(spec, worker_devices=preflight.worker_devices(core, spec))
    worker = body["spec"]["mpiReplicaSpecs"]["Worker"]
    [container] = worker["template"]["spec"]["containers"]
    assert worker["replicas"] == 2
    for key in ("limits", "requests"):  # an extended resource's request must equal its limit
        assert container["resources"][key]["rdma/rdma_shared_device_a"] == "1"
        assert container["resources"][key]["nvidia.com/gpu"] == "8"
    launcher = body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert "rdma/rdma_shared_device_a" not in launcher["resources"]["requests"]
    assert body["apiVersion"] == "kubeflow.org/v2beta1"
    assert body["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"


# --- mpi-operator: pure ------------------------------------------------------------------------


def test_mpi_operator_v2beta1_is_what_fleetval_needs() -> None:
    assert mpijob_api_problem({"v2beta1": ["mpijobs"]}) is None
    assert mpijob_api_problem({"v1": ["pytorchjobs"], "v2beta1": ["mpijobs"]}) is None


def test_the_training_operators_v1_mpijob_is_named_as_what_is_missing() -> None:
    problem = mpijob_api_problem({"v1": ["mpijobs", "pytorchjobs", "tfjobs", "xgboostjobs"]})
    assert problem == (
        "the cluster serves kubeflow.org/v1 MPIJob (the Kubeflow training-operator), not "
        "kubeflow.org/v2beta1: fleetval needs mpi-operator >= v0.4 serving kubeflow.org/v2beta1 MPIJob"
    )
    assert "no kubeflow.org API" in str(mpijob_api_problem(None))
    assert "serves no MPIJob (kubeflow.org/v1beta1: experiments)" in str(
        mpijob_api_problem({"v1beta1": ["experiments"]})
    )


def test_a_create_error_names_the_missing_mpi_operator() -> None:
    """v0.4's refusal of launcherCreationPolicy is no configuration error: the runner creates the
    v0.4 form instead (`mpijob.rejects_launcher_creation_policy`, test_mpijob_releases.py)."""
    strict = (
        '{"kind":"Status","status":"Failure","message":"MPIJob in version \\"v2beta1\\" cannot be handled '
        'as a MPIJob: strict decoding error: unknown field \\"spec.launcherCreationPolicy\\"","code":400}'
    )
    assert preflight.create_error_hint(400, strict) is None
    assert mpijob.rejects_launcher_creation_policy(400, strict)
    assert "does not serve kubeflow.org/v2beta1" in str(preflight.create_error_hint(404, "not found"))
    assert preflight.create_error_hint(409, "AlreadyExists") is None


# --- against the simulated API server ----------------------------------------------------------


@pytest.fixture
def kube(sim_kube: Any) -> Any:
    from tests.nccl_lab import NETLAB

    return sim_kube(NETLAB)


def test_discovery_and_node_allocatable_through_the_kubernetes_client(kube: Any) -> None:
    served = preflight.served_kubeflow_versions(kube.custom)
    assert served is not None and "mpijobs" in served["v2beta1"]
    preflight.check_mpijob_api(kube.custom)  # the simulated mpi-operator serves v2beta1
    # The simulated nodes advertise the RDMA shared device plugin's pool: one request per worker.
    assert preflight.prepare(kube.custom, kube.core, pair()) == (("rdma/rdma_shared_device_a", "1"),)
    gone = {"status": {"allocatable": {"rdma/rdma_shared_device_a": None}}}  # its plugin is down
    kube.core.patch_node_status("r01-n01", gone)
    with pytest.raises(ProbeConfigError, match="rdma/rdma_shared_device_a missing on r01-n01"):
        preflight.prepare(kube.custom, kube.core, pair())
    kube.core.patch_node_status("r02-n01", gone)
    # No RDMA device on any node: a pair that expects IB stops here.
    with pytest.raises(ProbeConfigError, match="none of the nodes under test"):
        preflight.prepare(kube.custom, kube.core, pair())
