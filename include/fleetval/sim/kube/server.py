"""`fleetval sim serve`: the simulated cluster over HTTPS, as the Kubernetes API.

The real `kubernetes` client, the cncf.kubernetes provider's hook, the KubernetesPodOperator and
kubectl talk to it through an ordinary kubeconfig (HTTPS on 127.0.0.1, its CA in the kubeconfig,
with a bearer token; `sim serve` passes `tls`, in-process users may serve plain HTTP). Served:
`/version`, discovery (`/api`, `/apis`), core v1 (pods with `log` and `status`, nodes with
`status`, events, namespaces, configmaps, secrets, serviceaccounts), batch/v1 jobs, and the
custom resources of the upstream CRDs; get, list (label/field selectors, `limit`/`continue`),
watch (newline-delimited JSON stream), create, replace, patch (JSON, merge, strategic merge),
delete (with DeleteOptions' propagationPolicy), any write with `dryRun=All`. Failures are
`Status` bodies with the API server's codes and reasons.

Every resource request is counted in `KubeApiServer.calls` as the RBAC authorizer sees it (verb,
API group, resource, subresource, namespace) with the client's User-Agent, so a test can check
that the shipped RBAC grants exactly what the product calls.
"""

from __future__ import annotations

import base64
import json
import pathlib
import re
import secrets
import ssl
import sys
import threading
import time
import traceback
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import yaml

from fleetval.k8s.validation import (
    KUBERNETES_VERSION,
    ApiError,
    bad_request,
    invalid_error,
    not_supported,
    status_body,
)
from fleetval.sim.kube.cluster import ListOptions, SimKubeCluster
from fleetval.sim.kube.resources import Resource, all_resources, find
from fleetval.sim.kubelet.runtime import log_text

if TYPE_CHECKING:  # tls.py needs `cryptography`, which only `sim serve` brings in
    from fleetval.sim.kube.tls import ServerTls

TICK_S: Final = 0.05


class ApiCall(NamedTuple):
    """One request as Kubernetes RBAC names it."""

    verb: str  # get, list, watch, create, update, patch, delete
    group: str  # "" for the core group
    resource: str  # plural, e.g. "pods"
    subresource: str  # "", "log", "status"
    namespace: str | None  # None for cluster-scoped objects and all-namespace lists
    agent: str  # the client's User-Agent


FLUSH_EVERY_S: Final = 0.5

# Request bodies, as kube-apiserver bounds them: its MaxRequestBodyBytes is twice etcd's 1.5 MiB
# request limit (the JSON of an object is about twice its protobuf in etcd).
MAX_BODY_BYTES: Final = 3 * 1024 * 1024
# Decoding is recursive (json, PyYAML) and so is everything after it (copies, validation,
# serialisation): a body nested deeper than any Kubernetes object is refused up front, well inside
# Python's recursion limit (kube-apiserver's JSON decoder stops at 10000).
MAX_BODY_DEPTH: Final = 100
BODY_READ_TIMEOUT_S = 60.0  # a client that stops sending mid-body loses its connection, not a thread
# Like Go's net/http: after refusing a body, read (and drop) a little of what is still on its way,
# so that closing the connection does not reset it before the client has read the answer.
DRAIN_BYTES: Final = 256 * 1024
DRAIN_TIMEOUT_S: Final = 0.5
TLS_HANDSHAKE_TIMEOUT_S: Final = 10.0  # as Go's net/http client's TLSHandshakeTimeout
MAX_CHUNK_LINE: Final = 4096  # a chunk-size line (with extensions) or a trailer line
MAX_TRAILERS: Final = 100
DECODE_FAILED: Final = "the body of the request could not be decoded"
YAML_MEDIA_TYPES: Final = frozenset({"application/yaml", "application/apply-patch+yaml"})
_DECIMAL: Final = re.compile(r"[0-9]+")  # Content-Length: ASCII digits only (no sign, "_", "0x")
_HEX: Final = re.compile(r"[0-9a-fA-F]+")


class KubeApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        cluster: SimKubeCluster,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        tls: ServerTls | None = None,
    ):
        super().__init__((host, port), _Handler)
        self.cluster = cluster
        self.token = token or secrets.token_hex(16)
        self.tls = tls
        self.calls: Counter[ApiCall] = Counter()
        self._calls_lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="sim-kubelet", daemon=True)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a watch ended, a CLI stopped) is routine, not a traceback on the
        demo's console; anything else is reported as socketserver does."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError | ssl.SSLError):
            return
        super().handle_error(request, client_address)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """The TLS handshake runs here, in the connection's own thread: a slow or silent client
        holds up only itself, not the accept loop."""
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(TLS_HANDSHAKE_TIMEOUT_S)
        try:
            connection = self.tls.context.wrap_socket(request, server_side=True)
        except (OSError, ValueError):  # a client that does not trust the CA, or speaks plain HTTP
            return
        try:
            connection.settimeout(None)
            super().finish_request(connection, client_address)
        finally:
            self.shutdown_request(connection)  # the plain socket it wrapped is closed with it

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}"

    def start(self) -> None:
        """Serve in background threads (the scheduler and kubelets tick in their own)."""
        self.cluster.start()
        self._ticker.start()
        threading.Thread(target=self.serve_forever, name="sim-apiserver", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self.shutdown()
        self.server_close()
        self.cluster.flush()
        self.cluster.stop_containers()

    def _tick(self) -> None:
        last_flush = time.monotonic()
        while not self._stop.wait(TICK_S):
            try:
                with self.cluster.lock:
                    self.cluster._reconcile()
                    if time.monotonic() - last_flush >= FLUSH_EVERY_S:
                        self.cluster._flush()
                        last_flush = time.monotonic()
            except Exception:  # keep the kubelets ticking; the next tick retries (a store blip)
                traceback.print_exc()

    def kubeconfig(self, context: str | None = None) -> dict[str, Any]:
        name = context or f"fleetval-sim-{self.cluster.spec.name}"
        cluster: dict[str, str] = {"server": self.url}
        if self.tls is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self.tls.ca_pem).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": name, "user": {"token": self.token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "fleetval"}}],
            "current-context": name,
        }

    def write_kubeconfig(self, path: pathlib.Path) -> pathlib.Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        path.chmod(0o600)
        return path


class _ClientGone(Exception):
    """The client stopped sending its body (closed, reset or silent): there is nobody to answer."""


