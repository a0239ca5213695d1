"""The fleet-health page as an Airflow plugin: a FastAPI app at /fleet on the api-server (every
route behind Airflow's authentication, see fleet_health/app.py) and an entry in the UI's
navigation that opens it inside the UI (an iframe at /plugin/fleet-health)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from fleet_health.app import URL_PREFIX, create_app

# A small rack-and-pulse glyph for the navigation button (no request: a data URI).
ICON = (
    "data:image/svg+xml;utf8,<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24' fill='none' "
    "stroke='%23808080' stroke-width='2' stroke-linecap='round' stroke-linejoin='round'>"
    "<rect x='3' y='3' width='18' height='18' rx='2'/><path d='M3 12h4l2-4 3 8 2-4h7'/></svg>"
)


class FleetHealthPlugin(AirflowPlugin):
    name = "fleetval_fleet_health"
    fastapi_apps = [  # noqa: RUF012 (AirflowPlugin declares these as plain class attributes)
        {"app": create_app(), "url_prefix": URL_PREFIX, "name": "fleetval fleet health"}
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
