"""Kueue's API names that both sides use — the runner that submits queued pods and the simulated
Kueue that admits them (kubernetes-sigs/kueue `pkg/controller/constants`, `pkg/controller/jobs/pod`)."""

from __future__ import annotations

from typing import Final

GROUP: Final = "kueue.x-k8s.io"
VERSION: Final = "v1beta2"  # the CRDs' storage version (v1beta1 is served too, deprecated)
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
POD_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_COUNT: Final = "kueue.x-k8s.io/pod-group-total-count"  # an annotation
MANAGED_LABEL: Final = "kueue.x-k8s.io/managed"
JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
ADMISSION_GATE: Final = "kueue.x-k8s.io/admission"  # the pod webhook's scheduling gate
MANAGED_FINALIZER: Final = "kueue.x-k8s.io/managed"  # the pod webhook's finalizer on every managed pod
# A pod group whose pods carry "false" is finished when none is active (else it waits for replacements).
RETRIABLE_IN_GROUP: Final = "kueue.x-k8s.io/retriable-in-group"  # an annotation

# Kueue's own objects, in the order a change flows (a LocalQueue needs its ClusterQueue, ...).
PLURALS: Final = {
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
}
