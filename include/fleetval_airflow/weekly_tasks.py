"""Tasks of `weekly_health_sweep` and `weekly_health_sweep_wave`: each pulls its context once
and calls fleetval.dcgm.weekly."""

from __future__ import annotations

from typing import Any

from airflow.sdk import get_current_context, task

from fleetval.store.engine import outage_is_one_line  # light: SQLAlchemy is loaded by Airflow already
from fleetval_airflow.context import run_key as _run_key

WAVE_DAG_ID = "weekly_health_sweep_wave"

# fleetval (SQLAlchemy, parsers, judges) is imported inside the tasks: the DAG processor parses
# this module on every cycle and never runs a task.


@task
@outage_is_one_line
def start_run() -> int:
    """Create (or find, on a retry) the fleetval run for this DAG run; keep its parameters.

    Failed probe pods are kept for forensics, but only the newest few: older ones are pruned here."""
    from fleetval_airflow import config

    ctx = get_current_context()
    params = dict(ctx["params"])
    pruned = config.kube().prune_failed_probe_pods(config.settings().namespace)
    if pruned:
        print(f"pruned {len(pruned)} old failed probe pods")
    return config.store().ensure_run(
        _run_key(),
        suite="weekly",
        backend="kubernetes",
        meta={"dry_run": bool(params["dry_run"]), "airflow_run_id": ctx["run_id"], "params": params},
    )


@task
@outage_is_one_line
def plan_waves(fv_run: int) -> list[dict[str, Any]]:
    """Select idle GPU nodes and split them into waves within the diagnosis budget.

    The plan is kept in the fleetval run: a rerun of this DAG run keeps the first attempt's plan
    (the cluster it sees has been changed by that attempt). One wave is one run of the wave DAG;
    only its index travels, so no mapping grows with the fleet beyond max_map_length.
    """
    from airflow.sdk.configuration import conf

    from fleetval.dcgm import weekly
    from fleetval.policy.blast_radius import DiagnosisBudget
    from fleetval_airflow import config

    ctx = get_current_context()
    params = ctx["params"]
    store = config.store()
    meta = store.run_meta(fv_run)
    if "plan" in meta:
        plan = weekly.SweepPlan.from_json(meta["plan"])
    else:
        from fleetval_airflow.onboarding_tasks import remember_inventory

        max_map_length = conf.getint("core", "max_map_length", fallback=1024)
        inventory = config.kube().list_nodes()
        remember_inventory(inventory)  # keeps rack_onboarding's rack suggestions fresh between onboardings
        plan = weekly.plan_sweep(
            inventory,
            DiagnosisBudget(float(params["max_fleet_fraction"]), float(params["max_rack_fraction"])),
            max_waves=max_map_length,
            max_wave_size=max_map_length,
        )
        store.update_run_meta(
            fv_run, plan=plan.to_json(), run_key=_run_key(), image=config.settings().dcgm_image
        )
    return [
        {"trigger_run_id": f"{ctx['run_id']}__wave{i:04d}", "conf": {"fv_run": fv_run, "wave": i}}
        for i in range(len(plan.waves))
    ]


@task
@outage_is_one_line
def wave_probes() -> list[dict[str, Any]]:
    """The wave's probes, one per node: the arguments of each mapped probe pod task."""
    from fleetval.dcgm import weekly
    from fleetval_airflow import config

    fv_run, wave = _wave_conf()
    meta = config.store().run_meta(fv_run)
    plan = weekly.SweepPlan.from_json(meta["plan"])
    specs = weekly.wave_probes(plan, wave, run_key=meta["run_key"], image=meta.get("image"))
    return [{"probe": spec.to_json(), "fv_run": fv_run} for spec in specs]


