"""`MPIJobTrigger`: waits in the triggerer while Kueue admits a set of MPIJobs and they run.

Fires once, when every job has an outcome (`Succeeded`, `Failed`, `NotAdmitted` past its
admission deadline, `Overdue` past its run deadline, `Gone`; see `fleetval_airflow.mpijobs`):
`{"status": "done", "jobs": [JobRef...], "outcomes": {name: outcome}}`. An API error fires
`{"status": "error", "message": ...}`: the task fails and its retry reattaches to the same jobs.
The jobs are read with the `kubernetes_default` connection's client, in a worker thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

# fleetval_airflow.mpijobs (the kubernetes client, the store) is imported where used: DAG files
# import this module at parse time.

CLASSPATH = "fleetval_airflow.triggers.mpijob.MPIJobTrigger"


class MPIJobTrigger(BaseTrigger):
    def __init__(
        self,
        jobs: list[dict[str, Any]],
        poll_interval: float | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
    ) -> None:
        from fleetval_airflow.mpijobs import POLL_S, JobRef

        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger is untyped
        if not jobs:
            raise ValueError("MPIJobTrigger needs at least one job")
        self.jobs = [JobRef.from_json(j).to_json() for j in jobs]
        self.poll_interval = POLL_S if poll_interval is None else poll_interval
        self.kubernetes_conn_id = kubernetes_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            CLASSPATH,
            {
                "jobs": self.jobs,
                "poll_interval": self.poll_interval,
                "kubernetes_conn_id": self.kubernetes_conn_id,
            },
        )

    def _custom(self) -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        return KubernetesHook(conn_id=self.kubernetes_conn_id).custom_object_client

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from fleetval_airflow.mpijobs import JobRef, backoff, poll

        refs = [JobRef.from_json(j) for j in self.jobs]
        try:
            custom = await asyncio.to_thread(self._custom)
            attempt = 0
            while True:
                outcomes = await asyncio.to_thread(poll, custom, refs, time.time())
                if outcomes is not None:
                    self.log.info("MPIJobs done: %s", outcomes)
                    event = {"status": "done", "jobs": self.jobs, "outcomes": outcomes}
                    yield TriggerEvent(event)  # type: ignore[no-untyped-call]  # untyped in Airflow
                    return
                await asyncio.sleep(backoff(attempt, self.poll_interval))
                attempt += 1
        except Exception as exc:  # the task fails; its retry reattaches to the same jobs
            message = f"{type(exc).__name__}: {exc}"[:500]
            self.log.warning("waiting for MPIJobs failed: %s", message)
            event = {"status": "error", "message": message, "jobs": self.jobs}
            yield TriggerEvent(event)  # type: ignore[no-untyped-call]
