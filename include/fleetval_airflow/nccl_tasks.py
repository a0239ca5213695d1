"""Tasks of `post_upgrade_nccl_sweep`, `post_upgrade_nccl_sweep_wave` and `baseline_backfill`:
each pulls its context once and calls the fleetval.nccl steps.

fleetval (SQLAlchemy, pandas, parsers, judges) is imported inside the tasks: the DAG processor
parses this module on every cycle and never runs a task. The plan lives in the fleetval run, not
in XCom: a wave run gets only (fv_run, kind, wave index) and rebuilds its probes from the plan, so
no mapping grows with the fleet beyond max_map_length.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from airflow.sdk import get_current_context, task

from fleetval_airflow.context import run_key as _run_key

if TYPE_CHECKING:
    from fleetval.nccl.plan import Kind

WAVE_DAG_ID = "post_upgrade_nccl_sweep_wave"
MAX_CHANGES_IN_XCOM = 50
MAX_SUBJECTS_IN_XCOM = 50


def _event_nodes(ctx: Any) -> list[str]:
    """Nodes announced by the driver-upgrade trigger for this run (asset event payloads)."""
    nodes: set[str] = set()
    for events in (ctx.get("triggering_asset_events") or {}).values():
        for event in events:
            nodes.update((event.extra or {}).get("payload", {}).get("nodes") or ())
    return sorted(nodes)


# --- post_upgrade_nccl_sweep -------------------------------------------------------------------


@task
def start_run() -> int:
    """Create (or find, on a retry) the fleetval run for this DAG run.

    Failed probe pods and MPIJobs are kept for forensics, but only the newest few: older ones
    are pruned here."""
    from fleetval.nccl import plan as nccl_plan
    from fleetval_airflow import config
    from fleetval_airflow.mpijob_probe import mpijob_runner

    ctx = get_current_context()
    params = ctx["params"]
    namespace = config.settings().namespace
    pruned = config.kube().prune_failed_probe_pods(namespace)
    pruned += mpijob_runner(config.KUBE_CONN_ID).prune_failed()
    if pruned:
        print(f"pruned {len(pruned)} old failed probe pods and MPIJobs")
    return config.store().ensure_run(
        _run_key(),
        suite=nccl_plan.SUITE,
        backend="kubernetes",
        meta={
            "dry_run": bool(params["dry_run"]),
            "airflow_run_id": ctx["run_id"],
            "requested_nodes": list(params.get("nodes") or []),
            "event_nodes": _event_nodes(ctx),
        },
    )


@task
def plan_sweep(fv_run: int) -> list[dict[str, Any]]:
    """Which nodes, which pairs, in which waves; returns one wave DAG run per intra-node wave.

    Nodes: the `nodes` param when given; else the nodes the upgrade trigger announced (still
    pending: a node already swept on its driver is not swept twice); else every node that is
    `upgrade-done` and not yet swept on its driver. The plan is kept in the fleetval run: a rerun
    of this DAG run keeps the first attempt's plan (its nodes are marked swept by then).
    """
    from airflow.sdk.configuration import conf

    from fleetval.nccl import plan as nccl_plan
    from fleetval.nccl.probe import DEFAULT_LAYOUT
    from fleetval_airflow import config

    ctx = get_current_context()
    params = ctx["params"]
    store = config.store()
    if "plan" not in store.run_meta(fv_run):
        inventory = config.kube().list_nodes()
        requested = list(params.get("nodes") or [])
        if requested:
            only, source = requested, "param"
        else:
            pending = nccl_plan.pending_upgrade_nodes(inventory)
            announced = _event_nodes(ctx)
            only = [n for n in announced if n in pending] if announced else sorted(pending)
            source = "event" if announced else "pending"
        max_map_length = conf.getint("core", "max_map_length", fallback=nccl_plan.DEFAULT_MAX_MAP_LENGTH)
        plan = nccl_plan.plan_sweep(
            inventory,
            repeats=int(params["repeats"]),
            only=only,
            max_wave_size=max_map_length,
            max_waves=max_map_length,
            layout=str(params.get("layout") or DEFAULT_LAYOUT),
        )
        store.update_run_meta(
            fv_run,
            plan=plan.to_json(),
            node_source=source,
            run_key=_run_key(),
            image=config.settings().nccl_image,
        )
    return _waves(store, fv_run, "intra")


@task
def pair_waves(fv_run: int) -> list[dict[str, Any]]:
    """One wave DAG run per pair wave (a separate task: Airflow maps over return values only)."""
    from fleetval_airflow import config

    return _waves(config.store(), fv_run, "pairs")


def _waves(store: Any, fv_run: int, kind: str) -> list[dict[str, Any]]:
    run_id = get_current_context()["run_id"]
    return [
        {"trigger_run_id": f"{run_id}__{kind}{i:04d}", "conf": {"fv_run": fv_run, "kind": kind, "wave": i}}
        for i in range(len(_plan(store, fv_run).waves(kind)))
    ]


def _plan(store: Any, fv_run: int) -> Any:
    from fleetval.nccl import plan as nccl_plan

    return nccl_plan.NcclPlan.from_json(store.run_meta(fv_run)["plan"])


def _wave_conf() -> tuple[int, str, int]:
    conf = get_current_context()["dag_run"].conf or {}
    try:
        fv_run, kind, wave = int(conf["fv_run"]), str(conf["kind"]), int(conf["wave"])
        if kind in ("intra", "pairs"):
            return fv_run, kind, wave
    except (KeyError, TypeError, ValueError):
        pass
    raise ValueError(
        f"{WAVE_DAG_ID} is started by post_upgrade_nccl_sweep with conf {{fv_run, kind, wave}}, got {conf!r}"
    )


def _wave_probes(kind: Kind) -> list[dict[str, Any]]:
    from fleetval.nccl import plan as nccl_plan
    from fleetval_airflow import config

    fv_run, wave_kind, wave = _wave_conf()
    if wave_kind != kind:
        return []
    meta = config.store().run_meta(fv_run)
    plan = nccl_plan.NcclPlan.from_json(meta["plan"])
    specs = nccl_plan.wave_specs(plan, kind, wave, run_key=meta["run_key"], image=meta.get("image"))
    return [{"probe": spec.to_json(), "fv_run": fv_run} for spec in specs]


@task
def intra_probes() -> list[dict[str, Any]]:
    """An intra-node wave's probes, one per node: the arguments of each mapped probe pod task."""
    return _wave_probes("intra")


