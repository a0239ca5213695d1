"""Pure parts of the NCCL task module: which nodes an asset-triggered run sweeps, and which range
a backfill run covers (params, else the data interval, else the day before the run)."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

from fleetval_airflow.nccl_tasks import _event_nodes, backfill_range

UTC = dt.UTC


def test_asset_events_name_the_nodes_to_sweep() -> None:
    def event(nodes: list[str] | None) -> SimpleNamespace:
        payload = {"nodes": nodes, "generations": {}} if nodes is not None else {}
        return SimpleNamespace(extra={"from_trigger": True, "payload": payload})

    ctx = {
        "triggering_asset_events": {
            "fleetval_driver_upgrade_done": [
                event(["r01-n02", "r01-n01"]),
                event(["r01-n01", "r02-n07"]),
                event(None),
            ]
        }
    }
    assert _event_nodes(ctx) == ["r01-n01", "r01-n02", "r02-n07"]
    assert _event_nodes({}) == []  # a manual run


def _ctx(start: dt.datetime | None, end: dt.datetime | None) -> dict[str, object]:
    run_after = dt.datetime(2026, 11, 29, 21, 0, tzinfo=UTC)
    return {
        "data_interval_start": start,
        "data_interval_end": end,
        "dag_run": SimpleNamespace(run_after=run_after),
    }


def test_backfill_range() -> None:
    day = dt.datetime(2026, 11, 20, tzinfo=UTC)
    interval = _ctx(day, day + dt.timedelta(days=1))
    # dates given: both days included, whatever the interval
    assert backfill_range({"since": "2026-11-01", "until": "2026-11-03"}, interval) == (
        dt.datetime(2026, 11, 1, tzinfo=UTC),
        dt.datetime(2026, 11, 4, tzinfo=UTC),
    )
    # Airflow backfill / schedule: the data interval
    assert backfill_range({"since": None, "until": None}, interval) == (day, day + dt.timedelta(days=1))
    # one bound given: the interval supplies the other
    assert backfill_range({"since": "2026-11-19", "until": None}, interval) == (
        dt.datetime(2026, 11, 19, tzinfo=UTC),
        day + dt.timedelta(days=1),
    )
    # no interval (a run without a logical date): the day before the run
    since, until = backfill_range({}, _ctx(None, None))
    assert until == dt.datetime(2026, 11, 29, 21, 0, tzinfo=UTC) and until - since == dt.timedelta(days=1)