class _BodyYamlLoader(yaml.SafeLoader):
    """YAML as kube-apiserver turns it into JSON: timestamps stay strings; no aliases, whose
    expansion into JSON is the billion-laughs bomb (a few hundred bytes, gigabytes expanded)."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError("aliases are not allowed in a request body")
        return super().compose_node(parent, index)


def _yaml_timestamp(loader: _BodyYamlLoader, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


_BodyYamlLoader.add_constructor("tag:yaml.org,2002:timestamp", _yaml_timestamp)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: KubeApiServer
    _raw: bytes = b""  # this request's body, read by _dispatch
    _unread: bool = False  # refused before its body was read: the connection closes

    def log_message(self, format: str, *args: Any) -> None:
        return  # request logging is noise for the simulator's users

    # --- plumbing -----------------------------------------------------------------------------
    def _send_json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _body(self) -> Any:
        """The request body decoded: JSON, or YAML under a YAML media type (as kube-apiserver)."""
        raw = self._raw
        if not raw.strip():
            return None
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        try:
            try:
                body = json.loads(raw)
            except ValueError:  # JSONDecodeError, or bytes that are no Unicode text
                if content_type not in YAML_MEDIA_TYPES:
                    raise
                # the YAML as JSON (what the server would have got from kubectl): mapping keys
                # become strings; what JSON cannot hold (binary, sets) does not decode
                body = json.loads(json.dumps(yaml.load(raw, Loader=_BodyYamlLoader)))
        except (ValueError, TypeError, yaml.YAMLError, RecursionError):  # RecursionError: too deep
            raise bad_request(DECODE_FAILED) from None
        if _depth(body) > MAX_BODY_DEPTH:
            raise bad_request(f"{DECODE_FAILED}: nested more than {MAX_BODY_DEPTH} levels deep")
        return body

    def _framing(self) -> int | None:
        """The body's declared length, None for a chunked one; refused when malformed or too large."""
        lengths = {value.strip(" \t") for value in self.headers.get_all("Content-Length") or []}
        encodings = self.headers.get_all("Transfer-Encoding") or []
        if encodings:
            if lengths:  # which one frames the body is ambiguous: the way to smuggle requests
                raise bad_request("both Transfer-Encoding and Content-Length are set")
            codings = [coding.strip().lower() for value in encodings for coding in value.split(",")]
            if codings != ["chunked"]:
                raise bad_request(f"unsupported transfer encoding: {', '.join(encodings)!r}")
            return None
        if len(lengths) > 1:
            raise bad_request(f"conflicting Content-Length headers: {sorted(lengths)}")
        text = lengths.pop() if lengths else ""
        if not text:
            return 0  # as Go's net/http: an empty Content-Length is no body
        if not _DECIMAL.fullmatch(text):
            raise bad_request(f"invalid Content-Length: {text!r}")
        digits = text.lstrip("0") or "0"
        # compare digit counts first: int() refuses numbers of thousands of digits
        if len(digits) > len(str(MAX_BODY_BYTES)) or int(digits) > MAX_BODY_BYTES:
            raise _too_large()
        return int(digits)

    def _read_body(self) -> bytes:
        """The whole body, at most MAX_BODY_BYTES of it; a refusal leaves the rest unread and
        marks the connection for closing."""
        try:
            length = self._framing()
        except ApiError:
            self._unread = True
            raise
        self.connection.settimeout(BODY_READ_TIMEOUT_S)
        try:
            return self._read_chunked() if length is None else self._read_exactly(length)
        except ApiError:
            self._unread = True
            raise
        except OSError:  # timed out or reset: nobody to answer
            raise _ClientGone from None
        finally:
            if not self._unread:
                self.connection.settimeout(self.timeout)

    def _read_exactly(self, length: int) -> bytes:
        data = self.rfile.read(length) if length else b""
        if len(data) < length:
            raise _ClientGone  # closed mid-body
        return data

    def _read_chunked(self) -> bytes:
        body = bytearray()
        while True:
            size = self._chunk_size()
            if size == 0:
                break
            if len(body) + size > MAX_BODY_BYTES:  # refused before the chunk is read
                raise _too_large()
            body += self._read_exactly(size)
            if self._read_exactly(2) != b"\r\n":
                raise bad_request("malformed chunked encoding: chunk data not followed by CRLF")
        for _ in range(MAX_TRAILERS):
            line = self._line()
            if not line.strip():
                return bytes(body)
        raise bad_request("malformed chunked encoding: too many trailers")

    def _chunk_size(self) -> int:
        text = self._line().split(b";", 1)[0].strip(b" \t\r\n")  # ";..." is a chunk extension
        if not _HEX.fullmatch(text.decode("latin-1")):
            raise bad_request(f"malformed chunked encoding: invalid chunk size {text[:40]!r}")
        return int(text, 16)

    def _line(self) -> bytes:
        line = self.rfile.readline(MAX_CHUNK_LINE + 1)
        if not line.endswith(b"\n"):
            if len(line) > MAX_CHUNK_LINE:
                raise bad_request("malformed chunked encoding: line too long")
            raise _ClientGone
        return line

    def _drain(self) -> None:
        """Drop up to DRAIN_BYTES of a refused body, for at most DRAIN_TIMEOUT_S between reads."""
        self.connection.settimeout(DRAIN_TIMEOUT_S)
        budget = DRAIN_BYTES
        try:
            while budget > 0 and (data := self.rfile.read1(min(budget, 64 * 1024))):
                budget -= len(data)
        except OSError:
            pass  # quiet or gone: the connection is closed either way

    def handle_expect_100(self) -> bool:
        # a body that will be refused is better not sent at all: no "100 Continue" for it, the
        # refusal is the answer
        try:
            self._framing()
        except ApiError:
            return True
        return super().handle_expect_100()

    def _authorized(self) -> bool:
        if self.path.split("?")[0].rstrip("/") in ("/version", "/healthz", "/readyz", "/livez"):
            return True
        return self.headers.get("Authorization") == f"Bearer {self.server.token}"

    def _dispatch(self, method: str) -> None:
        self._raw, self._unread = b"", False
        try:
            # read whatever body comes first, so that the next request on the connection starts
            # where this one ends (a GET's body included)
            self._raw = self._read_body()
            if not self._authorized():
                self._send_json(401, status_body(401, "Unauthorized", "Unauthorized"))
                return
            self._route(method)
        except ApiError as exc:
            if not self._unread:
                self._send_json(exc.code, exc.body)
                return
            self._send_json(exc.code, exc.body, {"Connection": "close"})  # the rest isn't read
            self._drain()
        except _ClientGone:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            return
        except Exception as exc:  # a simulator bug answers like the API server's InternalError
            where = traceback.extract_tb(exc.__traceback__)[-1]
            message = f"{type(exc).__name__}: {exc} ({pathlib.Path(where.filename).name}:{where.lineno})"
            self._send_json(500, status_body(500, "InternalError", message))

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # --- routing ------------------------------------------------------------------------------
    def _route(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/") if p]
        if parts in (["version"], ["healthz"], ["readyz"], ["livez"]):
            self._send_json(200, _version() if parts == ["version"] else "ok")
            return
        if parts == ["api"]:
            self._send_json(
                200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
            )
            return
        if parts == ["apis"]:
            self._send_json(200, _groups())
            return
        if parts and parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts and parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _not_found_path(url.path)
        if not rest:
            self._send_json(200, _resource_list(group, version))
            return
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        res = find(group, version, rest[0])
        if res is None or (namespace is not None and not res.namespaced):
            raise _not_found_path(url.path)
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else ""
        if len(rest) > 3 or subresource not in ("", "status", "log"):
            raise _not_found_path(url.path)
        self._serve(method, res, namespace, name, subresource, query)

    def _serve(
        self,
        method: str,
        res: Resource,
        namespace: str | None,
        name: str | None,
        sub: str,
        query: dict[str, str],
    ) -> None:
        cluster = self.server.cluster
        ns = namespace or ""
        dry_run = method != "GET" and _dry_run(method, query)
        self._count(method, res, namespace, name, sub, query)
        if name is None:
            if method == "GET":
                opts = ListOptions(
                    label_selector=query.get("labelSelector", ""),
                    field_selector=query.get("fieldSelector", ""),
                    limit=_int(query.get("limit"), "limit"),
                    continue_token=query.get("continue", ""),
                )
                if query.get("watch", "").lower() in ("true", "1"):
                    self._watch(res, namespace, opts, query)
                else:
                    self._send_json(200, cluster.list_objects(res, namespace, opts))
                return
            if method == "POST":
                if res.namespaced and namespace is None:
                    raise _method_not_allowed()
                obj, warnings = cluster.create(
                    res,
                    ns,
                    self._body(),
                    field_validation=query.get("fieldValidation", "Warn"),
                    dry_run=dry_run,
                )
                headers = {"Warning": ", ".join(f'299 - "{w}"' for w in warnings)} if warnings else None
                self._send_json(201, obj, headers)
                return
            raise _method_not_allowed()
        if sub == "log":
            if res.kind != "Pod" or method != "GET":
                raise _method_not_allowed()
            self._log(ns, name, query)
            return
        if method == "GET":
            self._send_json(200, cluster.get(res, ns, name))
        elif method == "PUT":
            self._send_json(
                200, cluster.replace(res, ns, name, self._body(), subresource=sub, dry_run=dry_run)
            )
        elif method == "PATCH":
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            patched = cluster.patch(
                res, ns, name, self._body(), content_type, subresource=sub, dry_run=dry_run
            )
            self._send_json(200, patched)
        elif method == "DELETE":
            options = self._body()  # DeleteOptions
            if isinstance(options, dict) and options.get("dryRun"):
                dry_run = _dry_run(method, {"dryRun": ",".join(map(str, options["dryRun"]))})
            propagation = _propagation(options, query)
            grace = _grace_period(options, query)
            self._send_json(
                200,
                cluster.delete(res, ns, name, propagation=propagation, dry_run=dry_run, grace_period=grace),
            )
        else:
            raise _method_not_allowed()

    def _count(
        self,
        method: str,
        res: Resource,
        namespace: str | None,
        name: str | None,
        sub: str,
        query: dict[str, str],
    ) -> None:
        if method == "GET":
            watching = query.get("watch", "").lower() in ("true", "1")
            verb = "watch" if watching else ("get" if name else "list")
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "")
            verb = verb or ("delete" if name else "deletecollection")
        call = ApiCall(verb, res.group, res.plural, sub, namespace, self.headers.get("User-Agent") or "")
        with self.server._calls_lock:
            self.server.calls[call] += 1

    def _watch(self, res: Resource, namespace: str | None, opts: ListOptions, query: dict[str, str]) -> None:
        timeout = float(_int(query.get("timeoutSeconds"), "timeoutSeconds") or 1800)
        events = self.server.cluster.watch(res, namespace, opts, query.get("resourceVersion", ""), timeout)
        first = next(events, None)  # selector errors raise before the stream starts
        self._start_stream("application/json")
        if first is not None:
            self._chunk(json.dumps(first).encode() + b"\n")
        for event in events:
            self._chunk(json.dumps(event).encode() + b"\n")
        self._end_stream()

    def _log(self, namespace: str, name: str, query: dict[str, str]) -> None:
        cluster = self.server.cluster
        container = query.get("container") or None
        follow = query.get("follow", "").lower() in ("true", "1")
        stamps = query.get("timestamps", "").lower() in ("true", "1")
        tail = _int(query.get("tailLines"), "tailLines") if "tailLines" in query else None
        lines, ended = cluster.log_lines(namespace, name, container)
        if tail is not None:
            lines = lines[-tail:] if tail else []
        self._start_stream("text/plain")
        sent = len(lines)

        def emit(batch: list[tuple[float, str]]) -> None:
            self._chunk(log_text(batch, timestamps=stamps).encode())

        emit(lines)
        while follow and not ended:
            time.sleep(TICK_S)
            try:
                current, ended = cluster.log_lines(namespace, name, container)
            except ApiError:  # the pod was deleted: its last lines, then the stream ends (kubectl logs -f)
                emit(cluster.ended_log_lines(namespace, name)[sent:])
                break
            emit(current[sent:])
            sent = len(current)
        self._end_stream()


