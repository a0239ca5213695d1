"""fleetval.metrics.collector against a real store (PostgreSQL and SQLite) written through the
store's own write paths: what each metric says, that a scrape's queries do not grow with the
fleet, that an unchanged store is not read again, and that an outage is a metric."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from fleetval.metrics.collector import METRIC_NAMES, RESULT_CODE, StoreCollector
from fleetval.records import Result, Verdict
from fleetval.store.repository import Store
from tests.metrics.fleet import backdate, r3, small_fleet, v, weekly_sweep

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(collector: StoreCollector) -> Samples:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def series(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    want = set(labels.items())
    return {k: val for (n, k), val in samples.items() if n == name and want <= k}


@pytest.fixture
def collector(store: Store) -> StoreCollector:
    return StoreCollector(store.engine)


def test_a_sweep_with_a_failing_node_reads_as_its_metrics(store: Store, collector: StoreCollector) -> None:
    now = dt.datetime.now(dt.UTC)
    small_fleet(store, now)
    s = scrape(collector)

    assert value(s, "fleetval_store_up") == 1
    assert value(s, "fleetval_result_code", result="fail") == RESULT_CODE["fail"] == 3
    # the newest judgement per node and criterion, its result as a code
    for node, code in {"n1": 0, "n2": 3, "n3": 0, "n4": 3}.items():
        assert value(s, "fleetval_verdict_result", node=node, criterion="D-DEV-03", layer="device") == code
        # a node's GPU records are one judgement of the node
        assert value(s, "fleetval_verdict_result", node=node, criterion="D-DEV-04", layer="device") == 0
    assert value(s, "fleetval_verdict_result", node="n1", criterion="D-NET-NCCL-01", layer="network") == 0
    # subjects that are not nodes (scenarios, the breaker's alerts) have no per-node series
    assert set(series(s, "fleetval_verdict_result")) == {
        frozenset({("node", n), ("criterion", c), ("layer", layer)})
        for n, c, layer in [(n, "D-DEV-03", "device") for n in ("n1", "n2", "n3", "n4")]
        + [(n, "D-DEV-04", "device") for n in ("n1", "n2", "n3", "n4")]
        + [("n1", "D-NET-NCCL-01", "network")]
    }
    assert value(s, "fleetval_verdict_nodes", criterion="D-DEV-03", layer="device", result="fail") == 2
    assert value(s, "fleetval_verdict_nodes", criterion="D-DEV-03", layer="device", result="pass") == 2
    assert value(s, "fleetval_verdict_nodes", criterion="D-DEV-03", layer="device", result="error") == 0

    # coverage: the newest conclusive judgement (a fail covers the node) 20 minutes ago
    for node in ("n1", "n2", "n3", "n4"):
        age = value(s, "fleetval_node_coverage_age_seconds", node=node, layer="device")
        assert age is not None and 20 * 60 - 5 <= age <= 20 * 60 + 120
    network = value(s, "fleetval_node_coverage_age_seconds", node="n1", layer="network")
    assert network is not None and 2 * 86400 - 5 <= network <= 2 * 86400 + 120
    assert value(s, "fleetval_layer_uncovered_nodes", layer="device") == 0
    assert value(s, "fleetval_layer_uncovered_nodes", layer="network") == 3
    assert value(s, "fleetval_inventory_nodes") == 4
    assert value(s, "fleetval_node_info", node="n3", rack="r2") == 1

    # node states, from the node events: n2 quarantined by the policy, n4 withheld by the
    # budget (no state), n3 cordoned for an Xid, n1 quarantined in shadow mode only
    states = {
        (dict(k)["node"], dict(k)["state"], dict(k)["shadow"]) for k in series(s, "fleetval_node_state")
    }
    assert states == {
        ("n2", "cordoned", "false"),
        ("n2", "quarantined", "false"),
        ("n2", "awaiting_r3", "false"),
        ("n3", "cordoned", "false"),
        ("n3", "awaiting_r3", "false"),
        ("n1", "cordoned", "true"),
        ("n1", "quarantined", "true"),
    }
    assert value(s, "fleetval_nodes_in_state", state="quarantined", shadow="false") == 1
    assert value(s, "fleetval_nodes_in_state", state="cordoned", shadow="false") == 2
    assert value(s, "fleetval_nodes_in_state", state="awaiting_r3", shadow="false") == 2
    assert value(s, "fleetval_nodes_in_state", state="quarantined", shadow="true") == 1
    assert value(s, "fleetval_nodes_in_state", state="onboarding", shadow="false") == 0

    # the action budget withheld n4's quarantine in rack r2: its breaker is open
    trip = {"domain": "r2", "rule": "safety.action_budget.exceeded"}
    assert value(s, "fleetval_breaker_open", **trip) == 1
    last = value(s, "fleetval_breaker_last_trip_timestamp_seconds", **trip)
    assert last is not None and abs(last - (now - dt.timedelta(minutes=20)).timestamp()) < 2
    assert set(series(s, "fleetval_breaker_open")) == {frozenset(trip.items())}

    # the baseline in force: the second version promoted
    nccl = {"profile": "h100-8x", "metric": "nccl.busbw", "scope": "intra-node"}
    assert value(s, "fleetval_baseline_version", **nccl) == 2
    assert value(s, "fleetval_baseline_value", **nccl, unit="GB/s") == 372.5

    # the newest Kueue run's scenarios
    assert value(s, "fleetval_scenario_result", scenario="d-sched-01-02-quota", criterion="D-SCHED-01") == 0
    assert (
        value(s, "fleetval_scenario_result", scenario="d-sched-05-preempt-resume", criterion="D-SCHED-05")
        == 3
    )
    ran = value(s, "fleetval_scenario_run_timestamp_seconds")
    assert ran is not None and abs(ran - (now - dt.timedelta(hours=3)).timestamp()) < 2

    # every metric the collector declares is exported, and nothing else
    exported = {name for name, _ in s}
    assert exported == METRIC_NAMES


def test_r3_ends_the_wait_pass_returns_the_node_fail_keeps_it_quarantined(
    store: Store, collector: StoreCollector
) -> None:
    now = dt.datetime.now(dt.UTC)
    small_fleet(store, now)
    xid_run = store.run_id("x1")
    weekly_run = store.run_id("w2")
    assert xid_run is not None and weekly_run is not None
    r3(store, xid_run, "n3", "pass", at=now - dt.timedelta(minutes=2))
    r3(store, weekly_run, "n2", "fail", at=now - dt.timedelta(minutes=1))
    s = scrape(collector)
    states = {(dict(k)["node"], dict(k)["state"]) for k in series(s, "fleetval_node_state", shadow="false")}
    assert states == {("n2", "cordoned"), ("n2", "quarantined")}
    assert value(s, "fleetval_verdict_result", node="n3", criterion="D-DEV-02", layer="device") == 0
    assert value(s, "fleetval_verdict_result", node="n2", criterion="D-DEV-02", layer="device") == 3


def test_the_newest_run_decides_and_an_error_is_not_coverage(store: Store, collector: StoreCollector) -> None:
    now = dt.datetime.now(dt.UTC)
    weekly_sweep(store, "w1", {"n1": "fail", "n2": "pass"}, at=now - dt.timedelta(days=3))
    weekly_sweep(store, "w2", {"n1": "pass", "n2": "error"}, at=now - dt.timedelta(days=1))
    s = scrape(collector)
    assert value(s, "fleetval_verdict_result", node="n1", criterion="D-DEV-03", layer="device") == 0
    assert value(s, "fleetval_verdict_result", node="n2", criterion="D-DEV-03", layer="device") == 4
    # n2's error did not look at it: its coverage is the pass three days ago (its GPU record
    # passed the day before yesterday: a D-DEV-04 record is not a diagnostic of its own)
    age = value(s, "fleetval_node_coverage_age_seconds", node="n2", layer="device")
    assert age is not None and 3 * 86400 - 5 <= age <= 3 * 86400 + 120


def test_verdicts_beyond_the_horizon_are_not_shown(store: Store) -> None:
    now = dt.datetime.now(dt.UTC)
    weekly_sweep(store, "w1", {"n1": "fail"}, at=now - dt.timedelta(days=40))
    s = scrape(StoreCollector(store.engine, horizon_days=30))
    assert series(s, "fleetval_verdict_result") == {}
    assert value(s, "fleetval_layer_uncovered_nodes", layer="device") == 4  # the plan's nodes


def _statements(engine: sa.Engine, collector: StoreCollector) -> int:
    count = 0

    def seen(*_: object) -> None:
        nonlocal count
        count += 1

    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        scrape(collector)
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
    return count


def test_a_scrape_reads_in_a_fixed_number_of_queries_and_only_when_the_store_changed(
    store: Store,
) -> None:
    now = dt.datetime.now(dt.UTC)
    small_fleet(store, now)
    small = _statements(store.engine, StoreCollector(store.engine))
    # forty times the nodes in a newer weekly plan, a quarter of them failed (quarantined or
    # withheld by the breaker), each with a verdict of another layer too
    racks = {f"m{i}": f"r{i // 8}" for i in range(160)}
    weekly_sweep(
        store, "w3", {n: "fail" if i % 4 == 0 else "pass" for i, n in enumerate(racks)}, at=now, racks=racks
    )
    run_id = store.ensure_run("big", suite="gpu_operator_validation", backend="test")
    for node in racks:
        store.add_verdicts(run_id, [v("D-OP-01", node, "fail")], node=node)
    collector = StoreCollector(store.engine)
    assert _statements(store.engine, collector) == small
    assert collector.last_read == "full"
    # nothing changed: one statement (the fingerprint), the last read served again
    assert _statements(store.engine, collector) == 1
    assert collector.last_read == "cached"
    store.add_verdicts(run_id, [v("D-OP-01", "m0", "pass")], node="m0")
    s = scrape(collector)
    assert collector.last_read == "full"
    assert value(s, "fleetval_verdict_result", node="m0", criterion="D-OP-01", layer="operator") == 0
    assert value(s, "fleetval_inventory_nodes") == 160
    assert value(s, "fleetval_verdict_nodes", criterion="D-DEV-03", layer="device", result="fail") == 40


def test_an_unreachable_store_is_store_up_zero_not_a_failed_scrape() -> None:
    from fleetval.store.engine import make_engine

    engine = make_engine(
        "postgresql+psycopg://postgres@127.0.0.1:1/none", connect_args={"connect_timeout": 2}
    )
    s = scrape(StoreCollector(engine))
    assert value(s, "fleetval_store_up") == 0
    assert {name for name, _ in s} == {"fleetval_store_up", "fleetval_store_read_seconds"}


def test_the_openmetrics_exposition_is_valid(store: Store, collector: StoreCollector) -> None:
    small_fleet(store, dt.datetime.now(dt.UTC))
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_openmetrics(registry).decode()
    assert text.endswith("# EOF\n")
    assert "# TYPE fleetval_verdict_result gauge" in text


def test_an_xid_breaker_trip_is_open_for_its_window_only(store: Store, collector: StoreCollector) -> None:
    now = dt.datetime.now(dt.UTC)
    weekly_sweep(store, "w1", {"n1": "pass"}, at=now - dt.timedelta(days=1))
    for key, rack, ago in (("x1", "r1", dt.timedelta(minutes=10)), ("x2", "r2", dt.timedelta(minutes=1))):
        run_id = store.ensure_run(key, suite="xid", backend="test")
        alert = Verdict(
            "F-SAFE-01",
            "n1" if rack == "r1" else "n3",
            Result.FAIL,
            "alert_operator",
            "safety.xid_breaker.open",
            "withheld",
            {"rack": rack},
            {"breaker": {"max_fleet_fraction": 0.1, "max_rack_fraction": 0.5, "window_s": 300.0}},
        )
        store.add_verdicts(run_id, [alert])
        backdate(store, run_id, now - ago)
    s = scrape(collector)
    rule = "safety.xid_breaker.open"
    assert value(s, "fleetval_breaker_open", domain="r1", rule=rule) == 0  # 10 min ago, window 5 min
    assert value(s, "fleetval_breaker_open", domain="r2", rule=rule) == 1
    last = value(s, "fleetval_breaker_last_trip_timestamp_seconds", domain="r1", rule=rule)
    assert last is not None and abs(last - (now - dt.timedelta(minutes=10)).timestamp()) < 2
