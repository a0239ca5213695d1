"""
### Checkpoint save/resume drill (`checkpoint_resume_drill`)
Does a training job survive what a platform does to it? Criteria **D-JOB-CKPT-01..07**: step
continuity, state completeness, bitwise loss continuity, atomic saves, save time, corruption
fallback, preemption save. Weekly and manual; `image` drills your own training image when it
follows the drill contract (docs/checkpoint.md, "Checkpoint drill contract"); the default is fleetval's
reference job.

- `plan` picks the node (or uses `node`), creates the claim `claim` on first use (on
  `storage_class`: the drill validates that storage path too) and opens the fleetval run.
- Pods, all on that node and claim, each scenario in `/ckpt/<drill>/<scenario>`:
  **reference** (uninterrupted); **kill_in_save** (its pod deleted with no grace period while it
  is inside a save, by `interrupt_kill`); **sigterm** (its pod deleted with the grace period
  `grace_s` at a known step, by `preempt`); **corrupt** then **corrupt.damage** (the newest
  checkpoint's bytes flipped). After each: **.inspect** lists the claim's files with their
  checksums, **.resume** trains again to the last step.
- `judge` compares every resumed run with the reference and the storage as inspected; it fails
  when a criterion did not pass, with the reasons in its log.

**Triage:** a failed `judge` is a finding about the job or the storage (read its log). A failed
pod task or interrupter is the harness (pod never scheduled, claim not bound, image missing).
Raw logs and listings: `fleetval_db` connection, probe keys `<run>/<pod name>`.
Owner: fleet-validation.
"""

from __future__ import annotations

# Named here so the dag-processor's manager imports them once (parsing_pre_import_modules) and
# every parse of this file forks with them loaded: the Kubernetes clients the operator pulls in cost
# ~2.7 s a parse, @task's machinery (the standard provider's decorators) ~0.06 s.
import airflow.providers.cncf.kubernetes.operators.pod
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.sdk import Param, dag

from fleetval.ckpt.contract import DEFAULT_GRACE_S, DEFAULT_STEPS, DRILL_IMAGE
from fleetval_airflow import ckpt_tasks
from fleetval_airflow.ckpt_tasks import DrillPodOperator, InterruptedRunOperator
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Tag


@dag(
    schedule="0 5 * * 0",
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,  # drills share the claim
    default_args=DEFAULT_ARGS,
    params={
        "image": Param(
            DRILL_IMAGE, type="string", minLength=1, maxLength=512, title="Training image to drill"
        ),
        "command": Param(
            None,
            type=["null", "array"],
            items={"type": "string", "minLength": 1},
            title="Its command (empty: the image's entrypoint)",
        ),
        "node": Param(None, type=["null", "string"], maxLength=253, title="Node (empty: the first free one)"),
        "gpus": Param(0, type="integer", minimum=0, maximum=8, title="GPUs per run (0: CPU)"),
        "claim": Param(
            "fleetval-ckpt-drill",
            type="string",
            pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
            maxLength=63,
            title="PersistentVolumeClaim (created on first use)",
        ),
        "storage_class": Param(
            None, type=["null", "string"], maxLength=253, title="Its storage class (empty: the default)"
        ),
        "claim_size": Param("10Gi", type="string", pattern="^[0-9]+(Mi|Gi|Ti)$", title="Its size"),
        "steps": Param(DEFAULT_STEPS, type="integer", minimum=6, maximum=100_000, title="Steps per run"),
        "grace_s": Param(
            int(DEFAULT_GRACE_S), type="integer", minimum=1, maximum=3600, title="SIGTERM grace period (s)"
        ),
    },
    tags=[Tag.LAYER_JOB, Tag.SCHEDULE_WEEKLY, Tag.SCHEDULE_MANUAL, Tag.OWNER],
    doc_md=__doc__,
)
def checkpoint_resume_drill() -> None:
    planned = ckpt_tasks.plan()

    def pod(run: str) -> DrillPodOperator:
        return DrillPodOperator(task_id=run.replace(".", "_"), run=run)

    def interrupted(run: str) -> InterruptedRunOperator:
        return InterruptedRunOperator(task_id=run, run=run, retries=0)

    kill = ckpt_tasks.interrupt.override(task_id="interrupt_kill")(planned, "kill_in_save", "kill")
    preempt = ckpt_tasks.interrupt.override(task_id="preempt")(planned, "sigterm", "sigterm")
    runs = [pod("reference"), interrupted("kill_in_save"), interrupted("sigterm"), pod("corrupt")]
    planned >> runs
    resumed = [
        [runs[1], kill] >> pod("kill_in_save.inspect") >> pod("kill_in_save.resume"),
        [runs[2], preempt] >> pod("sigterm.inspect") >> pod("sigterm.resume"),
        runs[3] >> pod("corrupt.damage") >> pod("corrupt.inspect") >> pod("corrupt.resume"),
    ]
    [runs[0], *resumed] >> ckpt_tasks.judge(planned, {"kill_in_save": kill, "sigterm": preempt})


checkpoint_resume_drill()
