"""
### Post-upgrade NCCL sweep (`post_upgrade_nccl_sweep`)
After the GPU Operator upgrades the driver on nodes, NCCL all_reduce is measured on each node and
each node pair and judged against the **measured baseline** of its hardware profile (criteria
**D-NET-NCCL-01..04**, transport). A regression is a **gate**: it halts the driver rollout.

- **Triggers:** nodes reaching `nvidia.com/gpu-driver-upgrade-state=upgrade-done` that were not
  swept on their driver yet (`DriverUpgradeDoneTrigger`, an AssetWatcher on the
  `fleetval_driver_upgrade_done` asset), or a manual run (`nodes`: empty = every such node).
- Intra-node all_reduce × `repeats` (3) on every node, then pairs (each node in ≥ 1 pair, across
  racks; multi-node runs are Kueue-admitted MPIJobs on k8s), batched so any fleet size fits
  under `max_map_length`. Failing pairs are narrowed down to the bad node by group testing.
- **Gate:** any `fail` → nodes labelled `fleetval.io/nccl-gate=fail` and the rollout paused
  (ClusterPolicy `spec.driver.upgradePolicy.autoUpgrade=false`; resume by setting it back to
  `true` once the nodes are fixed). Swept nodes get `fleetval.io/nccl-swept-driver=<driver>`.
- No promoted baseline for a profile/scope → busbw verdicts are `inconclusive` (never pass):
  establish and promote one (see `baseline_backfill`).
- `dry_run`: verdicts are recorded; no label, no ClusterPolicy change (server-side dry run).

**Triage:** a `fail` *verdict* is a finding about a node or pair (see its evidence: busbw vs
baseline version, transports, NCCL errors, CV); `D-NET-NCCL-02` on a single node is the
isolation result. A failed *task* means the harness broke (API, Kueue, store). If the rollout
was paused by mistake, set `autoUpgrade: true` on the ClusterPolicy. Verdicts: `fleetval_db`
connection. Owner: fleet-validation.
"""

from __future__ import annotations

from airflow.sdk import Asset, AssetWatcher, Param, dag

from fleetval_airflow import nccl_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Tag
from fleetval_airflow.triggers.driver_upgrade import DriverUpgradeDoneTrigger

DRIVER_UPGRADE_DONE = Asset(
    "fleetval_driver_upgrade_done",
    watchers=[
        AssetWatcher(name="driver_upgrade_done_watcher", trigger=DriverUpgradeDoneTrigger(poll_interval=60))
    ],
)


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
        "dry_run": Param(
            False, type="boolean", title="Dry run: record verdicts, label nothing, pause nothing"
        ),
    },
    tags=[Tag.LAYER_NETWORK, Tag.SCHEDULE_EVENT, Tag.SCHEDULE_MANUAL, Tag.OWNER],
    doc_md=__doc__,
)
def post_upgrade_nccl_sweep() -> None:
    fv_run = nccl_tasks.start_run()
    intra_batches = nccl_tasks.plan_sweep(fv_run)
    pair_batches = nccl_tasks.pair_batches(fv_run)
    intra = nccl_tasks.sweep_intra.partial(fv_run=fv_run).expand(batch_index=intra_batches)
    pairs = nccl_tasks.sweep_pairs.partial(fv_run=fv_run).expand(batch_index=pair_batches)
    isolated = nccl_tasks.isolate(fv_run)
    intra_batches >> pair_batches
    intra >> pairs >> isolated >> nccl_tasks.gate(fv_run)


post_upgrade_nccl_sweep()
