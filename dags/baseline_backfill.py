"""
### Baseline backfill (`baseline_backfill`)
Re-derives NCCL busbw baselines (per hardware profile and scope: `intra-<gpus>`,
`inter-2x<gpus>`, and `…-rank-per-gpu` for that layout) from **stored measurements** and
re-judges past runs against them, reporting which verdicts change. Baselines come from our own
measured nodes, never from spec sheets.

- **Manual:** `profile`, `scope` (empty: every series measured in the range), `since`/`until`
  (dates, both included), `promote`.
- **Airflow backfill / daily schedule:** with empty dates the run's data interval is the range,
  so `airflow backfill create --dag-id baseline_backfill --from-date … --to-date …` re-derives
  day by day.
- Each series gets a new **candidate** baseline version (promoted only with `promote`); past
  runs are re-judged under new runs (`…/rejudge/run-<id>`, suite `baseline_backfill`). Old
  verdicts are never overwritten and keep the baseline version they were judged with.

**Triage:** a failed task means the store was unreachable or a range held no usable rows with
sizes ≥ 1 GiB. The report (task `backfill_report`, and each backfill run's meta in
`fleetval_db`) lists old run/result/baseline version → new. Before promoting, check the
candidate's `excluded_outliers` and spread. Owner: fleet-validation.
"""

from __future__ import annotations

# Named here so the dag-processor's manager imports it once (parsing_pre_import_modules) and every
# parse of this file forks with it loaded: @task's machinery (the standard provider's decorators)
# costs ~0.06 s a parse.
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.sdk import Param, dag

from fleetval_airflow import nccl_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Tag


@dag(
    schedule="@daily",  # a time-based schedule is what lets Airflow backfill it
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,  # baseline versions are allocated in order
    default_args=DEFAULT_ARGS,
    params={
        "profile": Param(None, type=["null", "string"], title="Hardware profile (empty: all measured)"),
        "scope": Param(None, type=["null", "string"], title="Scope, e.g. intra-8 or inter-2x8 (empty: all)"),
        "since": Param(
            None, type=["null", "string"], format="date", title="First day (empty: data interval)"
        ),
        "until": Param(None, type=["null", "string"], format="date", title="Last day, included"),
        "promote": Param(False, type="boolean", title="Promote the new baseline (retires the current one)"),
    },
    tags=[Tag.LAYER_NETWORK, Tag.SCHEDULE_MANUAL, Tag.OWNER],
    doc_md=__doc__,
)
def baseline_backfill() -> None:
    series = nccl_tasks.plan_backfill()
    results = nccl_tasks.rederive.expand(series=series)
    nccl_tasks.backfill_report(results)


baseline_backfill()
