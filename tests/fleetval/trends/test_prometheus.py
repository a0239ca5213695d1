"""The device trend reader (`fleetval.trends.prometheus`) against a real Prometheus holding replayed
dcgm-exporter history (the degrading node warns, the healthy ones pass, exactly as the judge does on
the same samples in memory), and against a local server answering garbage: whatever breaks, a
node's verdict is `inconclusive`, never `pass`, and nothing raises."""

from __future__ import annotations

import datetime as dt
import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from fleetval.records import Result
from fleetval.trends import history as h
from fleetval.trends.judge import judge_device_trend
from fleetval.trends.prometheus import (
    DEVICE_FIELDS,
    PrometheusSource,
    device_promql,
    judge_device_histories,
    read_device_histories,
)
from tests.fleetval.trends.dcgm_prometheus import Fleet, dcgm_prometheus, replayed_fleet
from tests.metrics.test_prometheus import _free_port

AT = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1)
ABSENT = "gpu-node-not-scraped.example"


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return replayed_fleet(AT)


@pytest.fixture(scope="module")
def prometheus_url(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dcgm_prometheus(tmp_path_factory.mktemp("prometheus"), fleet) as url:
        yield url


def test_promql_asks_for_all_nodes_at_once_by_dcgm_exporter_labels() -> None:
    query = device_promql(
        h.SBE_VOL, node_label="Hostname", nodes=["a.example", "b"], lookback=dt.timedelta(days=1)
    )
    assert query == (
        "max by (Hostname, UUID, gpu) "
        '(last_over_time(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{Hostname=~"a\\\\.example|b"}[86400s]))'
    )
    assert set(DEVICE_FIELDS) >= {h.SBE_VOL, h.SBE_AGG, h.ROW_REMAP_PENDING, h.GPU_TEMP, h.THERMAL_VIOLATION}


def test_a_real_prometheus_warns_on_the_degrading_node_and_passes_the_healthy_ones(
    fleet: Fleet, prometheus_url: str
) -> None:
    nodes = [*fleet.nodes, ABSENT]
    source = PrometheusSource(prometheus_url, chunk_nodes=2)  # two chunks: the chunking is exercised
    histories = read_device_histories(nodes, source=source, at=AT)
    assert histories.problems == {}
    assert histories.read["queries"] == 2 * len(DEVICE_FIELDS)  # per field per chunk, not per node
    # every GPU's every sweep came back, the restarted exporter's two series as one
    for node, gpus in fleet.nodes.items():
        assert set(histories.gpus[node]) == set(gpus)
        for uuid, samples in gpus.items():
            got = histories.gpus[node][uuid]
            assert [s.sweep for s in got] == [s.sweep for s in samples]
            assert got[-1].values[h.GPU_TEMP] == samples[-1].values[h.GPU_TEMP]
            assert got[-1].usable(h.RETIRED_SBE) is None  # DCGM's "not supported" sentinel is not read

    verdicts = {v.subject: v for v in judge_device_histories(nodes, histories)}
    assert set(verdicts) == set(nodes)
    degrading = verdicts[fleet.degrading]
    assert degrading.result is Result.WARN and degrading.criterion == "D-DEV-TREND-01"
    assert degrading.action == "record_only"  # warn never cordons
    assert degrading.rule_id == "trend.sbe.rising_rate"
    assert degrading.evidence["read"]["source"] == "prometheus"
    for node in fleet.healthy:
        assert verdicts[node].result is Result.PASS, verdicts[node].reason
    # the same verdicts as the judge gives on the samples in memory
    for node, gpus in fleet.nodes.items():
        direct = judge_device_trend(node, gpus)
        assert (verdicts[node].result, verdicts[node].rule_id) == (direct.result, direct.rule_id)
    absent = verdicts[ABSENT]
    assert absent.result is Result.INCONCLUSIVE and "Hostname='gpu-node-not-scraped.example'" in absent.reason


def test_a_relabelled_node_label_that_the_exporter_does_not_carry_finds_nothing(
    fleet: Fleet, prometheus_url: str
) -> None:
    source = PrometheusSource(prometheus_url, node_label="node")
    histories = read_device_histories(fleet.nodes, source=source, at=AT)
    results = {v.result for v in judge_device_histories(fleet.nodes, histories)}
    assert results == {Result.INCONCLUSIVE}


def test_history_shorter_than_the_rules_need_is_inconclusive(fleet: Fleet, prometheus_url: str) -> None:
    # nine weeks earlier: only the oldest sample of each series falls in the window read
    early = AT - 8 * dt.timedelta(days=7)
    histories = read_device_histories(fleet.nodes, source=PrometheusSource(prometheus_url), at=early)
    verdicts = judge_device_histories(fleet.nodes, histories)
    assert {v.result for v in verdicts} == {Result.INCONCLUSIVE}
    assert all("1 sweep(s) of history" in v.reason for v in verdicts)


# --- a server that answers garbage ------------------------------------------------------------------

Answer = Callable[[str], tuple[int, bytes]]


def _good_answer(fleet: Fleet, query: str, start: float, step: float, spoil: str = "") -> bytes:
    """What Prometheus answers for `query`, from the samples in memory; `spoil` breaks it one way."""
    name = next(f for f in DEVICE_FIELDS if f"({f}{{" in query)
    shift = 0.3 * step if spoil == "off-grid" else 0.0
    result = []
    for node, gpus in fleet.nodes.items():
        for uuid, samples in gpus.items():
            values: list[list[Any]] = [
                [start + s.sweep * step + shift, str(s.values[name])] for s in samples if name in s.values
            ]
            if spoil == "not-a-number":
                values[-1][1] = "n/a"
            if spoil == "value-not-a-string":
                values[-1][1] = float(values[-1][1])
            result.append({"metric": {"Hostname": node, "UUID": uuid, "gpu": "0"}, "values": values})
    doc: dict[str, Any] = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    if spoil == "warnings":  # a partial answer: Thanos with a store gateway down
        doc["warnings"] = ["No StoreAPIs matched for this query"]
    return json.dumps(doc).encode()


@pytest.fixture
def server(fleet: Fleet) -> Iterator[Callable[[Answer], str]]:
    """A local HTTP server; `serve(answer)` makes `answer(field)` its reply and returns its URL."""
    answers: list[Answer] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
            query = form["query"][0]
            name = next(f for f in DEVICE_FIELDS if f"({f}{{" in query)
            status, body = answers[-1](name)
            if body.startswith(b"GOOD"):
                start, step = float(form["start"][0]), float(form["step"][0][:-1])
                body = _good_answer(fleet, query, start, step, spoil=body[5:].decode())
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()

    def serve(answer: Answer) -> str:
        answers.append(answer)
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    try:
        yield serve
    finally:
        httpd.shutdown()
        httpd.server_close()


def _judged(fleet: Fleet, url: str) -> tuple[dict[str, Any], Any]:
    histories = read_device_histories(fleet.nodes, source=PrometheusSource(url), at=AT)
    return {v.subject: v for v in judge_device_histories(fleet.nodes, histories)}, histories


EMPTY = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (lambda _: (200, b"<html>not Prometheus</html>"), "not JSON"),
        (lambda _: (500, b'{"status":"error","errorType":"internal","error":"boom"}'), "HTTP 500: boom"),
        (lambda _: (503, b"Service Unavailable"), "HTTP 503"),
        (lambda _: (200, b'{"status":"success","data":{"resultType":"vector","result":[]}}'), "not a matrix"),
        (
            lambda _: (200, b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{}}]}}'),
            "values",
        ),
        (lambda _: (200, b"[1, 2, 3]"), "not a JSON object"),
        (lambda _: (200, json.dumps({"status": "success", "data": None}).encode()), "not a matrix"),
    ],
    ids=["html", "500", "503-text", "vector", "series-without-values", "json-list", "null-data"],
)
def test_garbage_from_prometheus_is_inconclusive_never_pass(
    fleet: Fleet, server: Callable[[Answer], str], answer: Answer, problem: str
) -> None:
    verdicts, _ = _judged(fleet, server(answer))
    assert {v.result for v in verdicts.values()} == {Result.INCONCLUSIVE}
    for verdict in verdicts.values():
        assert verdict.reason.startswith("Prometheus: ") and problem in verdict.reason
        assert verdict.evidence["read_problems"]


