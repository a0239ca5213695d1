"""The isolation task of `post_upgrade_nccl_sweep`: pair testing in rounds of MPIJobs.

Each round asks `fleetval.nccl.isolation.isolation_step` for the next probes (one repeat of every
pair of the next round of every unfinished search; node-disjoint, so they run at once), submits
them as MPIJobs through the same runner as the pair probes, waits — deferred in `MPIJobTrigger`
(one deferral per round) or, with `FLEETVAL_PROBE_DEFERRABLE=false`, on the worker — stores the
raw outputs and asks again, until the step returns the report (bad nodes, bad links, what is
undetermined). A harness failure of a pair probe is stored as an `error` (the search for that
profile stops; its suspects become `inconclusive`), never raised: the task fails only when the
harness around it does (store, API), and its retry resumes from the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from fleetval_airflow.mpijob_probe import mpijob_runner, store_outputs, try_number
from fleetval_airflow.triggers.mpijob import MPIJobTrigger

if TYPE_CHECKING:
    from fleetval_airflow.mpijobs import JobRef, MPIJobRunner

# fleetval and the runner are imported where used: the DAG file builds this operator at parse time.


class NcclIsolationOperator(BaseOperator):
    """Locate the bad node(s) behind the failing pairs of fleetval run `fv_run`."""

    template_fields = ("fv_run",)
    ui_color = "#f2e6d9"

    def __init__(
        self,
        *,
        fv_run: Any,
        deferrable: bool | None = None,
        poll_interval: float | None = None,
        admission_timeout_s: int | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.fv_run = fv_run
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.admission_timeout_s = admission_timeout_s
        self.kubernetes_conn_id = kubernetes_conn_id

    def _runner(self) -> MPIJobRunner:
        return mpijob_runner(
            self.kubernetes_conn_id, admission_timeout_s=self.admission_timeout_s, log=self.log
        )

    def _poll_interval(self) -> float:
        from fleetval_airflow.mpijobs import POLL_S

        return POLL_S if self.poll_interval is None else self.poll_interval

    def _deferrable(self) -> bool:
        if self.deferrable is not None:
            return self.deferrable
        from fleetval.settings import Settings

        return Settings.from_env().probe_deferrable  # read in the worker, not at DAG parse time

    def execute(self, context: Any) -> Any:
        return self._advance(context, self._runner())

    def resume(self, context: Any, event: dict[str, Any]) -> Any:
        from fleetval_airflow.mpijobs import JobRef

        runner = self._runner()
        if event.get("status") != "done":
            raise AirflowException(f"waiting for the isolation MPIJobs failed: {event.get('message')}")
        jobs = [JobRef.from_json(j) for j in event["jobs"]]
        self._collect(runner, jobs, {k: str(v) for k, v in event["outcomes"].items()})
        return self._advance(context, runner)

    def _advance(self, context: Any, runner: MPIJobRunner) -> Any:
        from fleetval.nccl import isolation as nccl_isolation
        from fleetval.nccl import judge_stored as nccl_judge
        from fleetval.nccl import plan as nccl_plan
        from fleetval_airflow import config

        store = config.store()
        fv_run = int(self.fv_run)
        meta = store.run_meta(fv_run)
        plan = nccl_plan.NcclPlan.from_json(meta["plan"])
        lookup = nccl_judge.promoted_lookup(store)
        while True:
            step = nccl_isolation.isolation_step(
                store,
                run_id=fv_run,
                run_key=meta["run_key"],
                plan=plan,
                lookup=lookup,
                image=meta.get("image"),
            )
            if step.report is not None:
                report = step.report
                store.update_run_meta(fv_run, isolation=report.to_json())
                return {
                    "bad": report.bad,
                    "undetermined": report.undetermined,
                    "probes_used": report.probes_used,
                    "harness_errors": report.harness_errors,
                    "bad_links": report.bad_links,
                    "undetermined_links": report.undetermined_links,
                    "rounds": report.rounds,
                }
            self.log.info("isolation round: %d MPIJobs: %s", len(step.probes), [s.node for s in step.probes])
            jobs: list[JobRef] = []
            for spec in step.probes:
                try:
                    jobs.append(runner.submit(spec, attempt=try_number(context)))
                except Exception as exc:  # this group's search stops; the others go on
                    store_outputs(fv_run, [runner.failure(spec, f"{type(exc).__name__}: {exc}")])
            if not jobs:
                continue
            if self._deferrable():
                self.defer(
                    trigger=MPIJobTrigger(
                        [j.to_json() for j in jobs],
                        poll_interval=self._poll_interval(),
                        kubernetes_conn_id=self.kubernetes_conn_id,
                    ),
                    method_name="resume",
                )
            self._collect(runner, jobs, runner.wait(jobs, poll_interval=self._poll_interval()))

    def _collect(self, runner: MPIJobRunner, jobs: list[JobRef], outcomes: dict[str, str]) -> None:
        outputs = []
        for job in jobs:
            try:
                outputs.append(runner.collect(job, outcomes[job.name]))
            except Exception as exc:
                outputs.append(runner.failure(job.spec, f"{type(exc).__name__}: {exc}"))
        store_outputs(int(self.fv_run), outputs)
