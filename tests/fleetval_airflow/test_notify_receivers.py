"""`fleet_notifications`' tasks against a local receiver that records every request, sent through the
real notifiers: the Slack provider's SlackWebhookNotifier, the PagerDuty provider's
PagerdutyNotifier, and the generic (Opsgenie) webhook notifier. What arrives is checked field by
field against each receiver's format: one storm is one request per receiver, a flapping node is
trigger and resolve on one dedup key, shadow mode sends nothing, a channel without its connection
is skipped."""

from __future__ import annotations

import dataclasses
import datetime as dt
import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetval.notify import evaluation
from fleetval.notify.policy import DEFAULT_POLICY, Channel
from fleetval.policy import node_health as nh
from fleetval.settings import NOTIFY_ENV_VARS
from fleetval.sim.controlplane.pki import CertificateAuthority
from fleetval.store import notifications as ledger_store
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import Store
from fleetval_airflow import notify_tasks
from tests.fleetval.notify.store_fleet import NODES, sweep

SLACK_TOKEN = "T0000/B0000/XXXXXXXX"
ROUTING_KEY = "R0UTINGKEY0000000000000000000000"
GENIE_KEY = "genie-api-key"


@dataclasses.dataclass
class Received:
    scheme: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class Receiver:
    """One plain-HTTP and one HTTPS server on loopback (ephemeral ports), answering as Slack,
    PagerDuty and Opsgenie answer, and recording each POST."""

    def __init__(self, tmp: Path) -> None:
        self.requests: list[Received] = []
        ca = CertificateAuthority(tmp / "pki", name="notify-receiver-ca")
        pair = ca.issue("receiver", "127.0.0.1", hosts=("127.0.0.1",), server=True)
        self.ca_file = ca.pair.cert
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(pair.cert, pair.key)
        self._servers = [self._server("http", None), self._server("https", tls)]
        self.http_url = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.https_url = f"https://127.0.0.1:{self._servers[1].server_address[1]}"

    def _server(self, scheme: str, tls: ssl.SSLContext | None) -> http.server.ThreadingHTTPServer:
        received = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                received.append(Received(scheme, self.path, dict(self.headers), body))
                if self.path.startswith("/v2/enqueue"):  # PagerDuty Events API v2
                    self._answer(
                        202,
                        {"status": "success", "message": "Event processed", "dedup_key": body["dedup_key"]},
                    )
                elif self.path.startswith("/v2/alerts"):  # Opsgenie
                    self._answer(
                        202, {"result": "Request will be processed", "took": 0.01, "requestId": "r1"}
                    )
                else:  # a Slack incoming webhook answers a bare "ok"
                    self._answer(200, None)

            def _answer(self, status: int, doc: dict[str, Any] | None) -> None:
                data = b"ok" if doc is None else json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if doc is None else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def by_path(self, prefix: str) -> list[Received]:
        return [r for r in self.requests if r.path.startswith(prefix)]


@pytest.fixture
def receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    import pagerduty

    server = Receiver(tmp_path)
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLEETVAL_SLACK",
        json.dumps({"conn_type": "slackwebhook", "host": server.http_url, "password": SLACK_TOKEN}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLEETVAL_PAGERDUTY",
        json.dumps({"conn_type": "pagerduty_events", "password": ROUTING_KEY}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLEETVAL_WEBHOOK",
        json.dumps({"conn_type": "http", "host": server.http_url, "password": GENIE_KEY}),
    )
    # The PagerDuty provider's hook builds `pagerduty.EventsApiV2Client(routing_key)`, whose base URL
    # is the client's `default_base_url` (https://events.pagerduty.com, https only): that one
    # property is pointed at the local HTTPS receiver, trusted through SSL_CERT_FILE (read by the
    # client's HTTP library). The notifier, the hook and the client's request are the real ones.
    monkeypatch.setattr(pagerduty.EventsApiV2Client, "default_base_url", property(lambda _: server.https_url))
    monkeypatch.setenv("SSL_CERT_FILE", str(server.ca_file))
    for name in NOTIFY_ENV_VARS:  # the defaults
        monkeypatch.delenv(name, raising=False)
    yield server
    server.stop()


@pytest.fixture
def fleet(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    engine = make_engine(pg_url)
    upgrade(engine)
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLEETVAL_DB", json.dumps({"conn_type": "generic", "extra": {"url": pg_url}})
    )
    yield Store(engine)
    engine.dispose()


@pytest.mark.postgres
def test_a_storm_reaches_each_receiver_once_in_its_real_format(receiver: Receiver, fleet: Store) -> None:
    sweep(fleet, "w1", NODES[:40], at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5))
    planned = notify_tasks.evaluate.function()
    assert planned["notices"] == 3 and planned["channels"] == ["slack", "pagerduty", "webhook"]
    assert notify_tasks.deliver.function() == {"sent": 3, "failed": 0}

    [slack] = receiver.by_path(f"/{SLACK_TOKEN}")
    assert slack.scheme == "http" and set(slack.body) >= {"text", "blocks"}
    assert slack.body["text"].startswith(":red_circle: 40 nodes quarantined: r01-n01")
    assert [b["type"] for b in slack.body["blocks"]] == ["header", "section", "context"]

    [page] = receiver.by_path("/v2/enqueue")
    assert page.scheme == "https" and page.headers["Content-Type"] == "application/json"
    body = page.body
    assert body["routing_key"] == ROUTING_KEY and body["event_action"] == "trigger"
    assert body["dedup_key"].startswith("fleetval/storm/quarantine/")
    payload = body["payload"]
    assert {"summary", "source", "severity", "component", "group", "class", "custom_details"} <= set(payload)
    assert (
        payload["severity"] == "error"
        and payload["class"] == "quarantine"
        and payload["source"] == "fleetval"
    )
    assert payload["custom_details"]["count"] == 40 and len(payload["summary"]) <= 1024

    [alert] = receiver.by_path("/v2/alerts")
    assert alert.path == "/v2/alerts" and alert.headers["Authorization"] == f"GenieKey {GENIE_KEY}"
    assert alert.body["alias"] == body["dedup_key"] and alert.body["priority"] == "P2"
    assert len(alert.body["message"]) <= 130 and alert.body["source"] == "fleetval"
    assert all(isinstance(v, str) for v in alert.body["details"].values())

    # the stored payload is what arrived (the routing key and API key come from the connections)
    stored = {r["channel"]: r["payload"] for r in ledger_store.notices(fleet.engine)}
    assert stored["pagerduty"] == {k: v for k, v in body.items() if k != "routing_key"}
    assert stored["webhook"]["body"] == alert.body and stored["slack"]["blocks"] == slack.body["blocks"]
    assert {r["status"] for r in ledger_store.notices(fleet.engine)} == {"sent"}

    # the next run: nothing new, nothing sent
    assert notify_tasks.evaluate.function()["notices"] == 0
    notify_tasks.deliver.function()
    assert len(receiver.requests) == 3


