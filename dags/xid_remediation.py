"""
### Xid remediation (`xid_remediation`)
Event-driven: runs when new NVIDIA **Xid** kernel lines reach the fleetval Xid inbox (criteria
**D-DEV-02**, **D-DEV-05**, **D-DEV-06**).

0. **Before this run exists**, the trigger that read the lines has already judged them and
   cordoned every `cordon` decision (cordon + `fleetval.io/maintenance` taint), within the
   **circuit breaker** (more than `max_fleet_fraction` of the fleet or `max_rack_fraction` of a
   rack cordoned for Xids within `breaker_window_s`: an **F-SAFE-01** alert instead). The cordon
   never waits for a task slot or behind r3 work (node events keyed `xid-on-read/<dispatch>`).
1. `claim_xid_lines` takes the lines the trigger reserved for this run (raw evidence, kept).
2. `decide_and_cordon` judges every node's lines with the Xid decision table (NVIDIA catalog,
   repeat and storm rules) and records the verdicts; it cordons only what step 0 did not (a
   manual run, a failed patch), within the same breaker. Time from the first Xid to the cordon
   is a D-DEV-05 verdict per node. Steps 1–3 outrank every r3 task (priority weights).
3. `plan_r3` makes one DCGM **r3** probe per cordoned node. A node whose GPU the device plugin
   already withdrew (allocatable below capacity) cannot run r3 on every GPU: it is quarantined
   on that evidence.
4. `dcgm_r3` (one pod task per node, map index = node) waits for the node's workload GPU pods to
   end (retries every 10 min, 2 h; the job is never evicted), runs `dcgmi diag -r 3` on all its
   GPUs and judges it at once: Pass → uncordon, Fail → `fleetval.io/quarantine` + taint.
5. `close_run`: a node whose r3 gave up gets an `error` verdict and stays cordoned.
`dry_run` (shadow mode) records every decision and would-be action, touching no node; event runs
take `SHADOW_MODE` below, which the trigger's step 0 follows too.

**Event source:** `XidInboxTrigger`, chosen by the environment variable `FLEETVAL_XID_SOURCE`,
read by the triggerer at run time (`inbox`, the default: the simulator or a log shipper; `npd`:
node-problem-detector Events, see `deploy/node-problem-detector-xid.json`).
**Triage:** a `fail` verdict is a finding; a `dcgm_r3` map index up for retry with `NodeBusy` in
its log means the node still runs the job that hit the Xid. Owner: fleet-validation.
"""

from __future__ import annotations

import datetime as dt

# Named here so the dag-processor's manager imports them once (parsing_pre_import_modules) and
# every parse of this file forks with them loaded: the Kubernetes clients the operator pulls in cost
# ~2.7 s a parse, @task's machinery (the standard provider's decorators) ~0.06 s.
import airflow.providers.cncf.kubernetes.operators.pod
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.sdk import Asset, AssetWatcher, Param, dag

from fleetval_airflow import xid_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, REMEDIATION_PRIORITY, START_DATE, Pool, Tag
from fleetval_airflow.triggers.xid_inbox import XidInboxTrigger

SHADOW_MODE = False  # event runs' dry_run, and the trigger's
BREAKER = {"max_fleet_fraction": 0.10, "max_rack_fraction": 0.50, "breaker_window_s": 300}

XID_INBOX = Asset(
    "fleetval_xid_inbox",
    watchers=[
        AssetWatcher(
            name="xid_inbox_watcher",
            # source: FLEETVAL_XID_SOURCE, at run time; cordons as it reads (step 0)
            trigger=XidInboxTrigger(
                poll_interval=1.0, cordon_on_read=True, dry_run=SHADOW_MODE, breaker=BREAKER
            ),
        )
    ],
)


@dag(
    schedule=[XID_INBOX],
    start_date=START_DATE,
    catchup=False,
    # Room for the runs of several bursts while earlier ones wait on r3: a queued run delays a new
    # Xid's verdicts and r3 (never its cordon, done by the trigger). The breaker counts across runs.
    max_active_runs=16,
    default_args=DEFAULT_ARGS,
    params={
        "dry_run": Param(SHADOW_MODE, type="boolean", title="Shadow mode: record decisions, touch no node"),
        "max_fleet_fraction": Param(
            BREAKER["max_fleet_fraction"],
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            title="Breaker: most of the fleet cordoned for Xids within the window",
        ),
        "max_rack_fraction": Param(
            BREAKER["max_rack_fraction"],
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            title="Breaker: most of one rack cordoned for Xids within the window",
        ),
        "breaker_window_s": Param(
            BREAKER["breaker_window_s"], type="integer", minimum=1, title="Breaker window (seconds)"
        ),
    },
    tags=[Tag.LAYER_DEVICE, Tag.SCHEDULE_EVENT, Tag.OWNER],
    doc_md=__doc__,
)
def xid_remediation() -> None:
    claim = xid_tasks.claim_xid_lines()
    cordoned = xid_tasks.decide_and_cordon(claim)
    r3 = xid_tasks.plan_r3(claim, cordoned)
    probes = xid_tasks.R3ProbeOperator.partial(
        task_id="dcgm_r3",
        pool=Pool.NODE_DIAGNOSIS,
        map_index_template="{{ task.spec.node }}",
        retries=12,  # while the job that hit the Xid still runs (NodeBusy): 2 h
        retry_delay=dt.timedelta(minutes=10),
        max_active_tis_per_dagrun=16,
        priority_weight=REMEDIATION_PRIORITY,  # behind every run's decision tasks
        weight_rule="absolute",
    ).expand_kwargs(r3)
    probes >> xid_tasks.close_run(claim, r3)


xid_remediation()
