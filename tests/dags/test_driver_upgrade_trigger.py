"""The driver-upgrade trigger: serializes for the triggerer, and fires once per set of nodes that
reach `upgrade-done` on a driver they were not swept on — run with asyncio on a simulated fleet
through the configured backend (Airflow Connection + Variables from the environment)."""

from __future__ import annotations

import asyncio
import importlib
import json
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fleetval.sim.cluster import SimCluster
from fleetval.sim.spec import load_fleet_spec
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.suites import nccl
from fleetval_airflow.triggers.driver_upgrade import CLASSPATH, DriverUpgradeDoneTrigger
from tests.paths import ROOT

NETLAB = ROOT / "include" / "fleetval" / "sim" / "fleets" / "netlab.yaml"


def test_serialize_round_trips() -> None:
    from airflow.triggers.base import BaseEventTrigger

    trigger = DriverUpgradeDoneTrigger(poll_interval=5.0, backend="sim", sim_fleet="netlab")
    classpath, kwargs = trigger.serialize()
    assert classpath == CLASSPATH
    module, _, name = classpath.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    again = cls(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    json.dumps(kwargs)  # stored in the metadata DB as JSON
    # event-driven scheduling identifies the trigger by classpath + kwargs: stable across parses
    assert BaseEventTrigger.hash(classpath, kwargs) == BaseEventTrigger.hash(
        *DriverUpgradeDoneTrigger(poll_interval=5.0, backend="sim", sim_fleet="netlab").serialize()
    )
    with pytest.raises(ValueError, match="backend"):
        DriverUpgradeDoneTrigger(backend="slurm")


@pytest.fixture
def fleet(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimCluster]:
    url = f"sqlite:///{tmp_path}/fleetval.db"
    engine = make_engine(url)
    upgrade(engine)
    cluster = SimCluster.load(engine, load_fleet_spec(NETLAB.read_text()))
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLEETVAL_DB", json.dumps({"conn_type": "generic", "extra": {"url": url}})
    )
    monkeypatch.setenv("AIRFLOW_VAR_FLEETVAL_BACKEND", "sim")
    monkeypatch.setenv("AIRFLOW_VAR_FLEETVAL_SIM_FLEET", "netlab")
    yield cluster
    engine.dispose()


def upgraded(cluster: SimCluster, node: str, driver: str) -> None:
    cluster.set_labels(node, {nccl.DRIVER_VERSION_LABEL: driver, nccl.UPGRADE_STATE_LABEL: nccl.UPGRADE_DONE})


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():
        if loop.time() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


def test_fires_only_for_nodes_newly_upgrade_done(fleet: SimCluster) -> None:
    trigger = DriverUpgradeDoneTrigger(poll_interval=0.02)  # backend from the Variables
    events: list[dict[str, Any]] = []

    async def scenario() -> None:
        fleet.set_labels("r01-n08", {nccl.UPGRADE_STATE_LABEL: "pod-restart-required"})
        for node in ("r01-n01", "r01-n02"):
            upgraded(fleet, node, "570.172.08")

        async def consume() -> None:
            async for event in trigger.run():
                events.append(event.payload)

        task = asyncio.create_task(consume())
        try:
            await until(lambda: len(events) == 1)
            assert events[0]["nodes"] == ["r01-n01", "r01-n02"]
            assert events[0]["generations"] == {"r01-n01": "570.172.08", "r01-n02": "570.172.08"}
            await asyncio.sleep(0.2)  # ten more polls: nothing new, nothing fired
            assert len(events) == 1

            upgraded(fleet, "r01-n08", "570.172.08")  # the next node finishes its upgrade
            await until(lambda: len(events) == 2)
            assert events[1]["nodes"] == ["r01-n08"]

            # the sweep marks what it swept: still no repeat
            for node in ("r01-n01", "r01-n02", "r01-n08"):
                fleet.set_labels(node, {nccl.SWEPT_LABEL: "570.172.08"})
            await asyncio.sleep(0.2)
            assert len(events) == 2

            # the next driver upgrade makes a swept node pending again
            upgraded(fleet, "r01-n02", "575.51.03")
            await until(lambda: len(events) == 3)
            assert events[2]["nodes"] == ["r01-n02"] and events[2]["generations"] == {"r01-n02": "575.51.03"}
            await asyncio.sleep(0.1)
            assert len(events) == 3
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


def test_explicit_backend_overrides_the_variables(fleet: SimCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_VAR_FLEETVAL_SIM_FLEET", "no-such-fleet")
    upgraded(fleet, "r02-n01", "570.172.08")
    trigger = DriverUpgradeDoneTrigger(poll_interval=0.02, backend="sim", sim_fleet="netlab")

    async def first() -> dict[str, Any]:
        gen = trigger.run()
        try:
            return (await asyncio.wait_for(gen.__anext__(), timeout=5)).payload  # type: ignore[no-any-return]
        finally:
            await gen.aclose()

    assert asyncio.run(first())["nodes"] == ["r02-n01"]
