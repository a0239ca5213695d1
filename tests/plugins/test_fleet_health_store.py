"""fleetval.store.fleet_health: what the page shows, on PostgreSQL and SQLite, from verdicts written
through the store's own write path."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa

from fleetval.records import Result, Verdict
from fleetval.store import fleet_health as fh
from fleetval.store.repository import MeasurementIn, ProbeIn, Store
from tests.plugins.reference_cells import reference_cells

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def v(criterion: str, subject: str, result: str, **evidence: Any) -> Verdict:
    return Verdict(criterion, subject, Result(result), "none", "test.rule", f"{result} {subject}", evidence)


def run(
    store: Store,
    key: str,
    suite: str,
    verdicts: list[Verdict],
    *,
    at: dt.datetime,
    node: str | None = None,
    meta: dict[str, Any] | None = None,
) -> int:
    run_id = store.ensure_run(key, suite=suite, backend="test", meta=meta)
    if verdicts:
        store.add_verdicts(run_id, verdicts, node=node)
    with store.engine.begin() as conn:  # what happened then: the store stamps now
        conn.execute(sa.text("UPDATE runs SET started_at = :at WHERE id = :r"), {"at": at, "r": run_id})
        conn.execute(
            sa.text("UPDATE verdicts SET judged_at = :at WHERE run_id = :r"), {"at": at, "r": run_id}
        )
    return run_id


def weekly(
    store: Store,
    key: str,
    results: dict[str, str],
    *,
    at: dt.datetime,
    racks: dict[str, str] | None = None,
    skipped: dict[str, str] | None = None,
) -> int:
    plan = {
        "rack_of": racks or dict.fromkeys(results, "r1"),
        "skipped": skipped or {},
        "waves": [list(results)],
    }
    run_id = run(store, key, "weekly", [], at=at, meta={"plan": plan})
    for node, result in results.items():
        store.add_verdicts(
            run_id, [v("D-DEV-03", node, result), v("D-DEV-04", f"GPU-{node}-0", "pass")], node=node
        )
    run(store, key, "weekly", [], at=at)
    return run_id


def test_the_heatmap_cell_is_the_worst_of_the_newest_run_per_layer(store: Store) -> None:
    weekly(store, "w1", {"a": "fail", "b": "pass", "c": "pass"}, at=NOW - dt.timedelta(days=14))
    week2 = weekly(
        store,
        "w2",
        {"a": "pass", "b": "pass"},
        at=NOW - dt.timedelta(days=7),
        racks={"a": "r1", "b": "r1", "c": "r2"},
        skipped={"c": "busy (1 GPU pods)"},
    )
    # a GPU record failing inside an otherwise passing run makes the node's device cell fail
    store.add_verdicts(week2, [v("D-DEV-04", "GPU-b-3", "fail")], node="b")
    # the network layer: an intra-node verdict, an isolation blame (subject = node, no node column)
    # and a pair verdict (neither node's alone)
    nccl = run(
        store, "n1", fh.NCCL_SUITE, [v("D-NET-NCCL-01", "a", "pass")], at=NOW - dt.timedelta(days=2), node="a"
    )
    store.add_verdicts(nccl, [v("D-NET-NCCL-02", "c", "fail"), v("D-NET-NCCL-02", "a+b", "fail")])

    grid = fh.fleet_grid(store.engine, now=NOW)

    assert grid.inventory.rack_of == {"a": "r1", "b": "r1", "c": "r2"}
    assert grid.inventory.skipped == {"c": "busy (1 GPU pods)"}
    assert {n: {lay: c.result for lay, c in cells.items()} for n, cells in grid.cells.items()} == {
        "a": {"device": "pass", "network": "pass"},  # the newer pass wins over last week's fail
        "b": {"device": "fail"},
        "c": {"device": "pass", "network": "fail"},  # not swept this week: last week's r2 is its latest
    }
    assert grid.layers == ("device", "network")
    assert grid.worst("c") == "fail" and grid.worst("zzz") is None
    assert grid.counts()["network"] == {"pass": 1, "fail": 1, "untested": 1}
    assert "a+b" not in grid.cells


def test_verdicts_older_than_the_horizon_are_not_the_fleets_health(store: Store) -> None:
    weekly(store, "old", {"a": "fail", "b": "pass"}, at=NOW - dt.timedelta(days=200))
    weekly(
        store, "new", {"b": "pass"}, at=NOW - dt.timedelta(days=1), racks={"a": "r1", "b": "r1", "c": "r1"}
    )

    grid = fh.fleet_grid(store.engine, horizon_days=90, now=NOW)
    assert set(grid.cells) == {"b"}
    assert set(fh.fleet_grid(store.engine, horizon_days=None, now=NOW).cells) == {"a", "b"}

    cov = fh.coverage(store.engine, horizon_days=90, now=NOW)
    assert set(cov.last_r2) == {"b"} and round(cov.age_days("b") or 0) == 1
    assert cov.stale == ["a"]  # tested, but not within the horizon
    assert cov.never == ["c"]
    assert cov.age_days("c") is None


def test_an_error_is_not_an_r2_and_onboarding_r2_counts(store: Store) -> None:
    weekly(store, "w", {"a": "error", "b": "fail"}, at=NOW - dt.timedelta(days=3))
    run(
        store,
        "rack_onboarding/1",
        "rack_onboarding",
        [v("D-DEV-01", "a", "warn")],
        at=NOW - dt.timedelta(days=10),
        node="a",
    )

    cov = fh.coverage(store.engine, now=NOW)
    assert cov.last_r2["a"]["criterion"] == "D-DEV-01" and cov.last_r2["a"]["result"] == "warn"
    assert cov.last_r2["b"]["result"] == "fail"  # a failed r2 is still an r2
    assert cov.never == []


def test_without_a_weekly_plan_the_inventory_is_the_nodes_the_store_names(store: Store) -> None:
    run(store, "x1", "xid", [v("D-DEV-06", "n7", "fail")], at=NOW, node="n7")
    store.record_node_event(
        "x1/n7/cordon", node="n7", kind="cordon", reason="Xid 79", dry_run=False, details={"rack": "rack-9"}
    )
    grid = fh.fleet_grid(store.engine, now=NOW)
    assert grid.inventory.rack_of == {"n7": "rack-9"} and grid.inventory.source is None
    assert grid.cells["n7"]["device"].result == "fail"


def test_a_node_page_has_its_history_events_and_time_to_cordon(store: Store) -> None:
    weekly(store, "w", {"a": "pass"}, at=NOW - dt.timedelta(days=9))
    xid = run(
        store,
        "xid/1",
        "xid",
        [
            v("D-DEV-06", "a", "fail"),
            Verdict(
                "D-DEV-05",
                "a",
                Result.PASS,
                "none",
                "xid.time_to_cordon",
                "cordoned 2.3s after the first Xid",
                {"time_to_cordon_s": 2.312, "dry_run": False},
            ),
        ],
        at=NOW - dt.timedelta(days=1),
        node="a",
    )
    store.record_node_event(
        "xid/1/a/cordon",
        node="a",
        kind="cordon",
        reason="Xid 79",
        dry_run=False,
        run_id=xid,
        details={"rack": "r1"},
        at=NOW - dt.timedelta(days=1),
    )
    run(store, "other", "xid", [v("D-DEV-06", "b", "fail")], at=NOW, node="b")

    page = fh.node_page(store.engine, "a")
    assert page.rack == "r1"
    assert [r["criterion"] for r in page.verdicts][:2] in (["D-DEV-06", "D-DEV-05"], ["D-DEV-05", "D-DEV-06"])
    assert {r["subject"] for r in page.verdicts} == {"a", "GPU-a-0"}  # nothing of node b
    assert [(t["seconds"], t["run_key"]) for t in page.time_to_cordon] == [(2.312, "xid/1")]
    assert [(e["kind"], e["run_key"]) for e in page.events] == [("cordon", "xid/1")]
    assert not page.truncated
    assert fh.node_page(store.engine, "a", limit=1).truncated


def _nccl_probe(
    run_key: str,
    subject: str,
    nodes: tuple[str, ...],
    scope: str,
    factor: float,
    verdicts: tuple[Verdict, ...] = (),
) -> list[ProbeIn]:
    probes = []
    for r in range(3):
        ms = tuple(
            MeasurementIn(
                nodes[0],
                "nccl.busbw",
                size / 1e7 * factor,
                attrs={"size": size, "repeat": r, "scope": scope, "profile": "p"},
            )
            for size in (1 << 20, 1 << 25, 1 << 30)
        )
        probes.append(
            ProbeIn(
                f"{run_key}/{subject}/r{r}",
                "nccl",
                "raw\n",
                nodes,
                measurements=ms,
                verdicts=verdicts if r == 2 else (),
            )
        )
    return probes


def test_the_nccl_curve_is_the_subjects_newest_repeats_against_the_promoted_baseline(store: Store) -> None:
    stats = {
        "sizes": [{"size": 1 << 30, "min_gbps": 100.0, "median_gbps": 107.0, "max_gbps": 110.0}],
        "headline": {"busbw_gbps": 107.0, "min_size_bytes": 1 << 30},
    }
    bid, _ = store.add_baseline_candidate(
        profile="p", metric="nccl.busbw", scope="intra-8", value=107.0, unit="GB/s", stats=stats, source={}
    )
    store.promote_baseline(bid)
    against = {"profile": "p", "scope": "intra-8", "baseline_id": bid}
    for key, factor, result in (("old", 1.0, "pass"), ("new", 0.5, "fail")):
        run_id = store.ensure_run(key, suite=fh.NCCL_SUITE, backend="test")
        repeats = [{"repeat": r, "probe_key": f"{key}/a/r{r}"} for r in range(3)]
        verdict = Verdict(
            "D-NET-NCCL-01",
            "a",
            Result(result),
            "none",
            "nccl.busbw",
            result,
            {"repeats": repeats, "min_ratio": 0.9},
            against,
        )
        store.ingest(run_id, _nccl_probe(key, "a", ("a",), "intra-8", factor, (verdict,)))

    curve = fh.nccl_curve(store.engine, profile="p", scope="intra-8", subject="a")
    assert curve.run_key == "new" and curve.via is None
    assert len(curve.points) == 9 and {p["repeat"] for p in curve.points} == {0, 1, 2}
    assert max(p["busbw_gbps"] for p in curve.points) == (1 << 30) / 1e7 * 0.5  # the new run's, not the old
    assert (
        curve.baseline is not None and curve.baseline["version"] == 1 and curve.baseline["min_ratio"] == 0.9
    )
    assert curve.baseline["min_size_bytes"] == 1 << 30
    assert [x["result"] for x in curve.verdicts] == ["fail"]

    listing = fh.nccl_subjects(store.engine, profile="p", scope="intra-8")
    assert listing["run"]["run_key"] == "new" and listing["subjects"][0]["subject"] == "a"
    assert fh.nccl_scopes(store.engine) == [
        {"profile": "p", "scope": "intra-8", "promoted": {"version": 1, "value": 107.0}}
    ]


def test_a_node_located_by_pair_testing_shows_its_worst_pair(store: Store) -> None:
    against = {"profile": "p", "scope": "inter-2x8"}
    run_id = store.ensure_run("sweep", suite=fh.NCCL_SUITE, backend="test")
    for pair, result in (("a+b", "pass"), ("c+a", "fail")):
        repeats = [{"repeat": r, "probe_key": f"sweep/{pair}/r{r}"} for r in range(3)]
        verdict = Verdict(
            "D-NET-NCCL-02", pair, Result(result), "none", "nccl.busbw", result, {"repeats": repeats}, against
        )
        store.ingest(run_id, _nccl_probe("sweep", pair, tuple(pair.split("+")), "inter-2x8", 1.0, (verdict,)))
    store.add_verdicts(
        run_id,
        [
            Verdict(
                "D-NET-NCCL-02",
                "a",
                Result.FAIL,
                "none",
                "nccl.isolation",
                "located by pair testing",
                {},
                against,
            )
        ],
    )
    curve = fh.nccl_curve(store.engine, profile="p", scope="inter-2x8", subject="a")
    assert curve.via == "c+a" and len(curve.points) == 9


def test_the_criteria_matrix_has_every_criterion_its_implementation_and_newest_results(store: Store) -> None:
    weekly(store, "w1", {"a": "fail"}, at=NOW - dt.timedelta(days=8))
    weekly(store, "w2", {"a": "pass", "b": "warn"}, at=NOW - dt.timedelta(days=1))
    rows = {r.id: r for r in fh.criteria_matrix(store.engine)}
    assert set(rows) == {c.id for c in fh.CRITERIA}
    assert rows["D-DEV-03"].counts == {"pass": 1, "warn": 1} and rows["D-DEV-03"].run["run_key"] == "w2"
    assert rows["D-DEV-03"].implemented_by
    assert rows["D-SCHED-01"].run is None and rows["D-SCHED-01"].counts == {}
    unimplemented = [c.id for c in fh.CRITERIA if c.id not in fh.IMPLEMENTED_BY]
    assert all(rows[c].implemented_by == "" for c in unimplemented)


def test_kueue_and_onboarding_runs_newest_first_with_their_reports(store: Store) -> None:
    for i in range(3):
        run(
            store,
            f"kueue/{i}",
            fh.KUEUE_SUITE,
            [v("D-SCHED-06", "kueue/d-sched-06-gang", "pass" if i < 2 else "fail")],
            at=NOW + dt.timedelta(minutes=i),
        )
    kueue = fh.kueue_results(store.engine)
    assert [r.run_key for r in kueue] == ["kueue/2", "kueue/1", "kueue/0"]
    assert kueue[0].counts() == {"fail": 1} and kueue[1].verdicts == []  # the newest carries its verdicts
    assert fh.run_result_counts(store.engine, [kueue[1].id]) == {kueue[1].id: {"pass": 1}}

    assert fh.onboarding_reports(store.engine) == []
    run(
        store,
        "rack_onboarding/1",
        "rack_onboarding",
        [v("D-DEV-01", "a", "pass")],
        at=NOW,
        node="a",
        meta={"request": {"rack": "r1"}, "report": {"rack": "r1", "in_service": 1}},
    )
    run(store, "rack_onboarding/2", "onboarding_rack", [], at=NOW, meta={"summary": "all held"})
    reports = fh.onboarding_reports(store.engine)
    assert [fh.report_of(r) for r in reports] == ["all held", {"rack": "r1", "in_service": 1}]


def test_natural_order_of_racks_and_nodes() -> None:
    assert sorted(["r10-n2", "r2-n10", "r2-n9"], key=fh.natural_key) == ["r2-n9", "r2-n10", "r10-n2"]


def test_the_incremental_cells_equal_a_full_recomputation_after_each_change(store: Store) -> None:
    """FleetCells folds in only the runs judged since its last look; after each kind of write the
    result is what computing everything again gives."""
    cache = fh.FleetCells(store.engine)

    def full() -> fh.Cells:
        from_run = cache.get().from_run
        computed = fh.latest_cells(store.engine, from_run=from_run)
        assert computed == reference_cells(store, from_run=from_run)  # the SQL means what it says
        return computed

    def refreshed() -> tuple[fh.Cells, str]:
        got = cache.get()
        return got, cache.last_refresh

    first = store.ensure_run("w1", suite="weekly", backend="test")
    for node in ("a", "b"):
        store.add_verdicts(first, [v("D-DEV-03", node, "pass")], node=node)
    got, how = refreshed()
    assert how == "full" and got == full()
    got, how = refreshed()
    assert how in ("cached", "delta") and got == full()

    second = store.ensure_run("w2", suite="weekly", backend="test")  # a new run: b fails
    store.add_verdicts(second, [v("D-DEV-03", "b", "fail")], node="b")
    got, how = refreshed()
    assert how == "delta" and got.cells["b"]["device"].result == "fail"
    assert got == full()

    # the same run judged again (a retried task upserts in place): b passes after all
    store.add_verdicts(second, [v("D-DEV-03", "b", "pass")], node="b")
    got = cache.get()
    assert got.cells["b"]["device"].result == "pass" and got.r2["b"].result == "pass"
    assert got == full()

    # an Xid run on a: the device layer's newest run is that one
    xid = store.ensure_run("x", suite="xid", backend="test")
    store.add_verdicts(xid, [v("D-DEV-06", "a", "fail")], node="a")
    got = cache.get()
    assert got.cells["a"]["device"].run_id == xid and got.r2["a"].run_id == first
    assert got == full()


def test_runs_leaving_the_horizon_take_their_cells_with_them(store: Store) -> None:
    old = run(
        store, "w-old", "weekly", [v("D-DEV-03", "a", "fail")], at=NOW - dt.timedelta(days=30), node="a"
    )
    run(store, "w-new", "weekly", [v("D-DEV-03", "b", "pass")], at=NOW - dt.timedelta(days=1), node="b")
    cache = fh.FleetCells(store.engine, horizon_days=20)
    assert set(cache.get(now=NOW - dt.timedelta(days=15)).cells) == {"a", "b"}
    later = cache.get(now=NOW)  # 20 days back from now no longer reaches w-old
    assert later.from_run > old and set(later.cells) == {"b"} and set(later.r2) == {"b"}
    assert later == fh.latest_cells(store.engine, from_run=later.from_run)
    assert later == reference_cells(store, from_run=later.from_run)


def test_a_rack_onboarded_after_the_newest_weekly_sweep_is_in_the_inventory(store: Store) -> None:
    weekly(store, "w", {"a": "pass"}, at=NOW - dt.timedelta(days=2), racks={"a": "r1"})
    run(
        store,
        "rack_onboarding/r9",
        "rack_onboarding",
        [v("D-DEV-01", "n9", "warn")],
        at=NOW,
        node="n9",
        meta={"request": {"rack": "r9"}},
    )
    run(store, "xid/z", "xid", [v("D-DEV-06", "z", "fail")], at=NOW, node="z")  # not an onboarding
    grid = fh.fleet_grid(store.engine, now=NOW)
    assert grid.inventory.rack_of == {"a": "r1", "n9": "r9"}
    assert grid.cells["n9"]["device"].result == "warn"


def test_a_later_judgement_in_the_same_run_replaces_an_earlier_one(store: Store) -> None:
    """An Xid run decides to cordon (a fail), then r3 passes minutes later and the node goes back
    to service: its device cell is the r3's pass, not the run's worst."""
    weekly(store, "w", {"a": "pass", "b": "pass"}, at=NOW - dt.timedelta(days=2))
    xid = run(store, "xid/a", "xid", [], at=NOW - dt.timedelta(hours=1))
    for node, r3 in (("a", "pass"), ("b", "fail")):
        store.add_verdicts(xid, [v("D-DEV-06", node, "fail"), v("D-DEV-05", node, "pass")], node=node)
        with store.engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE verdicts SET judged_at = :at WHERE run_id = :r AND node = :n"),
                {"at": NOW - dt.timedelta(minutes=50), "r": xid, "n": node},
            )
        store.add_verdicts(xid, [v("D-DEV-02", node, r3)], node=node)  # judged now: after the decision
    grid = fh.fleet_grid(store.engine, now=NOW)
    assert grid.cells["a"]["device"].result == "pass" and grid.cells["a"]["device"].run_id == xid
    assert grid.cells["b"]["device"].result == "fail"
    cache = fh.FleetCells(store.engine)
    assert cache.get(now=NOW).cells["a"]["device"].result == "pass"


def test_a_retest_seconds_after_the_cordon_decision_still_decides_the_node(store: Store) -> None:
    """The demo's Xid run (time scaled): the cordon decision and the r3 that returns the node to
    service are seconds apart, well inside one batch window; the r3 still decides the cell, as the
    console's `fleetval nodes` says. A verdict judged after the r3 in that run still counts."""
    xid = run(store, "xid/fast", "xid", [], at=NOW - dt.timedelta(minutes=10))
    for node, r3 in (("a", "pass"), ("b", "fail"), ("c", "pass")):
        store.add_verdicts(xid, [v("D-DEV-06", node, "fail"), v("D-DEV-05", node, "pass")], node=node)
        with store.engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE verdicts SET judged_at = :at WHERE run_id = :r AND node = :n"),
                {"at": NOW - dt.timedelta(seconds=5), "r": xid, "n": node},
            )
        store.add_verdicts(xid, [v("D-DEV-02", node, r3)], node=node)
    store.add_verdicts(xid, [v("D-DEV-04", "GPU-c-2", "warn")], node="c")  # after c's r3: counts
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE verdicts SET judged_at = :at WHERE run_id = :r AND criterion = 'D-DEV-02'"),
            {"at": NOW, "r": xid},
        )
        conn.execute(
            sa.text("UPDATE verdicts SET judged_at = :at WHERE run_id = :r AND criterion = 'D-DEV-04'"),
            {"at": NOW + dt.timedelta(seconds=1), "r": xid},
        )
    grid = fh.fleet_grid(store.engine, now=NOW + dt.timedelta(seconds=2))
    assert {n: grid.cells[n]["device"].result for n in "abc"} == {"a": "pass", "b": "fail", "c": "warn"}
    assert grid.cells["a"]["device"].verdicts == 1
    assert fh.FleetCells(store.engine).get(now=NOW).cells["a"]["device"].result == "pass"
    assert reference_cells(store).cells["a"]["device"] == fh.latest_cells(store.engine).cells["a"]["device"]


