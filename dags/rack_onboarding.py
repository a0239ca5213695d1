"""
### Rack onboarding (`rack_onboarding`)
New GPU nodes enter service only when every layer's checks pass, or a human approves what warned
(criterion **D-DEV-01**: r2 must pass, a warning holds the node for approval; and the layers below).

**Trigger it from the form** (Trigger → the form): the **rack** (suggested: the racks the cluster
reported at the last onboarding; any rack name may be typed), optionally a **node list** and/or a
**label selector** (the listed nodes that match; a picked node without a rack label gets this
rack's), the **hardware profile** to expect (`nvidia.com/gpu.product`; others are refused), the
**DCGM level**, whether to run **NCCL pairs**, whether to **propose a baseline** when the profile
has none, and **dry run**. The form refuses malformed input; `plan_onboarding` checks it again
against the cluster and fails once, with the reason, when nothing can be onboarded.

**New nodes** carry the taint `fleetval.io/onboarding=pending:NoSchedule` until they pass (have
the kubelet register with it; the plan sets it too). A node without it counts as in service and
is refused unless *re-onboard nodes in service* is ticked (then within the action budget; past
it an **F-SAFE-01** alert). Refused too: other racks or profiles, quarantined, busy, a GPU
withdrawn by the device plugin.

**Stages** (one task group each; a node goes on only while it passes or warns):
`operator` (D-OP-01 operand pods, D-OP-02 advertised GPUs, D-GPU-TS-01, D-OP-03 one no-GPU pod per
node class) → `dcgm` (`dcgmi diag -r 2` per node) → `nccl_intra` (all_reduce per node, three
rounds) → `nccl_pairs` (pairs as Kueue-admitted MPIJobs, three repeats) → `mig` on MIG pool nodes
(`mig_validation`'s checks, D-GPU-MIG-01..06, every such node taken, its layout restored after).
NCCL is judged against
the profile's **promoted baseline**; with none, `propose_baselines` makes candidates from this
rack and **`approve_baselines` asks whether to promote them** (default on timeout: none; the NCCL
verdicts then stay inconclusive and the nodes are held).

**Gate**: pass → admitted at once (`fleetval.io/in-service=true`, taint removed); fail, error,
inconclusive → held (taint `…=held`), reasons recorded; warn → **`approve_nodes` asks** (Browse →
Required Actions, or the task's Required Action tab): the body lists each warned node's findings
and numbers; choose the nodes to admit. **No answer within the timeout holds them all.** The
answer (who, when, what) is stored in each offered node's D-DEV-01 verdict.
`report` prints the summary and stores it (`fleetval.store.onboarding`).

**Triage:** a held node is a finding, not a task failure: read `report`'s log (why per node) and
the verdicts in `fleetval_db`. A failed *probe* task (a round's map index is the node) is the
harness: the node gets an `error` verdict and is held; rerun the onboarding for it once fixed.
`plan_onboarding` failing means the request selects nothing onboardable (its log says why).
Form suggestions come from `$FLEETVAL_RACKS_CACHE` (default `$AIRFLOW_HOME/fleetval-racks.json`),
rewritten by each run: a bounded local file read at parse time, never the network, the
database or a Variable; without the file the form takes any rack name. One run at a time.
Owner: fleet-validation.
"""

from __future__ import annotations

from typing import Any

# Named here so the dag-processor's manager imports them once (parsing_pre_import_modules) and
# every parse of this file forks with them loaded: the Kubernetes clients the operator pulls in cost
# ~2.7 s a parse, @task's machinery (the standard provider's decorators) ~0.06 s.
import airflow.providers.cncf.kubernetes.operators.pod
import airflow.sdk.definitions.decorators  # noqa: F401
from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import Param, TaskGroup, TriggerRule, dag

from fleetval.onboarding import request as form
from fleetval.onboarding.registry import STAGES
from fleetval_airflow import onboarding_tasks
from fleetval_airflow.defaults import DEFAULT_ARGS, START_DATE, Pool, Tag
from fleetval_airflow.mpijob_probe import MPIJobProbeOperator
from fleetval_airflow.probe_pod import ProbePodOperator

RACKS = onboarding_tasks.suggestions("racks")
PROFILES = onboarding_tasks.suggestions("profiles")


def _suggest(values: list[str]) -> dict[str, Any]:
    """JSON schema `examples`: the form suggests them and still takes any value."""
    return {"examples": values} if values else {}


def _probes(runner: str, **partial: Any) -> Any:
    """A stage's probe task: a pod per probe, or an MPIJob per multi-node probe."""
    if runner == "pod":
        return ProbePodOperator.partial(**partial)
    return MPIJobProbeOperator.partial(**partial)


