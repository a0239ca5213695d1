"""Tasks of `mig_validation`, and the MIG stage any DAG can add (`mig_stage`): each pulls its
context once (a `MigRun` for the steps that touch the cluster) and calls one step of
fleetval.mig.suite. Their settings come from the DAG's params, or the defaults below where a DAG
(rack onboarding) has no such param."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from airflow.sdk import TaskGroup, get_current_context, task

from fleetval.store.engine import outage_is_one_line
from fleetval_airflow.context import run_key as _run_key

if TYPE_CHECKING:
    from fleetval.mig.suite import MigRun

# The settings a DAG's params may give; what the stage uses when they do not.
DEFAULTS: Final[dict[str, Any]] = {
    "nodes": [],
    "layouts": ["all-balanced"],
    "refused_layout": None,
    "dry_run": False,
    "max_fleet_fraction": 0.10,
    "max_rack_fraction": 0.25,
    "advertise_max_minutes": None,  # None: the criterion's N (D-GPU-MIG-01)
    "watch_minutes": 15,
    "poll_seconds": 5,
    "operator_namespace": "gpu-operator",
    "image": None,
}


def _setting(name: str) -> Any:
    params = get_current_context()["params"]
    return params[name] if name in params else DEFAULTS[name]


def _meta(fv_run: int) -> tuple[Any, dict[str, Any]]:
    from fleetval_airflow import config

    store = config.store()
    return store, store.run_meta(fv_run)


def _probed(meta: dict[str, Any]) -> list[str]:
    """The taken nodes the isolation probes run on (the baseline left why not the others)."""
    return [n for n in meta.get("mig_taken") or [] if n not in (meta.get("mig_not_probed") or {})]


def _mig_run(store: Any, fv_run: int, meta: dict[str, Any]) -> MigRun:
    """What every step of this run shares: the run's record (plan, nodes taken, mig-parted config),
    the cluster and the DAG's settings; built once per task, which runs one step."""
    from fleetval.mig import suite
    from fleetval_airflow import config

    kube = config.kube()
    return suite.MigRun(
        store=store,
        run_id=fv_run,
        run_key=meta["run_key"],
        plan=suite.MigPlan.from_json(meta["mig_plan"]),
        taken=tuple(meta.get("mig_taken") or ()),
        mig_config=meta.get("mig_config") or {},
        core=kube.core,
        actions=kube,
        pod_namespace=config.settings().namespace,
        image=_setting("image"),
        watch_s=60.0 * float(_setting("watch_minutes")),
        poll_s=float(_setting("poll_seconds")),
    )


def _taken_run(fv_run: int) -> MigRun | None:
    """The run for a step that changes the taken nodes; None when it took none."""
    store, meta = _meta(fv_run)
    return _mig_run(store, fv_run, meta) if meta.get("mig_taken") else None


@task
@outage_is_one_line
def open_run() -> int:
    from fleetval.mig.suite import SUITE
    from fleetval_airflow import config

    params = {k: _setting(k) for k in DEFAULTS}
    return config.store().ensure_run(_run_key(), suite=SUITE, backend="kubernetes", meta={"params": params})


@task
@outage_is_one_line
def plan(fv_run: int, nodes: list[str] | None = None, in_service: bool = True) -> dict[str, Any]:
    """The nodes this run takes (idle, MIG-capable, one wave of the blast-radius budget) and what it
    does on each; kept in the run, so a rerun keeps the plan. `dry_run` ends the run here. Nodes not
    in service (`in_service` false: a rack being onboarded) are all taken: the budget protects the
    capacity tenants use, which they are not part of yet."""
    from fleetval.k8s.cluster import gpu_pods_per_node
    from fleetval.mig import suite
    from fleetval.policy.blast_radius import DiagnosisBudget
    from fleetval_airflow import config

    store, meta = _meta(fv_run)
    if "mig_plan" not in meta:
        core = config.kube().core
        source, mig_config = suite.read_config(
            core, config.kube_custom_objects(), str(_setting("operator_namespace"))
        )
        logical = get_current_context()["dag_run"].run_after
        made = suite.plan(
            suite.gpu_nodes(core),
            gpu_pods_per_node(core),
            source,
            mig_config,
            budget=DiagnosisBudget(
                float(_setting("max_fleet_fraction")), float(_setting("max_rack_fraction"))
            )
            if in_service
            else DiagnosisBudget(1.0, 1.0),
            wanted=list(nodes if nodes is not None else _setting("nodes")),
            layouts=list(_setting("layouts")),
            refused=_setting("refused_layout"),
            week=f"{logical.isocalendar().year}-W{logical.isocalendar().week:02d}",
            rack_label=config.settings().rack_label,
            include_onboarding=not in_service,
        )
        store.update_run_meta(fv_run, mig_plan=made.to_json(), mig_config=mig_config, run_key=_run_key())
        meta = store.run_meta(fv_run)
    made = suite.MigPlan.from_json(meta["mig_plan"])
    for planned in made.nodes:
        steps = " -> ".join(planned.layouts)
        print(f"take {planned.node}: {steps}, refused {planned.refused}, probes on {planned.probe_profile}")
    for name, why in sorted(made.skipped.items()):
        print(f"skip {name}: {why}")
    if made.deferred:
        print(f"deferred by the budget to a later run: {', '.join(made.deferred)}")
    if _setting("dry_run"):
        print("dry run: nothing is cordoned or changed")
    return made.to_json()


