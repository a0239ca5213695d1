"""Probe specs and their KubernetesPodOperator keyword arguments (pure; no Airflow import).

One ProbeSpec is rendered two ways: as KPO kwargs for the `k8s` backend, and as a command the
simulator answers for the `sim` backend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes.client import models as k8s

from fleetval.backends import MAINTENANCE_TAINT

NAMESPACE: Final = "fleetval"
# DCGM diagnostics image, pinned by tag (digest pinning is a deploy-time override: FLEETVAL_DCGM_IMAGE).
DCGM_IMAGE: Final = "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    probe_key: str
    tool: str
    node: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    gpus: int = 0
    timeout_s: int = 1800
    env: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)  # tool parameters the simulator reads (level…)

    def to_json(self) -> dict[str, Any]:
        return {
            "probe_key": self.probe_key,
            "tool": self.tool,
            "node": self.node,
            "image": self.image,
            "command": list(self.command),
            "args": list(self.args),
            "gpus": self.gpus,
            "timeout_s": self.timeout_s,
            "env": self.env,
            "params": self.params,
        }


def dcgm_diag_probe(node: str, *, level: int, gpus: int, run_key: str, image: str = DCGM_IMAGE) -> ProbeSpec:
    """`dcgmi diag -r <level> -j` on every GPU of `node`.

    The pod starts its own host engine and prints the JSON report to stdout. It exits 0 whatever
    DCGM found (dcgmi exits non-zero on a failed test): the parsed report decides, and an empty
    or truncated report is inconclusive, never a pass.
    """
    script = f"nv-hostengine >/dev/null 2>&1; dcgmi diag -r {level} -j; exit 0"
    return ProbeSpec(
        probe_key=f"{run_key}/dcgm-r{level}/{node}",
        tool="dcgm",
        node=node,
        image=image,
        command=("/bin/bash", "-c"),
        args=(script,),
        gpus=gpus,
        timeout_s=3600 if level >= 3 else 1200,
        params={"level": level},
    )


def pod_name(spec: ProbeSpec) -> str:
    base = f"fleetval-{spec.tool}-{spec.node}".lower().replace("_", "-").replace(".", "-")
    return base[:52].rstrip("-")


def kpo_kwargs(spec: ProbeSpec) -> dict[str, Any]:
    """KubernetesPodOperator arguments for one probe: pinned to its node, all its GPUs, tolerating
    our own maintenance taint (a cordoned node under diagnosis must still run the probe)."""
    return {
        "name": pod_name(spec),
        "namespace": NAMESPACE,
        "image": spec.image,
        "cmds": list(spec.command),
        "arguments": list(spec.args),
        "env_vars": [k8s.V1EnvVar(name=k, value=v) for k, v in sorted(spec.env.items())],
        "labels": {
            "app.kubernetes.io/part-of": "fleetval",
            "fleetval.io/tool": spec.tool,
            "fleetval.io/node": spec.node[:63],
        },
        "node_selector": {"kubernetes.io/hostname": spec.node},
        "container_resources": k8s.V1ResourceRequirements(
            limits={"nvidia.com/gpu": str(spec.gpus)}, requests={"nvidia.com/gpu": str(spec.gpus), "cpu": "1"}
        ),
        "tolerations": [
            k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
            k8s.V1Toleration(key=MAINTENANCE_TAINT, operator="Exists"),
            k8s.V1Toleration(key="node.kubernetes.io/unschedulable", operator="Exists", effect="NoSchedule"),
        ],
        "active_deadline_seconds": spec.timeout_s,
        "security_context": k8s.V1PodSecurityContext(run_as_non_root=False),
        "container_security_context": k8s.V1SecurityContext(
            capabilities=k8s.V1Capabilities(add=["SYS_ADMIN"]), allow_privilege_escalation=True
        ),
        "service_account_name": "fleetval-probe",
        "termination_message_policy": "FallbackToLogsOnError",
        "get_logs": True,
        "do_xcom_push": False,
        "on_finish_action": "delete_succeeded_pod",
        "startup_timeout_seconds": 600,
    }


# nccl-tests with OpenMPI (CoreWeave's public build: CUDA 12.4.1, NCCL 2.21.5), pinned by tag; a
# site build with the fabric's plugins (or a digest) is passed as `image`.
NCCL_TESTS_IMAGE: Final = "ghcr.io/coreweave/nccl-tests:12.4.1-cudnn-devel-ubuntu20.04-nccl2.21.5-1-85f9143"
NCCL_MIN_BYTES: Final = "8"
NCCL_MAX_BYTES: Final = "8G"


SUBJECT_MAX: Final = 100


def nccl_subject(nodes: Sequence[str]) -> str:
    """The verdict subject of an NCCL probe: the node, or `nodeA+nodeB` for a pair (DESIGN.md §5).
    A larger group (fault isolation) is `a+b+c…` while that stays short, else
    `group<N>-<digest>` (its verdicts list the nodes)."""
    joined = "+".join(nodes)
    if len(nodes) <= 2 or len(joined) <= SUBJECT_MAX:
        return joined
    return f"group{len(nodes)}-{hashlib.sha256(joined.encode()).hexdigest()[:12]}"


def nccl_probe(
    nodes: Sequence[str],
    *,
    gpus_per_node: int,
    repeat: int,
    run_key: str,
    collective: str = "all_reduce",
    image: str = NCCL_TESTS_IMAGE,
    profile: str | None = None,
    scope: str | None = None,
    fabric: str | None = None,
    purpose: str | None = None,
) -> ProbeSpec:
    """nccl-tests `<collective>_perf -b 8 -e 8G -f 2 -g <gpus>` over one node or a group of nodes.

    One process per node drives all its GPUs (`-g`), so a group of N nodes is N × gpus ranks.
    The shell exits 0 whatever nccl-tests found (it exits non-zero on an NCCL failure): the parsed
    output decides, so a broken link is a `fail` verdict, not a harness error; `params["argv"]`
    is the bare nccl-tests command line (the MPIJob launcher runs it under mpirun).
    One node runs as a pod pinned to it; a group runs as an MPIJob gang-admitted through Kueue
    (`fleetval.k8s.mpijob`), whose launcher runs this command under `mpirun -np N`. NCCL_DEBUG=INFO
    makes NCCL print its version, topology and active transport, which the judges require.
    `profile`, `scope`, the expected `fabric` and `purpose` (sweep, isolation) travel in params
    so a stored probe can be re-judged later without its run's plan.
    """
    members = list(nodes)
    if not members:
        raise ValueError("an NCCL probe needs at least one node")
    if len(set(members)) != len(members):
        raise ValueError(f"duplicate nodes in an NCCL probe: {members}")
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
    kind = "intra" if len(members) == 1 else "inter"
    subject = nccl_subject(members)
    argv = [
        f"{collective}_perf",
        "-b",
        NCCL_MIN_BYTES,
        "-e",
        NCCL_MAX_BYTES,
        "-f",
        "2",
        "-g",
        str(gpus_per_node),
    ]
    params: dict[str, Any] = {"nodes": members, "repeat": repeat, "collective": collective, "argv": argv}
    extra = (("profile", profile), ("scope", scope), ("fabric", fabric), ("purpose", purpose))
    params.update({k: v for k, v in extra if v})
    return ProbeSpec(
        probe_key=f"{run_key}/nccl-{kind}/{subject}/r{repeat}",
        tool="nccl",
        node=subject,
        image=image,
        command=("/bin/bash", "-c"),
        args=(f"{' '.join(argv)}; exit 0",),
        gpus=gpus_per_node,
        timeout_s=1800,
        env={"NCCL_DEBUG": "INFO"},
        params=params,
    )
