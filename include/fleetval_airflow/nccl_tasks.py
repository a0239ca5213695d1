"""Tasks of `post_upgrade_nccl_sweep` and `baseline_backfill`: each pulls its context once and
calls fleetval.suites.nccl / nccl_backfill.

fleetval (SQLAlchemy, pandas, parsers, judges) is imported inside the tasks: the DAG processor
parses this module on every cycle and never runs a task. Plans live in the fleetval run, not in
XCom: only batch indexes travel, so the number of mapped tasks is the number of batches.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import get_current_context, task

from fleetval_airflow.defaults import Pool

MAX_CHANGES_IN_XCOM = 50


def _run_key() -> str:
    ctx = get_current_context()
    return f"{ctx['dag'].dag_id}/{ctx['run_id']}"


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
    """Create (or find, on a retry) the fleetval run for this DAG run."""
    from fleetval.suites import nccl
    from fleetval_airflow import config

    ctx = get_current_context()
    params = ctx["params"]
    return config.store().ensure_run(
        _run_key(),
        suite=nccl.SUITE,
        backend=config.backend_name(),
        meta={
            "dry_run": bool(params["dry_run"]),
            "airflow_run_id": ctx["run_id"],
            "requested_nodes": list(params.get("nodes") or []),
            "event_nodes": _event_nodes(ctx),
        },
    )


@task
def plan_sweep(fv_run: int) -> list[int]:
    """Which nodes, which pairs, in how many batches; returns the intra-node batch indexes.

    Nodes: the `nodes` param when given; else the nodes the upgrade trigger announced (still
    pending: a node already swept on its driver is not swept twice); else every node that is
    `upgrade-done` and not yet swept on its driver.
    """
    from airflow.sdk.configuration import conf

    from fleetval.suites import nccl
    from fleetval_airflow import config

    ctx = get_current_context()
    params = ctx["params"]
    backend = config.backend()
    inventory = backend.list_nodes()
    requested = list(params.get("nodes") or [])
    if requested:
        only, source = requested, "param"
    else:
        pending = nccl.pending_upgrade_nodes(inventory)
        announced = _event_nodes(ctx)
        only = [n for n in announced if n in pending] if announced else sorted(pending)
        source = "event" if announced else "pending"
    plan = nccl.plan_sweep(
        inventory,
        repeats=int(params["repeats"]),
        fabric_of=lambda n: nccl.expected_fabric(backend, n),
        only=only,
        max_batches=conf.getint("core", "max_map_length", fallback=1024),
    )
    config.store().update_run_meta(fv_run, plan=plan.to_json(), node_source=source)
    return list(range(len(plan.intra_batches)))


@task
def pair_batches(fv_run: int) -> list[int]:
    """The pair batch indexes of the plan (a separate task: Airflow maps over return values only)."""
    from fleetval_airflow import config

    return list(range(len(_plan(config.store(), fv_run).pair_batches)))


def _plan(store: Any, fv_run: int) -> Any:
    from fleetval.suites import nccl

    return nccl.NcclPlan.from_json(store.run_meta(fv_run)["plan"])


def _sweep(fv_run: int, groups_of: Any) -> dict[str, Any]:
    """Probe, store raw, judge and store one batch of groups (`groups_of(plan)` picks them)."""
    from fleetval.suites import nccl
    from fleetval_airflow import config

    store = config.store()
    plan = _plan(store, fv_run)
    outcomes = nccl.sweep_groups(
        store,
        config.backend(),
        run_id=fv_run,
        run_key=_run_key(),
        plan=plan,
        groups=groups_of(plan),
        lookup=nccl.promoted_lookup(store),
    )
    return nccl.summarize(outcomes)


@task(pool=Pool.NODE_DIAGNOSIS, max_active_tis_per_dagrun=4)
def sweep_intra(fv_run: int, batch_index: int) -> dict[str, Any]:
    """Intra-node all_reduce × repeats on one batch of nodes: probe, store raw, judge, store."""
    return _sweep(fv_run, lambda plan: [[n] for n in plan.intra_batches[batch_index]])


@task(pool=Pool.NODE_DIAGNOSIS, max_active_tis_per_dagrun=4, trigger_rule="all_done")
def sweep_pairs(fv_run: int, batch_index: int) -> dict[str, Any]:
    """Inter-node all_reduce × repeats on one batch of pairs (MPIJobs through Kueue on k8s)."""
    return _sweep(fv_run, lambda plan: plan.pair_batches[batch_index])


@task(pool=Pool.NODE_DIAGNOSIS, trigger_rule="all_done")
def isolate(fv_run: int) -> dict[str, Any]:
    """Locate the bad node(s) behind failing pairs by group testing."""
    from fleetval.suites import nccl
    from fleetval_airflow import config

    store = config.store()
    report = nccl.isolate_failures(
        store,
        config.backend(),
        run_id=fv_run,
        run_key=_run_key(),
        plan=_plan(store, fv_run),
        lookup=nccl.promoted_lookup(store),
    )
    store.update_run_meta(fv_run, isolation=report.to_json())
    return {"bad": report.bad, "undetermined": report.undetermined, "probes_used": report.probes_used}


@task(trigger_rule="all_done")
def gate(fv_run: int) -> dict[str, Any]:
    """The gate: label nodes pass/fail/inconclusive, halt the rollout on a fail, mark swept nodes."""
    from fleetval.suites import nccl
    from fleetval_airflow import config

    ctx = get_current_context()
    dry_run = bool(ctx["params"]["dry_run"])
    store = config.store()
    backend = config.backend()
    plan = _plan(store, fv_run)
    if not plan.nodes:
        store.update_run_meta(fv_run, gate={"result": "none", "reason": "no node to sweep"})
        store.finish_run(fv_run)
        return {"gate": "none", "reason": "no node to sweep", "skipped": plan.skipped}
    decision = nccl.decide_gate(store.verdicts(fv_run), plan)
    failed = nccl.apply_gate(
        store, backend, run_id=fv_run, run_key=_run_key(), decision=decision, dry_run=dry_run
    )
    paused: list[dict[str, Any]] = []
    if decision.halt_rollout and config.backend_name() == "k8s":
        from fleetval_airflow.k8s_gate import pause_driver_upgrades

        paused = pause_driver_upgrades(config.kube_custom_objects(), dry_run=dry_run)
    swept = nccl.mark_swept(backend, plan, nccl.swept_nodes(store, fv_run), dry_run=dry_run)
    store.update_run_meta(fv_run, gate={**decision.to_json(), "clusterpolicy": paused}, swept=swept)
    store.finish_run(fv_run)
    counts: dict[str, int] = {}
    for row in store.verdicts(fv_run):
        counts[row["result"]] = counts.get(row["result"], 0) + 1
    return {
        "gate": decision.result.value,
        "halt_rollout": decision.halt_rollout,
        "failed_nodes": failed,
        "verdicts": counts,
        "swept": len(swept),
        "skipped": plan.skipped,
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
    from fleetval.suites import nccl_backfill
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
    from fleetval.suites import nccl_backfill
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
