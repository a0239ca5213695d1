"""
### MIG validation (`mig_validation`)
Checks that MIG does what it promises on the GPU pool, node by node (criteria **D-GPU-MIG-01..04
and 06**, and **-05** from the node; quota by profile is `kueue_contention`'s x-06-mig-profiles):

- `plan`: the MIG-capable GPU nodes that are idle (no pod holding a GPU or MIG device), not
  cordoned or quarantined, their MIG manager settled; this run takes at most one wave of the
  blast-radius budget (`max_fleet_fraction`, `max_rack_fraction`), a different sample each week.
  The mig-parted config is the ConfigMap the ClusterPolicy names (`default-mig-parted-config`).
- `take`: cordons each node, label `fleetval.io/mig-validation=running`.
- `apply_layouts` (**D-GPU-MIG-01**, **-05**): sets `nvidia.com/mig.config` to each of `layouts`
  and times how long until the node advertises the resources they make (limit: the criterion's
  N minutes); each instance must be sold as its profile, not as a whole `nvidia.com/gpu`.
- `baseline_probe`, `start_fill`, `during_probe`, `stop_fill`, `judge_isolation` (**-03**, **-04**):
  a PyTorch workload on one instance, before and while a filler holds every other instance of
  its profile full; its memory and throughput must not move, and its container must not see the
  neighbours' devices, memory or processes.
- `busy_reconfig` (**-06**): a layout change while a pod works on an instance must be refused or
  wait; the pod must keep running.
- `refused_layout` (**-02**): a config the catalog refuses on that GPU must end `failed` on
  `nvidia.com/mig.config.state`, the old instances kept.
- `restore`: the node's original `nvidia.com/mig.config`, then uncordon — also when a check failed.
- `report` goes red listing every check that did not pass.

**Schedule:** weekly (Saturday 04:00 UTC) and manual (the nodes, the layouts to try, dry run).
**Disruptive:** a taken node loses its MIG layout for minutes; only idle nodes are taken and
they are cordoned meanwhile. `dry_run` plans and records, and touches nothing.

**Triage:** a `fail` names the node, the layout and what the node did (evidence: the Node
snapshots, the probes' output, the filler's log, all in `fleetval_db`). A node left cordoned with
`fleetval.io/mig-validation=restore-failed` did not come back to its layout: look at its MIG
manager (`kubectl logs -n gpu-operator -l app=nvidia-mig-manager`), set its `nvidia.com/mig.config`
again, then uncordon it. Owner: fleet-validation.
"""

from __future__ import annotations

# Named here so the dag-processor's manager imports them once (parsing_pre_import_modules) and
# every parse of this file forks with them loaded: the Kubernetes clients the operator pulls in cost
# ~2.7 s a parse, @task's machinery (the standard provider's decorators) ~0.06 s.
import airflow.providers.cncf.kubernetes.operators.pod
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.sdk import Param, dag
from airflow.timetables.trigger import CronTriggerTimetable

from fleetval_airflow import mig_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Tag


@dag(
    schedule=CronTriggerTimetable("0 4 * * 6", timezone="UTC"),
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params={
        "nodes": Param([], type="array", items={"type": "string"}, title="Nodes (empty: the MIG pool)"),
        "layouts": Param(
            ["all-balanced"],
            type="array",
            items={"type": "string"},
            minItems=1,
            title="mig-parted configs to apply, in order (names in the MIG manager's ConfigMap)",
        ),
        "refused_layout": Param(
            None, type=["null", "string"], title="D-GPU-MIG-02: a config to expect refused (empty: found)"
        ),
        "dry_run": Param(False, type="boolean", title="Dry run: plan and record, touch no node"),
        "max_fleet_fraction": Param(0.10, type="number", exclusiveMinimum=0, maximum=1),
        "max_rack_fraction": Param(0.25, type="number", exclusiveMinimum=0, maximum=1),
        "advertise_max_minutes": Param(
            None, type=["null", "number"], title="D-GPU-MIG-01 limit (empty: the criterion's N minutes)"
        ),
        "watch_minutes": Param(15, type="number", exclusiveMinimum=0, maximum=120),
        "poll_seconds": Param(5, type="number", exclusiveMinimum=0, maximum=300),
        "operator_namespace": Param("gpu-operator", type="string", minLength=1, maxLength=63),
        "image": Param(
            None, type=["null", "string"], title="Probe image (empty: the pinned NGC PyTorch image)"
        ),
    },
    tags=[Tag.LAYER_SHARING, Tag.SCHEDULE_WEEKLY, Tag.SCHEDULE_MANUAL, Tag.OWNER],
    doc_md=__doc__,
)
def mig_validation() -> None:
    fv_run = mig_tasks.open_run()
    mig_tasks.mig_stage(fv_run) >> mig_tasks.report(fv_run)


mig_validation()
