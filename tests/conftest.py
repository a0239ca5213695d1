"""Test session set-up: Airflow's environment before anything imports airflow, and the real
PostgreSQL the store tests run against (FLEETVAL_TEST_DB_URL, or 127.0.0.1:5432 user postgres).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.paths import DAGS, DEMO_FLEET, KNOWN_POOLS, ROOT
from tests.rbac import check_server

_home = pathlib.Path(os.environ.get("TEST_AIRFLOW_HOME") or ROOT / f".airflow-test-home-{os.getpid()}")
shutil.rmtree(_home, ignore_errors=True)
_home.mkdir(parents=True)
os.environ["AIRFLOW_HOME"] = str(_home)
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_home}/airflow.db"

PG_ADMIN_URL = os.environ.get(
    "FLEETVAL_TEST_DB_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
)


# The tests that, run together, make every call the product makes to a cluster: the end-to-end
# flows and the paths they do not take (node-problem-detector Events, the NVIDIADriver halt, the
# KubernetesPodOperator finding and labelling a failed pod).
RBAC_FLOWS = (
    "test_weekly_sweep_dag.py",
    "test_xid_remediation_dag.py",
    "test_nccl_dags.py",
    "test_npd_events.py",
    "test_rollout_halt.py",
    "test_probe_pod.py",
    "test_scenarios_on_sim.py",
    "test_ckpt_drill_dag.py",
    "test_mig_dag.py",
)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_home, ignore_errors=True)
    ran = {pathlib.Path(str(item.fspath)).name for item in session.items}
    if set(RBAC_FLOWS) <= ran:
        from tests.rbac import PRODUCT_CALLS, unused_grants

        unused = unused_grants(PRODUCT_CALLS)
        if unused:  # least privilege: a grant no flow used is a grant too many
            session.config.get_terminal_writer().line(f"deploy/rbac.yaml grants what no call used: {unused}")
            if exitstatus == 0:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.fuzz import tally_lines

    for line in tally_lines():
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    import sqlalchemy as sa

    engine = sa.create_engine(PG_ADMIN_URL)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {PG_ADMIN_URL} ({exc.orig}). Start it (`make postgres`) "
            "or set FLEETVAL_TEST_DB_URL to a server where the user may CREATE DATABASE."
        )
    finally:
        engine.dispose()
    return PG_ADMIN_URL


def _fresh_pg_db(admin_url: str) -> Iterator[str]:
    import sqlalchemy as sa

    name = f"fleetval_test_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test."""
    yield from _fresh_pg_db(pg_server_url)


@pytest.fixture(params=["postgresql", "sqlite"])
def db_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[str]:
    """The store under test on the real PostgreSQL and on the SQLite default."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/fleetval.db"
        return
    request.getfixturevalue("pg_server_url")
    yield from _fresh_pg_db(PG_ADMIN_URL)


@pytest.fixture
def store(db_url: str):  # type: ignore[no-untyped-def]
    from fleetval.store.engine import make_engine
    from fleetval.store.migrate import upgrade
    from fleetval.store.repository import Store

    engine = make_engine(db_url)
    upgrade(engine)
    yield Store(engine)
    engine.dispose()


@pytest.fixture(scope="session")
def dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS), known_pools=KNOWN_POOLS)


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """A migrated Airflow metadata DB (SQLite) for dag.test()."""
    from airflow.models.pool import Pool
    from airflow.utils import db
    from airflow.utils.session import create_session

    db.resetdb()
    with create_session() as session:
        Pool.create_or_update_pool(
            "fleetval_node_diagnosis", slots=4, description="test", include_deferred=True, session=session
        )


@pytest.fixture
def sim_kube(pg_url: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Serve a simulated fleet as a Kubernetes API (`fleetval sim serve`), its state and the verdict
    store in a fresh PostgreSQL database; point `kubernetes_default` and `fleetval_db` at them.

    Returns `start(path=DEMO_FLEET, time_scale=0.0) -> SimKube`."""
    import json

    from fleetval.fleet.spec import load_fleet_spec
    from fleetval.sim.kube.cluster import SimKubeCluster
    from fleetval.sim.kube.server import KubeApiServer
    from fleetval.store.engine import make_engine
    from fleetval.store.migrate import upgrade
    from fleetval.store.repository import Store
    from tests.simkube import SimKube

    engine = make_engine(pg_url)
    upgrade(engine)
    servers: list[KubeApiServer] = []
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLEETVAL_DB", json.dumps({"conn_type": "generic", "extra": {"url": pg_url}})
    )
    monkeypatch.setenv("FLEETVAL_SIM_VOLUMES", str(tmp_path / "volumes"))  # claims of running pods

    def start(path: pathlib.Path = DEMO_FLEET, time_scale: float = 0.0) -> SimKube:
        spec = load_fleet_spec(path.read_text())
        server = KubeApiServer(SimKubeCluster(spec, engine, time_scale=time_scale))
        server.start()
        servers.append(server)
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        monkeypatch.setenv(
            "AIRFLOW_CONN_KUBERNETES_DEFAULT",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}),
        )
        return SimKube(server, Store(engine), kubeconfig, pg_url)

    yield start
    for server in servers:
        server.stop()
    engine.dispose()
    for server in servers:
        check_server(server.calls)  # the product called only what deploy/rbac.yaml grants


@pytest.fixture
def real_kube(pg_url: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A real control plane on loopback (`fleetval cluster up`) with a fleet's GPU nodes joined by
    the virtual kubelet, the verdict store in a fresh PostgreSQL database; `kubernetes_default`
    authenticates as deploy/rbac.yaml's `fleetval-runner`. Stopped after the test, and no process
    of it may be left.

    Returns `start(path=DEMO_FLEET, time_scale=0.0) -> RealKube`."""
    import json

    from fleetval.sim.controlplane import cluster
    from fleetval.store.engine import make_engine
    from fleetval.store.migrate import upgrade
    from fleetval.store.repository import Store
    from tests.realkube import RealKube, binaries_or_fail, kubelet_complaints, leftover_processes

    binaries_or_fail()
    engine = make_engine(pg_url)
    upgrade(engine)
    started: list[RealKube] = []
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLEETVAL_DB", json.dumps({"conn_type": "generic", "extra": {"url": pg_url}})
    )

    def start(path: pathlib.Path = DEMO_FLEET, time_scale: float = 0.0) -> RealKube:
        state_dir = tmp_path / f"cluster-{len(started)}"
        info = cluster.up(state_dir, path, time_scale=time_scale)
        runner = pathlib.Path(info["runner_kubeconfig"])
        monkeypatch.setenv(
            "AIRFLOW_CONN_KUBERNETES_DEFAULT",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(runner)}}),
        )
        kube = RealKube(info, Store(engine), runner, pg_url, state_dir)
        started.append(kube)
        return kube

    yield start
    for kube in started:
        cluster.down(kube.state_dir)
    engine.dispose()
    for kube in started:
        assert leftover_processes(kube.state_dir) == []
        assert kube.outage or kubelet_complaints(kube.state_dir) == []
