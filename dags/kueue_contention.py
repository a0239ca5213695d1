"""
### Kueue contention scenarios (`kueue_contention`)
Checks that the cluster's Kueue does what the platform promises (criteria D-SCHED-01..07, and
D-GPU-MIG-05 for MIG quota) by **creating the contention on purpose**: each scenario applies its
own ResourceFlavor / ClusterQueues / LocalQueues / priority classes (names prefixed `fvk-<hash>-`,
labelled `fleetval.io/kueue-scenario`), submits GPU batch/v1 Jobs (one scenario: a pod group)
labelled `kueue.x-k8s.io/queue-name` on a timeline, ends them by telling their pods to exit 0,
watches the Workloads, pods and Kueue's events, and judges: held with no pod released, admitted
within N s when quota frees, borrowing up to the limit, reclaim per policy, preemption with the
victim's grace period and re-admission, gang admission, and the waiting reason users see. Kueue's
reasons differ by version; they are matched per version, never hard-coded. A run first reads
Kueue's served API versions, its live configuration and the fleet's GPU products: a scenario the
cluster cannot run meaningfully (Kueue < v0.15, fair sharing on) is `inconclusive`, with why.

- **Schedule:** weekly (Sunday 04:00 UTC), and manual with a form: which scenarios (empty:
  all shipped), Kueue's namespace (its version is read from `kueue-controller-manager`), the
  jobs' image, dry run (validate and print the plan; create nothing).
- Scenarios run **one at a time**: they hold real GPUs (up to 16 per scenario) for seconds, and
  with `waitForPodsReady.blockAdmission` an admitted job that cannot start holds every queue back.
  Run it on a validation pool or in a maintenance window.
- Everything a scenario creates is removed at its end, also when the task fails; a crashed run's
  leftovers are removed by the next run of the same scenario.

**Triage:** a red `report` task lists each criterion that did not pass with the step and what was
seen (full observations in `fleetval_db`, probe `kueue/<scenario>`). A failed `run_scenario`
task means the cluster or the store could not be reached; its retry starts the scenario over.
Kueue's `batch/job` integration (on by default) runs the Jobs; d-sched-06's pod group needs the
`pod` integration.
Owner: fleet-validation.
"""

from __future__ import annotations

# Named here so the dag-processor's manager imports it once (parsing_pre_import_modules) and every
# parse of this file forks with it loaded: @task's machinery (the standard provider's decorators)
# costs ~0.06 s a parse.
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.sdk import Param, dag

from fleetval_airflow import kueue_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Tag

SCENARIOS = [
    "d-sched-01-02-quota",
    "d-sched-03-04-borrow-reclaim",
    "d-sched-04-no-reclaim",
    "d-sched-05-preempt-resume",
    "d-sched-06-gang",
    "x-01-priority-order",
    "x-02-strict-fifo",
    "x-03-lending-limit",
    "x-06-mig-profiles",
    "x-07-two-flavors",
    "x-08-misconfigured",
    "x-09-cohort-tree",
    "x-10-borrow-within-cohort",
]


@dag(
    schedule="0 4 * * 0",
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,  # two runs would contend with each other, not with the platform
    default_args=DEFAULT_ARGS,
    params={
        "scenarios": Param(
            [],
            type="array",
            items={"type": "string", "enum": SCENARIOS},
            examples=SCENARIOS,
            uniqueItems=True,
            title="Scenarios (empty: all shipped)",
        ),
        "kueue_namespace": Param(
            "kueue-system", type="string", minLength=1, maxLength=63, title="Kueue's namespace"
        ),
        "image": Param(
            None,
            type=["null", "string"],
            title="Jobs' image (empty: Kubernetes' e2e busybox; a mirror if air-gapped)",
        ),
        "dry_run": Param(False, type="boolean", title="Dry run: validate and plan, create nothing"),
    },
    tags=[Tag.LAYER_SCHEDULING, Tag.SCHEDULE_WEEKLY, Tag.SCHEDULE_MANUAL, Tag.OWNER],
    doc_md=__doc__,
)
def kueue_contention() -> None:
    scenarios = kueue_tasks.plan_scenarios()
    kueue_tasks.report(kueue_tasks.run_scenario.expand(scenario=scenarios))


kueue_contention()
