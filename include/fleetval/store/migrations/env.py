"""Alembic environment: runs against the connection handed in by fleetval.store.migrate."""

from __future__ import annotations

from alembic import context

from fleetval.store.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # pragma: no cover - only `alembic` invoked by hand
    raise RuntimeError("run migrations through `fleetval db upgrade --db URL`")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
