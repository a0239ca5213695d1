"""What a scenario job is on the cluster: a batch/v1 Job queued in Kueue (the default kind) or a
plain pod group (the opt-in kind `pod-group`), both running the same container.

The container (`JOB_SCRIPT`, run by `sh -c` in Kubernetes' e2e busybox image) holds its GPUs until
it is told to finish, then exits 0, so Kueue sees a job that succeeded and marks its Workload
Finished, which is how quota comes back on a real Kueue. "Told to finish" is the pod annotation
`fleetval.io/finish`, projected into the container by a downwardAPI volume (the kubelet rewrites
the file when the pod's annotations change). On SIGTERM (a preempted victim, a deleted pod) the
script saves for `save` seconds, as a training job writes its checkpoint, then exits 143; a save
longer than the pod's grace period is cut short by SIGKILL (137).

A Job is created suspended with `parallelism = completions = pods`; Kueue unsuspends it on
admission and suspends it on eviction (the Job controller then deletes its pods, with their
grace period, and creates new ones when Kueue admits it again): nothing is resubmitted. Pods are
replaced only once the old ones have failed (`podReplacementPolicy: Failed`), so a resumed job
never shares its GPUs with its own terminating pods.

A pod group is pods labelled `kueue.x-k8s.io/pod-group-name` with the annotation
`kueue.x-k8s.io/pod-group-total-count`; it is Finished when all its pods succeeded. A preempted
group's pods stay (Kueue's finalizer) until replacements exist, so its owner resubmits once none
of its pods is live (Kueue's plain-pods documentation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.kueue.api import POD_GROUP_COUNT, POD_GROUP_LABEL, PRIORITY_CLASS_LABEL, QUEUE_LABEL
from fleetval.pinned_images import KUEUE_JOB_IMAGE

JOB_IMAGE: Final = KUEUE_JOB_IMAGE
JOB_KIND: Final = "job"
POD_GROUP_KIND: Final = "pod-group"
KINDS: Final = (JOB_KIND, POD_GROUP_KIND)
FINISH_ANNOTATION: Final = "fleetval.io/finish"
SIGNAL_VOLUME: Final = "fleetval-signal"
SIGNAL_DIR: Final = "/etc/fleetval-signal"
FINISH_FILE: Final = f"{SIGNAL_DIR}/finish"
EXIT_SAVED: Final = 143  # the script's exit after its SIGTERM save (128 + SIGTERM)
# `sleep 1 & wait $!`: a trap runs as soon as SIGTERM arrives, not after the sleep.
JOB_SCRIPT: Final = (
    'trap \'echo "SIGTERM: saving for ${SAVE_S}s"; sleep "$SAVE_S"; echo saved; exit 143\' TERM\n'
    "echo started\n"
    'while [ ! -s "$FINISH_FILE" ]; do sleep 1 & wait $!; done\n'
    "echo finished\n"
)


@dataclass(frozen=True, slots=True)
class JobShape:
    """One scenario job as the cluster sees it (names already the run's)."""

    name: str
    namespace: str
    queue: str
    pods: int
    gpus: int
    resource: str
    cpu: str
    memory: str
    grace: int
    save: float
    priority: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    image: str = JOB_IMAGE


def pod_spec(shape: JobShape) -> dict[str, Any]:
    limits: dict[str, str] = {"cpu": shape.cpu, "memory": shape.memory}
    if shape.gpus:
        limits[shape.resource] = str(shape.gpus)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": shape.grace,
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "main",
                "image": shape.image,
                "command": ["sh", "-c", JOB_SCRIPT],
                "env": [
                    {"name": "SAVE_S", "value": f"{shape.save:g}"},
                    {"name": "FINISH_FILE", "value": FINISH_FILE},
                ],
                "resources": {"requests": {"cpu": shape.cpu, "memory": shape.memory}, "limits": limits},
                "volumeMounts": [{"name": SIGNAL_VOLUME, "mountPath": SIGNAL_DIR, "readOnly": True}],
            }
        ],
        "volumes": [
            {
                "name": SIGNAL_VOLUME,
                "downwardAPI": {
                    "items": [
                        {
                            "path": "finish",
                            "fieldRef": {"fieldPath": f"metadata.annotations['{FINISH_ANNOTATION}']"},
                        }
                    ]
                },
            }
        ],
    }
    if shape.node_selector:
        spec["nodeSelector"] = dict(shape.node_selector)
    return spec


def job_manifest(shape: JobShape, labels: Mapping[str, str], pod_labels: Mapping[str, str]) -> dict[str, Any]:
    """The batch/v1 Job: queued by its labels, suspended until Kueue admits it."""
    job_labels = {**labels, QUEUE_LABEL: shape.queue}
    if shape.priority:
        job_labels[PRIORITY_CLASS_LABEL] = shape.priority
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": shape.name, "labels": job_labels},
        "spec": {
            "suspend": True,
            "parallelism": shape.pods,
            "completions": shape.pods,
            "backoffLimit": 6,
            "podReplacementPolicy": "Failed",
            "template": {"metadata": {"labels": dict(pod_labels)}, "spec": pod_spec(shape)},
        },
    }


def group_pod_manifest(
    shape: JobShape, index: int, attempt: int, pod_labels: Mapping[str, str]
) -> dict[str, Any]:
    """Member `index` of the pod group (attempt > 0: a replacement, a new name in the same group)."""
    labels = {**pod_labels, QUEUE_LABEL: shape.queue, POD_GROUP_LABEL: shape.name}
    if shape.priority:
        labels[PRIORITY_CLASS_LABEL] = shape.priority
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{shape.name}-{index}" + (f"-r{attempt}" if attempt else ""),
            "labels": labels,
            "annotations": {POD_GROUP_COUNT: str(shape.pods)},
        },
        "spec": pod_spec(shape),
    }
