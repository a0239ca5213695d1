"""Where the tasks get the store and the cluster: Airflow Connections, read at run time (never
at DAG parse time).

- Connection `fleetval_db`: the verdict store (not Airflow's metadata DB). A postgres connection,
  or any connection whose extra has `{"url": "<SQLAlchemy URL>"}` (e.g. sqlite for the demo).
- Connection `kubernetes_default`: the cluster — a customer's, or the simulated one that
  `fleetval sim serve` serves — through the provider's hook.
- The environment settings (`FLEETVAL_*`): `settings()`.
- A suite run's common end (`finish_suite_run`): its summary stored, printed and made the task's state.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from airflow.sdk import Connection

from fleetval.store.engine import make_engine
from fleetval.store.repository import Store

if TYPE_CHECKING:
    from fleetval.k8s.cluster import KubeCluster
    from fleetval.settings import Settings

DB_CONN_ID = "fleetval_db"
KUBE_CONN_ID = "kubernetes_default"


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


def finish_suite_run(fv_run: int, summary: dict[str, Any], checks: str) -> dict[str, Any]:
    """Store the summary (`fleetval.records.summarize`) in the run and end it; print it, and fail the
    task when any check did not pass, so the run is red with the reasons in this log."""
    runs = store()
    runs.update_run_meta(fv_run, summary=summary)
    runs.finish_run(fv_run)
    for key, count in summary["counts"].items():
        print(f"{count:>5}  {key}")
    print("\n".join(summary["not_passed"]) or "every check passed")
    if summary["not_passed"]:
        raise RuntimeError(f"{len(summary['not_passed'])} {checks} checks did not pass (listed above)")
    return summary


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