@task
@outage_is_one_line
def take(fv_run: int) -> list[str]:
    """Cordon the planned nodes that are still idle (none in a dry run)."""
    from fleetval.mig import suite

    store, meta = _meta(fv_run)
    if _setting("dry_run") or not meta.get("mig_plan"):
        return []
    if "mig_taken" in meta:  # a retry keeps what the first attempt took
        return list(meta["mig_taken"] or [])
    taken = suite.take(_mig_run(store, fv_run, meta))
    store.update_run_meta(fv_run, mig_taken=taken)
    return taken


@task(retries=0)  # a layout change half done is not redone by a retry: restore cleans up
@outage_is_one_line
def apply_layouts(fv_run: int) -> list[dict[str, Any]]:
    """D-GPU-MIG-01 (advertised within N minutes, the time stored) and D-GPU-MIG-05 (sold as its
    profile) for each layout of each taken node."""
    from fleetval.mig import suite

    run = _taken_run(fv_run)
    if run is None:
        return []
    limit = _setting("advertise_max_minutes")
    verdicts = suite.apply_layouts(run, max_s=None if limit is None else 60.0 * float(limit))
    return [v.to_json() for v in verdicts]


def _probes(fv_run: int, phase: str) -> list[dict[str, Any]]:
    """The workload probes of a phase, on the taken nodes that advertise the probed instances (the
    baseline decides which, and keeps why the others are not probed)."""
    from fleetval.mig import suite

    store, meta = _meta(fv_run)
    if not meta.get("mig_taken"):
        return []
    if "mig_not_probed" not in meta:
        ready = suite.probe_ready(_mig_run(store, fv_run, meta))
        store.update_run_meta(fv_run, mig_not_probed={n: why for n, why in ready.items() if why})
        meta = store.run_meta(fv_run)
    specs = suite.isolation_probes(
        suite.MigPlan.from_json(meta["mig_plan"]),
        _probed(meta),
        phase,
        run_key=meta["run_key"],
        image=_setting("image"),
    )
    return [{"probe": s.to_json(), "fv_run": fv_run} for s in specs]


@task
@outage_is_one_line
def baseline_probes(fv_run: int) -> list[dict[str, Any]]:
    """The workload probe on one instance of each taken node, nothing filled (D-GPU-MIG-03)."""
    return _probes(fv_run, "baseline")


@task(retries=0)
@outage_is_one_line
def start_fill(fv_run: int) -> dict[str, str]:
    """The filler on every other instance of the probed profile, waited for until full."""
    from fleetval.mig import suite

    store, meta = _meta(fv_run)
    probed = _probed(meta)
    if not probed:
        return {}
    fills = suite.start_fill(_mig_run(store, fv_run, meta), probed)
    store.update_run_meta(fv_run, mig_fills=fills)
    return fills


@task
@outage_is_one_line
def during_probes(fv_run: int) -> list[dict[str, Any]]:
    """The workload probe again, its neighbours full (D-GPU-MIG-03, -04)."""
    return _probes(fv_run, "during")


@task(trigger_rule="all_done")
@outage_is_one_line
def stop_fill(fv_run: int) -> None:
    """The fillers' logs stored as evidence, the fillers deleted (whatever the probes did)."""
    from fleetval.mig import suite

    store, meta = _meta(fv_run)
    fills = meta.get("mig_fills") or {}
    if fills:
        suite.stop_fill(_mig_run(store, fv_run, meta), fills)


@task(trigger_rule="all_done")
@outage_is_one_line
def judge_isolation(fv_run: int) -> list[dict[str, Any]]:
    """D-GPU-MIG-03 and -04 from the stored probes (a probe that left nothing is `error`)."""
    from fleetval.mig import suite

    store, meta = _meta(fv_run)
    taken = list(meta.get("mig_taken") or [])
    if not taken:
        return []
    verdicts = suite.judge_isolation(
        store,
        fv_run,
        suite.MigPlan.from_json(meta["mig_plan"]),
        taken,
        run_key=meta["run_key"],
        not_probed=meta.get("mig_not_probed") or {},
    )
    return [v.to_json() for v in verdicts]


