"""Tasks of `rack_onboarding`: each pulls its context once and calls fleetval.onboarding.

The run's state lives in the fleetval run (`runs.meta`: the request, the plan, each stage's state,
the gate, the answers, the report), not in XCom: a task finds it by the DAG run's key, so a task
whose predecessor broke is skipped ("no plan") instead of failing on a missing XCom, and a retried
task picks up what the first attempt stored. Only the probe lists (one mapped task per probe) and
the human-in-the-loop questions travel through XCom.

The rack suggestions of the trigger form (`suggestions`) are read at DAG parse time from a small
file (`FLEETVAL_RACKS_CACHE`, default `$AIRFLOW_HOME/fleetval-racks.json`) that every onboarding
run rewrites from the cluster's node list: no network, no database, no Airflow Variable at parse
time; a missing, unreadable or oversized file gives no suggestions, and the form still takes any
rack name (checked against the cluster in `plan_onboarding`).
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import pathlib
import re
import tempfile
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

from airflow.sdk import get_current_context, task

from fleetval.onboarding.request import LABEL_VALUE_PATTERN
from fleetval.store.engine import outage_is_one_line
from fleetval_airflow.context import run_key as _run_key

if TYPE_CHECKING:
    from fleetval.nodes import NodeInfo
    from fleetval.onboarding.registry import StageContext, StageSpec
    from fleetval.store.repository import Store

DAG_ID: Final = "rack_onboarding"
APPROVE_NODES: Final = "approve_nodes"
APPROVE_BASELINES: Final = "approve_baselines"
CACHE_ENV: Final = "FLEETVAL_RACKS_CACHE"
CACHE_MAX_BYTES: Final = 64 * 1024
MAX_SUGGESTIONS: Final = 500

# fleetval's heavier modules (SQLAlchemy, pandas, the tools) are imported inside the tasks: the
# DAG processor imports this module on every parse and never runs a task.


# --- the form's suggestions (parse time: a bounded local read, never fails) ---------------------


def cache_path() -> pathlib.Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return pathlib.Path(configured)
    home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
    return pathlib.Path(home) / "fleetval-racks.json"


def suggestions(kind: str) -> list[str]:
    """The racks (or profiles) the cluster reported at the last onboarding run; [] when unknown."""
    try:
        path = cache_path()
        if path.stat().st_size > CACHE_MAX_BYTES:
            return []
        values = json.loads(path.read_text(encoding="utf-8")).get(kind)
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(values, list):
        return []
    label = re.compile(LABEL_VALUE_PATTERN)
    return sorted({v for v in values if isinstance(v, str) and label.match(v)})[:MAX_SUGGESTIONS]


def remember_inventory(nodes: Sequence[NodeInfo]) -> None:
    """Rewrite the suggestions file from the cluster's GPU nodes (atomically; a failure to write is
    only logged: the form then suggests what it did before)."""
    gpu_nodes = [n for n in nodes if n.is_gpu_node]
    data = {
        "racks": sorted({n.rack for n in gpu_nodes if n.rack})[:MAX_SUGGESTIONS],
        "profiles": sorted({n.profile for n in gpu_nodes if n.profile})[:MAX_SUGGESTIONS],
    }
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as out:
            json.dump(data, out)
        os.replace(out.name, path)
    except OSError as exc:
        print(f"could not update the form's rack suggestions ({path}): {exc}")


# --- the run's state ---------------------------------------------------------------------------


def _planned() -> tuple[Store, int, dict[str, Any]]:
    """The store, the fleetval run and its meta; the task is skipped when the run has no plan."""
    from airflow.sdk.exceptions import AirflowSkipException

    from fleetval_airflow import config

    store = config.store()
    fv_run = store.run_id(_run_key())
    meta = store.run_meta(fv_run) if fv_run is not None else {}
    if fv_run is None or "plan" not in meta:
        raise AirflowSkipException("no onboarding plan: plan_onboarding did not complete (see its log)")
    return store, fv_run, meta


def _context(store: Store, fv_run: int, meta: dict[str, Any], *, cluster: bool = False) -> StageContext:
    from fleetval.onboarding.plan import OnboardingPlan
    from fleetval.onboarding.registry import StageContext
    from fleetval.onboarding.request import OnboardingRequest
    from fleetval_airflow import config

    return StageContext(
        store=store,
        run_id=fv_run,
        run_key=str(meta["run_key"]),
        plan=OnboardingPlan.from_json(meta["plan"]),
        request=OnboardingRequest.from_json(meta["request"]),
        nodes=(),
        core=config.kube().core if cluster else None,
        images=dict(meta.get("images") or {}),
        max_map_length=int(meta["max_map_length"]),
    )


def _set_stage(store: Store, fv_run: int, name: str, state: dict[str, Any]) -> None:
    stages = dict(store.run_meta(fv_run).get("stages") or {})
    store.update_run_meta(fv_run, stages={**stages, name: state})


def _answer(task_id: str) -> dict[str, Any] | None:
    """The human-in-the-loop task's result (None: it was skipped, failed or is not there)."""
    ti = get_current_context()["ti"]
    result = ti.xcom_pull(task_ids=task_id, map_indexes=0, default=None)
    return dict(result) if isinstance(result, dict) else None


