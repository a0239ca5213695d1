"""The virtual kubelet: a simulated fleet's GPU nodes joining a real control plane.

One process stands in for the kubelets of every node of a fleet spec, as a client of a real
kube-apiserver (with the rights of the `system:node` ClusterRole):

- **Nodes**: each node is registered with the capacity, allocatable and labels that the GPU
  Operator, GPU Feature Discovery and the device plugin leave on a real GPU node
  (`fleetval.sim.kube.nodes`), its InternalIP on loopback and the port of this kubelet's API.
  A Lease in kube-node-lease is renewed every `LEASE_RENEW_S`, the Ready condition's heartbeat
  every `STATUS_HEARTBEAT_S`, so the node lifecycle controller keeps the nodes Ready (and marks
  them NotReady, as for any kubelet, when this process stops).
- **Pods** the real scheduler binds to these nodes (one list-and-watch of every bound pod) run
  through the image catalog (`fleetval.sim.kubelet.runtime`): a probe prints what the real tool
  prints on that node, the fleet spec's faults included; the checkpoint drill's image runs as a
  real process. The status goes back as a kubelet writes it (a strategic merge patch of
  `status`: Running, then terminated with the exit code); GPUs are handed out as the device
  plugin does (healthy ones, not held by another running container).
- **Deletion** as a kubelet does it: a pod marked for deletion keeps running until its container
  ends or its grace period is over. A simulated container is a PID 1 without a SIGTERM handler
  (busybox `sleep`, a tool exec'd by `sh -c`): it ignores SIGTERM and is killed (exit 137) when the
  grace period ends; a real process gets SIGTERM, then SIGKILL. The pod is then deleted with a
  grace period of 0 (finalizers, such as Kueue's, keep the object until their controller lets go).
- **Logs** are served by the kubelet API (`/containerLogs/...`, HTTPS with client certificates),
  which kube-apiserver proxies `pods/log` to, so `kubectl logs -f` and the KubernetesPodOperator
  read them as on a real cluster.

Time: a container runs its tool's nominal duration × `time_scale` (0: at once); grace periods are
real seconds (the control plane's controllers wait for them).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import math
import signal
import ssl
import threading
import time
import traceback
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from fleetval.fleet.spec import FleetSpec
from fleetval.sim.images import ContainerContext
from fleetval.sim.kube import operands, processes
from fleetval.sim.kube.meta import TERMINAL, rfc3339
from fleetval.sim.kube.nodes import node_object, unhealthy_gpus
from fleetval.sim.kubelet.runtime import (
    Run,
    container_env,
    end_reason,
    gpu_request,
    log_text,
    mark_running,
    mark_terminated,
    pod_ip,
    shm_bytes,
    simulated_run,
)

TICK_S: Final = 0.1
LEASE_RENEW_S: Final = 10.0
LEASE_DURATION_S: Final = 40
STATUS_HEARTBEAT_S: Final = 60.0
KILLED_EXIT: Final = 137  # 128 + SIGKILL
ENDED_LOGS_KEPT: Final = 512
STRATEGIC: Final = "application/strategic-merge-patch+json"
MERGE: Final = "application/merge-patch+json"
AGENT: Final = "fleetval-virtual-kubelet"


def _first_line(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if body:
        with contextlib.suppress(ValueError, TypeError):
            return f"{getattr(exc, 'status', '')} {json.loads(body).get('message', '')}"
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _micro_time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class PodState:
    """What this kubelet holds for one pod it runs."""

    uid: str
    namespace: str
    name: str
    node: str
    obj: dict[str, Any]
    run: Run | None = None
    reported: str = ""  # the phase last written to the API server
    sigterm_sent: bool = False
    kill_at: float | None = None  # when the grace period of a deletion ends (from when this kubelet saw it)
    gone: bool = False  # deleted from the API server
    containers: list[str] = field(default_factory=list)


class VirtualKubelet:
    """The kubelets of `spec`'s nodes against the API server `api` talks to."""

    def __init__(
        self,
        spec: FleetSpec,
        api: client.ApiClient,
        *,
        port: int,
        node_ip: str = "127.0.0.1",
        time_scale: float = 0.0,
        volume_root: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spec = spec
        self.api = api
        self.core = client.CoreV1Api(api)
        self.leases = client.CoordinationV1Api(api)
        self.port = port
        self.node_ip = node_ip
        self.time_scale = time_scale
        self.instance = uuid.uuid4().hex[:12]  # this kubelet's own pod directories
        self.volume_root = volume_root
        self.clock = clock
        self.nodes = {name: (rack, index) for index, (name, rack) in enumerate(spec.nodes())}
        self.lock = threading.Condition()
        self.pods: dict[str, PodState] = {}  # by uid
        self.by_name: dict[tuple[str, str], PodState] = {}  # the newest pod of that name
        self._ended: dict[tuple[str, str], PodState] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._last_lease = 0.0
        self._last_status = 0.0
        self.errors: list[str] = []

    # --- nodes --------------------------------------------------------------------------------
    def node_body(self, name: str) -> dict[str, Any]:
        rack, index = self.nodes[name]
        node = node_object(self.spec, name, rack, index)
        status = node["status"]
        status["addresses"] = [
            {"type": "InternalIP", "address": self.node_ip},
            {"type": "Hostname", "address": name},
        ]
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.port}}
        now = rfc3339(self.clock())
        for condition in status.get("conditions", []):
            condition["lastHeartbeatTime"] = now
            condition["lastTransitionTime"] = now
        node["spec"].pop("podCIDR", None)  # no pod network to hand out
        node["metadata"].pop("uid", None)
        return node

    def register(self) -> None:
        """Create every node (or take over one that exists) and write its status."""
        for name in self.nodes:
            body = self.node_body(name)
            try:
                self.core.create_node({k: v for k, v in body.items() if k != "status"})
            except ApiException as exc:
                if exc.status != 409:
                    raise
            self.core.patch_node_status(name, {"status": body["status"]})
        self._renew_leases(force=True)
        self._last_status = self.clock()

    def _renew_leases(self, *, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self._last_lease < LEASE_RENEW_S:
            return
        self._last_lease = now
        renew = {"spec": {"holderIdentity": None, "renewTime": _micro_time(now)}}
        for name in self.nodes:
            renew["spec"]["holderIdentity"] = name
            try:
                self.leases.patch_namespaced_lease(name, "kube-node-lease", renew, _content_type=MERGE)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": name, "namespace": "kube-node-lease"},
                    "spec": {**renew["spec"], "leaseDurationSeconds": LEASE_DURATION_S},
                }
                self.leases.create_namespaced_lease("kube-node-lease", body)

    def _heartbeat(self) -> None:
        now = self.clock()
        if now - self._last_status < STATUS_HEARTBEAT_S:
            return
        self._last_status = now
        stamp = rfc3339(now)
        for name in self.nodes:
            node = self.api.sanitize_for_serialization(self.core.read_node(name))
            conditions = (node.get("status") or {}).get("conditions") or []
            for condition in conditions:
                condition["lastHeartbeatTime"] = stamp
                if condition["type"] == "Ready" and condition["status"] != "True":
                    condition.update(
                        status="True",
                        reason="KubeletReady",
                        message="kubelet is posting ready status",
                        lastTransitionTime=stamp,
                    )
            self.core.patch_node_status(name, {"status": {"conditions": conditions}}, _content_type=STRATEGIC)

    # --- the pod watch ------------------------------------------------------------------------
    def _watch(self) -> None:
        """List, then watch, every pod bound to a node; relist when the watch expires."""
        while not self._stop.is_set():
            try:
                listed = self.api.sanitize_for_serialization(
                    self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
                )
                with self.lock:
                    seen = set()
                    for item in listed.get("items", []):
                        item.setdefault("apiVersion", "v1")
                        item.setdefault("kind", "Pod")
                        seen.add(item["metadata"]["uid"])
                        self._observe("MODIFIED", item)
                    for uid, state in list(self.pods.items()):
                        if uid not in seen:
                            self._observe("DELETED", state.obj)
                self._wake.set()
                stream = watch.Watch()
                for event in stream.stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector="spec.nodeName!=",
                    resource_version=listed["metadata"]["resourceVersion"],
                    timeout_seconds=300,
                    allow_watch_bookmarks=True,
                    _request_timeout=330,
                ):
                    if self._stop.is_set():
                        stream.stop()
                        return
                    kind = event["type"]
                    if kind in ("BOOKMARK", "ERROR"):
                        if kind == "ERROR":
                            break
                        continue
                    obj = self.api.sanitize_for_serialization(event["object"])
                    with self.lock:
                        self._observe(kind, obj)
                    self._wake.set()
            except (ApiException, HTTPError, OSError, ValueError) as exc:
                self._note(f"pod watch: {type(exc).__name__}: {exc}")
                self._stop.wait(1.0)

    def _observe(self, kind: str, pod: dict[str, Any]) -> None:
        """A watch event (lock held)."""
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        uid = str(meta.get("uid") or "")
        if node not in self.nodes or not uid:
            return
        state = self.pods.get(uid)
        if kind == "DELETED":
            if state is not None:
                state.gone = True
                state.obj = pod
            return
        if state is None:
            state = PodState(
                uid,
                str(meta["namespace"]),
                str(meta["name"]),
                str(node),
                pod,
                containers=[c["name"] for c in pod["spec"]["containers"]],
            )
            self.pods[uid] = state
            self.by_name[(state.namespace, state.name)] = state
        else:
            state.obj = pod

    # --- the kubelet's loop -------------------------------------------------------------------
    def run(self) -> None:
        """Run the registered nodes' pods until `stop()`."""
        watcher = threading.Thread(target=self._watch, name="pod-watch", daemon=True)
        watcher.start()
        while not self._stop.is_set():
            self._wake.wait(TICK_S)
            self._wake.clear()
            # Each duty on its own: a failing heartbeat must not stop the pods, nor the reverse.
            for duty in (self._renew_leases, self._heartbeat, self.sync):
                try:
                    duty()
                except (ApiException, HTTPError, OSError) as exc:
                    self._note(f"{duty.__name__}: {type(exc).__name__}: {_first_line(exc)}")
                    self._stop.wait(0.2)
                except Exception:  # a simulator bug: report it, keep the nodes alive
                    self._note(traceback.format_exc())

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        with self.lock:
            for state in self.pods.values():
                if state.run is not None and state.run.live is not None:
                    with contextlib.suppress(Exception):
                        state.run.live.send(signal.SIGKILL)

    def _note(self, message: str) -> None:
        self.errors.append(message)
        del self.errors[:-50]
        print(f"virtual-kubelet: {message}", flush=True)

    def sync(self) -> None:
        """One pass over the pods this kubelet runs."""
        with self.lock:
            states = list(self.pods.values())
        now = self.clock()
        for state in states:
            if state.gone:
                self._forget(state)
                continue
            pod = copy.deepcopy(state.obj)
            meta, status = pod["metadata"], pod.get("status") or {}
            phase = status.get("phase", "Pending")
            if meta.get("deletionTimestamp"):
                self._terminating(state, pod, now)
            elif state.run is None:
                if phase in TERMINAL:
                    continue  # ran before this kubelet started; nothing left to do
                self._start(state, pod, now)
            elif state.reported not in TERMINAL:
                self._progress(state, pod, now)

    def _forget(self, state: PodState) -> None:
        """A pod gone from the API (deleted with grace 0, its namespace gone): its container stops."""
        if state.run is not None and state.run.live is not None and state.run.live.exit_code() is None:
            state.run.live.send(signal.SIGKILL)
        with self.lock:
            self.pods.pop(state.uid, None)
            key = (state.namespace, state.name)
            if self.by_name.get(key) is state:
                del self.by_name[key]
            if state.run is not None:
                self._ended[key] = state
                while len(self._ended) > ENDED_LOGS_KEPT:
                    self._ended.pop(next(iter(self._ended)))

    def _held_gpus(self, node: str, uid: str) -> set[int]:
        return {
            g
            for other in self.pods.values()
            if other.uid != uid
            and other.node == node
            and other.run is not None
            and other.reported not in TERMINAL
            for g in other.run.gpus
        }

    def _start(self, state: PodState, pod: dict[str, Any], now: float) -> None:
        node = state.node
        container = pod["spec"]["containers"][0]
        wanted = gpu_request(container)
        with self.lock:
            held = self._held_gpus(node, state.uid)
        bad = unhealthy_gpus(self.spec, node)
        gpus = [i for i in range(self.spec.profile_of(node).gpus) if i not in held and i not in bad][:wanted]
        visible = gpus
        if not gpus and any(f.kind == "op.isolation_leak" for f in self.spec.faults_on(node)):
            visible = list(range(self.spec.profile_of(node).gpus))
        image = str(container.get("image", ""))
        if processes.runs_as_process(image):
            run = self._start_process(state, pod, container, gpus, now)
        else:
            ctx = ContainerContext(
                node=node,
                gpu_indices=tuple(visible),
                env=container_env(container),
                salt=state.uid,
                peers=(),
                shm_bytes=shm_bytes(pod, container),
                driver_version=self.spec.profile_of(node).driver_version,
                started_at=now,
                exporter_running=operands.exporter_running(self.spec, node, self._node_labels(node)),
            )
            run = simulated_run(self.spec, container, ctx, gpus, now, self.time_scale)
        status = pod.setdefault("status", {})
        status["hostIP"] = self.node_ip
        status["hostIPs"] = [{"ip": self.node_ip}]
        status.setdefault("startTime", rfc3339(now))
        status["qosClass"] = status.get("qosClass", "BestEffort")
        mark_running(pod, now, pod_ip(self.spec.seed, (state.namespace, state.name, state.uid)))
        with self.lock:
            state.run = run
        self._event(pod, "Normal", "Started", f"Started container {container['name']}", now)
        self._write_status(state, pod)
        self._progress(state, pod, now)

    def _node_labels(self, node: str) -> dict[str, str]:
        """The node's labels now, as the kubelet reads its Node (the GPU Operator and fleetval change
        its `nvidia.com/gpu.deploy.*` labels)."""
        obj = self.api.sanitize_for_serialization(self.core.read_node(node))
        return dict((obj.get("metadata") or {}).get("labels") or {})

    def _start_process(
        self, state: PodState, pod: dict[str, Any], container: dict[str, Any], gpus: list[int], now: float
    ) -> Run:
        root = self.volume_root or processes.default_volume_root(self.spec.name)
        _image, command, args = (
            container.get("image"),
            container.get("command") or [],
            container.get("args") or [],
        )
        faults = tuple(f.kind for f in self.spec.cluster_faults("job"))
        started = processes.start(
            pod,
            container,
            list(command),
            list(args),
            root,
            root / ".logs" / f"{state.uid}.log",
            faults,
            self.instance,
        )
        if isinstance(started, processes.StartFailure):
            return Run(state.node, gpus, now, now, started.message + "\n", started.exit_code)
        return Run(state.node, gpus, now, math.inf, "", 0, live=started, stamped=[])

    def _pump(self, run: Run, now: float) -> None:
        """Read what a running process printed; its end once it exited."""
        code = run.live.exit_code()
        text = run.live.output()
        fresh = text[len(run.output) :]
        if code is None:
            fresh = fresh[: fresh.rfind("\n") + 1]  # a partial line waits for its end
        with self.lock:
            if fresh:
                run.output += fresh
                assert run.stamped is not None
                run.stamped.extend((now, line) for line in fresh.splitlines())
            if code is not None and not math.isfinite(run.ends):
                run.ends, run.exit_code = now, int(code)

    def _progress(self, state: PodState, pod: dict[str, Any], now: float) -> None:
        run = state.run
        assert run is not None
        if run.live is not None:
            root = self.volume_root or processes.default_volume_root(self.spec.name)
            processes.refresh_downward_api(pod, root, self.instance)
            self._pump(run, now)
        deadline = pod["spec"].get("activeDeadlineSeconds")
        if deadline and now >= run.started + float(deadline) and now < run.ends:
            self._finish(
                state,
                pod,
                now,
                KILLED_EXIT,
                "Error",
                pod_reason="DeadlineExceeded",
                pod_message="Pod was active on the node longer than the specified deadline",
            )
            return
        if now < run.ends:
            return
        restart = pod["spec"].get("restartPolicy", "Always")
        if restart == "Always" or (restart == "OnFailure" and run.exit_code != 0):
            return  # kept running, as a restarted container would be
        self._finish(state, pod, run.ends, run.exit_code, end_reason(run.exit_code))

    def _terminating(self, state: PodState, pod: dict[str, Any], now: float) -> None:
        """A pod marked for deletion: end its container by the grace period, then delete it."""
        run = state.run
        if run is not None and state.reported not in TERMINAL:
            if run.live is not None:
                self._pump(run, now)
            if state.kill_at is None:  # a kubelet counts the grace period from when it acts on it
                grace = pod["metadata"].get("deletionGracePeriodSeconds")
                state.kill_at = now + float(grace if grace is not None else 30)
            deadline = state.kill_at
            if now < run.ends and now < deadline:
                if run.live is not None and not state.sigterm_sent:
                    run.live.send(signal.SIGTERM)
                    state.sigterm_sent = True
                    self._event(pod, "Normal", "Killing", f"Stopping container {state.containers[0]}", now)
                return  # a PID 1 without a handler ignores SIGTERM: it runs on until the deadline
            if now < run.ends:
                if run.live is not None:
                    run.live.send(signal.SIGKILL)
                    return  # its exit comes on a later pass
                self._finish(state, pod, deadline, KILLED_EXIT, "Error")
            else:
                self._finish(state, pod, run.ends, run.exit_code, end_reason(run.exit_code))
        self._delete(state)

    def _finish(
        self,
        state: PodState,
        pod: dict[str, Any],
        at: float,
        exit_code: int,
        reason: str,
        *,
        pod_reason: str = "",
        pod_message: str = "",
    ) -> None:
        assert state.run is not None
        with self.lock:
            mark_terminated(
                pod,
                state.run,
                at,
                exit_code=exit_code,
                reason=reason,
                pod_reason=pod_reason,
                pod_message=pod_message,
            )
        self._write_status(state, pod)

    def _write_status(self, state: PodState, pod: dict[str, Any]) -> None:
        status = pod["status"]
        try:
            written = self.core.patch_namespaced_pod_status(
                state.name, state.namespace, {"status": status}, _content_type=STRATEGIC
            )
        except ApiException as exc:
            if exc.status == 404:
                with self.lock:
                    state.gone = True
                return
            raise
        with self.lock:
            state.reported = status.get("phase", "")
            state.obj = self.api.sanitize_for_serialization(written)

    def _delete(self, state: PodState) -> None:
        body = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=state.uid)
        )
        try:
            self.core.delete_namespaced_pod(state.name, state.namespace, body=body)
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone, or a new pod of that name
                raise
        with self.lock:
            if not (state.obj.get("metadata") or {}).get("finalizers"):
                state.gone = True

    def _event(self, pod: dict[str, Any], kind: str, reason: str, message: str, now: float) -> None:
        meta = pod["metadata"]
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
                "apiVersion": "v1",
                "fieldPath": f"spec.containers{{{pod['spec']['containers'][0]['name']}}}",
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": pod["spec"]["nodeName"]},
            "firstTimestamp": rfc3339(now),
            "lastTimestamp": rfc3339(now),
            "count": 1,
            "reportingComponent": "kubelet",
            "reportingInstance": pod["spec"]["nodeName"],
        }
        with contextlib.suppress(ApiException):
            self.core.create_namespaced_event(meta["namespace"], body)

    # --- logs ---------------------------------------------------------------------------------
    def log_lines(
        self, namespace: str, name: str, container: str
    ) -> tuple[list[tuple[float, str]], bool] | str:
        """The lines printed so far and whether the container ended, or why there are none."""
        with self.lock:
            state = self.by_name.get((namespace, name)) or self._ended.get((namespace, name))
            if state is None:
                return f'pod "{name}" not found on this node'
            if container not in state.containers:
                return f"container {container} is not valid for pod {name}"
            run = state.run
            if run is None:
                return f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
            if container != state.containers[0]:
                return [], state.reported in TERMINAL or state.gone
            now = self.clock()
            ended = state.reported in TERMINAL or state.gone or now >= run.ends
            return [(t, line) for t, line in run.lines() if ended or t <= now], ended


