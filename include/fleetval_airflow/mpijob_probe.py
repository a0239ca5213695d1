"""One multi-node probe, one MPIJob, one task: the NCCL pair probes of `post_upgrade_nccl_sweep`.

The job runs as `fleetval_airflow.mpijobs` describes (Kueue gang admission, launcher log as raw
output, cleanup). What the task adds, as ProbePodOperator does for pods:

- deferrable unless the deployment says otherwise (`FLEETVAL_PROBE_DEFERRABLE`): while Kueue
  admits the job and it runs, `MPIJobTrigger` waits in the triggerer and no worker slot is held;
- the raw output reaches the store as soon as the job is done, before anything judges it;
- an exit code nccl-tests uses to report a failed collective is not a task failure (the output
  decides the verdict). A harness failure (never admitted, a missing binary, a killed launcher,
  the API unreachable) is stored as an error and fails the task, which retries with a new job;
  the last failure stands as an `error` verdict. A cluster not set up for the probe
  (`fleetval.nccl.preflight.ProbeConfigError`: no MPIJob API of the right version, no RDMA device
  for the workers) is stored the same way but fails the task at once (`AirflowFailException`):
  a retry would meet the same cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from fleetval_airflow.triggers.mpijob import MPIJobTrigger

if TYPE_CHECKING:
    from fleetval.nodes import ProbeOutput
    from fleetval_airflow.mpijobs import JobRef, MPIJobRunner

# fleetval and the runner (the kubernetes client, the store) are imported where used: DAG files
# import this module at parse time, and mapped tasks build the operator in the worker.


def mpijob_runner(
    kubernetes_conn_id: str, *, admission_timeout_s: int | None = None, log: Any = None
) -> MPIJobRunner:
    """A runner on the `kubernetes_conn_id` cluster, in the configured namespace and Kueue queue."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    from fleetval.settings import Settings
    from fleetval_airflow.mpijobs import ADMISSION_TIMEOUT_S, MPIJobRunner

    settings = Settings.from_env()
    hook = KubernetesHook(conn_id=kubernetes_conn_id)
    return MPIJobRunner(
        hook.custom_object_client,
        hook.core_v1_client,
        namespace=settings.namespace,
        queue=settings.kueue_queue,
        admission_timeout_s=ADMISSION_TIMEOUT_S if admission_timeout_s is None else admission_timeout_s,
        worker_devices=settings.rdma_resources,
        log=log,
    )


def store_outputs(fv_run: int, outputs: list[ProbeOutput]) -> None:
    from fleetval.probes import outputs as probe_outputs
    from fleetval_airflow import config

    probe_outputs.store_probe_outputs(config.store(), fv_run, outputs)


def try_number(context: Any) -> int:
    return int(getattr(context["ti"], "try_number", 1) or 1)


class MPIJobProbeOperator(BaseOperator):
    """Run one multi-node fleetval probe (`probe`: a ProbeSpec as JSON) in run `fv_run`."""

    ui_color = "#d9e4f2"

    def __init__(
        self,
        *,
        probe: dict[str, Any],
        fv_run: int,
        deferrable: bool | None = None,
        poll_interval: float | None = None,
        admission_timeout_s: int | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        **kwargs: Any,
    ) -> None:
        from fleetval.probes.pod import ProbeSpec
        from fleetval.settings import Settings
        from fleetval_airflow.mpijobs import POLL_S

        super().__init__(**kwargs)
        if deferrable is None:
            # Read at run time: mapped tasks build the operator in the worker.
            deferrable = Settings.from_env().probe_deferrable
        self.deferrable = deferrable
        self.spec = ProbeSpec.from_json(probe)
        self.probe = probe
        self.fv_run = fv_run
        self.poll_interval = POLL_S if poll_interval is None else poll_interval
        self.admission_timeout_s = admission_timeout_s
        self.kubernetes_conn_id = kubernetes_conn_id
        self._job: JobRef | None = None

    def _runner(self) -> MPIJobRunner:
        return mpijob_runner(
            self.kubernetes_conn_id, admission_timeout_s=self.admission_timeout_s, log=self.log
        )

    def execute(self, context: Any) -> Any:
        from fleetval.nccl.preflight import ProbeConfigError

        runner = self._runner()
        try:
            job = runner.submit(self.spec, attempt=try_number(context))
        except ProbeConfigError as exc:  # the cluster is not set up for the probe: no retry helps
            self._fail(runner, f"{type(exc).__name__}: {exc}", retry=False)
        except Exception as exc:
            self._fail(runner, f"{type(exc).__name__}: {exc}")
        if self.deferrable:
            self.defer(
                trigger=MPIJobTrigger(
                    [job.to_json()],
                    poll_interval=self.poll_interval,
                    kubernetes_conn_id=self.kubernetes_conn_id,
                ),
                method_name="execute_complete",
            )
        self._job = job
        try:
            outcomes = runner.wait([job], poll_interval=self.poll_interval)
        except Exception as exc:
            self._fail(runner, f"{type(exc).__name__}: {exc}")
        finally:
            self._job = None
        return self._finish(runner, job, outcomes[job.name])

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        from fleetval_airflow.mpijobs import JobRef

        runner = self._runner()
        if event.get("status") != "done":
            self._fail(runner, str(event.get("message") or event))
        [job] = [JobRef.from_json(j) for j in event["jobs"]]
        return self._finish(runner, job, str(event["outcomes"][job.name]))

    def _finish(self, runner: MPIJobRunner, job: JobRef, result: str) -> dict[str, Any]:
        try:
            output = runner.collect(job, result)
        except Exception as exc:
            self._fail(runner, f"{type(exc).__name__}: {exc}")
        store_outputs(self.fv_run, [output])
        if output.error:
            raise AirflowException(output.error)
        return {"mpijob": job.name, "outcome": result, "exit_code": output.exit_code}

    def _fail(self, runner: MPIJobRunner, error: str, *, retry: bool = True) -> NoReturn:
        """Store the harness failure (the judge sees an `error`, never a pass) and fail the task;
        `retry=False` (a configuration error) fails it without its retries."""
        store_outputs(self.fv_run, [runner.failure(self.spec, error)])
        if not retry:
            raise AirflowFailException(error)
        raise AirflowException(error)

    def on_kill(self) -> None:
        """A task killed while it waits on the worker takes its job with it (a deferred task's
        job stays: its retry reattaches to it)."""
        if self._job is not None:
            self._runner().delete(self._job)