# --- tasks -------------------------------------------------------------------------------------


@task
@outage_is_one_line
def plan_onboarding() -> dict[str, Any]:
    """Check the request again, pick the nodes, taint them for onboarding (not in a dry run).

    The plan is kept in the fleetval run: a retry keeps the first attempt's plan (the cluster it
    sees has been changed by that attempt). A request that cannot be carried out fails here,
    once (no retry), with the reason."""
    from airflow.sdk.configuration import conf
    from airflow.sdk.exceptions import AirflowFailException

    from fleetval.onboarding import actions
    from fleetval.onboarding.plan import OnboardingPlan, PlanError, plan_onboarding
    from fleetval.onboarding.request import RequestError, validate_request
    from fleetval.records import Result, Verdict
    from fleetval.store.onboarding import SUITE
    from fleetval_airflow import config
    from fleetval_airflow.mpijob_probe import mpijob_runner

    ctx = get_current_context()
    try:
        request = validate_request(dict(ctx["params"]))
    except RequestError as exc:
        raise AirflowFailException(str(exc)) from None
    store = config.store()
    run_key = _run_key()
    fv_run = store.ensure_run(
        run_key,
        suite=SUITE,
        backend="kubernetes",
        meta={"request": request.to_json(), "airflow_run_id": ctx["run_id"], "run_key": run_key},
    )
    kube = config.kube()
    settings = config.settings()
    meta = store.run_meta(fv_run)
    if "plan" in meta:
        plan = OnboardingPlan.from_json(meta["plan"])
    else:
        pruned = (
            kube.prune_failed_probe_pods(settings.namespace)
            + mpijob_runner(config.KUBE_CONN_ID).prune_failed()
        )
        if pruned:
            print(f"pruned {len(pruned)} old failed probe pods and MPIJobs")
        inventory = kube.list_nodes()
        remember_inventory(inventory)
        max_map_length = conf.getint("core", "max_map_length", fallback=1024)
        try:
            plan = plan_onboarding(request, inventory, max_nodes=max_map_length)
        except PlanError as exc:
            store.update_run_meta(fv_run, report={"error": str(exc), "rack": request.rack})
            store.finish_run(fv_run)
            raise AirflowFailException(str(exc)) from None
        store.update_run_meta(
            fv_run,
            plan=plan.to_json(),
            max_map_length=max_map_length,
            images={"dcgm": settings.dcgm_image, "nccl": settings.nccl_image},
        )
    alerts = [
        Verdict(
            "F-SAFE-01",
            node,
            Result.FAIL,
            "alert_operator",
            "safety.action_budget.exceeded",
            f"re-onboarding {node} withheld: {why}",
            {"withheld_action": "take out of service for onboarding", "rack": plan.rack},
            {
                "budget": {
                    "max_fleet_fraction": request.max_action_fraction,
                    "max_rack_fraction": request.max_rack_fraction,
                }
            },
        )
        for node, why in sorted(plan.withheld.items())
    ]
    store.add_verdicts(fv_run, alerts)
    actions.apply_changes(
        actions.start_changes(plan, rack_label=settings.rack_label),
        nodes=kube,
        store=store,
        run_id=fv_run,
        run_key=run_key,
        phase="start",
        dry_run=request.dry_run,
    )
    print(f"rack {plan.rack}: {len(plan.nodes)} node(s) to onboard ({plan.selected_by})")
    for node, why in sorted({**plan.refused, **plan.withheld}.items()):
        print(f"  not onboarded: {node}: {why}")
    return {"nodes": len(plan.nodes), "refused": len(plan.refused), "withheld": len(plan.withheld)}


