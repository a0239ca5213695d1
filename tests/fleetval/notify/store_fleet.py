"""A fleet of 48 nodes in six racks written through the store's own write paths (a weekly plan,
verdicts, `remediation.apply_actions`), for the notifier's tests against a real store."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable

from fleetval.policy import node_health as nh
from fleetval.policy.blast_radius import ActionBudget
from fleetval.remediation import PlannedAction, apply_actions
from fleetval.store.repository import Store
from tests.fleetval.notify.sim import node_names
from tests.metrics.fleet import Nodes, backdate, v

NODES = node_names(48)
RACKS = {n: n.split("-")[0] for n in NODES}


def act(store: Store, run_id: int, key: str, nodes: Iterable[str], action: str, *, at: dt.datetime) -> None:
    """The policy's `action` on `nodes`, applied (the budget wide open: these tests are not about it)."""
    apply_actions(
        [PlannedAction(n, RACKS[n], action, action, "test.rule") for n in sorted(nodes)],
        nodes=Nodes(),
        store=store,
        run_id=run_id,
        run_key=key,
        budget=ActionBudget(1.0, 1.0),
        fleet_size=len(NODES),
        rack_sizes=Counter(RACKS.values()),
        dry_run=False,
        as_of=at,
    )


def sweep(
    store: Store, key: str, nodes: Iterable[str], *, at: dt.datetime, action: str = nh.QUARANTINE
) -> None:
    """A weekly r2 over every node (the inventory's plan): `nodes` fail and are quarantined, or
    (`action` return to service) pass and return."""
    nodes = set(nodes)
    plan = {"rack_of": RACKS, "skipped": {}, "waves": [NODES]}
    run_id = store.ensure_run(key, suite="weekly", backend="test", meta={"plan": plan})
    bad = "fail" if action == nh.QUARANTINE else "pass"
    for node in NODES:
        store.add_verdicts(run_id, [v("D-DEV-03", node, bad if node in nodes else "pass")], node=node)
    backdate(store, run_id, at)
    act(store, run_id, key, nodes, action, at=at)
