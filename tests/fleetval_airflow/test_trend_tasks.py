"""The early-warning task functions as Airflow runs them (their `@task` function, with the task's
context, store and settings put in place): the weekly sweep's device trends against a real
Prometheus, the skip without one, and the NCCL sweep's link trends from the stored sweeps."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from fleetval.settings import Settings
from fleetval.store.repository import Store
from fleetval_airflow import config, trend_tasks
from tests.fleetval.trends.dcgm_prometheus import Fleet, dcgm_prometheus, replayed_fleet
from tests.fleetval.trends.nccl_history import store_sweeps

AT = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1)
BUSY = "gpu-node-busy.example"  # in the plan (busy: not swept by r2), no exporter series


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return replayed_fleet(AT, seed=1)


@pytest.fixture(scope="module")
def prometheus_url(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dcgm_prometheus(tmp_path_factory.mktemp("prometheus"), fleet) as url:
        yield url


@pytest.fixture
def airflow_task(store: Store, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Run the tasks on `store` at the sweep time AT, with FLEETVAL_PROMETHEUS_URL = the argument."""
    monkeypatch.setattr(config, "store", lambda: store)
    monkeypatch.setattr(
        trend_tasks, "get_current_context", lambda: {"dag_run": SimpleNamespace(run_after=AT)}
    )

    def with_prometheus(url: str) -> None:
        monkeypatch.setattr(config, "settings", lambda: Settings.from_env({"FLEETVAL_PROMETHEUS_URL": url}))

    return with_prometheus


def _weekly_run(store: Store, fleet: Fleet) -> int:
    nodes = [*fleet.nodes, BUSY]
    plan = {
        "waves": [list(fleet.nodes)],
        "skipped": {BUSY: "busy (8 GPU pods)"},
        "rack_of": dict.fromkeys(nodes, "r1"),
        "fleet_size": len(nodes),
        "rack_sizes": {"r1": len(nodes)},
        "gpus": dict.fromkeys(nodes, 8),
    }
    return store.ensure_run(
        "weekly_health_sweep/scheduled__x", suite="weekly", backend="test", meta={"plan": plan}
    )


def _trends(store: Store, run: int, criterion: str) -> dict[str, Any]:
    return {r["subject"]: r for r in store.verdicts(run, criterion=criterion)}


def test_without_a_prometheus_the_device_trends_are_skipped_with_one_line_and_no_verdict(
    store: Store, fleet: Fleet, airflow_task: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    airflow_task("")
    run = _weekly_run(store, fleet)
    out = trend_tasks.judge_device_trends.function(run)
    assert out == {"skipped": "FLEETVAL_PROMETHEUS_URL is not set"}
    assert capsys.readouterr().out.strip().splitlines() == [
        "device trends skipped: FLEETVAL_PROMETHEUS_URL is not set (no D-DEV-TREND-01 verdict)"
    ]
    assert store.verdicts(run) == []


def test_the_weekly_device_trends_judge_every_gpu_node_of_the_plan_from_prometheus(
    store: Store, fleet: Fleet, prometheus_url: str, airflow_task: Callable[[str], None]
) -> None:
    airflow_task(prometheus_url)
    run = _weekly_run(store, fleet)
    out = trend_tasks.judge_device_trends.function(run)
    stored = _trends(store, run, "D-DEV-TREND-01")
    assert {s: r["result"] for s, r in stored.items()} == {
        fleet.degrading: "warn",
        **dict.fromkeys(fleet.healthy, "pass"),
        BUSY: "inconclusive",  # judged though r2 skipped it; no series in Prometheus
    }
    assert {r["action"] for r in stored.values()} == {"record_only"}
    assert out["verdicts"] == {"inconclusive": 1, "pass": 2, "warn": 1}
    assert out["warned"] and out["warned"][0].startswith(fleet.degrading)
    # a retry reads the same sweeps and replaces, never duplicates
    trend_tasks.judge_device_trends.function(run)
    assert len(store.verdicts(run, criterion="D-DEV-TREND-01")) == 4


def test_prometheus_down_at_sweep_time_leaves_every_node_inconclusive_and_the_task_green(
    store: Store, fleet: Fleet, airflow_task: Callable[[str], None]
) -> None:
    from tests.metrics.test_prometheus import _free_port

    airflow_task(f"http://127.0.0.1:{_free_port()}")
    run = _weekly_run(store, fleet)
    out = trend_tasks.judge_device_trends.function(run)
    assert out["verdicts"] == {"inconclusive": 4}
    assert all("unreachable" in r["reason"] for r in store.verdicts(run))


def test_the_nccl_sweeps_link_trends_judge_what_the_sweep_measured(
    store: Store, airflow_task: Callable[[str], None]
) -> None:
    runs = store_sweeps(store)
    out = trend_tasks.judge_link_trends.function(runs[-1])
    stored = _trends(store, runs[-1], "D-NET-NCCL-TREND-01")
    assert {s: r["result"] for s, r in stored.items()} == {
        "decl": "warn",
        "flat": "pass",
        "decl+flat": "inconclusive",
        "new": "inconclusive",
    }
    assert out["subjects"] == 4 and out["verdicts"] == {"inconclusive": 2, "pass": 1, "warn": 1}