_OPTIONS: Final = {"POST": "CreateOptions", "PUT": "UpdateOptions", "PATCH": "PatchOptions"}


def _dry_run(method: str, query: dict[str, str]) -> bool:
    """`dryRun=All`: the request is checked (validation, conflicts, admission) and answered as it
    would be, and nothing is stored; "All" is the only value the API server accepts."""
    value = query.get("dryRun")
    if value is None:
        return False
    if value != "All":
        kind = _OPTIONS.get(method, "DeleteOptions")
        raise invalid_error(kind, "", [not_supported("dryRun", value, ["All"])], group="meta.k8s.io")
    return True


def _propagation(options: Any, query: dict[str, str]) -> str | None:
    """DeleteOptions' propagationPolicy (the body's, else the query's), or the legacy
    orphanDependents; None leaves the resource's default."""
    options = options if isinstance(options, dict) else {}
    policy = options.get("propagationPolicy") or query.get("propagationPolicy")
    if policy is not None:
        return str(policy)
    orphan = options.get("orphanDependents", query.get("orphanDependents"))
    if orphan is None:
        return None
    return "Orphan" if orphan is True or str(orphan).lower() == "true" else "Background"


def _grace_period(options: Any, query: dict[str, str]) -> int | None:
    """DeleteOptions' gracePeriodSeconds (the body's, else the query's); None: the pod's own."""
    options = options if isinstance(options, dict) else {}
    value = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
    return None if value is None else _int(str(value), "gracePeriodSeconds")