@task
def pair_probes() -> list[dict[str, Any]]:
    """A pair wave's probes, one per pair: the arguments of each mapped MPIJob probe task."""
    return _wave_probes("pairs")


@task(trigger_rule="all_done")
def judge(fv_run: int) -> dict[str, Any]:
    """Judge every stored probe of the sweep against the promoted baselines; a probe that left
    nothing (its task or wave broke) is an `error`, never a pass."""
    from fleetval.nccl import judge_stored as nccl_judge
    from fleetval.nccl import plan as nccl_plan
    from fleetval_airflow import config

    store = config.store()
    meta = store.run_meta(fv_run)
    specs = nccl_plan.sweep_specs(_plan(store, fv_run), run_key=meta["run_key"], image=meta.get("image"))
    summary = nccl_judge.summarize(
        nccl_judge.judge_sweep(store, fv_run, specs, lookup=nccl_judge.promoted_lookup(store))
    )
    failed = summary["failed"]
    return {
        **summary,
        "failed": dict(sorted(failed.items())[:MAX_SUBJECTS_IN_XCOM]),
        "failed_subjects": len(failed),
    }


@task(trigger_rule="all_done")
def gate(fv_run: int) -> dict[str, Any]:
    """The gate: label nodes pass/fail/inconclusive, halt the rollout on a fail (ClusterPolicy
    autoUpgrade=false), mark swept nodes."""
    from fleetval.nccl import gate as nccl_gate
    from fleetval_airflow import config
    from fleetval_airflow.k8s_gate import pause_driver_upgrades

    ctx = get_current_context()
    dry_run = bool(ctx["params"]["dry_run"])
    store = config.store()
    plan = _plan(store, fv_run)
    run_key = store.run_meta(fv_run)["run_key"]
    if not plan.nodes:
        store.update_run_meta(fv_run, gate={"result": "none", "reason": "no node to sweep"})
        store.finish_run(fv_run)
        return {"gate": "none", "reason": "no node to sweep", "skipped": plan.skipped}
    kube = config.kube()
    decision = nccl_gate.decide_gate(store.verdicts(fv_run), plan)
    store.update_run_meta(fv_run, gate=decision.to_json())
    paused: list[dict[str, Any]] = []
    in_flight: dict[str, list[str]] = {}
    if decision.halt_rollout:  # first: every minute more, the rollout upgrades more nodes
        # read before the halt: the paused operator removes the upgrade-state labels
        in_flight = nccl_gate.upgrade_in_flight(kube.list_nodes())
        store.update_run_meta(fv_run, gate={**decision.to_json(), "upgrade_in_flight": in_flight})
        paused = pause_driver_upgrades(config.kube_custom_objects(), dry_run=dry_run)
    failed = nccl_gate.apply_gate(
        store, kube, run_id=fv_run, run_key=run_key, decision=decision, dry_run=dry_run, in_flight=in_flight
    )
    swept = nccl_gate.mark_swept(kube, plan, nccl_gate.swept_nodes(store, fv_run), dry_run=dry_run)
    store.update_run_meta(
        fv_run,
        gate={**decision.to_json(), "clusterpolicy": paused, "upgrade_in_flight": in_flight},
        swept=swept,
    )
    store.finish_run(fv_run)
    counts: dict[str, int] = {}
    for row in store.verdicts(fv_run):
        counts[row["result"]] = counts.get(row["result"], 0) + 1
    return {
        "gate": decision.result.value,
        "halt_rollout": decision.halt_rollout,
        "clusterpolicy": paused,
        "upgrade_in_flight": {state: len(names) for state, names in in_flight.items()},
        "failed_nodes": failed[:MAX_SUBJECTS_IN_XCOM],
        "verdicts": counts,
        "swept": len(swept),
        "skipped": dict(sorted(plan.skipped.items())[:MAX_SUBJECTS_IN_XCOM]),
    }