@task(trigger_rule="all_done", retries=0)
@outage_is_one_line
def refused_layout(fv_run: int) -> list[dict[str, Any]]:
    """D-GPU-MIG-02: a layout the catalog refuses is refused, `failed` on the node."""
    from fleetval.mig import suite

    run = _taken_run(fv_run)
    return [] if run is None else [v.to_json() for v in suite.refused_layout(run)]


@task(trigger_rule="all_done", retries=0)
@outage_is_one_line
def busy_reconfig(fv_run: int) -> list[dict[str, Any]]:
    """D-GPU-MIG-06: a layout change while a pod works on an instance is refused or waits."""
    from fleetval.mig import suite

    store, meta = _meta(fv_run)
    if not meta.get("mig_taken"):
        return []
    verdicts = suite.busy_reconfig(
        _mig_run(store, fv_run, meta), not_probed=dict(meta.get("mig_not_probed") or {})
    )
    return [v.to_json() for v in verdicts]


@task(trigger_rule="all_done")
@outage_is_one_line
def restore(fv_run: int) -> dict[str, bool]:
    """Each taken node back on its original layout and uncordoned (a node that does not come back
    stays cordoned, with an `error` verdict): whatever the checks did."""
    from fleetval.mig import suite
    from fleetval_airflow import config

    run = _taken_run(fv_run)
    back = suite.restore(run) if run is not None else {}
    config.store().update_run_meta(fv_run, mig_restored=back)
    return dict(back)


@task(trigger_rule="all_done", retries=0)  # a finding is not retried
@outage_is_one_line
def report(fv_run: int) -> dict[str, Any]:
    """Counts per criterion and a line per verdict that did not pass; a taken node missing a
    criterion's verdict (its step broke) gets an `error` one. The task fails on any, so the run is
    red with the reasons in this log."""
    from fleetval.mig import suite
    from fleetval.records import summarize
    from fleetval_airflow import config

    store = config.store()
    meta = store.run_meta(fv_run)
    if "mig_plan" not in meta:
        store.finish_run(fv_run)
        raise RuntimeError("no plan was made (the plan task failed): no node was checked")
    if not _setting("dry_run"):
        suite.missing_verdicts(store, fv_run, list(meta.get("mig_taken") or []))
        suite.nothing_taken(
            store, fv_run, suite.MigPlan.from_json(meta["mig_plan"]), meta.get("mig_taken") or []
        )
    return config.finish_suite_run(fv_run, summarize(store.verdicts(fv_run)), "MIG")


def mig_stage(fv_run: Any, nodes: Any = None, *, group_id: str = "mig", in_service: bool = True) -> TaskGroup:
    """The MIG checks on a node set as one task group, for any DAG (rack onboarding calls it with
    its nodes): plan → take → layouts → isolation probes → busy → refused layout → restore. Its
    settings come from the calling DAG's params where it has them (`DEFAULTS` otherwise); its
    verdicts go to the run `fv_run`. The caller adds its own report (or `report`). `in_service`
    false: the nodes serve no tenant yet, so every one of them is taken (no budget wave)."""
    from fleetval_airflow.probe_pod import ProbePodOperator

    with TaskGroup(group_id=group_id) as group:
        planned = plan(fv_run, nodes, in_service)
        taken = take(fv_run)
        applied = apply_layouts(fv_run)
        first = baseline_probes(fv_run)
        baseline = ProbePodOperator.partial(
            task_id="baseline_probe", map_index_template="{{ task.spec.node }}"
        ).expand_kwargs(first)
        filled = start_fill(fv_run)
        second = during_probes(fv_run)
        during = ProbePodOperator.partial(
            task_id="during_probe", map_index_template="{{ task.spec.node }}"
        ).expand_kwargs(second)
        stopped = stop_fill(fv_run)
        judged = judge_isolation(fv_run)
        busy = busy_reconfig(fv_run)
        refused = refused_layout(fv_run)
        restored = restore(fv_run)
        planned >> taken >> applied >> first
        baseline >> filled >> second
        during >> stopped >> judged >> busy >> refused >> restored
        filled >> stopped  # the fillers go even when the probes between broke
    return group


def mig_onboarding_stage(fv_run: Any, nodes: Any, *, group_id: str = "mig") -> TaskGroup:
    """`mig_stage` for rack onboarding (its registry names this): the rack's MIG nodes, all of them."""
    return mig_stage(fv_run, nodes, group_id=group_id, in_service=False)