def test_an_empty_answer_is_inconclusive(fleet: Fleet, server: Callable[[Answer], str]) -> None:
    verdicts, histories = _judged(fleet, server(lambda _: (200, EMPTY)))
    assert histories.problems == {}
    assert {v.result for v in verdicts.values()} == {Result.INCONCLUSIVE}
    assert all("no dcgm-exporter series" in v.reason for v in verdicts.values())


def test_the_local_server_serves_what_prometheus_would(fleet: Fleet, server: Callable[[Answer], str]) -> None:
    """The control for the partial cases below: every field answered, the healthy nodes pass."""
    verdicts, histories = _judged(fleet, server(lambda _: (200, b"GOOD")))
    assert histories.problems == {}
    assert verdicts[fleet.degrading].result is Result.WARN
    assert {verdicts[n].result for n in fleet.healthy} == {Result.PASS}


def test_one_field_unreadable_makes_a_passing_node_inconclusive_but_a_warning_stands(
    fleet: Fleet, server: Callable[[Answer], str]
) -> None:
    url = server(lambda name: (500, b"{}") if name == h.THERMAL_VIOLATION else (200, b"GOOD"))
    verdicts, _ = _judged(fleet, url)
    for node in fleet.healthy:
        assert verdicts[node].result is Result.INCONCLUSIVE
        assert verdicts[node].evidence["on_what_was_read"] == "pass"  # would have passed: not enough
        assert h.THERMAL_VIOLATION in verdicts[node].reason
    warned = verdicts[fleet.degrading]
    assert warned.result is Result.WARN and warned.evidence["read_problems"]