@task(trigger_rule="all_done")
@outage_is_one_line
def stage_round(stage: str, round_index: int) -> list[dict[str, Any]]:
    """The probes of one round of a stage (one mapped probe task each). The first round plans the
    stage for the nodes still in: those whose verdicts so far are pass or warn."""
    from fleetval.onboarding import stages
    from fleetval.onboarding.registry import stage_spec

    store, fv_run, meta = _planned()
    spec = stage_spec(stage)
    ctx = _context(store, fv_run, meta)
    states = dict(meta.get("stages") or {})
    if stage not in states:
        states[stage] = stages.prepare_stage(spec, ctx, states)
        _set_stage(store, fv_run, stage, states[stage])
        state = states[stage]
        print(f"{spec.title}: {len(state['nodes'])} node(s), {state['rounds']} round(s)")
        for node, why in sorted((state.get("stopped") or {}).items()):
            print(f"  not tested, stopped before: {node}: {why}")
    specs = stages.round_probes(spec, ctx, states[stage], round_index)
    return [{"probe": s.to_json(), "fv_run": fv_run} for s in specs]


@task(trigger_rule="all_done", multiple_outputs=True)
@outage_is_one_line
def stage_nodes(stage: str) -> dict[str, Any]:
    """A task-group stage's input (`runner` "group"): the onboarding run and the nodes still in
    that the stage applies to, planned here. With none, the group's tasks are skipped; the two
    values are pushed first, so its cleanup tasks (trigger rule all_done) still find the run."""
    from airflow.sdk.exceptions import AirflowSkipException

    from fleetval.onboarding import stages
    from fleetval.onboarding.registry import stage_spec

    store, fv_run, meta = _planned()
    spec = stage_spec(stage)
    states = dict(meta.get("stages") or {})
    if stage not in states:
        states[stage] = stages.prepare_stage(spec, _context(store, fv_run, meta), states)
        _set_stage(store, fv_run, stage, states[stage])
    nodes = list(states[stage]["nodes"])
    print(f"{spec.title}: {len(nodes)} node(s)")
    ti = get_current_context()["ti"]
    ti.xcom_push(key="fv_run", value=fv_run)
    ti.xcom_push(key="nodes", value=nodes)
    if not nodes:
        # An empty list would read as "no choice: every node" to a layer's own planner.
        raise AirflowSkipException(f"{spec.title}: no node of this run needs it")
    return {"fv_run": fv_run, "nodes": nodes}


def group_factory(spec: StageSpec) -> Callable[..., Any]:
    """The task-group factory a "group" stage names (`module:function`), imported at parse time."""
    module, _, name = spec.group.partition(":")
    return cast("Callable[..., Any]", getattr(importlib.import_module(module), name))


@task(trigger_rule="all_done")
@outage_is_one_line
def judge_stage(stage: str) -> dict[str, Any]:
    """Judge what the stage's probes stored (a probe that stored nothing is an `error` verdict)."""
    from fleetval.onboarding import stages
    from fleetval.onboarding.registry import load, stage_spec

    store, fv_run, meta = _planned()
    spec = stage_spec(stage)
    state = (meta.get("stages") or {}).get(stage)
    if state is None:
        print(f"{spec.title}: not planned (its first round did not complete): its nodes are held")
        return {"judged": False}
    ctx = _context(store, fv_run, meta, cluster=load(spec).needs_cluster and bool(state.get("nodes")))
    summary = stages.judge_stage(spec, ctx, state)
    _set_stage(store, fv_run, stage, {**state, "judged": summary})
    print(f"{spec.title}: {summary}")
    return summary


