"""A simulated cluster under test: the API server, its store and clients of the real kubernetes library."""

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


@dataclass
class SimKube:
    server: KubeApiServer
    store: Store
    kubeconfig: pathlib.Path
    db_url: str

    def api_client(self) -> client.ApiClient:
        """A client of the tests' own (its calls are not the product's: see tests/rbac.py)."""
        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        api.user_agent = TEST_AGENT
        return api

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
        for _ in range(100):
            if self.core.read_namespaced_pod(name, "default").status.phase == "Running":
                return name
            time.sleep(0.05)
        raise AssertionError(f"the workload pod {name} did not start on {node}")
