"""The fleet-health page: an Airflow plugin's FastAPI app (`app`) over server-rendered HTML
(`pages`, templates in `templates/`), reading the verdict store through
`fleetval.store.fleet_health` only. `pages` and `charts` do not import Airflow."""