@task(trigger_rule="all_done")
@outage_is_one_line
def propose_baselines() -> list[dict[str, Any]]:
    """Baseline candidates for what this run measured without a promoted baseline (when asked,
    not in a dry run); the question for `approve_baselines` ([] when there is nothing to ask)."""
    from fleetval.onboarding import baselines
    from fleetval.onboarding.request import OnboardingRequest

    store, fv_run, meta = _planned()
    request = OnboardingRequest.from_json(meta["request"])
    found = meta.get("baselines")
    if found is None:
        missing = baselines.missing_baselines(store.verdicts(fv_run))
        if not missing:
            found = {"missing": [], "candidates": []}
        elif request.dry_run or not request.establish_baseline:
            why = "dry run" if request.dry_run else "the request did not ask for baseline candidates"
            found = {"missing": missing, "candidates": [], "how": f"none proposed: {why}"}
        else:
            made, refused = baselines.propose(store, fv_run, missing)
            found = {"missing": missing, "candidates": [c.to_json() for c in made], "refused": refused}
        store.update_run_meta(fv_run, baselines=found)
    candidates = [baselines.Candidate.from_json(c) for c in found["candidates"]]
    for c in candidates:
        print(f"baseline candidate {c.label} from {len(c.subjects)} subject(s)")
    asked = baselines.question(
        candidates,
        rack=request.rack,
        timeout_minutes=request.approval_timeout_minutes,
        refused=found.get("refused"),
    )
    return [asked] if asked else []


@task(trigger_rule="all_done")
@outage_is_one_line
def promote_baselines() -> dict[str, Any]:
    """Promote what the answer chose (nothing on a timeout), then judge the baseline-relative
    stages again against it."""
    from fleetval.onboarding import baselines, stages
    from fleetval.onboarding.registry import STAGES, load

    store, fv_run, meta = _planned()
    found = dict(meta.get("baselines") or {})
    candidates = [baselines.Candidate.from_json(c) for c in found.get("candidates") or ()]
    if not candidates:
        return {"promoted": []}
    answer = _answer(APPROVE_BASELINES)
    promoted = baselines.promote(store, baselines.chosen(candidates, answer))
    user = (answer or {}).get("responded_by_user")
    by = str(user.get("name") or user.get("id")) if isinstance(user, dict) else None
    at = (answer or {}).get("responded_at")
    found.update(
        promoted=promoted,
        answer={
            "by": by,
            "at": at.isoformat() if isinstance(at, dt.datetime) else at,
            "chosen": list((answer or {}).get("chosen_options") or ()),
            "timed_out": answer is not None and by is None,
        },
        how="no answer"
        if answer is None
        else ("timed out: none promoted" if by is None else f"answered by {by}"),
    )
    store.update_run_meta(fv_run, baselines=found)
    if promoted:
        states = dict(meta.get("stages") or {})
        ctx = _context(store, fv_run, meta)
        for spec in STAGES:
            if load(spec).uses_baselines and spec.name in states:
                print(f"{spec.title}: judged again: {stages.judge_stage(spec, ctx, states[spec.name])}")
    return {"promoted": promoted}


@task(trigger_rule="all_done")
@outage_is_one_line
def gate() -> list[dict[str, Any]]:
    """The gate over every stage's verdicts: passing nodes are admitted now, failed, broken and
    inconclusive ones held; the question for `approve_nodes` about the warned ones ([] if none)."""
    from fleetval.onboarding import actions, approval, stages
    from fleetval.onboarding.gate import ASK, decide
    from fleetval_airflow import config

    store, fv_run, meta = _planned()
    ctx = _context(store, fv_run, meta)
    report = decide(ctx.plan, store.verdicts(fv_run), stages.stage_runs(meta.get("stages") or {}))
    decisions = {
        node: d for node, g in report.nodes.items() if (d := approval.decide_node(g, None)) is not None
    }
    store.update_run_meta(
        fv_run, gate=report.to_json(), decisions={n: _decision_json(d) for n, d in decisions.items()}
    )
    actions.apply_changes(
        [actions.decision_change(d) for d in decisions.values()],
        nodes=config.kube(),
        store=store,
        run_id=fv_run,
        run_key=ctx.run_key,
        phase="gate",
        dry_run=ctx.request.dry_run,
    )
    for node, g in sorted(report.nodes.items()):
        print(f"{node}: {g.result.value} → {g.action}: {g.reason}")
    offered = report.with_action(ASK)
    if not offered or ctx.request.dry_run:
        if offered:
            print(f"dry run: would ask for approval of {', '.join(offered)}")
        return []
    dcgm = stages.with_nodes(ctx, offered)
    asked = approval.question(
        report,
        rack=ctx.plan.rack,
        timeout_minutes=ctx.request.approval_timeout_minutes,
        messages=stages.dcgm_messages(dcgm),
        held={n: d.why for n, d in decisions.items() if not d.admit},
    )
    return [asked] if asked else []


