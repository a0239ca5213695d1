"""A cluster under test: the simulated one (`SimKube`: its API server and store) or the real control
plane (`tests.realkube.RealKube`), with the same clients of the real kubernetes library."""

from __future__ import annotations

import pathlib
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config

from fleetval.k8s.cluster import KubeCluster
from fleetval.sim.kube.server import KubeApiServer
from fleetval.store.repository import Store
from tests.rbac import TEST_AGENT


class KubeUnderTest:
    """What the tests do on either backend, through `api_client()`."""

    backend: str
    store: Store
    kubeconfig: pathlib.Path  # what the product (Airflow's kubernetes_default) uses

    def api_client(self) -> client.ApiClient:
        raise NotImplementedError

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client())

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client())

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api_client())

    @property
    def cluster(self) -> KubeCluster:
        return KubeCluster(self.core)

    def node(self, name: str) -> Any:
        return self.core.read_node(name)

    def run_workload(
        self, node: str, gpus: int, *, name: str = "", labels: dict[str, str] | None = None
    ) -> str:
        """A training pod holding `gpus` GPUs on `node` (running until deleted); returns its name."""
        name = name or f"training-{node}"
        self.core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": name, "labels": labels or {}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {
                            "name": "train",
                            "image": "busybox:1.36",
                            "command": ["/bin/sh", "-c", "sleep infinity"],
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        )
        deadline = time.monotonic() + 30  # the real scheduler and kubelet take a moment
        while time.monotonic() < deadline:
            if self.core.read_namespaced_pod(name, "default").status.phase == "Running":
                return name
            time.sleep(0.05)
        raise AssertionError(f"the workload pod {name} did not start on {node}")


@dataclass
class SimKube(KubeUnderTest):
    server: KubeApiServer
    store: Store
    kubeconfig: pathlib.Path
    db_url: str
    backend = "sim"

    def api_client(self) -> client.ApiClient:
        """A client of the tests' own (its calls are not the product's: see tests/rbac.py)."""
        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        api.user_agent = TEST_AGENT
        return api