def test_an_early_warning_judged_after_the_sweep_leaves_the_cells_to_the_sweeps_judgement(
    store: Store,
) -> None:
    """The weekly sweep's trend verdicts come after its r2s, the NCCL sweep's after its busbw: they
    are on the node's page, but the device and network cells stay the r2's and the busbw's (a
    trend is recorded, it does not judge the layer; its first weeks are all inconclusive)."""
    w = weekly(store, "w", {"a": "pass", "b": "fail"}, at=NOW - dt.timedelta(hours=3))
    store.add_verdicts(w, [v("D-DEV-TREND-01", "a", "warn"), v("D-DEV-TREND-01", "b", "inconclusive")])
    nccl = run(
        store, "n", fh.NCCL_SUITE, [v("D-NET-NCCL-01", "a", "pass")], at=NOW - dt.timedelta(hours=2), node="a"
    )
    store.add_verdicts(nccl, [v("D-NET-NCCL-TREND-01", "a", "inconclusive")])
    with store.engine.begin() as conn:  # an hour after each sweep's own verdicts
        conn.execute(
            sa.text("UPDATE verdicts SET judged_at = :at WHERE criterion LIKE '%TREND%'"),
            {"at": NOW - dt.timedelta(hours=1)},
        )
    cells = fh.latest_cells(store.engine).cells
    assert {n: cells[n]["device"].result for n in "ab"} == {"a": "pass", "b": "fail"}
    assert cells["a"]["network"].result == "pass"
    assert fh.latest_cells(store.engine) == reference_cells(store)
    page = fh.node_page(store.engine, "a")
    assert {r["criterion"] for r in page.verdicts} >= {"D-DEV-TREND-01", "D-NET-NCCL-TREND-01"}


