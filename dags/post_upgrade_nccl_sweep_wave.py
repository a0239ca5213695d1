"""
### One wave of the post-upgrade NCCL sweep (`post_upgrade_nccl_sweep_wave`)
Started by **`post_upgrade_nccl_sweep`** (conf `{fv_run, kind, wave}`), never on its own schedule.

- An intra-node wave runs **`nccl_intra`**: one pod per node (map index `<node> r<repeat>`),
  all_reduce over all its GPUs. A pair wave runs **`nccl_pair`**: one MPIJob per pair (map index
  `<nodeA>+<nodeB> r<repeat>`), gang-admitted by Kueue (LocalQueue `fleetval-validation`),
  deferred while it waits. The other kind's task is skipped.
- Raw output is stored the moment a pod or job completes; the parent's `judge` task judges it.
  An NCCL failure (wrong results, NCCL errors, a hang) is a finding, not a task failure.

**Triage:** a failed probe task is a *harness* failure on that node or pair (command missing from
the image, pod never scheduled, MPIJob never admitted by Kueue, killed); it retries with a new
pod or job, and its log says why. Failed MPIJobs are kept in namespace `fleetval` (the newest
50). Verdicts: `fleetval_db` connection. Owner: fleet-validation.
"""

from __future__ import annotations

# Named here so the dag-processor's manager imports them once (parsing_pre_import_modules) and
# every parse of this file forks with them loaded: the Kubernetes clients the operator pulls in cost
# ~2.7 s a parse, @task's machinery (the standard provider's decorators) ~0.06 s.
import airflow.providers.cncf.kubernetes.operators.pod
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.sdk import dag

from fleetval_airflow import nccl_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Pool, Tag
from fleetval_airflow.mpijob_probe import MPIJobProbeOperator
from fleetval_airflow.probe_pod import ProbePodOperator

MAP_INDEX = "{{ task.spec.node }} r{{ task.spec.params.repeat }}"


@dag(
    dag_id=nccl_tasks.WAVE_DAG_ID,
    schedule=None,
    start_date=START_DATE,
    catchup=False,
    is_paused_upon_creation=False,  # only ever started by post_upgrade_nccl_sweep
    default_args=DEFAULT_ARGS,
    tags=[Tag.LAYER_NETWORK, Tag.SCHEDULE_EVENT, Tag.SCHEDULE_MANUAL, Tag.OWNER],
    doc_md=__doc__,
)
def post_upgrade_nccl_sweep_wave() -> None:
    ProbePodOperator.partial(
        task_id="nccl_intra", pool=Pool.NODE_DIAGNOSIS, map_index_template=MAP_INDEX
    ).expand_kwargs(nccl_tasks.intra_probes())
    MPIJobProbeOperator.partial(
        task_id="nccl_pair", pool=Pool.NODE_DIAGNOSIS, map_index_template=MAP_INDEX
    ).expand_kwargs(nccl_tasks.pair_probes())


post_upgrade_nccl_sweep_wave()
