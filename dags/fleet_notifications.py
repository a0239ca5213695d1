"""
### On-call notifications (`fleet_notifications`)
Every ten minutes, tells the on-call what changed in the fleet since the last notice, through
Slack (incoming webhook), PagerDuty (Events API v2) and a generic webhook in Opsgenie's alert
format: a node **quarantined** or **returned to service**, a blast-radius **breaker tripped**
(F-SAFE-01), a driver **rollout halted** by the NCCL gate, a node whose **coverage** is older than
its limit, a Kueue **scenario failing**. The facts are the store's (the same reads as
`fleetval metrics serve`); what was already said is the ledger's (`notify_incidents`,
`notify_notices` in `fleetval_db`).

- **One incident per node (or breaker, halt, scenario)**, one dedup key: its return to service
  resolves that key; a node that flaps back within the flap window reopens the same incident.
- **Storms:** five or more of one kind at once are one summary per channel (the count and a sample),
  never a page per node; the summary resolves when its last node does.
- **Rate limit:** at most 20 notices per channel per hour; the rest are recorded as suppressed and
  the next notice says how many were held back.
- **Shadow mode** (`FLEETVAL_NOTIFY_SHADOW=true`): records what it would send, sends nothing.
- A channel whose connection (`fleetval_slack`, `fleetval_pagerduty`, `fleetval_webhook`) is not
  defined is skipped, with a log line. Thresholds: `FLEETVAL_NOTIFY_*` (docs/notifications.md).

**Triage:** `evaluate` prints one line per notice (channel, trigger or resolve, pending,
suppressed or shadow, dedup key, text); red means the store could not be read, and its retry plans
nothing twice. A red `deliver` lists the notices a receiver refused or could not be reached for:
they stay pending and the next run sends them again (five tries, then `failed` in `notify_notices`).
A missing notice: check the connection, then `notify_notices` for its status.
Owner: fleet-validation.
"""

from __future__ import annotations

import datetime as dt

import airflow.sdk.definitions.decorators  # noqa: F401  (pre-imported by the dag-processor: cheap parses)
from airflow.sdk import dag

from fleetval_airflow import notify_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Tag


@dag(
    schedule="*/10 * * * *",
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,  # the ledger is read, planned and written by one evaluation at a time
    default_args={**DEFAULT_ARGS, "execution_timeout": dt.timedelta(minutes=5)},
    tags=[Tag.OWNER],
    doc_md=__doc__,
)
def fleet_notifications() -> None:
    notify_tasks.evaluate() >> notify_tasks.deliver()


fleet_notifications()
