"""The plugin's FastAPI app without a running Airflow: every route is a read behind Airflow's
authentication dependency, anonymous requests are refused before anything reads the store, and the
routes pass their parameters on. (tests/e2e/test_fleet_page.py checks the same against the
api-server, with real users.)"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from bench.fleet_page import fill
from fleet_health.app import READ_METHODS, URL_PREFIX, create_app
from fleetval.store.engine import make_engine
from fleetval.store.migrate import upgrade
from fleetval.store.repository import Store

PATHS = ("/", "/node/r0000-n01", "/nccl", "/baselines", "/coverage", "/criteria", "/kueue", "/onboarding")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('page')}/fleetval.db")
    upgrade(engine)
    fill(Store(engine), nodes=32, weekly=1, nccl=1)
    yield engine
    engine.dispose()


def test_every_route_reads_and_is_behind_airflows_dag_read_permission(engine: Engine) -> None:
    app = create_app(lambda: engine)
    routes = [r for r in app.routes if isinstance(r, APIRoute)]
    assert {r.path for r in routes} >= {"/", "/node/{name}", "/nccl", "/coverage", "/kueue", "/onboarding"}
    for route in routes:
        assert route.methods <= READ_METHODS, (route.path, route.methods)
    # the one app-wide dependency every route runs first: Airflow's requires_access_dag("GET")
    (dep,) = app.router.dependencies
    assert dep.dependency is not None and dep.dependency.__qualname__ == "requires_access_dag.<locals>.inner"
    assert app.openapi_url is None and app.docs_url is None  # no unauthenticated schema or docs


def test_anonymous_requests_get_401_and_touch_no_store() -> None:
    def no_store() -> Engine:
        raise AssertionError("the store was read before authentication")

    client = TestClient(create_app(no_store))
    for path in PATHS:
        assert client.get(path).status_code == 401, path
        assert client.post(path).status_code in (401, 405), path


def test_routes_render_their_view_once_authenticated(engine: Engine) -> None:
    app = create_app(lambda: engine)
    (dep,) = app.router.dependencies
    app.dependency_overrides[dep.dependency] = lambda: None  # what Airflow's check lets through
    client = TestClient(app, root_path="/fleet")
    for path in PATHS:
        response = client.get(path)
        assert response.status_code == 200, path
        assert "Fleet health" in response.text and 'href="/fleet/coverage"' in response.text
    assert client.get("/", params={"layer": "device", "problems": 1}).status_code == 200
    assert client.get("/coverage", params={"page": 0}).status_code == 422
    found = client.get("/node", params={"name": " r0000-n02 "}, follow_redirects=False)
    assert found.status_code == 303 and found.headers["location"] == "/fleet/node/r0000-n02"
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        assert client.request(method, "/").status_code == 405


def test_an_unreachable_store_is_a_503_page_not_a_traceback(tmp_path: pathlib.Path) -> None:
    app = create_app(lambda: make_engine("postgresql+psycopg2://nobody@127.0.0.1:1/none"))
    (dep,) = app.router.dependencies
    app.dependency_overrides[dep.dependency] = lambda: None
    response = TestClient(app).get("/")
    assert response.status_code == 503 and "the fleetval store is unreachable" in response.text


def test_loading_the_plugin_imports_neither_fastapi_nor_the_page() -> None:
    """Every task process loads plugins (for macros): the page is built in the api-server only,
    at its first request, and it is the one the plugin mounts."""
    import subprocess
    import sys

    from tests.paths import ROOT

    probe = (
        "import sys; sys.path.insert(0, 'plugins'); import fleet_health_plugin as p; "
        "print(sorted(m for m in ('fastapi', 'fleet_health.app', "
        "'airflow.api_fastapi.core_api.security') if m in sys.modules)); "
        "(app,) = p.FleetHealthPlugin.fastapi_apps; print(app['url_prefix'], type(app['app']).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == "[]", out.stdout
    assert lines[-1] == f"{URL_PREFIX} FleetHealthApp"


def test_the_plugin_app_builds_the_page_at_its_first_request(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fleet_health_plugin

    import fleet_health.app as page_app

    monkeypatch.setattr(page_app, "engine_from_connection", lambda: engine)
    app = fleet_health_plugin.FleetHealthApp()
    assert app._app is None
    assert TestClient(app).get("/").status_code == 401  # the real app, with Airflow's check
    assert app._app is not None
