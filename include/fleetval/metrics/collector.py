"""The store as Prometheus metrics: a custom collector that reads the verdict store at scrape time.

What each metric means, its labels and its cardinality: docs/metrics.md. In short:

- each node's newest judgement per node-layer criterion, its result encoded as the result's
  severity (`RESULT_CODE`: pass 0, warn 1, inconclusive 2, fail 3, error 4; one series per node
  and criterion, not one per result, so 16k nodes cost 16k series per criterion, not 80k), and
  per criterion the number of nodes at each result;
- per node and layer, the age of its newest conclusive judgement (`COVERAGE_CRITERIA`);
- node states replayed from node events (cordoned, quarantined, awaiting r3, onboarding), per
  node and counted, shadow-mode (dry-run) events apart;
- the blast-radius breaker (F-SAFE-01 alerts) per rack, the promoted baselines, the newest Kueue
  scenario run's results.

A scrape reads the store in a fixed number of queries whatever the fleet's size (the reads are
`fleetval.store.metrics`), and only when something changed: a cheap fingerprint (the newest
verdict, node event, run, baseline change) is read first, and an unchanged store is served from
the last read (ages are computed at each scrape). A full read also runs every `full_every`,
which moves the horizon along.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from fleetval.records import Result
from fleetval.remediation import R3_REQUESTED_LABEL
from fleetval.store import fleet_health as fh
from fleetval.store.metrics import (
    COVERAGE_CRITERIA,
    NODE_CRITERIA,
    Snapshot,
    fingerprint,
    read_snapshot,
)

log = logging.getLogger(__name__)

# A verdict's result as a gauge value: its severity, so `max by (…)` is the worst and `>= 3` is
# "failed or worse". Exported as fleetval_result_code{result} too, for queries that join on it.
RESULT_CODE: Final = {r.value: r.severity for r in Result}
RESULTS: Final = fh.RESULTS  # by severity
# Per-node series only for the node layers' criteria (`NODE_CRITERIA`); which criteria cover a
# layer (`COVERAGE_CRITERIA`) and a breaker's window: fleetval.store.metrics.
NODE_LAYERS: Final = fh.NODE_LAYERS
UNKNOWN_DOMAIN: Final = "unknown"
NODE_STATES: Final = ("cordoned", "quarantined", "awaiting_r3", "onboarding")
SHADOW: Final = {False: "false", True: "true"}


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    help: str
    labels: tuple[str, ...] = ()


# Every metric the collector exports (all gauges), as data: `describe`, the docs and the
# dashboard test read this.
METRICS: Final[tuple[MetricSpec, ...]] = (
    MetricSpec(
        "fleetval_result_code",
        "the value fleetval_verdict_result and fleetval_scenario_result use for each result",
        ("result",),
    ),
    MetricSpec(
        "fleetval_verdict_result",
        "a node's newest judgement of a criterion: 0 pass, 1 warn, 2 inconclusive, 3 fail, 4 error",
        ("node", "criterion", "layer"),
    ),
    MetricSpec(
        "fleetval_verdict_nodes",
        "nodes whose newest judgement of the criterion has this result",
        ("criterion", "layer", "result"),
    ),
    MetricSpec(
        "fleetval_node_coverage_age_seconds",
        "seconds since the node's newest conclusive (pass, warn, fail) judgement in the layer",
        ("node", "layer"),
    ),
    MetricSpec(
        "fleetval_layer_uncovered_nodes",
        "inventory nodes with no conclusive judgement in the layer within the horizon",
        ("layer",),
    ),
    MetricSpec("fleetval_inventory_nodes", "nodes in the inventory (the newest weekly plan and later)"),
    MetricSpec("fleetval_node_info", "1 for each inventory node, with its rack", ("node", "rack")),
    MetricSpec(
        "fleetval_node_state",
        "1 while the node events leave the node in this state (shadow: dry-run events)",
        ("node", "state", "shadow"),
    ),
    MetricSpec("fleetval_nodes_in_state", "nodes in this state", ("state", "shadow")),
    MetricSpec(
        "fleetval_breaker_open",
        "1 while the newest F-SAFE-01 alert of this breaker in this rack is within its window",
        ("domain", "rule"),
    ),
    MetricSpec(
        "fleetval_breaker_last_trip_timestamp_seconds",
        "when this breaker last withheld an action in this rack (F-SAFE-01)",
        ("domain", "rule"),
    ),
    MetricSpec(
        "fleetval_baseline_version",
        "the promoted baseline's version, per series",
        ("profile", "metric", "scope"),
    ),
    MetricSpec(
        "fleetval_baseline_value",
        "the promoted baseline's headline value, per series",
        ("profile", "metric", "scope", "unit"),
    ),
    MetricSpec(
        "fleetval_scenario_result",
        "the newest Kueue contention run's result per scenario and criterion (as fleetval_result_code)",
        ("scenario", "criterion"),
    ),
    MetricSpec("fleetval_scenario_run_timestamp_seconds", "when the newest Kueue contention run started"),
    MetricSpec("fleetval_store_up", "1 when the last scrape could read the store"),
    MetricSpec("fleetval_store_read_seconds", "how long this scrape's reads of the store took"),
)
METRIC_NAMES: Final = frozenset(m.name for m in METRICS)
_SPEC: Final = {m.name: m for m in METRICS}


# --- the collector ------------------------------------------------------------------------------
class StoreCollector:
    """A prometheus_client collector over one store (register it with a CollectorRegistry).
    Thread-safe: the exposition server scrapes from several threads."""

    def __init__(
        self,
        engine: Engine,
        *,
        horizon_days: int | None = fh.DEFAULT_HORIZON_DAYS,
        full_every: dt.timedelta = dt.timedelta(minutes=5),
    ) -> None:
        self.engine = engine
        self.horizon_days = horizon_days
        self.full_every = full_every
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._fingerprint: tuple[Any, ...] | None = None
        self._read_at = 0.0
        self.last_read = "none"  # full or cached: what the last scrape did

    def snapshot(self, now: dt.datetime | None = None) -> Snapshot:
        with self._lock:
            mark = fingerprint(self.engine)
            fresh = time.monotonic() - self._read_at < self.full_every.total_seconds()
            if self._snapshot is None or mark != self._fingerprint or not fresh:
                self._snapshot = read_snapshot(
                    self.engine,
                    criteria=NODE_CRITERIA,
                    r3_label=R3_REQUESTED_LABEL,
                    horizon_days=self.horizon_days,
                    now=now,
                )
                self._fingerprint = mark
                self._read_at = time.monotonic()
                self.last_read = "full"
            else:
                self.last_read = "cached"
            return self._snapshot

    def describe(self) -> Iterator[Metric]:
        for spec in METRICS:
            yield _family(spec.name)

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        now = dt.datetime.now(dt.UTC)
        try:
            snap = self.snapshot(now)
        except SQLAlchemyError as exc:  # an outage is a metric (store_up 0), not a failed scrape
            log.warning("metrics: the store could not be read: %s", str(exc).strip().splitlines()[0])
            snap = None
        if snap is not None:
            yield from families(snap, now)
        up = _family("fleetval_store_up")
        up.add_metric([], 1.0 if snap is not None else 0.0)
        took = _family("fleetval_store_read_seconds")
        took.add_metric([], time.monotonic() - started)
        yield up
        yield took


def _family(name: str) -> GaugeMetricFamily:
    spec = _SPEC[name]
    return GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))


def families(snap: Snapshot, now: dt.datetime) -> list[GaugeMetricFamily]:
    """The metric families of one snapshot as of `now`."""
    layer_of = fh.layer_of
    codes = _family("fleetval_result_code")
    for name in RESULTS:
        codes.add_metric([name], float(RESULT_CODE[name]))

    result = _family("fleetval_verdict_result")
    per_result: Counter[tuple[str, str]] = Counter()
    for (node, criterion), code in sorted(snap.latest.items()):
        result.add_metric([node, criterion, layer_of(criterion)], float(code))
        per_result[(criterion, RESULTS[code])] += 1
    nodes_at = _family("fleetval_verdict_nodes")
    for criterion in sorted({c for _, c in snap.latest}):
        for name in RESULTS:  # every result, zeros included: a rate or an alert needs the series
            nodes_at.add_metric([criterion, layer_of(criterion), name], float(per_result[(criterion, name)]))

    covered = snap.layer_coverage()  # (node, layer) → its newest coverage
    age = _family("fleetval_node_coverage_age_seconds")
    for (node, layer), at in sorted(covered.items()):
        age.add_metric([node, layer], max(0.0, (now - at).total_seconds()))
    uncovered = _family("fleetval_layer_uncovered_nodes")
    for layer in COVERAGE_CRITERIA:
        missing = sum(1 for node in snap.racks if (node, layer) not in covered)
        uncovered.add_metric([layer], float(missing))

    inventory = _family("fleetval_inventory_nodes")
    inventory.add_metric([], float(len(snap.racks)))
    info = _family("fleetval_node_info")
    for node, rack in sorted(snap.racks.items()):
        info.add_metric([node, rack], 1.0)

    state = _family("fleetval_node_state")
    in_state: Counter[tuple[str, bool]] = Counter()
    for (node, shadow), names in sorted(snap.states.items()):
        for name in sorted(names):
            state.add_metric([node, name, SHADOW[shadow]], 1.0)
            in_state[(name, shadow)] += 1
    counts = _family("fleetval_nodes_in_state")
    for name in NODE_STATES:
        for shadow in (False, True):
            counts.add_metric([name, SHADOW[shadow]], float(in_state[(name, shadow)]))

    open_ = _family("fleetval_breaker_open")
    last_trip = _family("fleetval_breaker_last_trip_timestamp_seconds")
    for b in sorted(snap.breakers, key=lambda b: (b.domain, b.rule)):
        domain = b.domain or UNKNOWN_DOMAIN
        open_.add_metric([domain, b.rule], 1.0 if b.is_open(now) else 0.0)
        last_trip.add_metric([domain, b.rule], b.last_trip.timestamp())

    version = _family("fleetval_baseline_version")
    value = _family("fleetval_baseline_value")
    for profile, metric, scope, v, headline, unit in sorted(snap.baselines):
        version.add_metric([profile, metric, scope], float(v))
        value.add_metric([profile, metric, scope, unit], headline)

    scenario = _family("fleetval_scenario_result")
    for (name, criterion), code in sorted(snap.scenarios.items()):
        scenario.add_metric([name, criterion], float(code))
    scenario_at = _family("fleetval_scenario_run_timestamp_seconds")
    if snap.scenario_run_at is not None:
        scenario_at.add_metric([], snap.scenario_run_at.timestamp())

    return [
        codes,
        result,
        nodes_at,
        age,
        uncovered,
        inventory,
        info,
        state,
        counts,
        open_,
        last_trip,
        version,
        value,
        scenario,
        scenario_at,
    ]
