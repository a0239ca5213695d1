"""batch/v1 Jobs in the simulated cluster: the API server's defaulting and the checks the simulator
adds to the schema decoding, and the Job controller, as far as a one-pod Job goes (the
mpi-operator's launcher is one; a suspended Job queued in Kueue is another).

From Kubernetes 1.33 (`pkg/apis/batch/v1/defaults.go`, `pkg/apis/batch/validation`,
`pkg/controller/job`): the server generates the selector and the pod template's
`batch.kubernetes.io/controller-uid` / `job-name` labels; the template's restartPolicy must be
`Never` or `OnFailure`. The controller creates pods named `<job>-<5 chars>` owned by the Job,
counts them (`active`: not being deleted; `ready`, `succeeded`, `failed`, `terminating`), adds
`SuccessCriteriaMet` then `Complete` once `completions` pods succeeded, `FailureTarget` then `Failed` with
`BackoffLimitExceeded` once more than `backoffLimit` pods failed or `DeadlineExceeded` once the
Job ran `activeDeadlineSeconds` (simulated seconds: × the cluster's time_scale, so never at 0, as
pods' deadlines), deleting its running pods (each with its grace period, as the controller's
plain delete does). `podReplacementPolicy: Failed` replaces a deleted pod only once it has
ended. `suspend: true` deletes the running pods and clears
`startTime` (the deadline restarts on resume). Deleting a batch/v1 Job orphans its pods unless
the request asks for Background or Foreground propagation, as the real API server does.

Not modelled: indexed completion, parallelism above the missing completions, pod failure and
success policies, restart back-off, `ttlSecondsAfterFinished`.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any, Final

from fleetval.k8s.validation import ApiError, FieldError, not_supported, validate_pod_spec
from fleetval.sim.kube.meta import (
    TERMINAL,
    condition,
    condition_true,
    controller_ref,
    owned,
    parse_rfc3339,
    phase,
    pod_ready,
    rfc3339,
    truncate_event,
)
from fleetval.sim.kube.resources import by_kind

if TYPE_CHECKING:
    from fleetval.sim.kube.cluster import SimKubeCluster

CONTROLLER_UID_LABEL: Final = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID_LABEL: Final = "controller-uid"
LEGACY_JOB_NAME_LABEL: Final = "job-name"
DEFAULT_BACKOFF_LIMIT: Final = 6
COMPONENT: Final = "job-controller"


def default_job(job: dict[str, Any]) -> None:
    """What the API server fills in on create (the uid is already set)."""
    meta, spec = job["metadata"], job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    template = spec.setdefault("template", {})
    if not spec.get("manualSelector"):
        generated = {
            CONTROLLER_UID_LABEL: meta["uid"],
            JOB_NAME_LABEL: meta["name"],
            LEGACY_CONTROLLER_UID_LABEL: meta["uid"],
            LEGACY_JOB_NAME_LABEL: meta["name"],
        }
        template.setdefault("metadata", {}).setdefault("labels", {}).update(generated)
        spec["selector"] = {"matchLabels": {CONTROLLER_UID_LABEL: meta["uid"]}}


def job_errors(job: dict[str, Any]) -> list[FieldError]:
    """The Job checks the schema decoding leaves to semantic validation (a subset)."""
    template_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    errors = validate_pod_spec(template_spec, "spec.template.spec")
    restart = template_spec.get("restartPolicy", "Always")  # the pod default, which a Job refuses
    if restart not in ("OnFailure", "Never"):
        errors.append(not_supported("spec.template.spec.restartPolicy", restart, ["OnFailure", "Never"]))
    return errors


def _set(status: dict[str, Any], kind: str, value: str, reason: str, message: str, now: float) -> bool:
    """Set a Job condition; True when it changed."""
    current = condition(status, kind)
    if current is not None and (current.get("status"), current.get("reason")) == (value, reason):
        return False
    stamp = rfc3339(now)
    new = {
        "type": kind,
        "status": value,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != kind]
    status["conditions"] = [*conditions, new]
    return True


def finished(job: dict[str, Any]) -> bool:
    status = job.get("status") or {}
    return condition_true(status, "Complete") or condition_true(status, "Failed")


def reconcile_jobs(cluster: SimKubeCluster, now: float) -> float:
    """One pass of the Job controller; returns when it next needs a pass (a deadline), or inf."""
    due = math.inf
    for job in cluster.stored(by_kind("Job")):
        if not job["metadata"].get("deletionTimestamp") and not finished(job):
            due = min(due, _sync(cluster, job, now))
    return due


def _sync(cluster: SimKubeCluster, job: dict[str, Any], now: float) -> float:
    pod_res = by_kind("Pod")
    meta, spec = job["metadata"], job.get("spec") or {}
    ns = meta["namespace"]
    new = copy.deepcopy(job)
    status = new.setdefault("status", {})
    pods = owned(cluster.stored(pod_res, ns), job)
    running = [p for p in pods if phase(p) not in TERMINAL]
    # Active pods are those not being deleted (FilterActivePods); terminating ones run on through
    # their grace period and are counted apart.
    active = [p for p in running if not p["metadata"].get("deletionTimestamp")]
    terminating = [p for p in running if p["metadata"].get("deletionTimestamp")]
    succeeded = sum(phase(p) == "Succeeded" for p in pods)
    failed = sum(phase(p) == "Failed" for p in pods)
    due = math.inf

    def stop_active() -> None:
        # deleteActivePods: a plain delete, so each pod gets its terminationGracePeriodSeconds
        for pod in active:
            cluster.delete_gracefully(pod_res, pod)
            cluster.emit(
                job, "Normal", "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}", COMPONENT
            )
        terminating.extend(active)
        active.clear()

    def fail(reason: str, message: str) -> None:
        stop_active()
        _set(status, "FailureTarget", "True", reason, message, now)
        _set(status, "Failed", "True", reason, message, now)
        cluster.emit(job, "Warning", reason, message, COMPONENT)

    if spec.get("suspend"):
        stop_active()
        if _set(status, "Suspended", "True", "JobSuspended", "Job suspended", now):
            status.pop("startTime", None)
            cluster.job_started.pop(meta["uid"], None)
            cluster.emit(job, "Normal", "Suspended", "Job suspended", COMPONENT)
    else:
        if condition_true(status, "Suspended"):
            _set(status, "Suspended", "False", "JobResumed", "Job resumed", now)
            cluster.emit(job, "Normal", "Resumed", "Job resumed", COMPONENT)
        if "startTime" not in status:
            status["startTime"] = rfc3339(now)
            cluster.job_started[meta["uid"]] = now
        started = cluster.job_started.get(meta["uid"]) or parse_rfc3339(status["startTime"]) or now
        deadline = spec.get("activeDeadlineSeconds")
        ends = started + float(deadline) * cluster.time_scale if deadline is not None else math.inf
        completions = int(spec.get("completions") or 1)
        if cluster.time_scale > 0 and now >= ends:
            fail("DeadlineExceeded", "Job was active longer than specified deadline")
        elif failed > int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)):
            fail("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif succeeded >= completions:
            message = "Reached expected number of succeeded pods"
            _set(status, "SuccessCriteriaMet", "True", "CompletionsReached", message, now)
            _set(status, "Complete", "True", "CompletionsReached", message, now)
            status["completionTime"] = rfc3339(now)
            cluster.emit(job, "Normal", "Completed", "Job completed", COMPONENT)
        else:
            if cluster.time_scale > 0:
                due = ends
            # podReplacementPolicy Failed: a terminating pod is replaced only once it has failed
            occupied = len(active) + (len(terminating) if spec.get("podReplacementPolicy") == "Failed" else 0)
            wanted = min(int(spec.get("parallelism", 1)), completions - succeeded) - occupied
            for _ in range(max(0, wanted)):
                created = _create_pod(cluster, job)
                if created is not None:
                    active.append(created)
    status.update(
        active=len(active),
        ready=sum(pod_ready(p) for p in active),
        succeeded=succeeded,
        failed=failed,
        terminating=len(terminating),
        uncountedTerminatedPods={},
    )
    cluster.write(by_kind("Job"), new)
    return due


def _create_pod(cluster: SimKubeCluster, job: dict[str, Any]) -> dict[str, Any] | None:
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    template_meta = template.get("metadata") or {}
    meta: dict[str, Any] = {
        "generateName": f"{job['metadata']['name']}-",
        "labels": template_meta.get("labels") or {},
        "ownerReferences": [controller_ref(job)],
    }
    if template_meta.get("annotations"):
        meta["annotations"] = template_meta["annotations"]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template.get("spec") or {}}
    try:
        pod = cluster.insert(by_kind("Pod"), job["metadata"]["namespace"], body)
    except ApiError as exc:  # an invalid template: the controller reports it and retries
        message = truncate_event(f"Error creating: {exc}")
        cluster.emit(job, "Warning", "FailedCreate", message, COMPONENT, once=True)
        return None
    cluster.emit(job, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}", COMPONENT)
    return pod
