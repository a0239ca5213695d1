"""Before a multi-node NCCL probe's MPIJob is created: is the cluster set up for it?

Two checks, each a pure decision plus a thin reader over the kubernetes client. A failed check
raises `ProbeConfigError`: the probe stops before it runs and is stored as a harness error with
the reason (an `error` verdict, "investigate-harness"), never as a verdict about the nodes.

**RDMA device.** Each MPIJob worker must request the fabric's device resource, or NCCL gets no
RDMA device, falls back to TCP sockets, and D-NET-NCCL-TRANSPORT fails every pair for our own
misconfiguration. An explicit `FLEETVAL_RDMA_RESOURCE` wins. Left empty, the resource is found in
the allocatable of the probe's nodes, among the names the known RDMA device plugins advertise
(`RDMA_DEVICE_PLUGINS`). Found on none of them while the probe declares a fabric (`ib`/`roce`):
a configuration error. Found on some but not all: a configuration error naming the nodes without
it (their device plugin is down or their NICs are gone; a worker there could not be scheduled, or
would run on sockets). A probe that declares no fabric runs with whatever is found (its transport
verdict is `inconclusive` anyway: `nccl.transport.no_fabric_declared`). There is no "sockets are
expected" setting: the transport judge has no such fabric (`ib` | `roce` | none declared).

**mpi-operator.** The MPIJob is `kubeflow.org/v2beta1`, served by mpi-operator v0.4 and later
(the Kubeflow training-operator serves `kubeflow.org/v1` MPIJob only). API discovery says which
kubeflow.org versions the cluster serves and whether v2beta1 has `mpijobs`, so a cluster without
it gets one error that says what is missing instead of a 404 on every create. Discovery cannot
tell v0.4 from v0.5+ (both serve v2beta1): the create itself does (`fleetval.nccl.mpijob`, module
doc), and both are supported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kubernetes.client import ApisApi
from kubernetes.client.exceptions import ApiException

from fleetval.k8s.quantity import Quantity, QuantityError
from fleetval.nccl import mpijob
from fleetval.probes.pod import ProbeSpec

MIN_MPI_OPERATOR: Final = mpijob.MPI_OPERATOR_V04
REQUIRED_API: Final = f"{mpijob.GROUP}/{mpijob.VERSION}"


class ProbeConfigError(RuntimeError):
    """The cluster is not set up for the probe (see module doc): a harness error, not a verdict."""


# --- RDMA device resource ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RdmaDevicePlugin:
    """Extended resources an RDMA device plugin advertises: `name` exactly, or every name under
    `prefix`. `shared`: one request gives the pod every device of the pool (request 1); else each
    unit is one device held by one pod (a worker owning the node requests them all)."""

    plugin: str
    shared: bool
    source: str
    name: str | None = None
    prefix: str | None = None

    def matches(self, resource: str) -> bool:
        return resource == self.name if self.name else bool(self.prefix and resource.startswith(self.prefix))


RDMA_DEVICE_PLUGINS: Final[tuple[RdmaDevicePlugin, ...]] = (
    RdmaDevicePlugin(
        plugin="k8s-rdma-shared-dev-plugin",
        shared=True,
        prefix="rdma/",
        # Mellanox/k8s-rdma-shared-dev-plugin README (resource prefix `rdma`, one request per pod
        # shares the HCAs, `rdmaHcaMax` pods at once); NVIDIA Network Operator NicClusterPolicy
        # example: `resourceName: rdma_shared_device_a`, `rdmaHcaMax: 63` → rdma/rdma_shared_device_a.
        source="Mellanox/k8s-rdma-shared-dev-plugin; NVIDIA Network Operator NicClusterPolicy",
    ),
    RdmaDevicePlugin(
        plugin="sriov-network-device-plugin (host device network)",
        shared=False,
        name="nvidia.com/hostdev",
        # NVIDIA Network Operator docs, "Host Device Network with RDMA": sriovDevicePlugin
        # `resourcePrefix: nvidia.com`, `resourceName: hostdev`, selectors `isRdma: true`.
        source="NVIDIA Network Operator, Host Device Network with RDMA",
    ),
    RdmaDevicePlugin(
        plugin="aws-efa-k8s-device-plugin",
        shared=False,
        name="vpc.amazonaws.com/efa",
        # Amazon EKS user guide, "Manage EFA devices": the EFA device plugin advertises an integer
        # count of `vpc.amazonaws.com/efa`; each EFA device is dedicated to one pod.
        source="Amazon EKS user guide, Manage EFA devices on Amazon EKS",
    ),
)
# Not here: GKE's GPUDirect/RDMA NICs (`networking.gke.io.networks/<network>` resources) also need
# the pod's multi-network annotations, which a resource request alone does not give: set
# FLEETVAL_RDMA_RESOURCE and the annotations for such a site.


def rdma_plugin(resource: str) -> RdmaDevicePlugin | None:
    return next((p for p in RDMA_DEVICE_PLUGINS if p.matches(resource)), None)


def _count(quantity: Any) -> int:
    """An extended resource's allocatable, a whole quantity as the API server prints it (1000
    devices is `1k`); anything unreadable or fractional is 0 (no device)."""
    try:
        parsed = Quantity.parse(str(quantity))
    except QuantityError:
        return 0
    return max(0, int(parsed.value)) if parsed.is_integer else 0


def discover_rdma_resources(
    allocatable: Mapping[str, Mapping[str, Any] | None], *, fabric: str | None
) -> tuple[tuple[str, str], ...]:
    """The RDMA device resources each worker requests, as (name, count), from the allocatable of
    every node of the probe (None: the node is not in the cluster). See module doc for the rules."""
    missing = sorted(n for n, a in allocatable.items() if a is None)
    if missing:
        raise ProbeConfigError(f"probe node(s) not in the cluster: {', '.join(missing)}")
    per_node = {
        node: {r: _count(q) for r, q in (alloc or {}).items() if rdma_plugin(r) and _count(q) > 0}
        for node, alloc in allocatable.items()
    }
    found = sorted(set().union(*(set(r) for r in per_node.values()))) if per_node else []
    if not found:
        if fabric is None:
            return ()
        known = ", ".join(p.name or f"{p.prefix}*" for p in RDMA_DEVICE_PLUGINS)
        raise ProbeConfigError(
            f"FLEETVAL_RDMA_RESOURCE is not set and none of the nodes under test "
            f"({', '.join(sorted(per_node))}) advertises an RDMA device resource ({known}) in its "
            f"allocatable: the MPIJob workers would get no RDMA device and NCCL would fall back to "
            f"TCP sockets, where the probe expects {fabric}. Deploy the fabric's RDMA device plugin, "
            f"or set FLEETVAL_RDMA_RESOURCE to the resource it advertises (name=count)"
        )
    lacking = {r: sorted(n for n, rs in per_node.items() if r not in rs) for r in found}
    lacking = {r: ns for r, ns in lacking.items() if ns}
    if lacking:
        detail = "; ".join(f"{r} missing on {', '.join(ns)}" for r, ns in sorted(lacking.items()))
        raise ProbeConfigError(
            f"the nodes under test do not all advertise the same RDMA device resources ({detail}): "
            "their RDMA device plugin is not running or their NICs are gone; a worker there could not "
            "be scheduled or would fall back to sockets. Fix the nodes, or set FLEETVAL_RDMA_RESOURCE"
        )
    devices: list[tuple[str, str]] = []
    for resource in found:
        plugin = rdma_plugin(resource)
        assert plugin is not None
        # A shared pool: one request. Dedicated devices: every one the nodes have (the worker holds
        # all the node's GPUs, so NCCL gets a NIC per GPU rail); the smallest count fits every node.
        count = 1 if plugin.shared else min(rs[resource] for rs in per_node.values())
        devices.append((resource, str(count)))
    return tuple(devices)


def node_allocatable(core: Any, nodes: Sequence[str]) -> dict[str, dict[str, Any] | None]:
    """{node: its status.allocatable, or None when it is not in the cluster}; `core` a CoreV1Api."""
    found: dict[str, dict[str, Any] | None] = {}
    for name in nodes:
        try:
            node = core.read_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            found[name] = None
            continue
        found[name] = dict((node.status.allocatable if node.status else None) or {})
    return found


def worker_devices(
    core: Any, spec: ProbeSpec, configured: Sequence[tuple[str, str]] = ()
) -> tuple[tuple[str, str], ...]:
    """The extended resources each worker of `spec`'s MPIJob requests besides its GPUs: the
    configured ones (FLEETVAL_RDMA_RESOURCE) when set, else those its nodes advertise."""
    if configured:
        return tuple(configured)
    fabric = spec.params.get("fabric")
    return discover_rdma_resources(
        node_allocatable(core, mpijob.probe_nodes(spec)), fabric=str(fabric) if fabric else None
    )


# --- mpi-operator: API discovery -----------------------------------------------------------------


def mpijob_api_problem(served: Mapping[str, Sequence[str]] | None) -> str | None:
    """Why the cluster cannot run fleetval's MPIJob, or None. `served`: {kubeflow.org version it
    serves: the resources that version serves}, None when it serves no kubeflow.org group."""
    need = f"fleetval needs mpi-operator >= {MIN_MPI_OPERATOR} serving {REQUIRED_API} MPIJob"
    if served is not None and mpijob.PLURAL in (served.get(mpijob.VERSION) or ()):
        return None
    if not served:
        return f"the cluster serves no {mpijob.GROUP} API (no MPIJob CRD): {need}"
    with_mpijobs = sorted(v for v, rs in served.items() if mpijob.PLURAL in rs)
    if with_mpijobs:
        versions = ", ".join(f"{mpijob.GROUP}/{v}" for v in with_mpijobs)
        who = " (the Kubeflow training-operator)" if "v1" in with_mpijobs else ""
        return f"the cluster serves {versions} MPIJob{who}, not {REQUIRED_API}: {need}"
    others = "; ".join(
        f"{mpijob.GROUP}/{v}: {', '.join(sorted(rs)) or 'nothing'}" for v, rs in sorted(served.items())
    )
    return f"the cluster serves no MPIJob ({others}): {need}"


def served_kubeflow_versions(custom: Any) -> dict[str, list[str]] | None:
    """{version: resources} of the kubeflow.org group from API discovery (`GET /apis`, then
    `GET /apis/kubeflow.org/<version>`); None when the group is not served. `custom`: a
    CustomObjectsApi (its api_client serves the discovery calls)."""
    groups = ApisApi(custom.api_client).get_api_versions().groups or []
    versions = [v.version for g in groups if g.name == mpijob.GROUP for v in (g.versions or [])]
    if not versions:
        return None
    served: dict[str, list[str]] = {}
    for version in versions:
        try:
            listed = custom.get_api_resources(mpijob.GROUP, version)
        except ApiException as exc:
            if exc.status != 404:  # listed in /apis but gone since: not served
                raise
            continue
        served[version] = [r.name for r in (listed.resources or []) if "/" not in r.name]
    return served


def check_mpijob_api(custom: Any) -> None:
    """Raise ProbeConfigError when the cluster does not serve fleetval's MPIJob (module doc)."""
    problem = mpijob_api_problem(served_kubeflow_versions(custom))
    if problem:
        raise ProbeConfigError(problem)


def create_error_hint(status: int | None, body: str) -> str | None:
    """What a failed MPIJob create says about the mpi-operator, or None: a 404 means the version is
    not served (v0.4's refusal of launcherCreationPolicy is no error: the caller retries in v0.4's
    form)."""
    if status == 404:
        return (
            f"the cluster does not serve {REQUIRED_API} MPIJob: fleetval needs mpi-operator >= "
            f"{MIN_MPI_OPERATOR}"
        )
    return None


def prepare(
    custom: Any, core: Any, spec: ProbeSpec, configured: Sequence[tuple[str, str]] = ()
) -> tuple[tuple[str, str], ...]:
    """Both checks before creating `spec`'s MPIJob; returns the worker devices to request."""
    check_mpijob_api(custom)
    return worker_devices(core, spec, configured)