def test_the_cells_query_equals_a_plain_recomputation_from_every_verdict(store: Store) -> None:
    """Every rule the cells' SQL encodes, against `reference_cells` (Python over every row): the
    newest run per node and layer, its worst within the batch window, GPU records under their
    node, blame without a node column, pairs, other layers, ties, and the r2 of each node."""
    w1 = weekly(store, "w1", {"a": "pass", "b": "warn", "c": "fail"}, at=NOW - dt.timedelta(days=9))
    w2 = weekly(store, "w2", {"a": "pass", "b": "pass"}, at=NOW - dt.timedelta(days=2))
    # a GPU record failing under a passing node verdict of the same judgement decides g
    store.add_verdicts(w2, [v("D-DEV-03", "g", "pass"), v("D-DEV-04", "GPU-g-7", "fail")], node="g")
    run(store, "w2", "weekly", [], at=NOW - dt.timedelta(days=2))
    # a run judging a node twice, more than the batch window apart: the later judgement alone
    xid = run(store, "xid/c", "xid", [v("D-DEV-06", "c", "fail")], at=NOW - dt.timedelta(hours=3), node="c")
    store.add_verdicts(xid, [v("D-DEV-02", "c", "pass"), v("D-DEV-05", "c", "warn")], node="c")
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE verdicts SET judged_at = :at WHERE run_id = :r AND criterion = 'D-DEV-02'"),
            {"at": NOW - dt.timedelta(hours=2), "r": xid},
        )
    # an r3 within the window of the cordon decision still decides the node (the retest rule)
    near = run(store, "xid/a", "xid", [v("D-DEV-06", "a", "fail")], at=NOW - dt.timedelta(hours=1), node="a")
    store.add_verdicts(near, [v("D-DEV-02", "a", "pass")], node="a")
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE verdicts SET judged_at = :at WHERE run_id = :r AND criterion = 'D-DEV-02'"),
            {"at": NOW - dt.timedelta(hours=1) + dt.timedelta(seconds=30), "r": near},
        )
    # two runs judged at the same moment: the higher run id is the newer
    for key, result in (("tie/1", "fail"), ("tie/2", "pass")):
        run(store, key, "xid", [v("D-DEV-06", "b", result)], at=NOW - dt.timedelta(hours=5), node="b")
    # the network layer: a node's own verdict, a blame without a node column, a pair
    nccl = run(
        store, "n1", fh.NCCL_SUITE, [v("D-NET-NCCL-01", "a", "pass")], at=NOW - dt.timedelta(days=1), node="a"
    )
    store.add_verdicts(nccl, [v("D-NET-NCCL-02", "c", "fail"), v("D-NET-NCCL-02", "a+b", "warn")])
    # an onboarding r2 and a weekly r2 at one moment; an error is not an r2; a non-node layer
    both = run(store, "both", "weekly", [v("D-DEV-01", "d", "warn")], at=NOW - dt.timedelta(days=4), node="d")
    store.add_verdicts(both, [v("D-DEV-03", "d", "pass"), v("D-DEV-03", "e", "error")], node=None)
    store.add_verdicts(both, [v("D-DEV-03", "e2", "error")], node="e2")
    store.add_verdicts(both, [v("D-DEV-02", "a", "fail")], node="a")  # a later run, judged earlier
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE verdicts SET judged_at = :at, node = subject WHERE run_id = :r AND subject = 'd'"
            ),
            {"at": NOW - dt.timedelta(days=4), "r": both},
        )
        conn.execute(
            sa.text("UPDATE verdicts SET judged_at = :at WHERE run_id = :r"),
            {"at": NOW - dt.timedelta(days=4), "r": both},
        )
    run(store, "kueue/1", fh.KUEUE_SUITE, [v("D-SCHED-06", "kueue/gang", "fail")], at=NOW)

    for from_run in (0, w1 + 1, w2 + 1):
        assert fh.latest_cells(store.engine, from_run=from_run) == reference_cells(store, from_run=from_run)
    cells = fh.latest_cells(store.engine).cells
    assert cells["b"]["device"].result == "pass"  # tie/2: the higher run
    assert cells["g"]["device"].result == "fail" and cells["g"]["device"].verdicts == 2
    assert cells["c"]["device"].result == "warn" and cells["c"]["device"].verdicts == 2
    assert cells["a"]["device"].result == "pass" and cells["a"]["device"].verdicts == 1
    assert cells["kueue/gang"]["scheduling"].result == "fail"
    r2 = fh.latest_cells(store.engine).r2
    assert r2["d"].criterion == "D-DEV-03" and r2["d"].result == "warn"
    assert "e2" not in r2 and "e" not in r2


