"""
### Post-upgrade NCCL sweep (`post_upgrade_nccl_sweep`)
After the GPU Operator upgrades the driver on nodes, NCCL all_reduce is measured on each node and
each node pair and judged against the **measured baseline** of its hardware profile (criteria
**D-NET-NCCL-01..04**, transport). A regression is a **gate**: it halts the driver rollout.

- **Triggers:** nodes reaching `nvidia.com/gpu-driver-upgrade-state=upgrade-done` that were not
  swept on their driver yet (`DriverUpgradeDoneTrigger`, an AssetWatcher on the
  `fleetval_driver_upgrade_done` asset), or a manual run (`nodes`: empty = every such node).
- Probes run in **waves**, one at a time; each wave is a run of **`post_upgrade_nccl_sweep_wave`**
  (tasks `sweep_intra` / `sweep_pairs` here wait for them): one probe task per node (a pod) or per
  pair (a Kueue-admitted MPIJob), named `<node> r<repeat>`. A wave never uses a node twice; each
  node and pair is probed `repeats` (3) times, in different waves. Any fleet size fits under
  `max_map_length`. `layout`: one process per node (`-g <gpus>`, the default) or one MPI rank
  per GPU (`-g 1`, the layout training jobs and vendors' numbers use); each has its own baselines
  (scope `…-rank-per-gpu`).
- `judge` judges the stored raw outputs; `isolate` narrows failing pairs down to the bad node or
  link by pair testing (rounds of pair MPIJobs, deferred while they run).
- **Gate:** any `fail` → nodes labelled `fleetval.io/nccl-gate=fail` and the rollout paused
  (ClusterPolicy `spec.driver.upgradePolicy.autoUpgrade=false`; resume by setting it back to
  `true` once the nodes are fixed). Swept nodes get `fleetval.io/nccl-swept-driver=<driver>`.
- `judge_link_trends` records **D-NET-NCCL-TREND-01** per node and pair from the busbw of this and
  earlier sweeps: `warn` = busbw creeping down toward `min_ratio` while still above it (early
  warning: never gates, never labels); `inconclusive` = fewer than 8 sweeps of history.
- No promoted baseline for a profile/scope → busbw verdicts are `inconclusive` (never pass):
  establish and promote one (see `baseline_backfill`).
- `dry_run`: verdicts are recorded; no label, no ClusterPolicy change (server-side dry run).

**Triage:** a `fail` *verdict* is a finding about a node or pair (see its evidence: busbw vs
baseline version, transports, NCCL errors, CV); `D-NET-NCCL-02` on a single node is the
isolation result. A failed *task* means the harness broke: open the failed wave run's probe task
(pod or MPIJob never admitted by Kueue, API, store). If the rollout was paused by mistake, set
`autoUpgrade: true` on the ClusterPolicy. Verdicts: `fleetval_db` connection.
Owner: fleet-validation.
"""

from __future__ import annotations

# Named here so the dag-processor's manager imports it once (parsing_pre_import_modules) and every
# parse of this file forks with it loaded: @task's machinery (the standard provider's decorators)
# costs ~0.06 s a parse.
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import Asset, AssetWatcher, Param, dag

from fleetval_airflow import nccl_tasks, trend_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Pool, Tag
from fleetval_airflow.nccl_isolation import NcclIsolationOperator
from fleetval_airflow.triggers.driver_upgrade import DriverUpgradeDoneTrigger

DRIVER_UPGRADE_DONE = Asset(
    "fleetval_driver_upgrade_done",
    watchers=[
        AssetWatcher(name="driver_upgrade_done_watcher", trigger=DriverUpgradeDoneTrigger(poll_interval=60))
    ],
)
WAVE = {
    "trigger_dag_id": nccl_tasks.WAVE_DAG_ID,
    "wait_for_completion": True,
    "deferrable": True,
    "poke_interval": 2,
    "allowed_states": ["success", "failed"],  # a broken probe is an `error` verdict; the sweep goes on
    "reset_dag_run": True,  # a retried wave runs again (probes are idempotent)
    "fail_when_dag_is_paused": True,  # a paused wave DAG fails the sweep instead of waiting forever
    "max_active_tis_per_dagrun": 1,  # waves one at a time: a node's repeats never overlap
}


@dag(
    schedule=[DRIVER_UPGRADE_DONE],
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,  # one sweep at a time: sweeps share nodes and the rollout gate
    default_args=DEFAULT_ARGS,
    params={
        "nodes": Param(
            [],
            type="array",
            items={"type": "string"},
            uniqueItems=True,
            title="Nodes to sweep (empty: every upgrade-done node not yet swept on its driver)",
        ),
        "repeats": Param(3, type="integer", minimum=1, maximum=10, title="Repeats per node and pair"),
        "layout": Param(
            "process_per_node",
            type="string",
            enum=["process_per_node", "rank_per_gpu"],
            values_display={
                "process_per_node": "One process per node drives its GPUs (-g <gpus>)",
                "rank_per_gpu": "One MPI rank per GPU (-g 1): training's and vendors' layout",
            },
            title="Ranks: per node or per GPU (each has its own baselines)",
        ),
        "dry_run": Param(
            False, type="boolean", title="Dry run: record verdicts, label nothing, pause nothing"
        ),
    },
    tags=[Tag.LAYER_NETWORK, Tag.SCHEDULE_EVENT, Tag.SCHEDULE_MANUAL, Tag.OWNER],
    doc_md=__doc__,
)
def post_upgrade_nccl_sweep() -> None:
    fv_run = nccl_tasks.start_run()
    intra_waves = nccl_tasks.plan_sweep(fv_run)
    pair_waves = nccl_tasks.pair_waves(fv_run)
    intra = TriggerDagRunOperator.partial(task_id="sweep_intra", **WAVE).expand_kwargs(intra_waves)
    pairs = TriggerDagRunOperator.partial(
        task_id="sweep_pairs", trigger_rule="all_done", **WAVE
    ).expand_kwargs(pair_waves)
    judged = nccl_tasks.judge(fv_run)
    isolated = NcclIsolationOperator(
        task_id="isolate", fv_run=fv_run, pool=Pool.NODE_DIAGNOSIS, trigger_rule="all_done"
    )
    intra_waves >> pair_waves
    trends = trend_tasks.judge_link_trends(fv_run)
    intra >> pairs >> judged >> isolated >> trends >> nccl_tasks.gate(fv_run)


post_upgrade_nccl_sweep()
