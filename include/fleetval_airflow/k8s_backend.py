"""The `k8s` backend of Xid remediation and the NCCL sweep, until they run their probes as
probe pod tasks like the weekly sweep: probes as pods rendered by the KubernetesPodOperator;
inventory and node operations through `fleetval.k8s.cluster.KubeCluster`.

Pods of one wave run concurrently: each is created, polled until it ends or its deadline
passes, its log read (the tool's raw output), and deleted when it succeeded (failed pods are
kept for forensics). A pod that never ran is a harness error, not a verdict about the node.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

from fleetval.backends import NodeInfo, ProbeOutput
from fleetval.k8s.cluster import KubeCluster
from fleetval.k8s.specs import ProbeSpec, kpo_kwargs
from fleetval.settings import Settings

POLL_S = 5.0
MAX_PARALLEL_PODS = 64


def render_pod(spec: ProbeSpec) -> Any:
    """The V1Pod the KubernetesPodOperator would create for `spec` (no cluster access)."""
    op = KubernetesPodOperator(task_id=f"probe_{spec.tool}", **kpo_kwargs(spec))
    return op.build_pod_request_obj(dry_run=True)


class KubernetesBackend:
    name = "k8s"

    def __init__(self, conn_id: str = "kubernetes_default") -> None:
        self.hook = KubernetesHook(conn_id=conn_id)
        self.core = self.hook.core_v1_client
        self.cluster = KubeCluster(self.core, rack_label=Settings.from_env().rack_label)

    # --- inventory and node actions: the one cluster client ---------------------------------
    def list_nodes(self) -> list[NodeInfo]:
        return self.cluster.list_nodes()

    # --- probes -----------------------------------------------------------------------------
    def run_probes(self, specs: Sequence[ProbeSpec]) -> list[ProbeOutput]:
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_PODS, max(1, len(specs)))) as pool:
            return list(pool.map(self._run_one, specs))

    def _run_one(self, spec: ProbeSpec) -> ProbeOutput:
        if len(spec.params.get("nodes") or ()) > 1:  # multi-node: an MPIJob gang-admitted by Kueue
            from fleetval_airflow.k8s_mpijob import run_mpijob_probe

            return run_mpijob_probe(self.hook.custom_object_client, self.core, spec)
        started = time.time()
        pod = render_pod(spec)
        namespace = pod.metadata.namespace
        try:
            created = self.core.create_namespaced_pod(namespace=namespace, body=pod)
            name = created.metadata.name
            deadline = started + spec.timeout_s + 600
            phase = "Pending"
            while time.time() < deadline:
                phase = self.core.read_namespaced_pod(name=name, namespace=namespace).status.phase
                if phase in ("Succeeded", "Failed"):
                    break
                time.sleep(POLL_S)
            raw = self.core.read_namespaced_pod_log(name=name, namespace=namespace, container="base")
            error = None if phase == "Succeeded" else f"pod {name} ended in phase {phase}"
            if phase == "Succeeded":
                self.core.delete_namespaced_pod(name=name, namespace=namespace)
            return ProbeOutput(
                spec.probe_key,
                spec.node,
                spec.tool,
                raw or "",
                0 if error is None else 1,
                started,
                time.time(),
                error=error,
                spec=spec.to_json(),
            )
        except Exception as exc:  # the harness broke: recorded as an `error` verdict for this node
            return ProbeOutput(
                spec.probe_key,
                spec.node,
                spec.tool,
                "",
                None,
                started,
                time.time(),
                error=f"{type(exc).__name__}: {exc}"[:500],
                spec=spec.to_json(),
            )

    def cordon(self, node: str) -> None:
        self.cluster.cordon(node)

    def uncordon(self, node: str) -> None:
        self.cluster.uncordon(node)

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self.cluster.set_labels(node, labels)

    def add_taint(self, node: str, key: str, value: str, effect: str) -> None:
        self.cluster.add_taint(node, key, value, effect)

    def remove_taint(self, node: str, key: str) -> None:
        self.cluster.remove_taint(node, key)
