"""Early-warning tasks: the trend judges over each node's history across sweeps (docs/early-warning.md).

- `judge_device_trends` (weekly_health_sweep, after the waves): D-DEV-TREND-01 for every GPU node of
  the sweep's plan, from the dcgm-exporter counters in the fleet's Prometheus
  (`FLEETVAL_PROMETHEUS_URL`; empty: skipped, no verdict). Busy nodes too: r2 does not see them, the
  counters do.
- `judge_link_trends` (post_upgrade_nccl_sweep, before the gate): D-NET-NCCL-TREND-01 for every node
  and pair the sweep measured, from the busbw stored by this and earlier sweeps.

Both store `warn`, `pass` or `inconclusive` verdicts whose action is `record_only`: nothing is
cordoned, labelled or gated on them. fleetval is imported inside the tasks: the DAG processor parses
this module on every cycle and never runs a task.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from airflow.sdk import get_current_context, task

from fleetval.store.engine import outage_is_one_line  # light: SQLAlchemy is loaded by Airflow already

MAX_SUBJECTS_IN_XCOM = 50


def _summary(verdicts: list[Any]) -> dict[str, Any]:
    counts = Counter(v.result.value for v in verdicts)
    warned = [f"{v.subject}: {v.reason}" for v in verdicts if v.result.value == "warn"]
    for line in warned[:MAX_SUBJECTS_IN_XCOM]:
        print(f"warn  {line}")
    return {"verdicts": dict(sorted(counts.items())), "warned": warned[:MAX_SUBJECTS_IN_XCOM]}


@task(trigger_rule="all_done")  # a failed wave must not skip the trends: the counters are not the r2's
@outage_is_one_line
def judge_device_trends(fv_run: int) -> dict[str, Any]:
    """D-DEV-TREND-01 for every GPU node of the sweep's plan, its history read from Prometheus."""
    from fleetval.dcgm import weekly
    from fleetval.trends import prometheus
    from fleetval_airflow import config

    settings = config.settings()
    if not settings.prometheus_url:
        print("device trends skipped: FLEETVAL_PROMETHEUS_URL is not set (no D-DEV-TREND-01 verdict)")
        return {"skipped": "FLEETVAL_PROMETHEUS_URL is not set"}
    store = config.store()
    plan = weekly.SweepPlan.from_json(store.run_meta(fv_run)["plan"])
    nodes = sorted(plan.rack_of)  # every GPU node the sweep saw, idle or busy
    source = prometheus.PrometheusSource(settings.prometheus_url, node_label=settings.prometheus_node_label)
    # The sweep's scheduled time, not now: a retry reads the same points.
    at = get_current_context()["dag_run"].run_after
    histories = prometheus.read_device_histories(nodes, source=source, at=at)
    unread = len(histories.problems)
    if unread:
        node, problems = next(iter(sorted(histories.problems.items())))
        print(f"{unread} node(s) not fully read from Prometheus, e.g. {node}: {problems[0]}")
    verdicts = prometheus.judge_device_histories(nodes, histories)
    store.add_verdicts(fv_run, verdicts)
    return {"nodes": len(nodes), "queries": histories.read.get("queries", 0), **_summary(verdicts)}


@task(trigger_rule="all_done")  # judged on what the sweep stored, whatever broke
@outage_is_one_line
def judge_link_trends(fv_run: int) -> dict[str, Any]:
    """D-NET-NCCL-TREND-01 for every node and pair this sweep judged, from its stored busbw history."""
    from fleetval.nccl import plan as nccl_plan
    from fleetval.store import nccl_queries
    from fleetval.trends import links
    from fleetval_airflow import config

    store = config.store()
    subjects = sorted(
        {
            str(r["subject"])
            for r in store.verdicts(fv_run)
            if r["criterion"] == links.busbw_criterion_of(str(r["subject"]))
        }
    )
    rows = nccl_queries.busbw_history(
        store,
        subjects,
        criteria=links.BUSBW_CRITERIA,
        suite=nccl_plan.SUITE,
        until_run=fv_run,
        per_subject=links.LINK_LOOKBACK,
    )
    verdicts = links.judge_link_histories(subjects, links.busbw_histories(rows))
    store.add_verdicts(fv_run, verdicts)
    return {"subjects": len(subjects), **_summary(verdicts)}
