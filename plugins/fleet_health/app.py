"""The fleet-health page's FastAPI app, mounted on Airflow's api-server by the plugin.

Airflow does not authenticate a plugin's app: the app-wide dependency `requires_access_dag("GET")`
does. Anonymous requests get 401, a bad token 403; the UI's `_token` cookie (inside its iframe)
or a Bearer token of a user who may read DAGs gets the page. Every route is a GET that only
reads the verdict store: nothing here changes state, so a viewer can reach nothing that does
(tests/plugins hold both).

The store is the `fleetval_db` connection, resolved at each request in the api-server process
(Airflow's secrets backends, environment, metadata DB), one engine per URL.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Final

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import Engine

from fleetval.store import fleet_health as fh
from fleetval.store.engine import StoreUnavailable, StoreUrlError, make_engine, outage_as_error

from . import pages

URL_PREFIX: Final = "/fleet"
READ_METHODS: Final = frozenset({"GET", "HEAD"})


@functools.cache
def _engine_for(url: str) -> Engine:
    return make_engine(url, pool_size=4, max_overflow=4) if url.startswith("postgres") else make_engine(url)


@functools.cache
def cells_for(engine: Engine) -> fh.FleetCells:
    """One incremental heatmap/coverage state per store for this process (fleet_health.FleetCells)."""
    return fh.FleetCells(engine)


def engine_from_connection() -> Engine:
    """The store behind the `fleetval_db` connection, as the api-server process sees it."""
    from airflow.models.connection import Connection

    from fleetval_airflow.config import DB_CONN_ID, url_from_connection

    conn = Connection.get_connection_from_secrets(DB_CONN_ID)
    return _engine_for(url_from_connection(conn))


def create_app(engine: Callable[[], Engine] = engine_from_connection) -> FastAPI:
    from airflow.api_fastapi.core_api.security import requires_access_dag

    app = FastAPI(
        title="fleetval fleet health",
        dependencies=[Depends(requires_access_dag("GET"))],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    def base(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def page(request: Request, render: Callable[[Engine, str], str]) -> Response:
        try:
            with outage_as_error():
                return HTMLResponse(render(engine(), base(request)))
        except (StoreUnavailable, StoreUrlError) as exc:
            return HTMLResponse(pages.unavailable(base=base(request), why=str(exc)), status_code=503)

    @app.get("/", response_class=HTMLResponse)
    def fleet(
        request: Request,
        layer: str | None = None,
        page_no: Annotated[int, Query(alias="page", ge=1)] = 1,
        problems: bool = False,
    ) -> Response:
        return page(
            request,
            lambda e, b: pages.fleet(
                e, base=b, layer=layer, page=page_no, problems=problems, cache=cells_for(e)
            ),
        )

    @app.get("/node", response_class=HTMLResponse)
    def node_search(request: Request, name: str = "") -> Response:
        name = name.strip()
        if not name:
            return RedirectResponse(f"{base(request)}/", status_code=303)
        return RedirectResponse(f"{base(request)}/node/{name}", status_code=303)

    @app.get("/node/{name}", response_class=HTMLResponse)
    def node(request: Request, name: str) -> Response:
        return page(request, lambda e, b: pages.node(e, name, base=b))

    @app.get("/nccl", response_class=HTMLResponse)
    def nccl(
        request: Request, profile: str | None = None, scope: str | None = None, subject: str | None = None
    ) -> Response:
        return page(
            request,
            lambda e, b: pages.nccl(e, base=b, profile=profile, scope=scope, subject=(subject or "").strip()),
        )

    @app.get("/baselines", response_class=HTMLResponse)
    def baselines(request: Request) -> Response:
        return page(request, lambda e, b: pages.baselines(e, base=b))

    @app.get("/coverage", response_class=HTMLResponse)
    def coverage(request: Request, page_no: Annotated[int, Query(alias="page", ge=1)] = 1) -> Response:
        return page(request, lambda e, b: pages.coverage(e, base=b, page=page_no, cache=cells_for(e)))

    @app.get("/criteria", response_class=HTMLResponse)
    def criteria(request: Request) -> Response:
        return page(request, lambda e, b: pages.criteria(e, base=b))

    @app.get("/kueue", response_class=HTMLResponse)
    def kueue(request: Request) -> Response:
        return page(request, lambda e, b: pages.kueue(e, base=b))

    @app.get("/onboarding", response_class=HTMLResponse)
    def onboarding(request: Request) -> Response:
        return page(request, lambda e, b: pages.onboarding(e, base=b))

    return app
