"""Run a multi-node NCCL probe as an MPIJob on the cluster: create it (suspended, queued in Kueue),
wait for Kueue to admit the gang and the job to end, read the launcher's log, delete the job.

Outcomes:
- `Succeeded`, or `Failed` with a launcher log: the log is the raw output and the parsed output
  decides (an NCCL failure is a verdict about the nodes, not a harness error); the job is deleted
  when it succeeded, kept for forensics when it failed;
- never admitted, or no log by the deadline: a harness error (`error` verdicts), and the job is
  deleted so it does not start later on nodes that have moved on.
"""

from __future__ import annotations

import os
import time
from typing import Any

from fleetval.backends import ProbeOutput
from fleetval.k8s import mpijob
from fleetval.k8s.specs import ProbeSpec

POLL_S = 10.0
ADMISSION_TIMEOUT_S = 3600
# The Kueue LocalQueue probes are submitted to (namespace `fleetval`); see deploy/rbac.yaml.
QUEUE_ENV = "FLEETVAL_KUEUE_QUEUE"


def launcher_log(core: Any, name: str, namespace: str) -> str:
    """The newest launcher pod's log, or "" when there is none yet."""
    pods = core.list_namespaced_pod(
        namespace=namespace,
        label_selector=f"{mpijob.JOB_NAME_LABEL}={name},{mpijob.JOB_ROLE_LABEL}=launcher",
    ).items
    if not pods:
        return ""
    pod = max(pods, key=lambda p: p.metadata.creation_timestamp or 0)
    return str(core.read_namespaced_pod_log(name=pod.metadata.name, namespace=namespace) or "")


def run_mpijob_probe(
    custom: Any,
    core: Any,
    spec: ProbeSpec,
    *,
    queue_name: str | None = None,
    poll_s: float = POLL_S,
    admission_timeout_s: int = ADMISSION_TIMEOUT_S,
    clock: Any = time,
) -> ProbeOutput:
    """Create, await and clean up the MPIJob for `spec` (see module doc). `custom` is a
    CustomObjectsApi, `core` a CoreV1Api."""
    started = clock.time()
    body = mpijob.mpijob_manifest(
        spec,
        queue_name=queue_name or os.environ.get(QUEUE_ENV, mpijob.DEFAULT_QUEUE),
        admission_timeout_s=admission_timeout_s,
    )
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    api = {"group": mpijob.GROUP, "version": mpijob.VERSION, "namespace": namespace, "plural": mpijob.PLURAL}

    def output(raw: str, exit_code: int | None, error: str | None) -> ProbeOutput:
        return ProbeOutput(
            spec.probe_key,
            spec.node,
            spec.tool,
            raw,
            exit_code,
            started,
            clock.time(),
            error=error,
            spec={**spec.to_json(), "mpijob": name},
        )

    try:
        custom.create_namespaced_custom_object(body=body, **api)
        deadline = started + admission_timeout_s + spec.timeout_s + 600
        state = "Pending"
        while clock.time() < deadline:
            state = mpijob.job_state(custom.get_namespaced_custom_object(name=name, **api))
            if state in ("Succeeded", "Failed"):
                break
            clock.sleep(poll_s)
        raw = launcher_log(core, name, namespace) if state in ("Succeeded", "Failed") else ""
        if state == "Succeeded":
            custom.delete_namespaced_custom_object(name=name, propagation_policy="Foreground", **api)
            return output(raw, 0, None)
        if state == "Failed" and raw.strip():
            return output(raw, 1, None)  # the launcher ran: its output is the evidence
        if state not in ("Succeeded", "Failed"):
            custom.delete_namespaced_custom_object(name=name, propagation_policy="Foreground", **api)
            why = "never admitted by Kueue" if state in ("Suspended", "Pending") else f"still {state}"
            return output(raw, None, f"MPIJob {name} {why} by the deadline")
        return output(raw, 1, f"MPIJob {name} failed without launcher output")
    except Exception as exc:  # the harness broke: an `error` verdict for this pair, not a finding
        return output("", None, f"{type(exc).__name__}: {exc}"[:500])
