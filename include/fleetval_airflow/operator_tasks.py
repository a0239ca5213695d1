"""Tasks of `gpu_operator_validation`: each pulls its context once and calls
fleetval.gpu_operator.suite."""

from __future__ import annotations

from typing import Any

from airflow.sdk import get_current_context, task

from fleetval.store.engine import outage_is_one_line
from fleetval_airflow.context import run_key as _run_key


def _core() -> Any:
    from fleetval_airflow import config

    return config.kube().core


@task
@outage_is_one_line
def open_run() -> int:
    from fleetval.gpu_operator.suite import SUITE
    from fleetval_airflow import config

    params = get_current_context()["params"]
    return config.store().ensure_run(
        _run_key(), suite=SUITE, backend="kubernetes", meta={"params": dict(params)}
    )


@task
@outage_is_one_line
def check_operands(fv_run: int) -> list[dict[str, Any]]:
    """D-OP-01: the operand pods on each GPU node; the verdict names the operand that broke first."""
    from fleetval.gpu_operator import suite
    from fleetval_airflow import config

    params = get_current_context()["params"]
    core = _core()
    nodes = [n["metadata"]["name"] for n in suite.gpu_nodes(core)]
    verdicts = suite.check_operands(
        config.store(), fv_run, core, run_key=_run_key(), nodes=nodes, namespace=params["operator_namespace"]
    )
    return [v.to_json() for v in verdicts]


@task
@outage_is_one_line
def check_advertised(fv_run: int) -> list[dict[str, Any]]:
    """D-OP-02: each GPU node's advertised GPUs (or MIG devices) against the hardware count."""
    from fleetval.gpu_operator import suite
    from fleetval_airflow import config

    verdicts = suite.check_advertised(config.store(), fv_run, suite.gpu_nodes(_core()), run_key=_run_key())
    return [v.to_json() for v in verdicts]


@task
@outage_is_one_line
def plan_isolation(fv_run: int) -> list[dict[str, Any]]:
    """D-OP-03: one no-GPU probe pod per node class; the arguments of each mapped pod task."""
    from fleetval.gpu_operator import suite
    from fleetval_airflow import config

    params = get_current_context()["params"]
    specs = suite.isolation_probes(
        config.kube().list_nodes(), run_key=_run_key(), image=params["image"] or None
    )
    config.store().update_run_meta(fv_run, isolation=[s.to_json() for s in specs])
    return [{"probe": s.to_json(), "fv_run": fv_run} for s in specs]


@task(trigger_rule="all_done")
@outage_is_one_line
def judge_isolation(fv_run: int) -> list[dict[str, Any]]:
    """Judge the stored no-GPU probes (whatever their tasks did: a missing output is `error`)."""
    from fleetval.gpu_operator import suite
    from fleetval.probes.pod import ProbeSpec
    from fleetval_airflow import config

    store = config.store()
    specs = [ProbeSpec.from_json(s) for s in store.run_meta(fv_run).get("isolation") or []]
    return [v.to_json() for v in suite.judge_isolation_probes(store, fv_run, specs)]


@task
@outage_is_one_line
def check_upgrade_policy(fv_run: int) -> dict[str, Any] | None:
    """D-OP-04: a driver rollout in progress, sampled until it ends or the watch window closes,
    against the upgrade policy in force. No rollout: nothing to observe, no verdict."""
    from fleetval.gpu_operator import suite
    from fleetval_airflow import config

    params = get_current_context()["params"]
    verdict = suite.check_upgrade_policy(
        config.store(),
        fv_run,
        _core(),
        config.kube_custom_objects(),
        run_key=_run_key(),
        max_s=60.0 * float(params["rollout_watch_minutes"]),
        interval_s=float(params["rollout_poll_seconds"]),
    )
    if verdict is None:
        print("no driver rollout in progress: D-OP-04 has nothing to observe this run")
        return None
    print(f"{verdict.criterion} {verdict.result.value}: {verdict.reason}")
    return verdict.to_json()


@task(trigger_rule="all_done", retries=0)  # a finding is not retried
@outage_is_one_line
def report(fv_run: int) -> dict[str, Any]:
    """Counts per criterion and a line per verdict that did not pass; the task fails on any, so the
    run is red with the reasons in this log."""
    from fleetval.records import Result, summarize
    from fleetval_airflow import config

    summary = summarize(config.store().verdicts(fv_run), accepted=(Result.PASS, Result.WARN))
    return config.finish_suite_run(fv_run, summary, "GPU Operator")
