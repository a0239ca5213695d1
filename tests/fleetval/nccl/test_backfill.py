"""Baseline backfill: a baseline re-derived from stored measurements, past runs re-judged under a
new run, old verdicts untouched, a report of what changed, idempotent on its run key."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from fleetval.nccl import backfill as nccl_backfill
from fleetval.nccl.judge_stored import METRIC
from fleetval.store import nccl_queries
from fleetval.store.models import Baseline, VerdictRow
from fleetval.store.repository import Store
from tests.nccl_lab import PROFILE, Lab, sweep

NODES = ["r01-n01", "r01-n02", "r01-n03", "r02-n02", "r02-n04"]  # r01-n02: NVLink degraded


def spec_sheet_baseline(store: Store, scope: str, gbps: float) -> int:
    """The mistake the NCCL criteria rule out: a baseline typed in from a datasheet."""
    baseline_id, _ = store.add_baseline_candidate(
        profile=PROFILE,
        metric=METRIC,
        scope=scope,
        value=gbps,
        unit="GB/s",
        stats={},
        source={"spec": 1},
    )
    store.promote_baseline(baseline_id)
    return baseline_id


def snapshot(store: Store, run_id: int) -> list[tuple[Any, ...]]:
    return sorted(
        (r["id"], r["criterion"], r["subject"], r["result"], r["baseline_id"], r["rule_id"])
        for r in store.verdicts(run_id)
    )


@pytest.fixture
def swept(store: Store) -> tuple[Store, int, int]:
    old_baseline = spec_sheet_baseline(store, "intra-8", 600.0)
    spec_sheet_baseline(store, "inter-2x8", 370.0)
    run_id = sweep(store, Lab(), run_key="sweep/1", nodes=NODES)
    return store, run_id, old_baseline


def window() -> tuple[dt.datetime, dt.datetime]:
    now = dt.datetime.now(dt.UTC)
    return now - dt.timedelta(hours=1), now + dt.timedelta(hours=1)


def test_backfill_rederives_rejudges_and_reports_without_overwriting(swept: tuple[Store, int, int]) -> None:
    store, old_run, old_baseline = swept
    old_rows = snapshot(store, old_run)
    intra_before = {r[2]: r[3] for r in old_rows if r[1] == "D-NET-NCCL-01"}
    assert set(intra_before.values()) == {"fail"}  # 480 GB/s nodes judged against 600: all "fail"
    since, until = window()

    report = nccl_backfill.rederive_and_rejudge(
        store, profile=PROFILE, scope="intra-8", since=since, until=until, promote=True, run_key="bf/1"
    )
    assert report.status == "ok"
    assert report.baseline is not None
    assert report.baseline["value_gbps"] == pytest.approx(480, rel=0.03)
    assert report.baseline["excluded_outliers"] == ["r01-n02"]  # the sick node does not set the bar
    assert report.baseline["version"] == 2 and report.baseline["status"] == "promoted"

    changed = {(c.criterion, c.subject): c for c in report.changes}
    healthy = {"r01-n01", "r01-n03", "r02-n02", "r02-n04"}
    assert set(changed) == {("D-NET-NCCL-01", n) for n in healthy}  # r01-n02 stays a fail
    for c in changed.values():
        assert c.old["run_id"] == old_run and c.old["result"] == "fail"
        assert c.old["baseline_id"] == old_baseline and c.old["baseline_version"] == 1
        assert c.new["result"] == "pass" and c.new["baseline_version"] == 2
        assert c.new["run_id"] != old_run
    assert report.unchanged > 0

    # nothing overwritten: the old run's verdicts are byte-for-byte what they were
    assert snapshot(store, old_run) == old_rows
    [rejudged] = report.rejudged_runs
    assert rejudged["old_run_id"] == old_run and rejudged["subjects"] == len(NODES)
    new_rows = store.verdicts(rejudged["new_run_id"])
    assert {r["subject"] for r in new_rows if r["criterion"] == "D-NET-NCCL-01"} == set(NODES)
    assert nccl_queries.run_by_id(store, rejudged["new_run_id"])["suite"] == "baseline_backfill"  # type: ignore[index]
    # the spec-sheet baseline is retired, not deleted
    series = nccl_queries.baselines(store, profile=PROFILE, metric=METRIC, scope="intra-8")
    assert [(b["version"], b["status"]) for b in series] == [(1, "retired"), (2, "promoted")]

    # idempotent: the same backfill run again allocates no new baseline and no new verdict
    counts = (store.count(Baseline), store.count(VerdictRow))
    again = nccl_backfill.rederive_and_rejudge(
        store, profile=PROFILE, scope="intra-8", since=since, until=until, promote=True, run_key="bf/1"
    )
    assert (store.count(Baseline), store.count(VerdictRow)) == counts
    assert again.baseline == {**report.baseline}
    assert len(again.changes) == len(report.changes)

    # a second backfill (not promoting) compares with the original run again, never with a
    # backfill's re-judgement; its candidate waits for an explicit promotion
    later = nccl_backfill.rederive_and_rejudge(
        store, profile=PROFILE, scope="intra-8", since=since, until=until, promote=False, run_key="bf/2"
    )
    assert [r["old_run_id"] for r in later.rejudged_runs] == [old_run]
    assert {(c.criterion, c.subject) for c in later.changes} == set(changed)
    assert later.baseline is not None and (later.baseline["version"], later.baseline["status"]) == (
        3,
        "candidate",
    )
    assert store.promoted_baseline(profile=PROFILE, metric=METRIC, scope="intra-8")["version"] == 2  # type: ignore[index]


def test_backfill_of_an_empty_range_derives_nothing(swept: tuple[Store, int, int]) -> None:
    store, _, _ = swept
    since = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    report = nccl_backfill.rederive_and_rejudge(
        store, profile=PROFILE, scope="intra-8", since=since, until=since + dt.timedelta(days=1), promote=True
    )
    assert report.status == "no_measurements" and report.changes == [] and report.baseline is None
    assert store.count(Baseline) == 2
    with pytest.raises(ValueError, match="empty range"):
        nccl_backfill.rederive_and_rejudge(
            store, profile=PROFILE, scope="intra-8", since=since, until=since, promote=False
        )


def test_profile_scopes_lists_measured_series(swept: tuple[Store, int, int]) -> None:
    store, _, _ = swept
    since, until = window()
    assert nccl_backfill.profile_scopes(store, since=since, until=until) == [
        (PROFILE, "inter-2x8"),
        (PROFILE, "intra-8"),
    ]
