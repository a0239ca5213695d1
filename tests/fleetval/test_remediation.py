"""Node actions are applied, then recorded: a patch that fails is never recorded as done, and the
rerun applies it (the patches are idempotent)."""

from __future__ import annotations

import datetime as dt

import pytest

from fleetval.policy import node_health as nh
from fleetval.policy.blast_radius import ActionBudget
from fleetval.remediation import PlannedAction, apply_actions
from fleetval.store.repository import Store

NOW = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)


class Nodes:
    """Records node operations; the first `fail_first` cordons raise, as an API error would."""

    def __init__(self, fail_first: int = 0) -> None:
        self.ops: list[tuple[str, ...]] = []
        self.fail_first = fail_first

    def cordon(self, node: str) -> None:
        if self.fail_first:
            self.fail_first -= 1
            raise ConnectionError("the API server went away")
        self.ops.append(("cordon", node))

    def uncordon(self, node: str) -> None:
        self.ops.append(("uncordon", node))

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self.ops.append(("label", node, *sorted(f"{k}={v}" for k, v in labels.items())))

    def add_taint(self, node: str, key: str, value: str, effect: str) -> None:
        self.ops.append(("taint", node, key))

    def remove_taint(self, node: str, key: str) -> None:
        self.ops.append(("untaint", node, key))


def act(store: Store, nodes: Nodes, run: int) -> None:
    apply_actions(
        [PlannedAction("n1", "r1", nh.QUARANTINE_AND_R3, "r2 failed", "dev.weekly.fail")],
        nodes=nodes,
        store=store,
        run_id=run,
        run_key="k",
        budget=ActionBudget(1.0, 1.0),
        fleet_size=4,
        rack_sizes={"r1": 4},
        dry_run=False,
        as_of=NOW,
    )


def test_a_failed_patch_is_not_recorded_and_the_rerun_applies_it(store: Store) -> None:
    run = store.ensure_run("k", suite="weekly", backend="kubernetes")
    broken = Nodes(fail_first=1)
    with pytest.raises(ConnectionError):
        act(store, broken, run)
    assert broken.ops == []
    assert store.node_events(run_id=run) == []  # nothing recorded that did not happen

    working = Nodes()
    act(store, working, run)
    assert working.ops[0] == ("cordon", "n1") and ("taint", "n1", "fleetval.io/maintenance") in working.ops
    kinds = [e["kind"] for e in store.node_events(run_id=run)]
    assert "cordon" in kinds and "taint" in kinds

    # A rerun after success applies the idempotent patches again and records nothing twice.
    again = Nodes()
    act(store, again, run)
    assert [e["kind"] for e in store.node_events(run_id=run)] == kinds
