"""Verdicts as Prometheus metrics: a collector that reads the store at scrape time
(`fleetval.metrics.collector`) and `fleetval metrics serve` (`fleetval.metrics.cli`).
Metric names, labels and their cardinality: docs/metrics.md."""
