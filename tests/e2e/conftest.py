"""End-to-end set-up: one local Airflow 3 for the session (api-server, scheduler with the
LocalExecutor, dag-processor, triggerer), talking to a cluster started per test — the simulated one
(`fleetval sim serve`) or the real control plane (`fleetval cluster up`, backend "controlplane") —
and to a verdict store on the real PostgreSQL that each test gets fresh."""

from __future__ import annotations

import os
import pathlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa

from fleetval.sim.airflow_run import LocalAirflow
from tests.paths import DAGS
from tests.rbac import check_server
from tests.simkube import KubeUnderTest, SimKube

BACKENDS = ("sim", "controlplane")


@dataclass
class E2E:
    airflow: LocalAirflow
    kube: KubeUnderTest


@pytest.fixture(scope="session")
def local_airflow(
    pg_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalAirflow, str]]:
    base = tmp_path_factory.mktemp("airflow-e2e")
    url = (
        sa.make_url(pg_server_url)
        .set(database=f"fleetval_e2e_{os.getpid()}")
        .render_as_string(hide_password=False)
    )
    _recreate(pg_server_url, url)
    # Instant simulated probes: the probe tasks stay on their worker (see LocalAirflow.deferrable_probes).
    airflow = LocalAirflow(base / "home", url, base / "kubeconfig", dags_folder=DAGS, deferrable_probes=False)
    try:
        airflow.start()
        yield airflow, url
    finally:
        airflow.stop()
        _drop(pg_server_url, url)


def _recreate(admin_url: str, url: str) -> None:
    _drop(admin_url, url)
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{sa.make_url(url).database}"'))
    admin.dispose()


def _drop(admin_url: str, url: str) -> None:
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{sa.make_url(url).database}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def e2e(local_airflow: tuple[LocalAirflow, str], pg_server_url: str, tmp_path: pathlib.Path) -> Iterator[Any]:
    """`start(fleet_path, time_scale=0.0, backend="sim") -> E2E`: a fresh store and a cluster behind
    the session's Airflow. On the real control plane the product authenticates as deploy/rbac.yaml's
    `fleetval-runner` (a call it does not grant fails the flow); on the simulator every call is
    checked against deploy/rbac.yaml after the test."""
    from fleetval.fleet.spec import load_fleet_spec
    from fleetval.sim.kube.cluster import SimKubeCluster
    from fleetval.sim.kube.server import KubeApiServer
    from fleetval.store.engine import make_engine
    from fleetval.store.migrate import upgrade
    from fleetval.store.repository import Store

    airflow, url = local_airflow
    _recreate(pg_server_url, url)
    engine = make_engine(url)
    upgrade(engine)
    servers: list[KubeApiServer] = []
    clusters: list[pathlib.Path] = []

    def start(path: pathlib.Path, time_scale: float = 0.0, backend: str = "sim") -> E2E:
        if backend == "controlplane":
            return E2E(airflow, _real_cluster(path, time_scale))
        server = KubeApiServer(
            SimKubeCluster(load_fleet_spec(path.read_text()), engine, time_scale=time_scale)
        )
        server.start()
        servers.append(server)
        server.write_kubeconfig(airflow.kubeconfig)
        return E2E(airflow, SimKube(server, Store(engine), airflow.kubeconfig, url))

    def _real_cluster(path: pathlib.Path, time_scale: float) -> KubeUnderTest:
        from fleetval.sim.controlplane import cluster
        from tests.realkube import RealKube, binaries_or_fail

        binaries_or_fail()
        state = tmp_path / f"cluster-{len(clusters)}"
        clusters.append(state)
        info = cluster.up(state, path, time_scale=time_scale)
        shutil.copyfile(info["runner_kubeconfig"], airflow.kubeconfig)
        return RealKube(info, Store(engine), airflow.kubeconfig, url, state)

    yield start
    for server in servers:
        server.stop()
    for state in clusters:
        from fleetval.sim.controlplane import cluster
        from tests.realkube import kubelet_complaints, leftover_processes

        cluster.down(state)
        assert leftover_processes(state) == []
        assert kubelet_complaints(state) == []
    engine.dispose()
    for server in servers:
        check_server(server.calls)  # the product called only what deploy/rbac.yaml grants
