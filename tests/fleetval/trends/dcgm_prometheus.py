"""A real Prometheus (Debian's 2.42) holding a few nodes' dcgm-exporter history: the replay's GPU
samples (`fleetval.trends.replay.device_history`) written as timestamped OpenMetrics with
dcgm-exporter's labels, backfilled with `promtool tsdb create-blocks-from openmetrics`, served on
loopback. The process helpers are tests/metrics/test_prometheus.py's (skip where the binary is
missing)."""

from __future__ import annotations

import datetime as dt
import math
import subprocess
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetval.trends.history import Sample
from fleetval.trends.judge import DEVICE_LOOKBACK, judge_device_trend
from fleetval.trends.prometheus import DEVICE_FIELDS, WEEK
from fleetval.trends.replay import ReplayConfig, device_hard_fail, device_history
from tests.metrics.test_prometheus import _binary, _eventually, _free_port, _stop

# The label set of the Tesla T4 scrape in the shared fixtures
# (dcgm-exporter/metrics-tesla-t4-full-default-counters-datadog-fixture-excerpt.prom).
MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "550.127.08"
# Each sweep's sample sits this long before the sweep instant (scraped just before the sweep).
BEFORE_SWEEP = dt.timedelta(minutes=10)


@dataclass(frozen=True)
class Fleet:
    """What was written: node → GPU UUID → samples (sweep 0 = the window's first), and the instant
    of the last sweep."""

    nodes: dict[str, dict[str, list[Sample]]]
    at: dt.datetime
    degrading: str
    healthy: tuple[str, ...]
    restarted: str  # a healthy node whose exporter pod changed half-way (new instance label)


def warned_window(name: str, pattern: str, cfg: ReplayConfig) -> dict[str, list[Sample]]:
    """The degrading node's last DEVICE_LOOKBACK sweeps up to the first sweep the judge warns on,
    before its hard fail (the moment early warning is for), renumbered from 0."""
    series = device_history(name, pattern, cfg)
    for end in range(DEVICE_LOOKBACK - 1, cfg.sweeps):
        if any(device_hard_fail(s[end - 1] if end else None, s[end]) for s in series.values()):
            break
        if judge_device_trend(name, {g: s[: end + 1] for g, s in series.items()}).result.value == "warn":
            return window(series, end)
    raise AssertionError(f"{pattern} never warned before its hard fail with seed {cfg.seed}")


def window(series: Mapping[str, list[Sample]], end: int) -> dict[str, list[Sample]]:
    first = end - DEVICE_LOOKBACK + 1
    return {g: [Sample(s.sweep - first, s.values) for s in x[first : end + 1]] for g, x in series.items()}


def replayed_fleet(at: dt.datetime, *, seed: int = 0) -> Fleet:
    cfg = ReplayConfig(seed=seed, sweeps=20)
    nodes = {"gpu-node-degrading.example": warned_window("gpu-node-degrading.example", "ecc_to_dbe", cfg)}
    healthy = ("gpu-node-ok-1.example", "gpu-node-ok-2.example")
    for name in healthy:
        nodes[name] = window(device_history(name, None, cfg), cfg.sweeps - 1)
    return Fleet(nodes, at, "gpu-node-degrading.example", healthy, healthy[1])


def _number(value: Any) -> str:
    if isinstance(value, int):
        return str(value)
    return repr(float(value)) if math.isfinite(value) else ("NaN" if math.isnan(value) else "+Inf")


def openmetrics(fleet: Fleet, *, step: dt.timedelta = WEEK) -> str:
    """The fleet's samples as OpenMetrics with timestamps: one family per field (families are not
    interleaved), dcgm-exporter's labels, series in time order."""
    lines = []
    last = len(next(iter(next(iter(fleet.nodes.values())).values()))) - 1
    for name in DEVICE_FIELDS:
        lines.append(f"# TYPE {name} gauge")
        for node, gpus in fleet.nodes.items():
            for index, (uuid, samples) in enumerate(gpus.items()):
                for sample in samples:
                    if name not in sample.values:
                        continue
                    at = fleet.at - (last - sample.sweep) * step - BEFORE_SWEEP
                    # a restarted exporter pod: the same GPU under a new `instance` from sweep 5 on
                    moved = node == fleet.restarted and sample.sweep >= 5
                    instance = "10.0.0.2:9400" if moved else "10.0.0.1:9400"
                    labels = (
                        f'gpu="{index}",UUID="{uuid}",device="nvidia{index}",modelName="{MODEL}",'
                        f'Hostname="{node}",DCGM_FI_DRIVER_VERSION="{DRIVER}",instance="{instance}"'
                    )
                    lines.append(f"{name}{{{labels}}} {_number(sample.values[name])} {at.timestamp():.3f}")
    return "\n".join([*lines, "# EOF", ""])


@contextmanager
def dcgm_prometheus(tmp: Path, fleet: Fleet) -> Iterator[str]:
    """Prometheus serving `fleet`'s history on loopback; yields its URL."""
    promtool, prometheus = _binary("promtool"), _binary("prometheus")
    source = tmp / "dcgm-exporter.om"
    source.write_text(openmetrics(fleet))
    data = tmp / "data"
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    config = tmp / "prometheus.yml"
    config.write_text('{"global": {"scrape_interval": "1m"}}\n')  # YAML is a superset of JSON
    port = _free_port()
    with (tmp / "prometheus.log").open("w") as log:
        proc = subprocess.Popen(
            [
                prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                "--storage.tsdb.retention.time=3650d",  # the backfilled weeks are older than the default 15d
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _eventually(lambda: _ready(url), "Prometheus ready")
        yield url
    finally:
        _stop(proc)


def _ready(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/-/ready", timeout=5) as resp:
        return bool(resp.status == 200)


def nodes_of(fleet: Fleet, *extra: str) -> Sequence[str]:
    return [*fleet.nodes, *extra]