def _decision_json(decision: Any) -> dict[str, Any]:
    return {"node": decision.node, "admit": decision.admit, "state": decision.state, "why": decision.why}


@task(trigger_rule="all_done")
@outage_is_one_line
def apply_answer() -> dict[str, Any]:
    """Admit the nodes the human approved, hold the others (no answer, a timeout or a dry run:
    hold); the answer goes into each offered node's D-DEV-01 verdict and the node events."""
    from fleetval.onboarding import actions, approval
    from fleetval.onboarding.gate import ASK, GateReport
    from fleetval_airflow import config

    store, fv_run, meta = _planned()
    if "gate" not in meta:
        return {"asked": False, "why": "the gate did not decide"}
    ctx = _context(store, fv_run, meta)
    report = GateReport.from_json(meta["gate"])
    offered = report.with_action(ASK)
    if not offered:
        return {"asked": False}
    if ctx.request.dry_run:
        decisions = [
            approval.Decision(
                n, False, approval.HELD, f"warned ({report.nodes[n].reason}); dry run: not asked"
            )
            for n in offered
        ]
        answer = None
    else:
        answer = approval.read_answer(offered, _answer(APPROVE_NODES))
        actions.store_approval(store, fv_run, store.verdicts(fv_run), answer)
        decisions = [d for n in offered if (d := approval.decide_node(report.nodes[n], answer)) is not None]
    actions.apply_changes(
        [actions.decision_change(d) for d in decisions],
        nodes=config.kube(),
        store=store,
        run_id=fv_run,
        run_key=ctx.run_key,
        phase="answer",
        dry_run=ctx.request.dry_run,
        details={"answer": answer.to_json()} if answer else None,
    )
    known = dict(meta.get("decisions") or {})
    known.update({d.node: _decision_json(d) for d in decisions})
    store.update_run_meta(fv_run, decisions=known, approval=answer.to_json() if answer else None)
    for d in decisions:
        print(f"{d.node}: {'admitted' if d.admit else 'held'}: {d.why}")
    return {"asked": True, "approved": [d.node for d in decisions if d.admit]}


def _cordoned(core: Any, nodes: Sequence[str]) -> list[str]:
    """The nodes still cordoned (by someone else: onboarding never cordons); a node gone is not."""
    from kubernetes.client.exceptions import ApiException

    found = []
    for name in nodes:
        try:
            if core.read_node(name).spec.unschedulable:
                found.append(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return found


@task(trigger_rule="all_done")
@outage_is_one_line
def report() -> dict[str, Any]:
    """The summary: in this log, and in the store (the run's `report`)."""
    from fleetval.onboarding import report as onboarding_report
    from fleetval.onboarding.approval import Answer, Decision
    from fleetval.onboarding.gate import GateReport
    from fleetval_airflow import config

    store, fv_run, meta = _planned()
    ctx = _context(store, fv_run, meta)
    decisions = {n: Decision(**d) for n, d in (meta.get("decisions") or {}).items()}
    admitted = [n for n, d in decisions.items() if d.admit]
    cordoned = [] if ctx.request.dry_run else _cordoned(config.kube().core, admitted)
    summary = onboarding_report.build_report(
        run_key=ctx.run_key,
        request=ctx.request,
        plan=ctx.plan,
        gate=GateReport.from_json(meta["gate"]) if "gate" in meta else None,
        decisions=decisions,
        answer=Answer.from_json(meta["approval"]) if meta.get("approval") else None,
        baselines=meta.get("baselines") or {},
        stages=meta.get("stages") or {},
        still_cordoned=cordoned,
    )
    store.update_run_meta(fv_run, report=summary)
    store.finish_run(fv_run)
    print(onboarding_report.render(summary))
    return {"admitted": summary["admitted"], "held": summary["held"], "counts": summary["counts"]}
