"""`DriverUpgradeDoneTrigger`: fires when GPU nodes finish a driver upgrade and have not been
NCCL-swept on their new driver yet.

The GPU Operator's upgrade controller moves each node through the states of the node label
`nvidia.com/gpu-driver-upgrade-state` (`upgrade-required` → `cordon-required` → … →
`uncordon-required` → `upgrade-done`, or `upgrade-failed`; NVIDIA's docs and k8s-operator-libs
`pkg/upgrade/consts.go`). The trigger lists the GPU nodes of the `kubernetes_default` cluster
every `poll_interval` seconds and fires `{"nodes": [...], "generations": {node: driver},
"observed_at": ...}` for nodes that are `upgrade-done` and whose `fleetval.io/nccl-swept-driver`
label is not their current driver version (GPU feature discovery's
`nvidia.com/cuda.driver-version.full`).

No repeats for the same nodes: the sweep labels every node it swept with the driver it swept
(so a node is pending again only after its next upgrade), and while a sweep is still running the
trigger remembers what it already announced (node → driver). The memory is dropped for nodes
that stop being pending, so removing the swept label by hand asks for a new sweep. After a
triggerer restart a still-running sweep's nodes may be announced once more; the DAG's plan
skips nodes already swept on that driver.

A failed poll (API unreachable) is logged and retried at the next interval: the watcher outlives
API outages. The client is built for every poll, so a changed connection is picked up.

Note that a freshly installed operator also labels nodes `upgrade-done`: the first time the
trigger runs it announces every such node (one baseline sweep of the fleet).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

# fleetval is imported where used: DAG files import this module at parse time.

CLASSPATH = "fleetval_airflow.triggers.driver_upgrade.DriverUpgradeDoneTrigger"


class DriverUpgradeDoneTrigger(BaseEventTrigger):
    """See module doc."""

    def __init__(self, poll_interval: float = 60.0, kubernetes_conn_id: str = "kubernetes_default") -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger is untyped
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval}")
        self.poll_interval = poll_interval
        self.kubernetes_conn_id = kubernetes_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            CLASSPATH,
            {"poll_interval": self.poll_interval, "kubernetes_conn_id": self.kubernetes_conn_id},
        )

    def _pending(self) -> dict[str, str]:
        """Runs in a worker thread: the connection is read with the sync SDK calls."""
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        from fleetval.k8s.cluster import KubeCluster
        from fleetval.nccl.plan import pending_upgrade_nodes
        from fleetval.settings import Settings

        core = KubernetesHook(conn_id=self.kubernetes_conn_id).core_v1_client
        cluster = KubeCluster(core, rack_label=Settings.from_env().rack_label)
        return pending_upgrade_nodes(cluster.list_nodes())

    async def run(self) -> AsyncIterator[TriggerEvent]:
        announced: dict[str, str] = {}
        while True:
            try:
                pending = await asyncio.to_thread(self._pending)
            except Exception as exc:  # an API outage must not end the watcher
                self.log.warning("listing the GPU nodes failed, retrying in %ss: %s", self.poll_interval, exc)
                await asyncio.sleep(self.poll_interval)
                continue
            announced = {n: g for n, g in announced.items() if pending.get(n) == g}
            new = {n: g for n, g in sorted(pending.items()) if n not in announced}
            if new:
                announced.update(new)
                self.log.info(
                    "driver upgrade done on %d node(s) not yet swept: %s", len(new), sorted(new)[:20]
                )
                event = {
                    "nodes": sorted(new),
                    "generations": new,
                    "observed_at": dt.datetime.now(dt.UTC).isoformat(),
                }
                yield TriggerEvent(event)  # type: ignore[no-untyped-call]  # untyped in Airflow
            await asyncio.sleep(self.poll_interval)
