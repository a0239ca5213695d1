"""The node side of a simulated GPU node, shared by both backends: the simulated API server's
kubelets (`fleetval.sim.kube.cluster`) and the virtual kubelet that joins a real control plane
(`fleetval.sim.kubelet.virtual`).

A container runs through the image catalog (`fleetval.sim.images.run_container`): what it prints
and how it ends come from the fleet spec, faults included. This module turns that into a `Run`
(output lines with their times, the exit code, when it ends) and writes a pod's status as the
kubelet writes it: Running with every container started and Ready, then terminated with the
exit code, reason and (for FallbackToLogsOnError) the last lines as the message.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from dataclasses import dataclass
from typing import Any, Final

from fleetval.fleet.spec import FleetSpec
from fleetval.k8s import scheduling
from fleetval.sim.images import ContainerContext, ContainerResult, run_container
from fleetval.sim.kube.meta import rfc3339

GPU: Final = "nvidia.com/gpu"
SIM_FAILURE_EXIT: Final = 128


def nano_rfc3339(t: float) -> str:
    """A log line's timestamp as the kubelet writes it (RFC 3339 with nanoseconds)."""
    stamp = dt.datetime.fromtimestamp(t, dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond * 1000:09d}Z"


@dataclass(slots=True)
class Run:
    """What the kubelet knows of a pod's base container run (not part of the API object)."""

    node: str
    gpus: list[int]
    started: float
    ends: float
    output: str
    exit_code: int
    # A container that really runs (sim/kube/processes.py): its process, and its lines with the
    # time the kubelet read each. Not kept in the store: a restarted server has lost its processes.
    live: Any = None
    stamped: list[tuple[float, str]] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "gpus": self.gpus,
            "started": self.started,
            "ends": self.ends if math.isfinite(self.ends) else None,  # JSON has no infinity
            "output": self.output,
            "exit_code": self.exit_code,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Run:
        ends = math.inf if data["ends"] is None else float(data["ends"])
        return cls(data["node"], list(data["gpus"]), data["started"], ends, data["output"], data["exit_code"])

    def lines(self) -> list[tuple[float, str]]:
        """Output lines with the time each was printed (spread over the run)."""
        if self.stamped is not None:
            return list(self.stamped)
        lines = self.output.splitlines()
        span = max(0.0, self.ends - self.started) if math.isfinite(self.ends) else 0.0
        n = max(1, len(lines))
        return [(self.started + span * (i + 1) / n, line) for i, line in enumerate(lines)]


def container_requests(container: dict[str, Any]) -> dict[str, Any]:
    resources = container.get("resources") or {}
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def gpu_request(container: dict[str, Any]) -> int:
    return int(scheduling.parse_quantity(container_requests(container).get(GPU, "0")))


def shm_bytes(pod: dict[str, Any], container: dict[str, Any]) -> int | None:
    """/dev/shm size: a memory-backed emptyDir mounted there, else the runtime's 64 MiB default."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or [] if "name" in v}
    for mount in container.get("volumeMounts") or []:
        if mount.get("mountPath") == "/dev/shm":
            empty_dir = (volumes.get(mount.get("name", "")) or {}).get("emptyDir")
            if empty_dir is not None and empty_dir.get("medium") == "Memory":
                limit = empty_dir.get("sizeLimit")
                return int(scheduling.parse_quantity(limit)) if limit else 1 << 40
    return None


def container_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env", []) if "name" in e}


def argv_of(container: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    """Image, command and args; a JSON null in a string list decodes to "" on a real server."""
    command = ["" if a is None else str(a) for a in container.get("command") or []]
    args = ["" if a is None else str(a) for a in container.get("args") or []]
    return str(container.get("image", "")), command, args


def simulated_run(
    spec: FleetSpec,
    container: dict[str, Any],
    ctx: ContainerContext,
    gpus: list[int],
    now: float,
    time_scale: float,
) -> Run:
    """Run a container through the image catalog; its nominal duration is scaled by `time_scale`."""
    image, command, args = argv_of(container)
    try:
        result: ContainerResult = run_container(image, command, args, ctx, spec)
    except Exception as exc:  # a simulator bug fails this container, not the kubelet of every pod
        message = f"fleetval-sim: the simulated runtime failed: {type(exc).__name__}: {exc}"
        result = ContainerResult(message + "\n", SIM_FAILURE_EXIT, 0.0)
    # A process that never exits by itself (`sleep infinity`, a server) runs until deleted.
    took = result.duration_s * time_scale if math.isfinite(result.duration_s) else math.inf
    return Run(ctx.node, gpus, now, now + took, result.output, result.exit_code)


def container_status(
    container: dict[str, Any], state: dict[str, Any], *, ready: bool = False
) -> dict[str, Any]:
    image = str(container.get("image", ""))
    return {
        "name": container["name"],
        "image": image,
        "imageID": f"{image.split(':')[0]}@sha256:{hashlib.sha256(image.encode()).hexdigest()}",
        "ready": ready,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    }


def pod_ip(seed: int, key: object) -> str:
    digest = hashlib.sha256(f"{seed}/{key}".encode()).digest()
    return f"10.244.{digest[0]}.{digest[1] % 254 + 1}"


def mark_running(pod: dict[str, Any], now: float, ip: str) -> None:
    """The pod's status once its containers started (in place)."""
    started = rfc3339(now)
    status = pod.setdefault("status", {})
    status["phase"] = "Running"
    status["podIP"] = status.get("hostIP", ip) if pod["spec"].get("hostNetwork") else ip
    status["podIPs"] = [{"ip": status["podIP"]}]
    status["containerStatuses"] = [
        container_status(c, {"running": {"startedAt": started}}, ready=True)
        for c in pod["spec"]["containers"]
    ]
    status["conditions"] = [c for c in status.get("conditions", []) if c["type"] == "PodScheduled"] + [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
    ]


def mark_terminated(
    pod: dict[str, Any],
    run: Run,
    at: float,
    *,
    exit_code: int,
    reason: str,
    pod_reason: str = "",
    pod_message: str = "",
) -> None:
    """The pod's status once its containers ended (in place); the run ends at `at` at the latest."""
    run.ends = min(run.ends, at)
    status = pod.setdefault("status", {})
    status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
    if pod_reason:
        status["reason"] = pod_reason
        status["message"] = pod_message
    finished = rfc3339(at)
    terminated: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": rfc3339(run.started),
        "finishedAt": finished,
        "containerID": f"containerd://{hashlib.sha256(pod['metadata']['uid'].encode()).hexdigest()}",
    }
    if exit_code != 0 and any(
        c.get("terminationMessagePolicy") == "FallbackToLogsOnError" for c in pod["spec"]["containers"]
    ):
        terminated["message"] = "\n".join(run.output.splitlines()[-80:])[-4096:]
    status["containerStatuses"] = [
        container_status(c, {"terminated": terminated}) for c in pod["spec"]["containers"]
    ]
    status["conditions"] = [
        {**c, "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished}
        if c["type"] in ("Ready", "ContainersReady", "PodReadyToStartContainers")
        else c
        for c in status.get("conditions", [])
    ]


def end_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else ("StartError" if exit_code == SIM_FAILURE_EXIT else "Error")


def log_text(lines: list[tuple[float, str]], *, timestamps: bool) -> str:
    return "".join(f"{nano_rfc3339(t) + ' ' if timestamps else ''}{line}\n" for t, line in lines)
