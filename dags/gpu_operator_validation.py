"""
### GPU Operator validation (`gpu_operator_validation`)
Says which layer of the GPU Operator broke, node by node (criteria **D-OP-01..04**, and
**D-GPU-TS-01** from the same node objects):

- `check_operands` (**D-OP-01**): the operand pods on each GPU node (driver, container toolkit,
  device plugin, DCGM exporter, GPU feature discovery, MIG manager, validator). The verdict names
  the operand that fails outright first, in dependency order, and the ones blocked behind it in
  `Init:` (a broken driver leaves every other operand waiting).
- `check_advertised` (**D-OP-02**, **D-GPU-TS-01**): what the device plugin advertises
  (`nvidia.com/gpu`, or each `nvidia.com/mig-<profile>` with the mixed strategy, × replicas when
  time-slicing is disclosed) against GPU feature discovery's count; a GPU advertised more than
  once without a `.shared` resource, a replicas label or a sharing strategy is sold as isolated.
- `no_gpu_pod` (**D-OP-03**): one pod **without** a GPU request per node class, in an image that
  sets `NVIDIA_VISIBLE_DEVICES=all`: it must see no `/dev/nvidia<N>`, no GPU in `nvidia-smi -L`
  and no GPU id. A leak hands every tenant every GPU of the node.
- `check_upgrade_policy` (**D-OP-04**): when a driver rollout is in progress, samples the nodes'
  upgrade-state labels, cordons and running GPU pods every `rollout_poll_seconds` until it ends
  (at most `rollout_watch_minutes`), and compares them with the `upgradePolicy` in force (the
  ClusterPolicy's, or the NVIDIADriver's with `useNvidiaDriverCRD`): `autoUpgrade`,
  `maxParallelUpgrades`, `maxUnavailable`, GPU pods deleted before the driver restarts,
  `waitForCompletion`. A difference fails, naming the field. No rollout: no verdict.
- `report` goes red listing every check that did not pass.

**Schedule:** weekly (Sunday 02:00 UTC), after every driver upgrade the operator finishes (the
`fleetval_driver_upgrade_done` asset), and manual (the operator's namespace; the probe image, a
mirror if air-gapped; the rollout watch). It reads the cluster and runs one small pod per node
class; it changes no node.

**Triage:** a `fail` names the node and the operand or the leak (evidence: the PodList, the node's
`nvidia.com/` labels and resources, the probe's output, all in `fleetval_db`). A failed
`no_gpu_pod` task is the harness (image not pullable, pod never scheduled): its verdict is `error`.
Owner: fleet-validation.
"""

from __future__ import annotations

# Named here so the dag-processor's manager imports them once (parsing_pre_import_modules) and
# every parse of this file forks with them loaded: the Kubernetes clients the operator pulls in cost
# ~2.7 s a parse, @task's machinery (the standard provider's decorators) ~0.06 s.
import airflow.providers.cncf.kubernetes.operators.pod
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.sdk import Asset, Param, dag
from airflow.timetables.assets import AssetOrTimeSchedule
from airflow.timetables.trigger import CronTriggerTimetable

from fleetval_airflow import operator_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Tag
from fleetval_airflow.probe_pod import ProbePodOperator

# The asset post_upgrade_nccl_sweep's watcher updates when nodes finish a driver upgrade.
DRIVER_UPGRADE_DONE = Asset("fleetval_driver_upgrade_done")


@dag(
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("0 2 * * 0", timezone="UTC"), assets=DRIVER_UPGRADE_DONE
    ),
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params={
        "operator_namespace": Param(
            "gpu-operator", type="string", minLength=1, maxLength=63, title="The GPU Operator's namespace"
        ),
        "rollout_watch_minutes": Param(
            60,
            type="integer",
            minimum=1,
            maximum=1440,
            title="D-OP-04: follow a rollout for at most (minutes)",
        ),
        "rollout_poll_seconds": Param(
            15, type="integer", minimum=1, maximum=600, title="D-OP-04: sample the rollout every (seconds)"
        ),
        "image": Param(
            None,
            type=["null", "string"],
            title="No-GPU probe image (empty: the pinned nccl-tests image; needs NVIDIA_VISIBLE_DEVICES=all)",
        ),
    },
    tags=[Tag.LAYER_OPERATOR, Tag.SCHEDULE_WEEKLY, Tag.SCHEDULE_EVENT, Tag.SCHEDULE_MANUAL, Tag.OWNER],
    doc_md=__doc__,
)
def gpu_operator_validation() -> None:
    fv_run = operator_tasks.open_run()
    probes = ProbePodOperator.partial(
        task_id="no_gpu_pod", map_index_template="{{ task.spec.node }}"
    ).expand_kwargs(operator_tasks.plan_isolation(fv_run))
    judged = operator_tasks.judge_isolation(fv_run)
    probes >> judged
    checks = [
        operator_tasks.check_operands(fv_run),
        operator_tasks.check_advertised(fv_run),
        judged,
        operator_tasks.check_upgrade_policy(fv_run),
    ]
    checks >> operator_tasks.report(fv_run)


gpu_operator_validation()