@task
@outage_is_one_line
def pause_exporters() -> dict[str, Any]:
    """Take dcgm-exporter off the wave's nodes while DCGM diagnoses them (FLEETVAL_DCGM_EXPORTER_PAUSE).

    Its profiling metrics compete with the diagnostic's: a known source of r2/r3 failures that are
    not the node's. Within the diagnosis budget's share of the fleet; a dry run only records it."""
    from fleetval.dcgm import exporter_pause, weekly
    from fleetval_airflow import config

    fv_run, wave = _wave_conf()
    if not config.settings().pause_dcgm_exporter:
        return {"paused": [], "skipped": "FLEETVAL_DCGM_EXPORTER_PAUSE is false"}
    store = config.store()
    meta = store.run_meta(fv_run)
    plan = weekly.SweepPlan.from_json(meta["plan"])
    outcome = exporter_pause.pause_exporters(
        plan.waves[wave],
        cluster=config.kube(),
        events=store,
        run_id=fv_run,
        run_key=meta["run_key"],
        fleet_size=plan.fleet_size,
        policy=exporter_pause.PausePolicy(max_fleet_fraction=float(meta["params"]["max_fleet_fraction"])),
        dry_run=bool(meta["params"]["dry_run"]),
    )
    for node in outcome.still_running:
        print(f"{node}: dcgm-exporter still running after the wait; a busy-profiling result is inconclusive")
    return outcome.to_json()


@task(trigger_rule="all_done")
@outage_is_one_line
def restore_exporters() -> dict[str, Any]:
    """Give the wave's nodes their dcgm-exporter back (and undo any pause a dead run left)."""
    from fleetval.dcgm import exporter_pause, weekly
    from fleetval_airflow import config

    fv_run, wave = _wave_conf()
    store = config.store()
    meta = store.run_meta(fv_run)
    plan = weekly.SweepPlan.from_json(meta["plan"])
    return exporter_pause.restore_exporters(
        plan.waves[wave],
        cluster=config.kube(),
        events=store,
        run_id=fv_run,
        run_key=meta["run_key"],
        dry_run=bool(meta["params"]["dry_run"]),
        policy=exporter_pause.PausePolicy(),
    ).to_json()


@task(trigger_rule="all_done")
@outage_is_one_line
def judge_wave() -> dict[str, Any]:
    """Judge the wave's stored raw outputs, store verdicts, act within the action budget."""
    from fleetval.dcgm import weekly
    from fleetval.policy.blast_radius import ActionBudget
    from fleetval_airflow import config

    ctx = get_current_context()
    fv_run, wave = _wave_conf()
    store = config.store()
    meta = store.run_meta(fv_run)
    params = meta["params"]
    return weekly.judge_wave(
        store,
        config.kube(),
        run_id=fv_run,
        run_key=meta["run_key"],
        plan=weekly.SweepPlan.from_json(meta["plan"]),
        wave_index=wave,
        action_budget=ActionBudget(float(params["max_action_fraction"]), float(params["max_rack_fraction"])),
        dry_run=bool(params["dry_run"]),
        as_of=ctx["dag_run"].run_after,
        image=meta.get("image"),
    )


def _wave_conf() -> tuple[int, int]:
    conf = get_current_context()["dag_run"].conf or {}
    try:
        return int(conf["fv_run"]), int(conf["wave"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"{WAVE_DAG_ID} is started by weekly_health_sweep with conf {{fv_run, wave}}, got {conf!r}"
        ) from None


@task(trigger_rule="all_done")
@outage_is_one_line
def report_coverage(fv_run: int) -> dict[str, Any]:
    """D-DEV-03 coverage for the fleet, and the run's verdict counts."""
    from fleetval.dcgm import weekly
    from fleetval_airflow import config

    ctx = get_current_context()
    store = config.store()
    plan = weekly.SweepPlan.from_json(store.run_meta(fv_run)["plan"])
    swept = store.probed_nodes(fv_run, completed_only=True)
    verdict = weekly.coverage_verdict(plan, swept, as_of=ctx["dag_run"].run_after)
    store.add_verdicts(fv_run, [verdict])
    store.finish_run(fv_run)
    counts: dict[str, int] = {}
    for row in store.verdicts(fv_run):
        counts[row["result"]] = counts.get(row["result"], 0) + 1
    return {"coverage": verdict.result.value, "verdicts": counts, "waves": len(plan.waves)}
