"""Request bodies the simulated API server must refuse the way kube-apiserver does: 413 above its
3 MiB limit (from Content-Length, before reading, or while reading a chunked body), 400 for a
malformed Content-Length, framing or undecodable body (too deep included), never a 5xx or a hung
server thread, and the next request served as usual. Raw sockets, so that the requests can be
as broken as an attacker makes them."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
from typing import Any

import pytest

from fleetval.sim.kube import server as kube_server
from tests.paths import DEMO_FLEET
from tests.rbac import TEST_AGENT
from tests.simkube import SimKube

LIMIT = 3 * 1024 * 1024  # kube-apiserver's MaxRequestBodyBytes: twice etcd's 1.5 MiB request limit
PODS = "/api/v1/namespaces/fleetval/pods"
ANSWER_TIMEOUT_S = 10.0  # a server thread stuck on the body shows as a timeout, not a hung test
CHUNK = 64 * 1024


@pytest.fixture
def kube(sim_kube: Any) -> SimKube:
    return sim_kube(DEMO_FLEET)  # type: ignore[no-any-return]


def connect(kube: SimKube) -> socket.socket:
    host, port = kube.server.server_address[:2]
    sock = socket.create_connection((str(host), int(port)), timeout=ANSWER_TIMEOUT_S)
    sock.settimeout(ANSWER_TIMEOUT_S)
    return sock


def head(kube: SimKube, method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: sim", f"Authorization: Bearer {kube.server.token}"]
    lines += [f"User-Agent: {TEST_AGENT}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer(sock: socket.socket, method: str = "POST") -> tuple[int, Any]:
    """The next response on `sock`: its code and its body (decoded JSON)."""
    response = http.client.HTTPResponse(sock, method=method)
    response.begin()
    return response.status, json.loads(response.read())


def send(kube: SimKube, data: bytes, *, method: str = "POST") -> tuple[int, Any]:
    with connect(kube) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused mid-body
            sock.sendall(data)
        return answer(sock, method)


def assert_status(answered: tuple[int, Any], code: int, reason: str) -> None:
    """`answered` (code, body) is the API server's refusal: a `Status` with `code` and `reason`."""
    assert (answered[0], answered[1].get("code"), answered[1].get("reason")) == (code, code, reason), answered
    body = answered[1]
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure", body
    assert body["message"], body


def assert_still_serving(kube: SimKube) -> None:
    """A following ordinary request is answered (no thread or connection left wedged)."""
    assert kube.core.list_namespaced_pod("fleetval").kind == "PodList"
    with connect(kube) as sock:
        sock.sendall(head(kube, "GET", "/version", {}))
        code, body = answer(sock, "GET")
    assert code == 200 and body["major"] == "1", body


def pod_json(name: str) -> bytes:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"]}]},
    }
    return json.dumps(body).encode()


# --- Content-Length: too large --------------------------------------------------------------------
def test_declared_body_over_the_limit_is_refused_before_it_is_read(kube: SimKube) -> None:
    # 50 MiB announced, only the first 64 KiB sent: the answer must not wait for (or parse) the rest
    data = head(kube, "POST", PODS, {"Content-Type": "application/json", "Content-Length": str(50 << 20)})
    code, body = send(kube, data + b"x" * CHUNK)
    assert_status((code, body), 413, "RequestEntityTooLarge")
    assert body["message"] == f"Request entity too large: limit is {LIMIT}"
    assert_still_serving(kube)


def test_expect_continue_is_answered_413_without_asking_for_the_body(kube: SimKube) -> None:
    headers = {"Content-Length": str(LIMIT + 1), "Expect": "100-continue"}
    with connect(kube) as sock:
        sock.sendall(head(kube, "POST", PODS, {"Content-Type": "application/json", **headers}))
        assert_status(answer(sock), 413, "RequestEntityTooLarge")  # not "100 Continue" first