def test_postgresqls_verdict_groups_are_the_verdicts_counted_after_every_kind_of_write(store: Store) -> None:
    """The triggers of migration 0007 keep `verdict_groups` equal to counting the verdicts again:
    after inserts, upserts that change a result or a judgement time, direct updates, a run's
    deletion (cascading to its verdicts) and a truncation."""
    if store.engine.dialect.name != "postgresql":
        return  # SQLite groups the verdicts at each load
    # the product's severities (the migration froze them: a change there must show here)
    sev = "CASE result " + " ".join(f"WHEN '{r}' THEN {n}" for r, n in fh.SEVERITY.items()) + " ELSE 4 END"
    levels = range(len(fh.RESULTS))
    counts = ", ".join(f"n{s}, r{s}" for s in levels)
    recount = ", ".join(
        f"count(*) FILTER (WHERE {sev} = {s}), "
        f"count(*) FILTER (WHERE {sev} = {s} AND node IS NOT NULL AND result <> 'error')"
        for s in levels
    )

    def same() -> bool:
        with store.engine.connect() as conn:
            kept = set(
                conn.execute(
                    sa.text(f"SELECT run_id, who, criterion, judged_at, {counts} FROM verdict_groups")
                )
            )
            again = set(
                conn.execute(
                    sa.text(
                        f"SELECT run_id, coalesce(node, subject), criterion, judged_at, {recount} "
                        "FROM verdicts GROUP BY 1, 2, 3, 4"
                    )
                )
            )
        return kept == again

    w1 = weekly(store, "w1", {"a": "pass", "b": "fail"}, at=NOW - dt.timedelta(days=7))
    assert same()
    store.add_verdicts(w1, [v("D-DEV-03", "a", "error"), v("D-DEV-04", "GPU-c-1", "warn")], node="a")
    assert same()  # an upsert moved a's verdict to another result and judgement time
    store.add_verdicts(w1, [v("D-NET-NCCL-02", "a+b", "fail"), v("D-NET-NCCL-02", "b", "fail")])
    x = run(store, "x", "xid", [v("D-DEV-06", "b", "fail")], at=NOW, node="b")
    assert same()
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE verdicts SET result = 'pass', node = NULL WHERE run_id = :r"), {"r": w1})
    assert same()
    with store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM runs WHERE id = :r"), {"r": x})
    assert same()
    with store.engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE verdicts"))
    assert same()
