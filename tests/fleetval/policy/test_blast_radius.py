"""Blast-radius budgets: waves never exceed the fleet or rack share; the breaker stops actions."""

from __future__ import annotations

from collections import Counter

import pytest

from fleetval.errors import SpecError
from fleetval.policy.blast_radius import ActionBudget, DiagnosisBudget, plan_waves


def _fleet(racks: int, per_rack: int) -> tuple[list[str], dict[str, str], dict[str, int]]:
    nodes = [f"r{r:03d}-n{n:02d}" for r in range(racks) for n in range(per_rack)]
    rack_of = {n: n.split("-")[0] for n in nodes}
    return nodes, rack_of, dict(Counter(rack_of.values()))


@pytest.mark.parametrize(
    ("racks", "per_rack", "fleet_frac", "rack_frac"),
    [(2, 8, 0.25, 0.5), (16, 8, 0.10, 0.25), (512, 32, 0.10, 0.25), (3, 5, 0.5, 1.0)],
    ids=["demo", "small", "16k-nodes", "uneven"],
)
def test_waves_respect_budget_and_cover_every_node_once(
    racks: int, per_rack: int, fleet_frac: float, rack_frac: float
) -> None:
    nodes, rack_of, sizes = _fleet(racks, per_rack)
    budget = DiagnosisBudget(fleet_frac, rack_frac)
    waves = plan_waves(nodes, rack_of, fleet_size=len(nodes), rack_sizes=sizes, budget=budget, max_waves=1024)
    flat = [n for w in waves for n in w]
    assert sorted(flat) == sorted(nodes)
    for wave in waves:
        assert 0 < len(wave) <= max(1, int(len(nodes) * fleet_frac))
        assert max(Counter(rack_of[n] for n in wave).values()) <= max(1, int(per_rack * rack_frac))


def test_16k_nodes_fit_max_map_length() -> None:
    nodes, rack_of, sizes = _fleet(512, 32)
    waves = plan_waves(
        nodes,
        rack_of,
        fleet_size=len(nodes),
        rack_sizes=sizes,
        budget=DiagnosisBudget(0.10, 0.25),
        max_waves=1024,
    )
    assert len(nodes) == 16384 and len(waves) < 1024


def test_too_many_waves_is_a_clear_error() -> None:
    nodes, rack_of, sizes = _fleet(4, 4)
    with pytest.raises(SpecError, match="raise the budget"):
        plan_waves(
            nodes, rack_of, fleet_size=16, rack_sizes=sizes, budget=DiagnosisBudget(0.01, 0.01), max_waves=3
        )


@pytest.mark.parametrize("value", [0.0, -0.1, 1.5])
def test_budget_fractions_are_validated(value: float) -> None:
    with pytest.raises(SpecError):
        DiagnosisBudget(value, 0.5)


def test_action_budget_trips_at_fleet_and_rack_caps() -> None:
    budget = ActionBudget(max_fleet_fraction=0.1, max_rack_fraction=0.25)
    sizes = {"a": 8, "b": 8, "c": 4}
    assert budget.allows("a1", "a", taken={}, fleet_size=20, rack_sizes=sizes)
    assert budget.allows("a2", "a", taken={"a1": "a"}, fleet_size=20, rack_sizes=sizes)
    assert not budget.allows("a3", "a", taken={"a1": "a", "a2": "a"}, fleet_size=20, rack_sizes=sizes)
    assert not budget.allows("b1", "b", taken={"a1": "a", "c1": "c"}, fleet_size=20, rack_sizes=sizes)
    assert budget.allows("a1", "a", taken={"a1": "a", "c1": "c"}, fleet_size=20, rack_sizes=sizes)
