"""Thin adapters between Airflow and the fleetval domain package: the only code importing both."""
