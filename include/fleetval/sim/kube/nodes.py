"""The Node objects of a simulated fleet, as the kubelet, GPU Feature Discovery, the GPU Operator
and the NVIDIA device plugin leave them on a real GPU node.

- Labels: the kubelet's (`kubernetes.io/hostname`, os, arch), the zone, the rack label fleetval
  reads (`fleetval.io/rack` by default), and GFD's `nvidia.com/*` labels (product, count, memory,
  family, driver and CUDA versions, operand deploy flags), as a real H100 node carries them.
- `status.capacity` counts every GPU; `status.allocatable` only the healthy ones: the device
  plugin withdraws a GPU after an Xid its health check watches (every Xid except the
  application-class 13, 31, 43, 45, 68 and 109 it ignores), so a pod requesting the node's
  capacity cannot be scheduled and never runs on a subset of its GPUs.
- The fleet spec's `op.gpu_count_wrong` (`advertised`) makes the device plugin advertise that
  many GPUs (capacity and allocatable) while GFD's `nvidia.com/gpu.count` keeps the real count.
- `ts.undisclosed` makes it advertise each GPU UNDISCLOSED_REPLICAS times (time-slicing) while
  the labels still say `nvidia.com/gpu.replicas: 1` and no sharing strategy.
- The RDMA shared device plugin (Mellanox k8s-rdma-shared-dev-plugin as the NVIDIA Network
  Operator deploys it: `resourceName: rdma_shared_device_a`, `rdmaHcaMax: 63`) advertises
  `rdma/rdma_shared_device_a: 63` on every node of a profile with a fabric (`ib` or `roce`: every
  profile), so an MPIJob worker can request the node's RDMA devices as on a real cluster.
- The zone is the fleet's availability zone, not the rack: a product that reads racks from the
  zone label gets one "rack" for the whole fleet here, as it would on most clouds.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from fleetval.fleet.spec import FleetSpec, Profile, Rack

RACK_LABEL: Final = "fleetval.io/rack"
# Xids the NVIDIA device plugin's health check ignores (application errors): the GPU stays allocatable.
DEVICE_PLUGIN_IGNORED_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})
KUBELET_VERSION: Final = "v1.33.4"
CONTAINER_RUNTIME: Final = "containerd://1.7.27"
UNDISCLOSED_REPLICAS: Final = 4
# The RDMA shared device plugin's pool on a node with a fabric (see module doc): one request per
# pod shares every HCA, at most RDMA_HCA_MAX pods at once.
RDMA_RESOURCE: Final = "rdma/rdma_shared_device_a"
RDMA_HCA_MAX: Final = 63
# GFD's nvidia.com/gpu.memory (MiB) and family by product; unknown products get none.
GPU_MEMORY_MIB: Final = {
    "NVIDIA-H100-80GB-HBM3": "81559",
    "NVIDIA-H200": "143771",
    "NVIDIA-A100-SXM4-80GB": "81920",
}
_GPU_FAMILY: Final = {
    "H100": "hopper",
    "H200": "hopper",
    "GH200": "hopper",
    "A100": "ampere",
    "B200": "blackwell",
}


def zone_of(spec: FleetSpec) -> str:
    return f"{spec.name}-az1"


def unhealthy_gpus(spec: FleetSpec, node: str) -> set[int]:
    """GPUs the device plugin has marked unhealthy on `node` (from the fleet spec's Xid faults)."""
    return {
        int(f.params["gpu"])
        for f in spec.faults_on(node, "device")
        if f.kind == "xid" and int(f.params["code"]) not in DEVICE_PLUGIN_IGNORED_XIDS
    }


def node_object(spec: FleetSpec, name: str, rack: Rack, index: int) -> dict[str, Any]:
    profile = spec.profiles[rack.profile]
    allocatable_gpus = profile.gpus - len(unhealthy_gpus(spec, name))
    advertised = profile.gpus
    for fault in spec.faults_on(name):
        if fault.kind == "op.gpu_count_wrong":  # a device plugin that advertises the wrong count
            advertised = int(fault.params["advertised"])
            allocatable_gpus = min(allocatable_gpus, advertised)
        elif fault.kind == "ts.undisclosed":  # time-slicing ×4 with no replicas label or renaming
            advertised = profile.gpus * UNDISCLOSED_REPLICAS
            allocatable_gpus *= UNDISCLOSED_REPLICAS
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": _uid(spec, "node", name),
            "labels": _labels(spec, name, rack, profile),
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": f"10.244.{index % 256}.0/24", "providerID": f"fleetval-sim://{spec.name}/{name}"},
        "status": {
            "capacity": _resources(advertised, allocatable=False, rdma=bool(profile.fabric)),
            "allocatable": _resources(allocatable_gpus, allocatable=True, rdma=bool(profile.fabric)),
            "conditions": _conditions(),
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{index // 250}.{index % 250 + 1}"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _uid(spec, "machine", name).replace("-", ""),
                "systemUUID": _uid(spec, "system", name),
                "bootID": _uid(spec, "boot", name),
                "kernelVersion": "5.15.0-102-generic",
                "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": CONTAINER_RUNTIME,
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def driver_labels(version: str) -> dict[str, str]:
    """GFD's labels for the loaded driver: `nvidia.com/cuda.driver-version.*` and the older
    `nvidia.com/cuda.driver.*` (a driver upgrade rewrites them)."""
    parts = version.split(".")
    labels = {
        "nvidia.com/cuda.driver-version.full": version,
        "nvidia.com/cuda.driver-version.major": parts[0],
        "nvidia.com/cuda.driver.major": parts[0],
    }
    if len(parts) > 1:
        labels["nvidia.com/cuda.driver-version.minor"] = parts[1]
        labels["nvidia.com/cuda.driver.minor"] = parts[1]
    if len(parts) > 2:
        labels["nvidia.com/cuda.driver-version.revision"] = parts[2]
        labels["nvidia.com/cuda.driver.rev"] = parts[2]
    return labels


def mig_settings(spec: FleetSpec, profile: str) -> tuple[str, str]:
    """The pool's MIG strategy and the mig.config its nodes start with (fleet spec, optional)."""
    raw = spec.raw.get("profiles", {}).get(profile, {}) or {}
    return str(raw.get("mig_strategy", "single")), str(raw.get("mig_config", "all-disabled"))


def _labels(spec: FleetSpec, name: str, rack: Rack, profile: Profile) -> dict[str, str]:
    family = next((f for key, f in _GPU_FAMILY.items() if key in profile.gpu_product), None)
    mig_strategy, mig_config = mig_settings(spec, profile.name)
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
        "node-role.kubernetes.io/worker": "",
        "topology.kubernetes.io/zone": zone_of(spec),
        RACK_LABEL: rack.name,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": profile.gpu_product,
        "nvidia.com/gpu.count": str(profile.gpus),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        **driver_labels(profile.driver_version),
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.config": mig_config,  # the MIG manager advertises its layout on its first pass
        "nvidia.com/mig.config.state": "success",
        "nvidia.com/mig.strategy": mig_strategy,
        "nvidia.com/fabric": profile.fabric,
        "fleetval.io/fabric": profile.fabric,
    }
    if profile.gpu_product in GPU_MEMORY_MIB:
        labels["nvidia.com/gpu.memory"] = GPU_MEMORY_MIB[profile.gpu_product]
    if family:
        labels["nvidia.com/gpu.family"] = family
    for operand in (
        "container-toolkit",
        "dcgm",
        "dcgm-exporter",
        "device-plugin",
        "driver",
        "gpu-feature-discovery",
        "mig-manager",
        "node-status-exporter",
        "operator-validator",
    ):
        labels[f"nvidia.com/gpu.deploy.{operand}"] = "true"
    return labels


def _resources(gpus: int, *, allocatable: bool, rdma: bool) -> dict[str, str]:
    resources = {
        "cpu": "190" if allocatable else "192",
        "memory": "2043735076Ki" if allocatable else "2113638404Ki",
        "ephemeral-storage": "3513044456Ki" if allocatable else "3813044456Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "pods": "110",
        "nvidia.com/gpu": str(gpus),
    }
    if rdma:
        resources[RDMA_RESOURCE] = str(RDMA_HCA_MAX)
    return resources


def _conditions() -> list[dict[str, str]]:
    at = "2026-01-01T00:00:00Z"
    rows = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]
    return [
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": at,
            "lastTransitionTime": at,
        }
        for kind, status, reason, message in rows
    ]


def _uid(spec: FleetSpec, kind: str, name: str) -> str:
    digest = hashlib.sha256(f"{spec.seed}/{kind}/{name}".encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def fleet_nodes(spec: FleetSpec) -> list[dict[str, Any]]:
    return [node_object(spec, name, rack, i) for i, (name, rack) in enumerate(spec.nodes())]