class KubeletApi(ThreadingHTTPServer):
    """The kubelet's HTTPS API that kube-apiserver proxies `pods/log` to (client certificates
    signed by the cluster CA required)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, kubelet: VirtualKubelet, host: str, port: int, cert: Path, key: Path, client_ca: Path):
        super().__init__((host, port), _KubeletHandler)
        self.kubelet = kubelet
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
        self.socket = context.wrap_socket(self.socket, server_side=True)

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="kubelet-api", daemon=True).start()


class _KubeletHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: KubeletApi

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _plain(self, code: int, text: str) -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        if parts == ["healthz"]:
            self._plain(200, "ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._plain(404, "404 page not found\n")
            return
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        self._logs(parts[1], parts[2], parts[3], query)

    def _logs(self, namespace: str, name: str, container: str, query: dict[str, str]) -> None:
        kubelet = self.server.kubelet
        follow = query.get("follow", "").lower() in ("true", "1")
        stamps = query.get("timestamps", "").lower() in ("true", "1")
        found = kubelet.log_lines(namespace, name, container)
        if isinstance(found, str):
            self._plain(404 if "not found" in found else 400, found)
            return
        lines, ended = found
        if "tailLines" in query:
            with contextlib.suppress(ValueError):
                tail = int(query["tailLines"])
                lines = lines[-tail:] if tail > 0 else []
        if "sinceSeconds" in query:
            with contextlib.suppress(ValueError):
                since = kubelet.clock() - int(query["sinceSeconds"])
                lines = [(t, line) for t, line in lines if t >= since]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = len(found[0])
        self._chunk(log_text(lines, timestamps=stamps))
        while follow and not ended:
            time.sleep(TICK_S)
            again = kubelet.log_lines(namespace, name, container)
            if isinstance(again, str):
                break
            current, ended = again
            self._chunk(log_text(current[sent:], timestamps=stamps))
            sent = len(current)
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, text: str) -> None:
        if not text:
            return
        data = text.encode()
        with contextlib.suppress(OSError):
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()


def serve(
    spec: FleetSpec,
    kubeconfig: Path,
    *,
    port: int,
    cert: Path,
    key: Path,
    client_ca: Path,
    time_scale: float = 0.0,
    ready_file: Path | None = None,
) -> None:
    """Run the virtual kubelet until SIGTERM (the `fleetval cluster kubelet` process)."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    api.user_agent = AGENT
    kubelet = VirtualKubelet(spec, api, port=port, time_scale=time_scale)
    server = KubeletApi(kubelet, kubelet.node_ip, port, cert, key, client_ca)
    server.start()
    signal.signal(signal.SIGTERM, lambda *_: kubelet.stop())
    signal.signal(signal.SIGINT, lambda *_: kubelet.stop())
    kubelet.register()
    if ready_file is not None:
        ready_file.write_text(json.dumps({"nodes": len(kubelet.nodes), "port": port}))
    kubelet.run()
    server.shutdown()
