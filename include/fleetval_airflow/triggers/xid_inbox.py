"""`XidInboxTrigger`: fires one event per batch of new Xid lines in the fleetval `xid_inbox`.

Where the lines come from (`source`):
- `inbox` — something else fills the inbox: the simulator (`fleetval sim inject-xid`), or any
  log shipper writing (node, kernel line) rows.
- `manual` — no run is started by new lines: someone triggers the DAG, which claims them all.
- `npd` — node-problem-detector on every GPU node watches /dev/kmsg with the rule in
  `deploy/node-problem-detector-xid.json` (source `fleetval-xid-monitor`, so Xid Events do not share
  the spam budget of `kernel-monitor`'s OOM and hung-task Events) and emits Kubernetes Events
  (reason `NVRMXid`) on the Node; the trigger copies them into the inbox before it looks.

Events are not lines. client-go's recorder inside NPD folds an identical message into `count` (or
`series.count`) of one Event, combines more than 10 similar Events in 600 s into one whose message
starts "(combined from similar events): ", and rate-limits bursts; NPD's `lookback` replays old
kernel lines as new Events after a restart. So one Event becomes `count` inbox rows (the first at
its first timestamp, the repeats at the last one seen: a repeat is never dated before it could have
happened), keyed by node, first timestamp, message and repeat index: a replay (same kernel time and
message, a new Event) adds nothing, and a count that grows adds only the new repeats.

On new lines the trigger reserves them (`dispatch_id`) and fires `{dispatch_id, lines, nodes}`;
the DAG run it starts claims exactly those rows, so two firings never remediate the same line.

With `cordon_on_read` (the `xid_remediation` DAG's setting) the trigger first judges the lines it
reserved and cordons each `cordon` decision itself, within the circuit breaker (the DAG's breaker
params, overridden by Variable `fleetval_xid_breaker`, read here at each batch) and in shadow mode
when `dry_run`: the cordon does not wait for the scheduler to create a run, for a worker slot, or
behind the r3 tasks of earlier bursts. The DAG run's `decide_and_cordon` then records the
verdicts and cordons only what this step could not (a failed patch, or the triggerer died).
Then it keeps polling: one trigger fires every batch.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
from collections.abc import AsyncIterator
from functools import cache
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

# fleetval and the hooks are imported where used: DAG files import this module at parse time.

NPD_REASON = "NVRMXid"
COMBINED_PREFIX = "(combined from similar events): "  # client-go's EventAggregator
XID_SOURCES = ("inbox", "npd", "manual")  # fleetval.settings.XID_SOURCES, without importing it at parse time
BREAKER_VARIABLE = "fleetval_xid_breaker"


@cache
def _engine(url: str) -> Any:
    from fleetval.store.engine import make_engine

    return make_engine(url)


def npd_event_lines(event: Any) -> list[tuple[str, str, str, str]]:
    """One node-problem-detector Event → (key, node, kernel line, source) inbox rows, one per
    occurrence it stands for (see the module doc)."""
    if event.involved_object is None or event.involved_object.kind != "Node":
        return []
    node = str(event.involved_object.name)
    message = str(event.message or "").removeprefix(COMBINED_PREFIX)
    first = event.first_timestamp or event.event_time or event.metadata.creation_timestamp
    series = event.series
    last = (series.last_observed_time if series else None) or event.last_timestamp or first
    count = max(1, int((series.count if series else None) or event.count or 1))
    identity = hashlib.sha256(f"{node}\0{_iso(first)}\0{message}".encode()).hexdigest()[:16]
    # NPD's message is the kernel line without its timestamp: put the time back in the syslog ISO
    # shape the Xid parser reads, so time-to-cordon and repeat windows start there.
    return [
        (
            f"npd/{node}/{identity}/{k}",
            node,
            f"{_iso(first if k == 0 else last)} {node} kernel: {message}".strip(),
            "npd",
        )
        for k in range(count)
    ]


def _iso(stamp: dt.datetime | None) -> str:
    return stamp.astimezone(dt.UTC).isoformat() if stamp else ""


def copy_npd_events(engine: Any, core_v1: Any) -> int:
    """Node-problem-detector Events, in every namespace (NPD writes them to `default`) → inbox rows."""
    from fleetval.store.xid_inbox import receive_lines

    events = core_v1.list_event_for_all_namespaces(field_selector=f"reason={NPD_REASON}")
    rows = [row for event in events.items for row in npd_event_lines(event)]
    return receive_lines(engine, rows, at=dt.datetime.now(dt.UTC))


def cordon_inputs(kubernetes_conn_id: str, breaker_params: dict[str, Any]) -> tuple[Any, Any]:
    """The cluster behind the connection (made per batch: the kubeconfig may change under a
    long-lived triggerer) and the breaker, with Variable `fleetval_xid_breaker` read now, as the
    DAG run's tasks read it. Called on the event loop: the SDK reaches the triggerer's
    supervisor from there (a worker thread's first call blocked the loop for 35 s)."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from airflow.sdk import Variable

    from fleetval.k8s.cluster import KubeCluster
    from fleetval.settings import Settings
    from fleetval.xid.steps import XidBreaker

    cluster = KubeCluster(
        KubernetesHook(conn_id=kubernetes_conn_id).core_v1_client, rack_label=Settings.from_env().rack_label
    )
    override = Variable.get(BREAKER_VARIABLE, default=None, deserialize_json=True)
    return cluster, XidBreaker.from_params(breaker_params, override)


class XidInboxTrigger(BaseEventTrigger):
    def __init__(
        self,
        conn_id: str = "fleetval_db",
        poll_interval: float = 1.0,
        source: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        cordon_on_read: bool = False,
        dry_run: bool = False,
        breaker: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger is untyped
        if source not in (None, *XID_SOURCES):
            raise ValueError(f"source must be one of {XID_SOURCES}, got {source!r}")
        if cordon_on_read and not breaker:
            raise ValueError("cordon_on_read needs the breaker params (the DAG's defaults)")
        self.conn_id = conn_id
        self.poll_interval = poll_interval
        self.source = source
        self.kubernetes_conn_id = kubernetes_conn_id
        self.cordon_on_read = cordon_on_read
        self.dry_run = dry_run
        self.breaker = dict(breaker or {})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "fleetval_airflow.triggers.xid_inbox.XidInboxTrigger",
            {
                "conn_id": self.conn_id,
                "poll_interval": self.poll_interval,
                "source": self.source,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "cordon_on_read": self.cordon_on_read,
                "dry_run": self.dry_run,
                "breaker": self.breaker,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow.sdk.bases.hook import BaseHook

        from fleetval.settings import Settings
        from fleetval.store.xid_inbox import dispatch_pending
        from fleetval_airflow.config import url_from_connection

        conn = await BaseHook.aget_connection(self.conn_id)
        engine = _engine(url_from_connection(conn))
        if self.cordon_on_read:
            # Imported on the event loop, once, before any batch: a first import of these in a
            # worker thread stalled the loop past the triggerer's 30 s deadlock watchdog.
            from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

            from fleetval.xid import steps  # noqa: F401

            await self._warm_up()
        core_v1 = None
        # None: FLEETVAL_XID_SOURCE, read here in the triggerer at run time, not when the DAG is parsed.
        source = self.source or Settings.from_env().xid_source
        while source == "manual":  # no run is started by events: someone triggers the DAG
            await asyncio.sleep(3600)
        if source == "npd":
            from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

            core_v1 = KubernetesHook(conn_id=self.kubernetes_conn_id).core_v1_client
        while True:
            if core_v1 is not None:
                await asyncio.to_thread(copy_npd_events, engine, core_v1)
            now = dt.datetime.now(dt.UTC)
            batch = await asyncio.to_thread(dispatch_pending, engine, now=now)
            if batch is not None:
                self.log.info("Xid inbox: %s new lines on %s nodes", batch["lines"], batch["nodes"])
                if self.cordon_on_read:
                    await self._cordon(engine, batch["dispatch_id"], now)
                yield TriggerEvent(batch)  # type: ignore[no-untyped-call]  # untyped in Airflow
                continue  # more may have arrived meanwhile: look again at once
            await asyncio.sleep(self.poll_interval)

    async def _warm_up(self) -> None:
        """The first connection lookup, Variable read and API call of a fresh triggerer took 9 s
        (measured): pay them when the trigger starts, not on the first Xid."""
        try:
            cluster, _breaker = cordon_inputs(self.kubernetes_conn_id, self.breaker)
            await asyncio.to_thread(cluster.node_racks)
        except Exception as exc:  # the first batch tries again, and falls back to the DAG run
            self.log.warning("Xid inbox: warming up the cordon path failed: %s", exc)

    async def _cordon(self, engine: Any, dispatch_id: str, now: dt.datetime) -> None:
        from fleetval.store.repository import Store
        from fleetval.xid.steps import cordon_on_read

        try:
            cluster, breaker = cordon_inputs(self.kubernetes_conn_id, self.breaker)
            outcomes = await asyncio.to_thread(
                cordon_on_read,
                Store(engine),
                cluster,
                dispatch_id=dispatch_id,
                breaker=breaker,
                dry_run=self.dry_run,
                now=now,
            )
        except Exception:  # the DAG run's decide_and_cordon cordons them instead, later
            self.log.exception("cordoning dispatch %s as it was read failed; the DAG run will", dispatch_id)
            return
        self.log.info(
            "Xid inbox: dispatch %s: %s cordoned%s, %s withheld by the breaker",
            dispatch_id,
            sum(1 for o in outcomes if o.cordoned),
            " (shadow mode)" if self.dry_run else "",
            sum(1 for o in outcomes if o.withheld),
        )
