"""
### One wave of the weekly health sweep (`weekly_health_sweep_wave`)
Started by **`weekly_health_sweep`** (conf `{fv_run, wave}`), never on its own schedule.

- `wave_probes` lists the wave's nodes; `pause_exporters` takes the GPU Operator's dcgm-exporter
  off them (its profiling metrics compete with the diagnostic; FLEETVAL_DCGM_EXPORTER_PAUSE) and
  `restore_exporters` (runs whatever the probes did) puts it back. **`dcgm_r2`** runs one pod per
  node (map index = node name): `dcgmi diag -r 2 -j` on all its GPUs, raw output stored the moment
  the pod completes.
  A failed `dcgm_r2` task is a *harness* failure on that node (command missing, pod never
  scheduled, killed); it retries that node only. A DCGM finding is not a task failure.
- `judge_wave` (runs whatever the probes did) judges the stored outputs with the node health
  policy and acts within the action budget. A node without output gets an `error` verdict.

**Triage:** look at the failed `dcgm_r2` map index's log (pod events are printed there).
Verdicts: `fleetval_db` connection. Owner: fleet-validation.
"""

from __future__ import annotations

# Named here so the dag-processor's manager imports them once (parsing_pre_import_modules) and
# every parse of this file forks with them loaded: the Kubernetes clients the operator pulls in cost
# ~2.7 s a parse, @task's machinery (the standard provider's decorators) ~0.06 s.
import airflow.providers.cncf.kubernetes.operators.pod
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.sdk import dag

from fleetval_airflow import weekly_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Pool, Tag
from fleetval_airflow.probe_pod import ProbePodOperator


@dag(
    dag_id=weekly_tasks.WAVE_DAG_ID,
    schedule=None,
    start_date=START_DATE,
    catchup=False,
    is_paused_upon_creation=False,  # only ever started by weekly_health_sweep
    default_args=DEFAULT_ARGS,
    tags=[Tag.LAYER_DEVICE, Tag.SCHEDULE_WEEKLY, Tag.OWNER],
    doc_md=__doc__,
)
def weekly_health_sweep_wave() -> None:
    probes = weekly_tasks.wave_probes()
    dcgm = ProbePodOperator.partial(
        task_id="dcgm_r2",
        pool=Pool.NODE_DIAGNOSIS,
        map_index_template="{{ task.spec.node }}",
    ).expand_kwargs(probes)
    weekly_tasks.pause_exporters() >> dcgm
    dcgm >> [weekly_tasks.restore_exporters(), weekly_tasks.judge_wave()]


weekly_health_sweep_wave()
