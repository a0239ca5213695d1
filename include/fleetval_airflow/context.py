"""What the tasks read from the running Airflow task's context.

Light on purpose: task modules import it at top level, and DAG files parse those (no SQLAlchemy,
no Kubernetes client here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import get_current_context


def run_key(context: Mapping[str, Any] | None = None) -> str:
    """The run key: the store's key for one DAG run, `<dag_id>/<run_id>`.

    Airflow's run_id is unique only within its DAG (two DAGs triggered at the same time may share
    one), so the dag_id makes it unique in the store; both stay the same across task retries, so a
    retried task finds the fleetval run its DAG run already opened instead of opening another.
    The tasks also hand it on to what they make for the run (probe specs, drill ids). `context`:
    the task's context where the caller holds one (an operator's execute), else the current one."""
    ctx = get_current_context() if context is None else context
    return f"{ctx['dag'].dag_id}/{ctx['run_id']}"