@dag(
    dag_id=onboarding_tasks.DAG_ID,
    schedule=None,
    start_date=START_DATE,
    catchup=False,
    # One at a time: runs would share nodes, the action budget and a new profile's baseline question.
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params={
        "rack": Param(
            type="string",
            pattern=form.LABEL_VALUE_PATTERN,
            title="Rack",
            description="The rack to onboard (the fleetval.io/rack label): pick one or type a new one.",
            section="What to onboard",
            **_suggest(RACKS),
        ),
        "nodes": Param(
            [],
            type="array",
            items={"type": "string", "pattern": form.NODE_PATTERN},
            uniqueItems=True,
            maxItems=form.MAX_LISTED_NODES,
            title="Nodes (optional, one per line)",
            description="Only these nodes; empty: every GPU node of the rack (or of the label selector).",
            section="What to onboard",
        ),
        "label_selector": Param(
            None,
            type=["null", "string"],
            pattern=form.SELECTOR_PATTERN,
            maxLength=form.SELECTOR_MAX,
            title="Label selector (optional)",
            description="Kubernetes syntax, e.g. fleetval.io/batch=2026-12,nvidia.com/gpu.count=8",
            section="What to onboard",
        ),
        "hardware_profile": Param(
            None,
            type=["null", "string"],
            pattern=form.LABEL_VALUE_PATTERN,
            title="Hardware profile (optional)",
            description="The nvidia.com/gpu.product the nodes must report; others are refused.",
            section="What to onboard",
            **_suggest(PROFILES),
        ),
        "dcgm_level": Param(
            form.DEFAULT_DCGM_LEVEL,
            type="integer",
            enum=list(form.DCGM_LEVELS),
            values_display={"2": "r2: medium (the onboarding minimum)", "3": "r3: long (adds stress tests)"},
            title="DCGM diagnostic level",
            section="Checks",
        ),
        "run_pairs": Param(
            True, type="boolean", title="Run inter-node NCCL pairs (MPIJobs through Kueue)", section="Checks"
        ),
        "establish_baseline": Param(
            True,
            type="boolean",
            title="No NCCL baseline for the profile yet: propose one from this rack (promoted if you say so)",
            section="Checks",
        ),
        "operator_namespace": Param(
            form.DEFAULT_OPERATOR_NAMESPACE,
            type="string",
            pattern=form.NAMESPACE_PATTERN,
            title="The GPU Operator's namespace",
            section="Checks",
        ),
        "approval_timeout_minutes": Param(
            form.DEFAULT_TIMEOUT_MINUTES,
            type="number",
            exclusiveMinimum=0,
            maximum=form.MAX_TIMEOUT_MINUTES,
            title="Minutes to wait for an answer (then: hold the nodes, promote no baseline)",
            section="Approval",
        ),
        "include_in_service": Param(
            False,
            type="boolean",
            title="Re-onboard nodes already in service (takes them out of service, within the budget)",
            section="Safety",
        ),
        "max_action_fraction": Param(
            form.DEFAULT_BUDGET.max_fleet_fraction,
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            title="Most of the fleet taken out of service by re-onboarding",
            section="Safety",
        ),
        "max_rack_fraction": Param(
            form.DEFAULT_BUDGET.max_rack_fraction,
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            title="Most of one rack taken out of service by re-onboarding",
            section="Safety",
        ),
        "dry_run": Param(
            False,
            type="boolean",
            title="Dry run: probe and judge, record what would be done, touch no node, ask nothing",
            section="Safety",
        ),
    },
    tags=[
        Tag.LAYER_OPERATOR,
        Tag.LAYER_DEVICE,
        Tag.LAYER_NETWORK,
        Tag.LAYER_SHARING,
        Tag.SCHEDULE_MANUAL,
        Tag.OWNER,
    ],
    doc_md=__doc__,
)
def rack_onboarding() -> None:
    previous = onboarding_tasks.plan_onboarding()
    for stage in STAGES:  # the registry: adding a layer's stage there adds its tasks here
        with TaskGroup(stage.name, tooltip=stage.title):
            if stage.runner == "group":  # a layer's own task group, handed the nodes still in
                inputs: Any = onboarding_tasks.stage_nodes.override(task_id="nodes")(stage.name)
                previous >> inputs
                previous = onboarding_tasks.group_factory(stage)(
                    inputs["fv_run"], inputs["nodes"], group_id="checks"
                )
            for k in range(stage.rounds):
                # Rounds fill in order: after an empty (skipped) round the next list is skipped
                # without starting a process; after a failed one it still runs.
                rule = TriggerRule.NONE_SKIPPED if k else TriggerRule.ALL_DONE
                probes = onboarding_tasks.stage_round.override(task_id=f"list_{k + 1}", trigger_rule=rule)(
                    stage.name, k
                )
                previous >> probes
                previous = _probes(
                    stage.runner,
                    task_id=f"round_{k + 1}",
                    pool=Pool.NODE_DIAGNOSIS,
                    map_index_template=stage.map_index,
                ).expand_kwargs(probes)
            judged = onboarding_tasks.judge_stage.override(task_id="judge")(stage.name)
            previous >> judged
            previous = judged
    proposed = onboarding_tasks.propose_baselines()
    baselines = HITLOperator.partial(task_id=onboarding_tasks.APPROVE_BASELINES, multiple=True).expand_kwargs(
        proposed
    )
    gated = onboarding_tasks.gate()
    approval = HITLOperator.partial(task_id=onboarding_tasks.APPROVE_NODES, multiple=True).expand_kwargs(
        gated
    )
    applied = onboarding_tasks.apply_answer()
    previous >> proposed
    baselines >> onboarding_tasks.promote_baselines() >> gated
    approval >> applied >> onboarding_tasks.report()


rack_onboarding()
