"""The fleet-health page as an Airflow plugin: a FastAPI app at /fleet on the api-server (every
route behind Airflow's authentication, see fleet_health/app.py) and an entry in the UI's
navigation that opens it inside the UI (an iframe at /plugin/fleet-health).

Every Airflow process loads plugins — each task process too, for macros — but only the api-server
serves this one: the app is built at its first request, so FastAPI, Airflow's security module and
the page's templates are imported there only."""

from __future__ import annotations

import threading
from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/fleet"  # fleet_health.app.URL_PREFIX (not imported here: see above)
# A rack-and-pulse glyph for the navigation button (a data URI: no request).
ICON = (
    "data:image/svg+xml;utf8,<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24' fill='none' "
    "stroke='%23808080' stroke-width='2' stroke-linecap='round' stroke-linejoin='round'>"
    "<rect x='3' y='3' width='18' height='18' rx='2'/><path d='M3 12h4l2-4 3 8 2-4h7'/></svg>"
)


class FleetHealthApp:
    """An ASGI app that builds the page's FastAPI app (`fleet_health.app.create_app`) at its first
    request and hands every request to it."""

    def __init__(self) -> None:
        self._app: Any = None
        self._lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    from fleet_health.app import create_app

                    self._app = create_app()
        await self._app(scope, receive, send)


class FleetHealthPlugin(AirflowPlugin):
    name = "fleetval_fleet_health"
    fastapi_apps = [  # noqa: RUF012 (AirflowPlugin declares these as plain class attributes)
        {"app": FleetHealthApp(), "url_prefix": URL_PREFIX, "name": "fleetval fleet health"}
    ]
    external_views = [  # noqa: RUF012
        {
            "name": "Fleet health",
            "href": URL_PREFIX.lstrip("/") + "/",
            "destination": "nav",
            "url_route": "fleet-health",
            "icon": ICON,
            "nav_top_level": True,
        }
    ]
