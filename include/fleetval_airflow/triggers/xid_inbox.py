"""`XidInboxTrigger`: fires one event per batch of new Xid lines in the fleetval `xid_inbox`.

Where the lines come from (`source`):
- `inbox` — something else fills the inbox: the simulator (`fleetval sim inject-xid`), or any
  log shipper writing (node, kernel line) rows.
- `manual` — no run is started by new lines: someone triggers the DAG, which claims them all.
- `npd` — node-problem-detector on every GPU node watches /dev/kmsg with the rule in
  `deploy/node-problem-detector-xid.json` and emits Kubernetes Events (reason `NVRMXid`) on the
  Node; the trigger copies new Events into the inbox (idempotent on the Event uid) before it looks.

On new lines the trigger reserves them (`dispatch_id`) and fires `{dispatch_id, lines, nodes}`;
the DAG run it starts claims exactly those rows, so two firings never remediate the same line.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from functools import cache
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

# fleetval and the hooks are imported where used: DAG files import this module at parse time.

NPD_REASON = "NVRMXid"
XID_SOURCES = ("inbox", "npd", "manual")  # fleetval.settings.XID_SOURCES, without importing it at parse time


@cache
def _engine(url: str) -> Any:
    from fleetval.store.engine import make_engine

    return make_engine(url)


def copy_npd_events(engine: Any, core_v1: Any) -> int:
    """Node-problem-detector Events (one per kernel line it matched) → inbox rows."""
    from fleetval.store.xid_inbox import receive_lines

    events = core_v1.list_event_for_all_namespaces(field_selector=f"reason={NPD_REASON}")
    rows = []
    for ev in events.items:
        if ev.involved_object is None or ev.involved_object.kind != "Node":
            continue
        node = ev.involved_object.name
        seen = ev.first_timestamp or ev.event_time or ev.metadata.creation_timestamp
        stamp = seen.astimezone(dt.UTC).isoformat() if seen else ""
        # NPD's message is the kernel line without its timestamp: put the time it was seen back
        # in the syslog ISO shape the Xid parser reads, so time-to-cordon starts there.
        rows.append((f"npd/{ev.metadata.uid}", node, f"{stamp} {node} kernel: {ev.message}".strip(), "npd"))
    return receive_lines(engine, rows, at=dt.datetime.now(dt.UTC))


class XidInboxTrigger(BaseEventTrigger):
    def __init__(
        self,
        conn_id: str = "fleetval_db",
        poll_interval: float = 1.0,
        source: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger is untyped
        if source not in (None, *XID_SOURCES):
            raise ValueError(f"source must be one of {XID_SOURCES}, got {source!r}")
        self.conn_id = conn_id
        self.poll_interval = poll_interval
        self.source = source
        self.kubernetes_conn_id = kubernetes_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "fleetval_airflow.triggers.xid_inbox.XidInboxTrigger",
            {
                "conn_id": self.conn_id,
                "poll_interval": self.poll_interval,
                "source": self.source,
                "kubernetes_conn_id": self.kubernetes_conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow.sdk.bases.hook import BaseHook

        from fleetval.settings import Settings
        from fleetval.store.xid_inbox import dispatch_pending
        from fleetval_airflow.config import url_from_connection

        conn = await BaseHook.aget_connection(self.conn_id)
        engine = _engine(url_from_connection(conn))
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
            batch = await asyncio.to_thread(dispatch_pending, engine, now=dt.datetime.now(dt.UTC))
            if batch is not None:
                self.log.info("Xid inbox: %s new lines on %s nodes", batch["lines"], batch["nodes"])
                yield TriggerEvent(batch)  # type: ignore[no-untyped-call]  # untyped in Airflow
                return
            await asyncio.sleep(self.poll_interval)
