"""Probe specs and their KubernetesPodOperator keyword arguments (pure; no Airflow import).
Each tool builds its own specs (`fleetval.dcgm.probe`, `fleetval.nccl.probe`).

A ProbeSpec says what runs where: image, command, the node, the GPUs, the deadline, and which
exit codes mean "the tool ran and reported" (its output decides the verdict) as opposed to a
harness failure (a command missing from the image, a killed container: the task fails and is
retried, and the last failure becomes an `error` verdict).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes.client import models as k8s

from fleetval.nodes import MAINTENANCE_TAINT, ONBOARDING_TAINT
from fleetval.settings import NAMESPACE as NAMESPACE

PROBE_LABEL: Final = "fleetval.io/probe"
CLAIM_MOUNT: Final = "/ckpt"


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    probe_key: str
    tool: str
    node: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    gpus: int = 0
    timeout_s: int = 1800
    env: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)  # tool parameters the judges read (level…)
    reported_exit_codes: tuple[int, ...] = (0,)
    capabilities: tuple[str, ...] = ()
    shm_size: str | None = None  # a memory-backed /dev/shm of this size (NCCL needs more than 64 MiB)
    claim: str | None = (
        None  # a PersistentVolumeClaim mounted at CLAIM_MOUNT (the checkpoint drill's storage)
    )
    gpu_resource: str = "nvidia.com/gpu"  # what `gpus` counts: a MIG probe asks for nvidia.com/mig-<profile>

    def to_json(self) -> dict[str, Any]:
        return {
            "probe_key": self.probe_key,
            "tool": self.tool,
            "node": self.node,
            "image": self.image,
            "command": list(self.command),
            "args": list(self.args),
            "gpus": self.gpus,
            "timeout_s": self.timeout_s,
            "env": self.env,
            "params": self.params,
            "reported_exit_codes": list(self.reported_exit_codes),
            "capabilities": list(self.capabilities),
            "shm_size": self.shm_size,
            "claim": self.claim,
            **({"gpu_resource": self.gpu_resource} if self.gpu_resource != "nvidia.com/gpu" else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeSpec:
        return cls(
            probe_key=str(data["probe_key"]),
            tool=str(data["tool"]),
            node=str(data["node"]),
            image=str(data["image"]),
            command=tuple(data["command"]),
            args=tuple(data.get("args") or ()),
            gpus=int(data.get("gpus", 0)),
            timeout_s=int(data.get("timeout_s", 1800)),
            env=dict(data.get("env") or {}),
            params=dict(data.get("params") or {}),
            reported_exit_codes=tuple(data.get("reported_exit_codes") or (0,)),
            capabilities=tuple(data.get("capabilities") or ()),
            shm_size=data.get("shm_size"),
            claim=data.get("claim"),
            gpu_resource=str(data.get("gpu_resource") or "nvidia.com/gpu"),
        )


def pod_name(spec: ProbeSpec) -> str:
    base = f"fleetval-{spec.tool}-{spec.node}".lower().replace("_", "-").replace(".", "-")
    return base[:52].rstrip("-")


def probe_label(probe_key: str) -> str:
    """A label value naming one probe (keys are longer than a label value may be)."""
    return hashlib.sha256(probe_key.encode()).hexdigest()[:16]


def node_affinity(node: str) -> k8s.V1Affinity:
    """Required node affinity on the Node's name (`matchFields` metadata.name In), as the DaemonSet
    controller pins its pods: the `kubernetes.io/hostname` label is the kubelet's hostname, not
    necessarily the node's name (`fleetval.k8s.scheduling.node_name_affinity`)."""
    return k8s.V1Affinity(
        node_affinity=k8s.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                node_selector_terms=[
                    k8s.V1NodeSelectorTerm(
                        match_fields=[
                            k8s.V1NodeSelectorRequirement(key="metadata.name", operator="In", values=[node])
                        ]
                    )
                ]
            )
        )
    )


def kpo_kwargs(spec: ProbeSpec) -> dict[str, Any]:
    """KubernetesPodOperator arguments for one probe: pinned to its node by name, its GPUs, tolerating
    our own maintenance and onboarding taints (a cordoned node under diagnosis, a new node not yet
    in service, must still run the probe).

    Successful pods are deleted; failed ones are kept for forensics (the operator subclass deletes
    a pod that never started, so a Pending probe cannot run later on a node back in service)."""
    volumes: list[k8s.V1Volume] = []
    mounts: list[k8s.V1VolumeMount] = []
    if spec.shm_size:
        volumes.append(
            k8s.V1Volume(
                name="dshm", empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit=spec.shm_size)
            )
        )
        mounts.append(k8s.V1VolumeMount(name="dshm", mount_path="/dev/shm"))
    if spec.claim:
        volumes.append(
            k8s.V1Volume(
                name="storage",
                persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(claim_name=spec.claim),
            )
        )
        mounts.append(k8s.V1VolumeMount(name="storage", mount_path=CLAIM_MOUNT))
    return {
        "name": pod_name(spec),
        "namespace": NAMESPACE,
        "image": spec.image,
        "cmds": list(spec.command),
        "arguments": list(spec.args),
        "env_vars": [k8s.V1EnvVar(name=k, value=v) for k, v in sorted(spec.env.items())],
        "labels": {
            "app.kubernetes.io/part-of": "fleetval",
            "fleetval.io/tool": spec.tool,
            "fleetval.io/node": spec.node[:63].rstrip("-_."),
            PROBE_LABEL: probe_label(spec.probe_key),
        },
        "annotations": {"fleetval.io/probe-key": spec.probe_key},
        "affinity": node_affinity(spec.node),
        # A probe of no GPUs requests none at all (D-OP-03's pod must be one that asked for no GPU).
        "container_resources": k8s.V1ResourceRequirements(
            limits={spec.gpu_resource: str(spec.gpus)},
            requests={spec.gpu_resource: str(spec.gpus), "cpu": "1"},
        )
        if spec.gpus
        else k8s.V1ResourceRequirements(requests={"cpu": "100m"}),
        "tolerations": [
            k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
            k8s.V1Toleration(key=MAINTENANCE_TAINT, operator="Exists"),
            k8s.V1Toleration(key=ONBOARDING_TAINT, operator="Exists"),  # a node is probed before it serves
            k8s.V1Toleration(key="node.kubernetes.io/unschedulable", operator="Exists", effect="NoSchedule"),
        ],
        "volumes": volumes,
        "volume_mounts": mounts,
        "active_deadline_seconds": spec.timeout_s,
        "container_security_context": k8s.V1SecurityContext(
            capabilities=k8s.V1Capabilities(
                add=list(spec.capabilities) or None, drop=["ALL"] if not spec.capabilities else None
            ),
            allow_privilege_escalation=False,
        ),
        # The drill image runs as user 1000: the claim's files must be its group's to write.
        **({"security_context": k8s.V1PodSecurityContext(fs_group=1000)} if spec.claim else {}),
        "service_account_name": "fleetval-probe",
        "termination_message_policy": "FallbackToLogsOnError",
        "get_logs": True,
        "do_xcom_push": False,
        "on_finish_action": "delete_succeeded_pod",
        "startup_timeout_seconds": 600,
    }
