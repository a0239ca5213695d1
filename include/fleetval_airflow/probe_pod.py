"""One probe, one pod, one task: a thin KubernetesPodOperator for fleetval's probes.

The provider does the work (pod creation, reattach on retry, startup timeout, deferral, log
streaming, cleanup); this subclass adds only what a probe needs:

- the pod comes from a ProbeSpec (`fleetval.probes.pod.kpo_kwargs`): the node, its GPUs, the
  image, the tool's command;
- the raw output reaches the store the moment the pod completes (`StoreProbeOutput`), before
  anything judges it, with its exit code and, when the harness broke, why;
- an exit code the tool uses to report a finding (dcgmi 226: a test failed) is not a task
  failure: the verdict comes from the output. Any other failure (command not found, killed,
  deadline) fails the task, which retries with a new pod; the last failure stands as an `error`;
- a pod that never started (Pending at the startup timeout) is deleted, whatever
  `on_finish_action` says, so it cannot start later on a node that is back in service.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.callbacks import KubernetesPodOperatorCallback
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from kubernetes.client.exceptions import ApiException

from fleetval.probes.pod import ProbeSpec, kpo_kwargs

if TYPE_CHECKING:
    from kubernetes.client import models as k8s

DEADLINE_EXCEEDED = "DeadlineExceeded"


def base_exit_code(pod: k8s.V1Pod | None, container: str = "base") -> int | None:
    statuses = (pod.status.container_statuses if pod is not None and pod.status else None) or []
    for status in statuses:
        if status.name == container and status.state and status.state.terminated:
            return int(status.state.terminated.exit_code)
    return None


def harness_failure(pod: k8s.V1Pod | None, spec: ProbeSpec, raw: str | None = None) -> str | None:
    """Why a completed probe pod is not evidence about the node, or None when the tool reported.

    An nccl probe declares every exit code some nccl-tests version reports with; given its output
    (`raw`), the code is read by the version the output prints (`exit_codes.exit_code_problem`)."""
    if pod is None or pod.status is None:
        return "the probe pod is gone"
    if pod.status.reason == DEADLINE_EXCEEDED:
        return f"the probe ran past its deadline ({spec.timeout_s}s) and was killed"
    code = base_exit_code(pod)
    if code is None:
        return f"the probe container did not terminate (phase {pod.status.phase})"
    if code not in spec.reported_exit_codes:
        hint = {126: "not executable", 127: "command not found in the image", 128: "could not start"}.get(
            code, ""
        )
        detail = f" ({hint})" if hint else ""
        return f"the probe command exited {code}{detail}, not a code {spec.tool} reports with"
    if spec.tool == "nccl" and raw is not None:
        from fleetval.nccl.exit_codes import exit_code_problem

        return exit_code_problem(code, raw)
    return None


def read_base_log(client: Any, name: str, namespace: str) -> str:
    """The probe container's log as text (`_preload_content=False`: the client's str conversion
    mangles plain text)."""
    response = client.read_namespaced_pod_log(name, namespace, container="base", _preload_content=False)
    return str(response.data.decode("utf-8", errors="replace"))


class StoreProbeOutput(KubernetesPodOperatorCallback):
    """Store the pod's log (the tool's raw output) as soon as the pod completes, in both modes."""

    @staticmethod
    def on_pod_completion(*, pod: k8s.V1Pod, client: Any, operator: Any, context: Any, **kwargs: Any) -> None:
        if not isinstance(operator, ProbePodOperator):
            return
        raw = ""
        try:
            raw = read_base_log(client, pod.metadata.name, pod.metadata.namespace)
        except ApiException as exc:
            operator.log.warning("could not read the probe's log: %s", exc.reason)
        operator.store_output(
            raw, exit_code=base_exit_code(pod), error=harness_failure(pod, operator.spec, raw)
        )


class ProbePodOperator(KubernetesPodOperator):
    """Run one fleetval probe (`probe`: a ProbeSpec as JSON) in run `fv_run` of the store."""

    ui_color = "#d9ecf2"

    def __init__(self, *, probe: dict[str, Any], fv_run: int, **kwargs: Any) -> None:
        from fleetval.settings import Settings

        # Deferrable unless the deployment says otherwise (FLEETVAL_PROBE_DEFERRABLE): a DCGM
        # diagnostic takes minutes, and a deferred probe holds no worker slot. Mapped tasks build
        # the operator in the worker, so this is read at run time.
        kwargs.setdefault("deferrable", Settings.from_env().probe_deferrable)
        self.spec = ProbeSpec.from_json(probe)
        namespace = kwargs.pop("namespace", None)
        pod_args = kpo_kwargs(self.spec)
        if namespace:
            pod_args["namespace"] = namespace
        super().__init__(**{**pod_args, **kwargs, "callbacks": [StoreProbeOutput]})
        self.probe = probe
        self.fv_run = fv_run
        self._stored = False

    # --- raw output ---------------------------------------------------------------------------
    def store_output(self, raw: str, *, exit_code: int | None, error: str | None) -> None:
        from fleetval.probes import outputs as probe_outputs
        from fleetval.store.engine import outage_as_error
        from fleetval_airflow import config

        now = dt.datetime.now(dt.UTC).timestamp()
        with outage_as_error():
            probe_outputs.store_probe_outputs(
                config.store(),
                self.fv_run,
                [
                    probe_outputs.probe_output(
                        self.spec, raw, exit_code=exit_code, error=error, finished_at=now
                    )
                ],
            )
        self._stored = True

    def execute(self, context: Any) -> Any:
        try:
            return super().execute(context)
        except Exception as exc:
            self._store_failure(exc)
            raise

    def trigger_reentry(self, context: Any, event: dict[str, Any]) -> Any:
        try:
            if event.get("status") == "failed" and self._reported(event["name"], event["namespace"]):
                event = {**event, "status": "success"}  # the tool ran and reported: its output decides
            return super().trigger_reentry(context, event)
        except Exception as exc:
            self._store_failure(exc)
            raise

    def _store_failure(self, exc: Exception) -> None:
        from airflow.exceptions import TaskDeferred

        if isinstance(exc, TaskDeferred) or self._stored:
            return
        self.store_output("", exit_code=None, error=f"{type(exc).__name__}: {exc}"[:500])

    def _reported(self, name: str, namespace: str) -> bool:
        try:
            pod = self.hook.get_pod(name, namespace)
        except ApiException:
            return False
        return harness_failure(pod, self.spec, self._raw(name, namespace)) is None

    def _raw(self, name: str, namespace: str) -> str | None:
        """An nccl probe's log (its exit code means what its version says), else None."""
        if self.spec.tool != "nccl":
            return None
        try:
            return read_base_log(self.hook.core_v1_client, name, namespace)
        except ApiException:
            return None

    # --- cleanup ------------------------------------------------------------------------------
    def cleanup(
        self, pod: Any, remote_pod: Any, xcom_result: dict[str, Any] | None = None, context: Any = None
    ) -> None:
        failed = (
            remote_pod is not None and remote_pod.status is not None and remote_pod.status.phase == "Failed"
        )
        if failed and harness_failure(remote_pod, self.spec, self._pod_raw(remote_pod)) is None:
            # A reported finding: the output is stored, the pod has nothing more to tell.
            self.pod_manager.delete_pod(remote_pod)
            return
        super().cleanup(pod, remote_pod, xcom_result, context)

    def _pod_raw(self, pod: Any) -> str | None:
        meta = getattr(pod, "metadata", None)
        return self._raw(meta.name, meta.namespace) if meta is not None and meta.name else None

    def process_pod_deletion(self, pod: Any, *, reraise: bool = True) -> bool:
        if pod is not None and pod.status is not None and pod.status.phase == "Pending":
            self.log.info("Deleting pod %s: it never started", pod.metadata.name)
            self.pod_manager.delete_pod(pod)
            return True
        return bool(super().process_pod_deletion(pod, reraise=reraise))