@pytest.mark.parametrize("spoil", ["warnings", "off-grid", "not-a-number", "value-not-a-string"])
def test_partial_or_odd_answers_are_inconclusive(
    fleet: Fleet, server: Callable[[Answer], str], spoil: str
) -> None:
    """Every answer carries the healthy history (unspoilt, they pass: the control above)."""
    verdicts, _ = _judged(fleet, server(lambda _: (200, f"GOOD:{spoil}".encode())))
    assert {verdicts[n].result for n in fleet.healthy} == {Result.INCONCLUSIVE}
    assert verdicts[fleet.degrading].result is not Result.PASS


def test_prometheus_unreachable_is_inconclusive_and_stops_asking(fleet: Fleet) -> None:
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    verdicts, histories = _judged(fleet, url)
    assert {v.result for v in verdicts.values()} == {Result.INCONCLUSIVE}
    assert all("unreachable" in v.reason for v in verdicts.values())
    assert histories.read["queries"] == 1  # not one timeout per field and chunk


def test_the_prometheus_settings_default_to_off_and_refuse_what_would_break_the_query() -> None:
    from fleetval.settings import ENV_VARS, Settings

    assert {"FLEETVAL_PROMETHEUS_URL", "FLEETVAL_PROMETHEUS_NODE_LABEL"} <= set(ENV_VARS)
    default = Settings.from_env({})
    assert (default.prometheus_url, default.prometheus_node_label) == ("", "Hostname")
    given = Settings.from_env(
        {"FLEETVAL_PROMETHEUS_URL": " http://prom:9090/ ", "FLEETVAL_PROMETHEUS_NODE_LABEL": "node"}
    )
    assert (given.prometheus_url, given.prometheus_node_label) == ("http://prom:9090", "node")
    with pytest.raises(ValueError, match="FLEETVAL_PROMETHEUS_URL"):
        Settings.from_env({"FLEETVAL_PROMETHEUS_URL": "prom:9090"})
    with pytest.raises(ValueError, match="FLEETVAL_PROMETHEUS_NODE_LABEL"):
        Settings.from_env({"FLEETVAL_PROMETHEUS_NODE_LABEL": 'node"} or vector(1) #'})
