"""The simulated cluster's saved API objects (`sim_objects`), so `fleetval sim serve` keeps its
state across restarts. Bodies are JSON text written and read verbatim."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import Engine, delete, insert, select

from fleetval.store.models import SimObject


class SavedObject(NamedTuple):
    resource: str
    namespace: str
    name: str
    body: str  # the API object, JSON text
    sim: str  # what only the simulator knows about it, JSON text


def load(engine: Engine, fleet: str) -> list[SavedObject]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                SimObject.resource, SimObject.namespace, SimObject.name, SimObject.body, SimObject.sim
            ).where(SimObject.fleet == fleet)
        ).all()
    return [SavedObject(*row) for row in rows]


def forget(engine: Engine, fleet: str) -> None:
    with engine.begin() as conn:
        conn.execute(delete(SimObject).where(SimObject.fleet == fleet))


def save(
    engine: Engine, fleet: str, changed: Sequence[SavedObject], deleted: Sequence[tuple[str, str, str]]
) -> None:
    """Replace the changed objects and drop the deleted ones, in one transaction."""
    with engine.begin() as conn:
        for resource, namespace, name in [*((o.resource, o.namespace, o.name) for o in changed), *deleted]:
            conn.execute(
                delete(SimObject).where(
                    SimObject.fleet == fleet,
                    SimObject.resource == resource,
                    SimObject.namespace == namespace,
                    SimObject.name == name,
                )
            )
        if changed:
            conn.execute(insert(SimObject), [{"fleet": fleet, **o._asdict()} for o in changed])
