"""Where the DAGs get their engine and backend: Airflow Connections and Variables, read at run
time (never at DAG parse time).

- Connection `fleetval_db`: the verdict store (not Airflow's metadata DB). A postgres connection,
  or any connection whose extra has `{"url": "<SQLAlchemy URL>"}` (e.g. sqlite for the demo).
- Variable `fleetval_backend`: `sim` or `k8s` (default `k8s`).
- Variable `fleetval_sim_fleet`: the simulated fleet's name (sim backend only).
- Connection `kubernetes_default`: the cluster (k8s backend), through the provider's hook.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from airflow.sdk import Connection, Variable

from fleetval.store.engine import make_engine
from fleetval.store.repository import Store

if TYPE_CHECKING:
    from fleetval.backends import Backend
    from fleetval.k8s.cluster import KubeCluster
    from fleetval.settings import Settings

DB_CONN_ID = "fleetval_db"
KUBE_CONN_ID = "kubernetes_default"
BACKENDS = ("sim", "k8s")


@cache
def _store_for(url: str) -> Store:
    return Store(make_engine(url))


def db_url() -> str:
    return url_from_connection(Connection.get(DB_CONN_ID))


def url_from_connection(conn: Connection) -> str:
    """The SQLAlchemy URL a `fleetval_db` connection stands for."""
    url = (conn.extra_dejson or {}).get("url")
    if url:
        return str(url)
    uri = str(conn.get_uri())
    if uri.startswith("postgres://"):
        uri = "postgresql+psycopg2://" + uri.removeprefix("postgres://")
    return uri


def store() -> Store:
    return _store_for(db_url())


def backend_name() -> str:
    name = str(Variable.get("fleetval_backend", default="k8s"))
    if name not in BACKENDS:
        raise ValueError(f"Variable fleetval_backend must be one of {BACKENDS}, got {name!r}")
    return name


def backend() -> Backend:
    name = backend_name()
    if name == "sim":
        from fleetval.sim.cluster import SimCluster

        return SimCluster(store().engine, str(Variable.get("fleetval_sim_fleet")))
    from fleetval_airflow.k8s_backend import KubernetesBackend

    return KubernetesBackend()


def settings() -> Settings:
    from fleetval.settings import Settings

    return Settings.from_env()


def kube() -> KubeCluster:
    """The cluster behind the `kubernetes_default` connection (a real one, or `fleetval sim serve`)."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    from fleetval.k8s.cluster import KubeCluster

    return KubeCluster(KubernetesHook(conn_id=KUBE_CONN_ID).core_v1_client, rack_label=settings().rack_label)


def kube_custom_objects() -> Any:
    """The CustomObjectsApi of the `kubernetes_default` cluster."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id=KUBE_CONN_ID).custom_object_client
