"""The driver-upgrade trigger: serializes for the triggerer, and fires once per set of nodes that
reach `upgrade-done` on a driver they were not swept on — run with asyncio against the simulated
cluster (`fleetval sim serve`, its GPU Operator upgrading drivers for real) through the
`kubernetes_default` connection; an unreachable API does not end the watcher."""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Callable
from typing import Any

import pytest

from fleetval.nccl import plan as nccl_plan
from fleetval_airflow.triggers.driver_upgrade import CLASSPATH, DriverUpgradeDoneTrigger
from tests.nccl_lab import NETLAB
from tests.simkube import SimKube

DRIVER = "570.172.08"


def test_serialize_round_trips() -> None:
    from airflow.triggers.base import BaseEventTrigger

    trigger = DriverUpgradeDoneTrigger(poll_interval=5.0)
    classpath, kwargs = trigger.serialize()
    assert classpath == CLASSPATH
    module, _, name = classpath.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    again = cls(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    json.dumps(kwargs)  # stored in the metadata DB as JSON
    # event-driven scheduling identifies the trigger by classpath + kwargs: stable across parses
    assert BaseEventTrigger.hash(classpath, kwargs) == BaseEventTrigger.hash(
        *DriverUpgradeDoneTrigger(poll_interval=5.0).serialize()
    )
    with pytest.raises(ValueError, match="poll_interval"):
        DriverUpgradeDoneTrigger(poll_interval=0)


def driver_of(kube: SimKube, node: str) -> str:
    return str(kube.node(node).metadata.labels[nccl_plan.DRIVER_VERSION_LABEL])


def mark_swept(kube: SimKube, nodes: list[str] | None = None) -> None:
    """What the sweep's gate leaves on the nodes it swept: the driver it swept them on."""
    for node in nodes or [n.name for n in kube.cluster.list_nodes()]:
        kube.cluster.set_labels(node, {nccl_plan.SWEPT_LABEL: driver_of(kube, node)})


def upgrade(kube: SimKube, driver: str) -> None:
    """Roll a new driver out through the GPU Operator: its upgrade controller takes it from there."""
    kube.custom.patch_cluster_custom_object(
        "nvidia.com", "v1", "clusterpolicies", "cluster-policy", {"spec": {"driver": {"version": driver}}}
    )


async def until(check: Callable[[], bool], timeout: float = 60.0) -> None:  # generous: a loaded CI machine
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():
        if loop.time() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


class CountedPolls(DriverUpgradeDoneTrigger):
    """Counts the polls that completed, so the test waits for one that saw a change rather than
    for a fixed time (a poll on a loaded machine can outlast any fixed sleep)."""

    polls = 0

    def _pending(self) -> dict[str, str]:
        pending = super()._pending()
        self.polls += 1
        return pending


async def polls_after_now(trigger: CountedPolls) -> None:
    """Until a poll that started after this call has completed (the one in flight may predate it)."""
    start = trigger.polls
    await until(lambda: trigger.polls >= start + 2)


def test_fires_only_for_nodes_newly_upgrade_done(sim_kube: Any) -> None:
    kube = sim_kube(NETLAB)
    nodes = sorted(n.name for n in kube.cluster.list_nodes())
    mark_swept(kube)  # every node swept on the driver it runs: nothing pending
    trigger = CountedPolls(poll_interval=0.05)
    events: list[dict[str, Any]] = []

    def announced() -> list[str]:
        return [n for e in events for n in e["nodes"]]

    async def scenario() -> None:
        async def consume() -> None:
            async for event in trigger.run():
                events.append(event.payload)

        task = asyncio.create_task(consume())
        try:
            await polls_after_now(trigger)
            assert events == []

            upgrade(kube, DRIVER)  # one node at a time (maxParallelUpgrades 1): several events
            await until(lambda: sorted(announced()) == nodes)
            assert len(announced()) == len(nodes)  # no node announced twice
            assert {g for e in events for g in e["generations"].values()} == {DRIVER}
            assert all(driver_of(kube, n) == DRIVER for n in nodes)

            mark_swept(kube)  # the sweep marks what it swept: no repeat
            count = len(events)
            await polls_after_now(trigger)
            assert len(events) == count

            # removing the swept label by hand asks for a new sweep of that node
            kube.cluster.set_labels("r01-n02", {nccl_plan.SWEPT_LABEL: None})
            await until(lambda: len(events) == count + 1)
            assert events[-1]["nodes"] == ["r01-n02"] and events[-1]["generations"] == {"r01-n02": DRIVER}
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


def test_an_unreachable_api_does_not_end_the_watcher(sim_kube: Any) -> None:
    first = sim_kube(NETLAB)
    first.server.stop()  # the API goes away
    trigger = DriverUpgradeDoneTrigger(poll_interval=0.05)

    async def scenario() -> dict[str, Any]:
        gen = trigger.run()
        try:
            pending = asyncio.ensure_future(gen.__anext__())
            await asyncio.sleep(0.5)  # polls fail, the watcher keeps going
            assert not pending.done()
            sim_kube(NETLAB)  # the API is back (same connection): a fresh operator, every node done
            return (await asyncio.wait_for(pending, timeout=20)).payload  # type: ignore[no-any-return]
        finally:
            await gen.aclose()

    event = asyncio.run(scenario())
    assert len(event["nodes"]) == 16
