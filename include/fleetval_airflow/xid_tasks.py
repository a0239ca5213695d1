"""Tasks of `xid_remediation`: each pulls its context once and calls fleetval.xid.steps (the
decisions) or fleetval.store.xid_inbox (claiming the inbox rows); `R3ProbeOperator` is the DCGM
r3 probe pod of one cordoned node."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import get_current_context, task

from fleetval.store.engine import outage_is_one_line  # light: SQLAlchemy is loaded by Airflow already
from fleetval_airflow.context import run_key as _run_key
from fleetval_airflow.defaults import DECISION_PRIORITY
from fleetval_airflow.probe_pod import ProbePodOperator

# fleetval is imported inside the tasks: the DAG processor parses this module every cycle.


def _breaker(params: dict[str, Any]) -> Any:
    """The breaker from the run's params, overridden by Variable `fleetval_xid_breaker`
    (JSON with any of max_fleet_fraction, max_rack_fraction, breaker_window_s): event-triggered
    runs take the params' defaults, and operators tune the breaker without a deploy."""
    from airflow.sdk import Variable

    from fleetval.xid.steps import XidBreaker

    return XidBreaker.from_params(
        params, Variable.get("fleetval_xid_breaker", default=None, deserialize_json=True)
    )


@task(priority_weight=DECISION_PRIORITY, weight_rule="absolute")
@outage_is_one_line
def claim_xid_lines() -> dict[str, Any]:
    """Claim the Xid lines this run was triggered for (all pending ones on a manual run)."""
    from airflow.sdk.configuration import conf

    from fleetval.store import xid_inbox
    from fleetval_airflow import config

    ctx = get_current_context()
    dispatch_ids = [
        event.extra["payload"]["dispatch_id"]
        for events in (ctx.get("triggering_asset_events") or {}).values()
        for event in events
        if (event.extra or {}).get("payload", {}).get("dispatch_id")
    ]
    store = config.store()
    run_id = store.ensure_run(
        _run_key(),
        suite="xid",
        backend="kubernetes",
        meta={"dry_run": bool(ctx["params"]["dry_run"]), "dispatch_ids": dispatch_ids},
    )
    claimed = xid_inbox.claim(
        store.engine,
        run_id,
        dispatch_ids=dispatch_ids or None,
        now=dt.datetime.now(dt.UTC),
        max_nodes=conf.getint("core", "max_map_length", fallback=1024),
    )
    return {"fv_run": run_id, "nodes": sorted(claimed), "dispatch_ids": dispatch_ids}


@task(priority_weight=DECISION_PRIORITY, weight_rule="absolute")
@outage_is_one_line
def decide_and_cordon(claim: dict[str, Any]) -> list[str]:
    """Decision table per node; cordon within the circuit breaker; time-to-cordon recorded.

    The trigger already cordoned the run's nodes as it read their lines (`cordon_on_read`): this
    task records those cordons' verdicts and cordons only what that step did not (a manual run,
    a failed patch). One task for every claimed node, ahead of any queued r3 task."""
    from fleetval.store import xid_inbox
    from fleetval.xid import steps as xid
    from fleetval_airflow import config

    ctx = get_current_context()
    params = ctx["params"]
    store = config.store()
    claimed = xid_inbox.claimed_lines(store.engine, claim["fv_run"])
    outcomes = xid.decide_and_cordon(
        store,
        config.kube(),
        run_id=claim["fv_run"],
        run_key=_run_key(),
        claimed=claimed,
        breaker=_breaker(params),
        dry_run=bool(params["dry_run"]),
        now=dt.datetime.now(dt.UTC),
        dispatch_ids=claim.get("dispatch_ids") or (),
    )
    return [o.node for o in outcomes if o.cordoned]


@task(priority_weight=DECISION_PRIORITY, weight_rule="absolute")
@outage_is_one_line
def plan_r3(claim: dict[str, Any], cordoned: list[str]) -> list[dict[str, Any]]:
    """One DCGM r3 probe per cordoned node (the arguments of each mapped `dcgm_r3` task); a node
    whose GPU the device plugin withdrew is quarantined on that evidence instead."""
    from fleetval.xid import steps as xid
    from fleetval_airflow import config

    ctx = get_current_context()
    store, cluster = config.store(), config.kube()
    specs, without = xid.r3_probes(cluster, cordoned, run_key=_run_key(), image=config.settings().dcgm_image)
    xid.quarantine_withdrawn(
        store,
        cluster,
        run_id=claim["fv_run"],
        run_key=_run_key(),
        withdrawn=without,
        dry_run=bool(ctx["params"]["dry_run"]),
        now=dt.datetime.now(dt.UTC),
    )
    return [{"probe": spec.to_json(), "fv_run": claim["fv_run"]} for spec in specs]


class NodeBusy(Exception):
    """The node still runs workload GPU pods: r3 waits (the task retries later)."""


class R3ProbeOperator(ProbePodOperator):
    """DCGM r3 on one cordoned node once its workload has ended, then that node's decision.

    The job that hit the Xid is never evicted: while it runs, the task fails with `NodeBusy` and
    retries. Once the pod completes, its raw output is stored (ProbePodOperator) and judged
    right away, so each node returns to service (or is quarantined) on its own, not when the
    slowest node of the burst is done."""

    def execute(self, context: Any) -> Any:
        from fleetval_airflow import config

        busy = config.kube().workload_gpu_pods(self.spec.node)
        if busy:
            raise NodeBusy(f"{self.spec.node} still runs {busy} GPU pods; r3 waits for them to end")
        result = super().execute(context)
        self._judge(context)
        return result

    def trigger_reentry(self, context: Any, event: dict[str, Any]) -> Any:
        result = super().trigger_reentry(context, event)
        self._judge(context)
        return result

    def _judge(self, context: Any) -> None:
        from fleetval.store.engine import outage_as_error
        from fleetval.xid import steps as xid
        from fleetval_airflow import config

        with outage_as_error():
            outcome = xid.judge_r3(
                config.store(),
                config.kube(),
                run_id=self.fv_run,
                run_key=_run_key(context),
                spec=self.spec,
                dry_run=bool(context["params"]["dry_run"]),
                now=dt.datetime.now(dt.UTC),
            )
        self.log.info("r3 on %s: %s", self.spec.node, outcome)


@task(trigger_rule="all_done")
@outage_is_one_line
def close_run(claim: dict[str, Any], r3: list[dict[str, Any]] | None) -> None:
    """A node whose r3 task gave up (its job never ended, or the harness kept failing) gets an
    `error` verdict and stays cordoned for a human."""
    from fleetval.probes.pod import ProbeSpec
    from fleetval.xid import steps as xid
    from fleetval_airflow import config

    ctx = get_current_context()
    store = config.store()
    judged = {row["subject"] for row in store.verdicts(claim["fv_run"], criterion=xid.R3_CRITERION)}
    for item in r3 or []:
        spec = ProbeSpec.from_json(item["probe"])
        if spec.node not in judged:
            xid.judge_r3(
                store,
                config.kube(),
                run_id=claim["fv_run"],
                run_key=_run_key(),
                spec=spec,
                dry_run=bool(ctx["params"]["dry_run"]),
                now=dt.datetime.now(dt.UTC),
            )
    store.finish_run(claim["fv_run"])
