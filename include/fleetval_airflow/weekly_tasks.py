"""Tasks of `weekly_health_sweep`: each pulls its context once and calls fleetval.suites.weekly."""

from __future__ import annotations

from typing import Any

from airflow.sdk import get_current_context, task

from fleetval_airflow.defaults import Pool

# fleetval (SQLAlchemy, parsers, judges) is imported inside the tasks: the DAG processor parses
# this module on every cycle and never runs a task.


def _run_key() -> str:
    ctx = get_current_context()
    return f"{ctx['dag'].dag_id}/{ctx['run_id']}"


@task
def start_run() -> int:
    """Create (or find, on a retry) the fleetval run for this DAG run."""
    from fleetval_airflow import config

    ctx = get_current_context()
    params = ctx["params"]
    return config.store().ensure_run(
        _run_key(),
        suite="weekly",
        backend=config.backend_name(),
        meta={"dry_run": bool(params["dry_run"]), "airflow_run_id": ctx["run_id"]},
    )


@task
def plan_waves(fv_run: int) -> list[int]:
    """Select idle GPU nodes and split them into waves within the diagnosis budget.

    The plan is kept in the fleetval run, not in XCom: only wave indexes travel, so the number
    of mapped tasks is the number of waves, not of nodes.
    """
    from airflow.sdk.configuration import conf

    from fleetval.policy.blast_radius import DiagnosisBudget
    from fleetval.suites import weekly
    from fleetval_airflow import config

    ctx = get_current_context()
    params = ctx["params"]
    max_map_length = conf.getint("core", "max_map_length", fallback=1024)
    plan = weekly.plan_sweep(
        config.backend().list_nodes(),
        DiagnosisBudget(float(params["max_fleet_fraction"]), float(params["max_rack_fraction"])),
        max_waves=max_map_length,
    )
    config.store().update_run_meta(fv_run, plan=plan.to_json())
    return list(range(len(plan.waves)))


@task(pool=Pool.NODE_DIAGNOSIS, max_active_tis_per_dagrun=1)
def sweep_wave(fv_run: int, wave_index: int) -> dict[str, Any]:
    """DCGM r2 on one wave: probe, store raw, judge, store verdicts, act. Waves run one at a time."""
    from fleetval.policy.blast_radius import ActionBudget
    from fleetval.suites import weekly
    from fleetval_airflow import config

    ctx = get_current_context()
    params = ctx["params"]
    store = config.store()
    plan = weekly.SweepPlan.from_json(store.run_meta(fv_run)["plan"])
    return weekly.sweep_wave(
        store,
        config.backend(),
        run_id=fv_run,
        run_key=_run_key(),
        plan=plan,
        wave=plan.waves[wave_index],
        action_budget=ActionBudget(float(params["max_action_fraction"]), float(params["max_rack_fraction"])),
        dry_run=bool(params["dry_run"]),
        as_of=ctx["dag_run"].run_after,
    )


@task(trigger_rule="all_done")
def report_coverage(fv_run: int, wave_results: list[dict[str, Any]]) -> dict[str, Any]:
    """D-DEV-03 coverage for the fleet, and the run's verdict counts."""
    from fleetval.suites import weekly
    from fleetval_airflow import config

    ctx = get_current_context()
    store = config.store()
    plan = weekly.SweepPlan.from_json(store.run_meta(fv_run)["plan"])
    swept = store.probed_nodes(fv_run)
    verdict = weekly.coverage_verdict(plan, swept, as_of=ctx["dag_run"].run_after)
    store.add_verdicts(fv_run, [verdict])
    store.finish_run(fv_run)
    counts: dict[str, int] = {}
    for row in store.verdicts(fv_run):
        counts[row["result"]] = counts.get(row["result"], 0) + 1
    return {"coverage": verdict.result.value, "verdicts": counts, "waves": len(list(wave_results))}