@pytest.mark.parametrize("length", [LIMIT + 1, 10**30])
def test_declared_length_just_over_or_absurd_is_413(kube: SimKube, length: int) -> None:
    data = head(kube, "PUT", f"{PODS}/p", {"Content-Type": "application/yaml", "Content-Length": str(length)})
    assert_status(send(kube, data), 413, "RequestEntityTooLarge")
    assert_still_serving(kube)


def test_body_at_the_limit_is_accepted(kube: SimKube) -> None:
    raw = pod_json("at-limit")
    raw += b" " * (LIMIT - len(raw))  # JSON allows trailing whitespace
    data = head(kube, "POST", PODS, {"Content-Type": "application/json", "Content-Length": str(len(raw))})
    code, body = send(kube, data + raw)
    assert code == 201, body
    assert body["metadata"]["name"] == "at-limit"


def test_chunked_body_over_the_limit_is_refused_while_reading(kube: SimKube) -> None:
    data = head(kube, "POST", PODS, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    chunk = f"{CHUNK:x}\r\n".encode() + b" " * CHUNK + b"\r\n"
    data += chunk * (LIMIT // CHUNK) + b"1\r\n "  # one byte past the limit (and no end)
    assert_status(send(kube, data), 413, "RequestEntityTooLarge")
    assert_still_serving(kube)


def test_chunked_body_within_the_limit_is_read(kube: SimKube) -> None:
    raw = pod_json("chunked")
    data = head(kube, "POST", PODS, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    data += b"".join(f"{len(part):x}\r\n".encode() + part + b"\r\n" for part in (raw[:10], raw[10:]))
    code, body = send(kube, data + b"0\r\n\r\n")
    assert code == 201, body
    assert body["metadata"]["name"] == "chunked"


# --- Content-Length: malformed ------------------------------------------------------------------
@pytest.mark.parametrize("length", ["abc", "0x10", "+5", "1_0", "٣", "5 5", "1e3"])
def test_malformed_content_length_is_400(kube: SimKube, length: str) -> None:
    data = head(kube, "POST", PODS, {"Content-Type": "application/json", "Content-Length": length})
    assert_status(send(kube, data + b"{}"), 400, "BadRequest")
    assert_still_serving(kube)


def test_negative_content_length_is_400_not_a_blocked_thread(kube: SimKube) -> None:
    # read(-1) waits for the client to close; this client keeps the connection open for its answer
    data = head(kube, "POST", PODS, {"Content-Type": "application/json", "Content-Length": "-1"})
    assert_status(send(kube, data + pod_json("negative")), 400, "BadRequest")
    assert_still_serving(kube)


def test_conflicting_content_lengths_are_400(kube: SimKube) -> None:
    data = head(kube, "POST", PODS, {"Content-Type": "application/json", "Content-Length": "2"})
    data = data.replace(b"\r\n\r\n", b"\r\nContent-Length: 3\r\n\r\n")
    assert_status(send(kube, data + b"{} "), 400, "BadRequest")
    assert_still_serving(kube)


@pytest.mark.parametrize(
    ("headers", "tail"),
    [
        ({"Transfer-Encoding": "chunked", "Content-Length": "5"}, b"0\r\n\r\n"),
        ({"Transfer-Encoding": "gzip, chunked"}, b"0\r\n\r\n"),
        ({"Transfer-Encoding": "chunked"}, b"zz\r\n{}\r\n0\r\n\r\n"),
        ({"Transfer-Encoding": "chunked"}, b"2\r\n{}XX0\r\n\r\n"),
        ({"Transfer-Encoding": "chunked"}, b"-2\r\n{}\r\n0\r\n\r\n"),
    ],
)
def test_malformed_framing_is_400(kube: SimKube, headers: dict[str, str], tail: bytes) -> None:
    assert_status(
        send(kube, head(kube, "POST", PODS, {"Content-Type": "application/json", **headers}) + tail),
        400,
        "BadRequest",
    )
    assert_still_serving(kube)


def test_stalled_body_frees_the_thread(kube: SimKube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_server, "BODY_READ_TIMEOUT_S", 0.5, raising=False)
    with connect(kube) as sock:
        sock.sendall(head(kube, "POST", PODS, {"Content-Length": "100"}) + b"{")
        assert sock.recv(1024) == b""  # the server gave up on the body and closed
    assert_still_serving(kube)


# --- bodies that cannot be decoded ----------------------------------------------------------------
def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


# deep enough that copying the object would exhaust Python's recursion limit (a 500 before)
DEEP_POD = json.loads(pod_json("deep")) | {"x": nested(600)}


@pytest.mark.parametrize("content_type", ["application/json", "application/yaml"])
@pytest.mark.parametrize(
    "raw",
    [b"[" * 100_000, b"{" * 100_000, b'{"a":' * 100_000, json.dumps(DEEP_POD).encode()],
    ids=["brackets", "braces", "objects", "deep-pod"],
)
def test_too_deep_body_is_400(kube: SimKube, content_type: str, raw: bytes) -> None:
    data = head(kube, "POST", PODS, {"Content-Type": content_type, "Content-Length": str(len(raw))})
    assert_status(send(kube, data + raw), 400, "BadRequest")
    assert_still_serving(kube)


def test_yaml_aliases_are_refused(kube: SimKube) -> None:
    # billion laughs: a few hundred bytes that expand to 10**9 strings as JSON
    raw = b'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n'
    for level in "bcdefghij":
        raw += f"{level}: &{level} [{', '.join([f'*{chr(ord(level) - 1)}'] * 10)}]\n".encode()
    data = head(kube, "POST", PODS, {"Content-Type": "application/yaml", "Content-Length": str(len(raw))})
    assert_status(send(kube, data + raw), 400, "BadRequest")
    assert_still_serving(kube)


def test_yaml_only_as_application_yaml(kube: SimKube) -> None:
    # a timestamp stays the string it is (a label value), as kube-apiserver's YAML-to-JSON keeps it
    raw = b"apiVersion: v1\nkind: Pod\nmetadata: {name: from-yaml, labels: {since: 2026-01-01}}\n"
    raw += b"spec:\n  containers:\n"
    raw += b"  - {name: c, image: 'busybox:1.36', command: ['true']}\n"
    yaml_head = head(
        kube, "POST", PODS, {"Content-Type": "application/yaml", "Content-Length": str(len(raw))}
    )
    code, body = send(kube, yaml_head + raw)
    assert code == 201 and body["metadata"]["name"] == "from-yaml", body
    assert body["metadata"]["labels"] == {"since": "2026-01-01"}
    json_head = head(
        kube, "POST", PODS, {"Content-Type": "application/json", "Content-Length": str(len(raw))}
    )
    assert_status(send(kube, json_head + raw), 400, "BadRequest")


def test_body_of_a_get_does_not_poison_the_connection(kube: SimKube) -> None:
    with connect(kube) as sock:
        sock.sendall(head(kube, "GET", "/version", {"Content-Length": "2"}) + b"{}")
        assert answer(sock, "GET")[0] == 200
        sock.sendall(head(kube, "GET", "/version", {}))  # same connection, kept alive
        code, body = answer(sock, "GET")
    assert code == 200 and body["major"] == "1", body


@pytest.mark.parametrize(
    ("raised", "reported"),
    [
        (ConnectionResetError(104, "Connection reset by peer"), False),
        (BrokenPipeError(), False),
        (KeyError("x"), True),
    ],
    ids=["reset", "broken-pipe", "bug"],
)
def test_a_client_hanging_up_is_not_a_traceback(
    kube: SimKube, capsys: pytest.CaptureFixture[str], raised: BaseException, reported: bool
) -> None:
    """What socketserver does with a handler's exception: a hang-up is routine (the demo printed
    a ConnectionResetError traceback), a bug is still reported."""
    try:
        raise raised
    except BaseException:
        kube.server.handle_error(None, ("127.0.0.1", 1))
    assert ("Traceback" in capsys.readouterr().err) is reported
