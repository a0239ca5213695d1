"""`fleetval metrics serve` scraped by a real Prometheus (Debian's 2.42) on loopback, with the alert
rules loaded; the rules checked by promtool; the dashboard's queries run against it and naming
only metrics the collector exports. Skipped only where the prometheus binary is missing."""

from __future__ import annotations

import datetime as dt
import json
import re
import selectors
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetval.metrics.collector import METRIC_NAMES
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import Store
from tests.metrics.fleet import small_fleet
from tests.paths import ROOT

RULES = ROOT / "deploy" / "prometheus-rules.yaml"
DASHBOARD = ROOT / "deploy" / "grafana-dashboard.json"
MISSING = "Debian's prometheus (with promtool) is not installed: `make tools` as root installs it"
METRIC_TOKEN = re.compile(r"\bfleetval_[a-z0-9_]+")
WAIT_S = 60


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(MISSING)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise AssertionError(f"no output within {timeout}s")
    return proc.stdout.readline()


def _eventually(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, ValueError) as exc:  # not up yet
            last = exc
        else:
            if last:
                return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> dict[frozenset[tuple[str, str]], float]:
        data = self.api("query", query=promql)
        if data["resultType"] == "scalar":
            return {frozenset(): float(data["result"][1])}
        return {
            frozenset((k, v) for k, v in r["metric"].items() if k not in ("job", "instance")): float(
                r["value"][1]
            )
            for r in data["result"]
        }

    def value(self, promql: str) -> float | None:
        found = self.query(promql)
        assert len(found) <= 1, found
        return next(iter(found.values()), None)


@pytest.fixture
def prometheus(pg_url: str, tmp_path: Path) -> Iterator[tuple[Prometheus, Store]]:
    """An empty migrated store, `fleetval metrics serve` on it, and Prometheus scraping it every
    second with the alert rules evaluated every second."""
    binary = _binary("prometheus")
    engine = make_engine(pg_url)
    upgrade(engine)
    serve = subprocess.Popen(
        [sys.executable, "-m", "fleetval.cli", "metrics", "serve", "--db", pg_url, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    procs: list[subprocess.Popen[Any]] = [serve]
    try:
        line = _first_line(serve, WAIT_S)
        assert line, serve.stderr.read() if serve.stderr else ""
        target = urllib.parse.urlparse(json.loads(line)["metrics"]).netloc
        config = tmp_path / "prometheus.yml"
        config.write_text(
            json.dumps(  # YAML is a superset of JSON
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
                    "rule_files": [str(RULES)],
                    "scrape_configs": [{"job_name": "fleetval", "static_configs": [{"targets": [target]}]}],
                }
            )
        )
        port = _free_port()
        log = (tmp_path / "prometheus.log").open("w")
        procs.append(
            subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        prom = Prometheus(f"http://127.0.0.1:{port}")
        _eventually(lambda: prom.value('up{job="fleetval"}') == 1, "Prometheus scraped the endpoint")
        yield prom, Store(engine)
    finally:
        for proc in reversed(procs):
            _stop(proc)
        engine.dispose()


def test_prometheus_sees_a_sweeps_failing_node_and_fires_the_alerts(
    prometheus: tuple[Prometheus, Store],
) -> None:
    prom, store = prometheus
    assert prom.value("fleetval_store_up") == 1
    assert prom.value("fleetval_inventory_nodes") == 0

    # the simulated sweep, written while Prometheus scrapes: n2 and n4 fail their r2
    small_fleet(store, dt.datetime.now(dt.UTC))
    _eventually(
        lambda: prom.value('fleetval_verdict_result{node="n2", criterion="D-DEV-03"}') == 3,
        "the new verdicts were scraped",
    )
    failing = prom.query('fleetval_verdict_result{criterion="D-DEV-03"} >= 3')
    assert {dict(k)["node"] for k in failing} == {"n2", "n4"}
    assert prom.value('count(fleetval_verdict_result{criterion="D-DEV-03"} == 0)') == 2
    assert prom.value('sum(fleetval_nodes_in_state{state="quarantined", shadow="false"})') == 1
    assert prom.value('sum(fleetval_nodes_in_state{state="awaiting_r3", shadow="false"})') == 2
    assert prom.value('fleetval_node_state{state="quarantined", shadow="false"}') == 1
    assert prom.value('count(fleetval_node_coverage_age_seconds{layer="device"} < 3600)') == 4
    assert prom.value('fleetval_breaker_open{domain="r2"}') == 1
    assert prom.value('fleetval_baseline_version{metric="nccl.busbw", scope="intra-node"}') == 2
    assert prom.value('fleetval_scenario_result{scenario="d-sched-05-preempt-resume"}') == 3

    def alerts() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for alert in prom.api("alerts")["alerts"]:
            found.setdefault(alert["labels"]["alertname"], set()).add(
                f"{alert['state']}:{alert['labels'].get('node', alert['labels'].get('domain', ''))}"
            )
        return found

    seen = _eventually(
        lambda: (a := alerts()).get("FleetvalBreakerTripped") and a.get("FleetvalNodeQuarantined") and a,
        "the rules saw the sweep",
    )
    assert seen["FleetvalBreakerTripped"] == {"firing:r2"}  # no `for:`: at once
    assert seen["FleetvalNodeQuarantined"] == {"pending:n2"}  # `for: 5m`
    assert "pending:n4" in seen["FleetvalNodeFailing"]  # failed, withheld: not quarantined
    assert "pending:n2" not in seen["FleetvalNodeFailing"]  # quarantined: its own alert
    assert seen["FleetvalScenarioFailing"] == {"firing:"}
    assert "FleetvalStoreDown" not in seen
    assert "FleetvalDeviceCoverageStale" not in seen

    # every panel's query is valid PromQL against this Prometheus (a 400 otherwise), and most
    # show data
    empty = []
    for expr in _dashboard_queries(with_variables=False):
        try:
            found = prom.query(expr.replace("$layer", ".*"))
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{expr}: {exc.read().decode()}") from None
        if not found:
            empty.append(expr)
    assert len(empty) <= 2, empty  # e.g. stale coverage: none here


def test_the_alert_rules_pass_promtool() -> None:
    promtool = _binary("promtool")
    done = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def _dashboard_queries(*, with_variables: bool = True) -> list[str]:
    """The panels' PromQL, and the variables' queries (Grafana's label_values(), not PromQL)."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"] if with_variables else ():
        query = var.get("query")
        if isinstance(query, dict):
            exprs.append(query["query"])
    return exprs


def test_the_dashboard_and_rules_name_only_exported_metrics() -> None:
    import yaml

    queries = _dashboard_queries()
    assert len(queries) >= 10
    rules = [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    for expr in queries + rules:
        named = set(METRIC_TOKEN.findall(expr))
        assert named, f"names no fleetval metric: {expr}"
        assert named <= METRIC_NAMES, f"{expr}: not exported: {sorted(named - METRIC_NAMES)}"
    # and every exported metric is on the dashboard but the bookkeeping ones
    shown = {name for expr in queries for name in METRIC_TOKEN.findall(expr)}
    assert METRIC_NAMES - shown <= {
        "fleetval_result_code",
        "fleetval_store_read_seconds",
        "fleetval_scenario_run_timestamp_seconds",
    }
