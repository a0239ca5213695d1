"""Tasks of `kueue_contention`: each pulls its context once and calls fleetval.kueue.suite."""

from __future__ import annotations

from typing import Any

from airflow.sdk import get_current_context, task

from fleetval.store.engine import outage_is_one_line
from fleetval_airflow.context import run_key as _run_key


@task
@outage_is_one_line
def plan_scenarios() -> list[str]:
    """Validate the chosen scenarios (every Kueue manifest against its CRD) and open the run.
    A dry run stops here: the plan is logged, nothing is created on the cluster."""
    from fleetval.kueue.suite import SUITE, resolve, shipped
    from fleetval_airflow import config

    params = get_current_context()["params"]
    chosen = [resolve(ref) for ref in params["scenarios"]] if params["scenarios"] else shipped()
    for scenario in chosen:
        jobs = ", ".join(f"{j.name}({j.pods}x{j.gpus} {j.resource})" for j in scenario.jobs.values())
        print(f"{scenario.id}: {scenario.title} — criteria {', '.join(scenario.criteria)}; jobs {jobs}")
    if params["dry_run"]:
        print("dry run: nothing is created on the cluster")
        return []
    config.store().ensure_run(_run_key(), suite=SUITE, backend="kubernetes", meta={"params": dict(params)})
    return [s.id for s in chosen]


@task(max_active_tis_per_dagrun=1)  # scenarios share the cluster's GPUs and Kueue's blockAdmission
@outage_is_one_line
def run_scenario(scenario: str) -> dict[str, Any]:
    """Run one scenario end to end (its objects are removed whatever happens) and store its run
    record, then its verdicts. A failing criterion is a verdict; this task fails only when the
    store or the cluster could not be reached."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    from fleetval.kueue.suite import SUITE, resolve
    from fleetval.kueue.suite import run_scenario as run
    from fleetval_airflow import config

    params = get_current_context()["params"]
    store = config.store()
    run_id = store.ensure_run(_run_key(), suite=SUITE, backend="kubernetes")
    api = KubernetesHook(conn_id=config.KUBE_CONN_ID).api_client
    outcome = run(
        api,
        resolve(scenario),
        _run_key(),
        store=store,
        run_id=run_id,
        image=params["image"] or None,
        kueue_namespace=params["kueue_namespace"],
    )
    for verdict in outcome.verdicts:
        print(f"{verdict.criterion} {verdict.result.value}: {verdict.reason}")
    return outcome.to_json()


@task(trigger_rule="all_done")
def report(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """One line per scenario and criterion; the task fails when a criterion did not pass, so the
    run is red with the reasons in this log."""
    from fleetval_airflow import config

    lines, bad = [], []
    for outcome in outcomes or []:
        for v in outcome["verdicts"]:
            line = f"{v['result']:>12}  {v['criterion']:<13} {outcome['scenario']}: {v['reason']}"
            lines.append(line)
            if v["result"] != "pass":
                bad.append(line)
    print("\n".join(lines) or "no scenario ran")
    found = config.store().find_run(_run_key())
    if found is not None:
        config.store().finish_run(found[0])
    summary = {"scenarios": len(outcomes or []), "verdicts": len(lines), "not_passed": len(bad)}
    if bad:
        raise RuntimeError(f"{len(bad)} scheduling verdicts did not pass:\n" + "\n".join(bad))
    return summary