def _int(text: str | None, name: str) -> int:
    if text in (None, ""):
        return 0
    try:
        value = int(str(text))
    except ValueError:
        raise ApiError(400, status_body(400, "BadRequest", f"invalid value for {name}: {text!r}")) from None
    if value < 0:
        raise ApiError(400, status_body(400, "BadRequest", f"{name} must be non-negative"))
    return value


def _too_large() -> ApiError:
    return ApiError(
        413,
        status_body(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY_BYTES}"),
    )


def _depth(body: Any) -> int:
    """How deeply `body` nests lists and objects, found without recursion (it may be very deep)."""
    deepest, stack = 0, [(body, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            depth += 1
            if depth > MAX_BODY_DEPTH:
                return depth  # no need to walk the rest
            deepest = max(deepest, depth)
            stack.extend((child, depth) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _not_found_path(path: str) -> ApiError:
    return ApiError(404, status_body(404, "NotFound", "the server could not find the requested resource"))


def _method_not_allowed() -> ApiError:
    return ApiError(
        405,
        status_body(
            405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
        ),
    )


def _version() -> dict[str, str]:
    major, minor = KUBERNETES_VERSION.split(".")[:2]
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{major}.{minor}.0-fleetval-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _groups() -> dict[str, Any]:
    groups: dict[str, list[str]] = {}
    for res in all_resources():
        if res.group and res.version not in groups.setdefault(res.group, []):
            groups[res.group].append(res.version)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": group,
                "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]},
            }
            for group, versions in sorted(groups.items())
        ],
    }


def _resource_list(group: str, version: str) -> dict[str, Any]:
    resources = [r for r in all_resources() if (r.group, r.version) == (group, version)]
    if not resources:
        raise _not_found_path(f"{group}/{version}")
    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [
            {
                "name": r.plural,
                "singularName": r.kind.lower(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": verbs,
            }
            for r in resources
        ]
        + [
            {
                "name": f"{r.plural}/{sub}",
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": ["get"],
            }
            for r in resources
            for sub, kind in (("status", r.kind), ("log", "Pod"))
            if sub == "status" or r.kind == "Pod"
        ],
    }