# --- baseline_backfill -------------------------------------------------------------------------


def _day(value: Any) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.combine(dt.date.fromisoformat(str(value)), dt.time(), tzinfo=dt.UTC)


def backfill_range(params: Any, ctx: Any) -> tuple[dt.datetime, dt.datetime]:
    """[since, until): the params' dates (both days included), else the run's data interval
    (what an Airflow backfill or a scheduled run covers), else the day before the run."""
    since, until = _day(params.get("since")), _day(params.get("until"))
    if until is not None:
        until += dt.timedelta(days=1)
    start, end = ctx.get("data_interval_start"), ctx.get("data_interval_end")
    if start is not None and end is not None and end > start:
        since = since or start
        until = until or end
    run_after = ctx["dag_run"].run_after
    until = until or run_after
    since = since or until - dt.timedelta(days=1)
    return since, until


@task
def plan_backfill() -> list[dict[str, str]]:
    """The (profile, scope) series to re-derive: the params', or every series measured in range."""
    from fleetval.nccl import backfill as nccl_backfill
    from fleetval_airflow import config

    ctx = get_current_context()
    params = ctx["params"]
    since, until = backfill_range(params, ctx)
    profile, scope = params.get("profile") or None, params.get("scope") or None
    if profile and scope:
        series = [(profile, scope)]
    else:
        series = [
            (p, s)
            for p, s in nccl_backfill.profile_scopes(config.store(), since=since, until=until)
            if (profile is None or p == profile) and (scope is None or s == scope)
        ]
    return [
        {"profile": p, "scope": s, "since": since.isoformat(), "until": until.isoformat()} for p, s in series
    ]


@task(max_active_tis_per_dagrun=1)  # baseline versions are allocated one at a time
def rederive(series: dict[str, str]) -> dict[str, Any]:
    """New candidate baseline from stored measurements; past runs re-judged under a new run."""
    from fleetval.nccl import backfill as nccl_backfill
    from fleetval_airflow import config

    ctx = get_current_context()
    report = nccl_backfill.rederive_and_rejudge(
        config.store(),
        profile=series["profile"],
        scope=series["scope"],
        since=dt.datetime.fromisoformat(series["since"]),
        until=dt.datetime.fromisoformat(series["until"]),
        promote=bool(ctx["params"]["promote"]),
        run_key=f"{_run_key()}/{series['profile']}/{series['scope']}",
    )
    data = report.to_json()
    return {
        **{k: data[k] for k in ("profile", "scope", "since", "until", "run_id", "status", "baseline")},
        "rejudged_runs": len(report.rejudged_runs),
        "changed": len(report.changes),
        "unchanged": report.unchanged,
        "changes": data["changes"][:MAX_CHANGES_IN_XCOM],
    }


@task(trigger_rule="all_done")
def backfill_report(results: Any) -> dict[str, Any]:
    """What changed, per series (full reports are in each backfill run's meta)."""
    rows = [r for r in (results or []) if r]
    return {
        "series": len(rows),
        "changed": sum(int(r["changed"]) for r in rows),
        "by_series": {
            f"{r['profile']}/{r['scope']}": {"status": r["status"], "changed": r["changed"]} for r in rows
        },
    }
