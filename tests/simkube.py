"""A simulated cluster under test: the API server, its store and clients of the real kubernetes library."""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config

from fleetval.k8s.cluster import KubeCluster
from fleetval.sim.kube.server import KubeApiServer
from fleetval.store.repository import Store


@dataclass
class SimKube:
    server: KubeApiServer
    store: Store
    kubeconfig: pathlib.Path
    db_url: str

    def api_client(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(self.kubeconfig))

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