@pytest.mark.postgres
def test_a_flapping_node_is_trigger_and_resolve_on_one_key(receiver: Receiver, fleet: Store) -> None:
    node = NODES[9]
    start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)
    channels = tuple(Channel)
    for i in range(3):
        at = start + dt.timedelta(minutes=20 * i)
        sweep(fleet, f"q{i}", [node], at=at)
        evaluation.evaluate(fleet.engine, DEFAULT_POLICY, channels, at + dt.timedelta(minutes=1))
        sweep(fleet, f"r{i}", [node], at=at + dt.timedelta(minutes=5), action=nh.RETURN_TO_SERVICE)
        evaluation.evaluate(fleet.engine, DEFAULT_POLICY, channels, at + dt.timedelta(minutes=6))
    notify_tasks.deliver.function()

    pages = [r.body for r in receiver.by_path("/v2/enqueue")]
    assert [p["event_action"] for p in pages] == ["trigger", "resolve"] * 3
    assert len({p["dedup_key"] for p in pages}) == 1  # one PagerDuty incident
    assert pages[-2]["payload"]["custom_details"]["times_opened"] == 3
    alerts = receiver.by_path("/v2/alerts")
    alias = alerts[0].body["alias"]
    closes = [r.path for r in alerts if r.path.endswith("/close?identifierType=alias")]
    assert len(alerts) == 6 and len(closes) == 3
    assert {r.body.get("alias") for r in alerts if not r.path.endswith("alias")} == {alias}
    [incident] = ledger_store.incidents(fleet.engine)
    assert incident.count == 3 and incident.dedup_key == alias == pages[0]["dedup_key"]


@pytest.mark.postgres
def test_shadow_mode_sends_nothing_and_records_what_it_would(
    receiver: Receiver, fleet: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETVAL_NOTIFY_SHADOW", "true")
    sweep(fleet, "w1", NODES[:40], at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5))
    assert notify_tasks.evaluate.function()["shadow"] is True
    notify_tasks.deliver.function()
    assert receiver.requests == []
    rows = ledger_store.notices(fleet.engine)
    assert len(rows) == 3 and {(r["status"], r["shadow"]) for r in rows} == {("shadow", True)}


@pytest.mark.postgres
def test_a_channel_without_its_connection_is_skipped(
    receiver: Receiver, fleet: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_FLEETVAL_PAGERDUTY")
    sweep(fleet, "w1", NODES[:2], at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5))
    assert notify_tasks.evaluate.function()["channels"] == ["slack", "webhook"]
    assert notify_tasks.deliver.function() == {"sent": 4, "failed": 0}
    assert receiver.by_path("/v2/enqueue") == [] and len(receiver.requests) == 4


def test_dag_shape(dagbag: Any) -> None:
    dag = dagbag.dags["fleet_notifications"]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {
        "evaluate": ["deliver"],
        "deliver": [],
    }
    assert dag.schedule == "*/10 * * * *" and dag.max_active_runs == 1 and dag.catchup is False


@pytest.mark.postgres
@pytest.mark.airflow
def test_a_run_of_the_dag_delivers_a_storm_once(
    dagbag: Any, airflow_db: None, receiver: Receiver, fleet: Store
) -> None:
    sweep(fleet, "w1", NODES[:40], at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5))
    dag = dagbag.dags["fleet_notifications"]
    assert dag.test().state == "success"
    assert sorted((r.scheme, r.path) for r in receiver.requests) == [
        ("http", f"/{SLACK_TOKEN}"),
        ("http", "/v2/alerts"),
        ("https", "/v2/enqueue"),
    ]
    assert {r["status"] for r in ledger_store.notices(fleet.engine)} == {"sent"}
