"""
### Weekly health sweep (`weekly_health_sweep`)
DCGM **r2** on every *idle* GPU node (no GPU pods, not cordoned, not quarantined), once a week
(criteria **D-DEV-03**, **D-DEV-04**).

- Nodes are swept in **waves**; a wave never holds more than `max_fleet_fraction` of the fleet
  or `max_rack_fraction` of any rack, and waves run one at a time (blast-radius budget).
  Each wave is a run of **`weekly_health_sweep_wave`** (task `sweep_wave` here waits for it):
  open that run to see one `dcgm_r2` task per node, with the node's own log, state and retries.
- A wave probes each node with one pod pinned to it that requests all its GPUs, keeps the raw
  `dcgmi diag -r 2 -j` output, judges it with the node health policy, and acts: **Fail** →
  cordon + `fleetval.io/quarantine` label + maintenance taint + r3 requested; **Warn** → flagged.
  Disruptive actions past `max_action_fraction` are withheld and raise an **F-SAFE-01** alert.
- `dry_run` records what would be done without touching nodes.
- `judge_device_trends` (after the waves, even if one failed) reads every GPU node's dcgm-exporter
  counters per weekly sweep from the fleet's Prometheus (`FLEETVAL_PROMETHEUS_URL`; unset: skipped,
  one log line, no verdict) and records **D-DEV-TREND-01**: `warn` = a counter drifting toward a
  hard failure (early warning, **never cordons**), `inconclusive` = too little history or
  Prometheus unreadable (the task log says which).

**Triage:** a `fail` *verdict* is a finding about a node, not a task failure. A failed *task*
means the harness broke (API unreachable, store down). Verdicts: `fleetval_db` connection.
Owner: fleet-validation.
"""

from __future__ import annotations

# Named here so the dag-processor's manager imports it once (parsing_pre_import_modules) and every
# parse of this file forks with it loaded: @task's machinery (the standard provider's decorators)
# costs ~0.06 s a parse.
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import Param, dag

from fleetval.policy.blast_radius import ActionBudget, DiagnosisBudget
from fleetval_airflow import trend_tasks, weekly_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Tag

# The budgets' defaults live with the budgets (the CLI uses the same ones).
DIAGNOSIS, ACTION = DiagnosisBudget(), ActionBudget()


@dag(
    schedule="0 3 * * 0",
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,  # two sweeps at once would double the nodes under diagnosis
    default_args=DEFAULT_ARGS,
    params={
        "dry_run": Param(False, type="boolean", title="Dry run (shadow mode): record actions, touch no node"),
        "max_fleet_fraction": Param(
            DIAGNOSIS.max_fleet_fraction,
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            title="Most of the fleet under diagnosis at once",
        ),
        "max_rack_fraction": Param(
            DIAGNOSIS.max_rack_fraction,
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            title="Most of one rack under diagnosis (or acted on) at once",
        ),
        "max_action_fraction": Param(
            ACTION.max_fleet_fraction,
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            title="Most of the fleet cordoned by one sweep (circuit breaker)",
        ),
    },
    tags=[Tag.LAYER_DEVICE, Tag.SCHEDULE_WEEKLY, Tag.OWNER],
    doc_md=__doc__,
)
def weekly_health_sweep() -> None:
    fv_run = weekly_tasks.start_run()
    waves = weekly_tasks.plan_waves(fv_run)
    sweep = TriggerDagRunOperator.partial(
        task_id="sweep_wave",
        trigger_dag_id=weekly_tasks.WAVE_DAG_ID,
        wait_for_completion=True,
        deferrable=True,
        poke_interval=2,
        allowed_states=["success", "failed"],  # a wave's judge decides; the next wave still runs
        reset_dag_run=True,  # a retried wave runs again (probes and node actions are idempotent)
        fail_when_dag_is_paused=True,  # a paused wave DAG fails the sweep instead of waiting forever
        max_active_tis_per_dagrun=1,  # waves one at a time: the diagnosis budget holds
    ).expand_kwargs(waves)
    sweep >> trend_tasks.judge_device_trends(fv_run) >> weekly_tasks.report_coverage(fv_run)


weekly_health_sweep()
