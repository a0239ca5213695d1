"""
### Xid remediation (`xid_remediation`)
Event-driven: runs when new NVIDIA **Xid** kernel lines reach the fleetval Xid inbox (criteria
**D-DEV-02**, **D-DEV-05**, **D-DEV-06**).

1. `claim_xid_lines` takes the lines the trigger reserved for this run (raw evidence, kept).
2. `decide_and_cordon` judges every node's lines with the Xid decision table (NVIDIA catalog,
   repeat and storm rules); a `cordon` decision cordons the node and adds the
   `fleetval.io/maintenance` taint, unless the **circuit breaker** is open (more than
   `max_fleet_fraction` of the fleet or `max_rack_fraction` of a rack cordoned for Xids within
   `breaker_window_s`): then an **F-SAFE-01** alert verdict stands in for the cordon.
   Time from the first Xid to the cordon is a D-DEV-05 verdict per node.
3. `plan_r3` makes one DCGM **r3** probe per cordoned node. A node whose GPU the device plugin
   already withdrew (allocatable below capacity) cannot run r3 on every GPU: it is quarantined
   on that evidence.
4. `dcgm_r3` (one pod task per node, map index = node) waits for the node's workload GPU pods to
   end (retries every 10 min, 2 h; the job is never evicted), runs `dcgmi diag -r 3` on all its
   GPUs and judges it at once: Pass → uncordon, Fail → `fleetval.io/quarantine` + taint.
5. `close_run`: a node whose r3 gave up gets an `error` verdict and stays cordoned.
`dry_run` (shadow mode) records every decision and would-be action, touching no node.

**Event source:** `XidInboxTrigger`, chosen by the environment variable `FLEETVAL_XID_SOURCE`,
read by the triggerer at run time (`inbox`, the default: the simulator or a log shipper; `npd`:
node-problem-detector Events, see `deploy/node-problem-detector-xid.json`).
**Triage:** a `fail` verdict is a finding; a `dcgm_r3` map index up for retry with `NodeBusy` in
its log means the node still runs the job that hit the Xid. Owner: fleet-validation.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import Asset, AssetWatcher, Param, dag

from fleetval_airflow import xid_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Pool, Tag
from fleetval_airflow.triggers.xid_inbox import XidInboxTrigger

XID_INBOX = Asset(
    "fleetval_xid_inbox",
    watchers=[
        AssetWatcher(
            name="xid_inbox_watcher",
            trigger=XidInboxTrigger(poll_interval=1.0),  # source: FLEETVAL_XID_SOURCE, at run time
        )
    ],
)


@dag(
    schedule=[XID_INBOX],
    start_date=START_DATE,
    catchup=False,
    max_active_runs=4,  # bursts queue as separate runs; the breaker counts across runs
    default_args=DEFAULT_ARGS,
    params={
        "dry_run": Param(False, type="boolean", title="Shadow mode: record decisions, touch no node"),
        "max_fleet_fraction": Param(
            0.10,
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            title="Breaker: most of the fleet cordoned for Xids within the window",
        ),
        "max_rack_fraction": Param(
            0.50,
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            title="Breaker: most of one rack cordoned for Xids within the window",
        ),
        "breaker_window_s": Param(300, type="integer", minimum=1, title="Breaker window (seconds)"),
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
    ).expand_kwargs(r3)
    probes >> xid_tasks.close_run(claim, r3)


xid_remediation()
