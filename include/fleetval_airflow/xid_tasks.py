"""Tasks of `xid_remediation`: each pulls its context once and calls fleetval.suites.xid (the
decisions) or fleetval.store.xid_inbox (claiming the inbox rows)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import get_current_context, task

# fleetval is imported inside the tasks: the DAG processor parses this module every cycle.


def _run_key() -> str:
    ctx = get_current_context()
    return f"{ctx['dag'].dag_id}/{ctx['run_id']}"


def _breaker(params: dict[str, Any]) -> Any:
    """The breaker from the run's params, overridden by Variable `fleetval_xid_breaker`
    (JSON with any of max_fleet_fraction, max_rack_fraction, breaker_window_s): event-triggered
    runs take the params' defaults, and operators tune the breaker without a deploy."""
    from airflow.sdk import Variable

    from fleetval.suites.xid import XidBreaker

    merged = {**params, **(Variable.get("fleetval_xid_breaker", default=None, deserialize_json=True) or {})}
    return XidBreaker(
        float(merged["max_fleet_fraction"]),
        float(merged["max_rack_fraction"]),
        dt.timedelta(seconds=float(merged["breaker_window_s"])),
    )


@task
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
        backend=config.backend_name(),
        meta={"dry_run": bool(ctx["params"]["dry_run"]), "dispatch_ids": dispatch_ids},
    )
    claimed = xid_inbox.claim(
        store.engine,
        run_id,
        dispatch_ids=dispatch_ids or None,
        now=dt.datetime.now(dt.UTC),
        max_nodes=conf.getint("core", "max_map_length", fallback=1024),
    )
    return {"fv_run": run_id, "nodes": sorted(claimed)}


@task
def decide_and_cordon(claim: dict[str, Any]) -> list[str]:
    """Decision table per node; cordon within the circuit breaker; time-to-cordon recorded.

    One task for every claimed node: cordoning is the latency-critical step, so it does not wait
    for a mapped task per node to be scheduled."""
    from fleetval.store import xid_inbox
    from fleetval.suites import xid
    from fleetval_airflow import config

    ctx = get_current_context()
    params = ctx["params"]
    store = config.store()
    claimed = xid_inbox.claimed_lines(store.engine, claim["fv_run"])
    outcomes = xid.decide_and_cordon(
        store,
        config.backend(),
        run_id=claim["fv_run"],
        run_key=_run_key(),
        claimed=claimed,
        breaker=_breaker(params),
        dry_run=bool(params["dry_run"]),
        now=dt.datetime.now(dt.UTC),
    )
    return [o.node for o in outcomes if o.cordoned]


@task(retries=12, retry_delay=dt.timedelta(minutes=10), max_active_tis_per_dagrun=16)
def remediate_node(claim: dict[str, Any], node: str) -> dict[str, Any]:
    """DCGM r3 once the node's GPU pods are gone; Pass → uncordon, Fail → quarantine.

    While the job that hit the Xid still runs, the task fails and retries (every 10 min, 2 h)."""
    from fleetval.suites import xid
    from fleetval_airflow import config

    ctx = get_current_context()
    outcome = xid.remediate(
        config.store(),
        config.backend(),
        run_id=claim["fv_run"],
        run_key=_run_key(),
        node=node,
        dry_run=bool(ctx["params"]["dry_run"]),
        now=dt.datetime.now(dt.UTC),
    )
    if outcome["state"] == "waiting":
        raise RuntimeError(f"{node} still runs {outcome['gpu_pods']} GPU pods; r3 waits for them to end")
    return outcome


@task(trigger_rule="all_done")
def close_run(claim: dict[str, Any]) -> None:
    from fleetval_airflow import config

    config.store().finish_run(claim["fv_run"])
