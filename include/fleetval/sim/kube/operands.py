"""The GPU Operator's operand pods in the simulated cluster: one pod of each operand DaemonSet on
every GPU node, in namespace `gpu-operator`, as `kubectl get pods -n gpu-operator` shows them.

Names, containers and init containers follow NVIDIA/gpu-operator's assets (`assets/state-*`):
`nvidia-driver-daemonset`, `nvidia-container-toolkit-daemonset`, `nvidia-device-plugin-daemonset`,
`nvidia-dcgm-exporter`, `gpu-feature-discovery`, `nvidia-mig-manager` and `nvidia-operator-validator`
run; `nvidia-cuda-validator` has Completed. Every operand but the driver starts behind the
validator's markers (its init containers wait for `driver-ready`, and the later ones for
`toolkit-ready`), so one operand that fails leaves the ones behind it in `Init:0/N` — the picture
the operator's troubleshooting guide shows for a driver in CrashLoopBackOff.

The fleet spec's `op.operand_down` (`operand`: driver, container-toolkit, device-plugin,
dcgm-exporter, gpu-feature-discovery, mig-manager or validator) crash-loops that operand's pod on
its node. The pods are stored with the status the DaemonSets' kubelets would report; the
simulated kubelet does not run them (annotation SIM_STATIC) and they hold no resources. Each
DaemonSet selects the nodes whose `nvidia.com/gpu.deploy.<operand>` label is "true" (DEPLOY_LABELS):
`operand_daemonsets` takes a pod off a node labelled otherwise and brings it back, under the same
name (`operand_pod_name`), when the label is "true" again.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any, Final

from fleetval.fleet.spec import FleetSpec

NAMESPACE: Final = "gpu-operator"
SIM_STATIC: Final = "sim.fleetval.io/static"
IMAGE_REGISTRY: Final = "nvcr.io/nvidia"
# operand → (DaemonSet, image, init containers it waits in) in the operator's start order.
OPERANDS: Final[dict[str, tuple[str, str, tuple[str, ...]]]] = {
    "driver": ("nvidia-driver-daemonset", "driver:570.172.08", ("k8s-driver-manager",)),
    "container-toolkit": (
        "nvidia-container-toolkit-daemonset",
        "k8s/container-toolkit:v1.17.8",
        ("driver-validation",),
    ),
    "device-plugin": ("nvidia-device-plugin-daemonset", "k8s-device-plugin:v0.17.3", ("toolkit-validation",)),
    "dcgm-exporter": (
        "nvidia-dcgm-exporter",
        "k8s/dcgm-exporter:4.2.3-4.3.1-ubuntu22.04",
        ("toolkit-validation",),
    ),
    "gpu-feature-discovery": ("gpu-feature-discovery", "k8s-device-plugin:v0.17.3", ("toolkit-validation",)),
    "mig-manager": ("nvidia-mig-manager", "cloud-native/k8s-mig-manager:v0.12.2", ("toolkit-validation",)),
    "validator": (
        "nvidia-operator-validator",
        "cloud-native/gpu-operator-validator:v25.3.2",
        ("driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation"),
    ),
}
# The node label each operand's DaemonSet selects on (`nvidia.com/gpu.deploy.<operand>: "true"`).
DEPLOY_LABELS: Final[dict[str, str]] = {
    operand: f"nvidia.com/gpu.deploy.{'operator-validator' if operand == 'validator' else operand}"
    for operand in OPERANDS
}
CUDA_VALIDATOR: Final = "nvidia-cuda-validator"
# What each operand needs running first (the validator's markers it waits for).
NEEDS: Final[dict[str, tuple[str, ...]]] = {
    "driver": (),
    "container-toolkit": ("driver",),
    "device-plugin": ("driver", "container-toolkit"),
    "dcgm-exporter": ("driver", "container-toolkit"),
    "gpu-feature-discovery": ("driver", "container-toolkit"),
    "mig-manager": ("driver", "container-toolkit"),
    "validator": ("driver", "container-toolkit", "device-plugin"),
}
CRASH_RESTARTS: Final = 13
STARTED_AT: Final = "2026-01-01T00:05:00Z"
COMPLETED: Final = {
    "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": STARTED_AT, "finishedAt": STARTED_AT}
}


def _suffix(*parts: str) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes' generated names use
    digest = int(hashlib.sha256("/".join(parts).encode()).hexdigest(), 16)
    out = ""
    for _ in range(5):
        digest, i = divmod(digest, len(alphabet))
        out += alphabet[i]
    return out


def down_operands(spec: FleetSpec, node: str) -> set[str]:
    return {
        str(f.params.get("operand", "driver")) for f in spec.faults_on(node) if f.kind == "op.operand_down"
    }


def pod_name(fleet: str, node: str, daemonset: str) -> str:
    """The name of `daemonset`'s pod on `node` of fleet `fleet`: the same every time, so a controller
    finds it without listing pods."""
    return f"{daemonset}-{_suffix(fleet, node, daemonset)}"


def operand_pod_name(spec: FleetSpec, node: str, operand: str) -> str:
    return pod_name(spec.name, node, OPERANDS[operand][0])


def deployed(labels: Mapping[str, str], operand: str) -> bool:
    """Whether the operand's DaemonSet selects a node with `labels`. A missing label counts as
    "true": the operator labels every GPU node that lacks one (state-manager labelGPUNodes)."""
    return labels.get(DEPLOY_LABELS[operand], "true") == "true"


def exporter_running(spec: FleetSpec, node: str, labels: Mapping[str, str]) -> bool:
    """Whether dcgm-exporter is up on `node` (its pod deployed and neither it nor what it waits
    for crash-looping): the exporter then holds DCGM's profiling module on the node's GPUs."""
    if spec.profile_of(node).gpus < 1 or not deployed(labels, "dcgm-exporter"):
        return False
    down = down_operands(spec, node)
    return "dcgm-exporter" not in down and not any(o in down for o in NEEDS["dcgm-exporter"])


def _container_status(
    name: str, image: str, state: dict[str, Any], *, ready: bool, restarts: int = 0
) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": ready,
        "restartCount": restarts,
        "started": ready,
        "state": copy.deepcopy(state),  # COMPLETED is shared
    }


def _pod(name: str, node: str, image: str, container: str, inits: tuple[str, ...]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app": name.rsplit("-", 1)[0], "app.kubernetes.io/managed-by": "gpu-operator"},
            "annotations": {SIM_STATIC: "true"},
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": "nvidia-operator",
            "priorityClassName": "system-node-critical",
            "initContainers": [{"name": i, "image": image} for i in inits],
            "containers": [{"name": container, "image": image}],
        },
    }


def operand_pod(
    spec: FleetSpec, node: str, operand: str, *, down: set[str], started_at: str = STARTED_AT
) -> dict[str, Any]:
    """`operand`'s pod on `node`, with the status its DaemonSet's kubelet reports: crash-looping
    when it is in `down`, waiting in its init containers while one it needs is, else Running."""
    _daemonset, tag, inits = OPERANDS[operand]
    image = f"{IMAGE_REGISTRY}/{tag}"
    pod = _pod(operand_pod_name(spec, node, operand), node, image, f"{operand}-ctr", inits)
    if operand in down:
        state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off 5m0s restarting failed container={operand}-ctr",
            }
        }
        crashing = (state, False, CRASH_RESTARTS)
        pod["status"] = _status(pod, "Running", inits_done=True, main=crashing, started_at=started_at)
    elif any(o in down for o in NEEDS[operand]):
        pod["status"] = _status(pod, "Pending", inits_done=False, started_at=started_at)
    else:
        running = ({"running": {"startedAt": started_at}}, True, 0)
        pod["status"] = _status(pod, "Running", inits_done=True, main=running, started_at=started_at)
    return pod


def operand_pods(spec: FleetSpec) -> list[dict[str, Any]]:
    """Every operand pod of every GPU node, with its status (see module doc)."""
    pods: list[dict[str, Any]] = []
    for node, rack in spec.nodes():
        if spec.profiles[rack.profile].gpus < 1:
            continue
        down = down_operands(spec, node)
        pods.extend(operand_pod(spec, node, operand, down=down) for operand in OPERANDS)
        image = f"{IMAGE_REGISTRY}/{OPERANDS['validator'][1]}"
        validator = _pod(
            f"{CUDA_VALIDATOR}-{_suffix(spec.name, node, CUDA_VALIDATOR)}",
            node,
            image,
            "nvidia-cuda-validator",
            ("cuda-validation",),
        )
        if down:
            validator["status"] = _status(validator, "Pending", inits_done=False)
        else:
            validator["status"] = _status(validator, "Succeeded", inits_done=True, main=(COMPLETED, False, 0))
        pods.append(validator)
    return pods


def _status(
    pod: dict[str, Any],
    phase: str,
    *,
    inits_done: bool,
    main: tuple[dict[str, Any], bool, int] | None = None,
    started_at: str = STARTED_AT,
) -> dict[str, Any]:
    spec = pod["spec"]
    if inits_done:
        done = {"terminated": {**COMPLETED["terminated"], "startedAt": started_at, "finishedAt": started_at}}
        inits = [_container_status(c["name"], c["image"], done, ready=True) for c in spec["initContainers"]]
    else:
        # The first init container waits for a validator marker; the rest have not started.
        inits = [
            _container_status(
                c["name"],
                c["image"],
                {"running": {"startedAt": started_at}}
                if i == 0
                else {"waiting": {"reason": "PodInitializing"}},
                ready=False,
            )
            for i, c in enumerate(spec["initContainers"])
        ]
    container = spec["containers"][0]
    if main is None:
        mains = [
            _container_status(
                container["name"], container["image"], {"waiting": {"reason": "PodInitializing"}}, ready=False
            )
        ]
    else:
        state, ready, restarts = main
        mains = [
            _container_status(container["name"], container["image"], state, ready=ready, restarts=restarts)
        ]
    ready_all = all(s["ready"] for s in mains)
    return {
        "phase": phase,
        "hostIP": "",
        "startTime": started_at,
        "conditions": [
            {"type": "Initialized", "status": "True" if inits_done else "False"},
            {"type": "Ready", "status": "True" if ready_all else "False"},
            {"type": "PodScheduled", "status": "True"},
        ],
        "initContainerStatuses": inits,
        "containerStatuses": mains,
    }
