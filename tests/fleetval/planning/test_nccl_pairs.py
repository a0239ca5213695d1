"""Fault-isolation planner: correctness for 0, 1 and k bad nodes, and the probe budget."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest

from fleetval.planning.nccl_pairs import IsolationResult, locate_bad_nodes


def fleet(n: int) -> list[str]:
    return [f"r{i // 32:02d}-n{i % 32:02d}" for i in range(n)]


def group_probe(bad: set[str], calls: list[tuple[str, ...]]) -> Callable[[tuple[str, ...]], bool]:
    def probe(group: tuple[str, ...]) -> bool:
        calls.append(group)
        return not (set(group) & bad)

    return probe


def test_empty_fleet_needs_no_probe() -> None:
    assert locate_bad_nodes([], lambda g: True) == IsolationResult(bad=(), probes_used=0, probes=[])


@pytest.mark.parametrize(("healthy", "bad"), [(True, ()), (False, ("solo",))])
def test_single_node_is_probed_alone(healthy: bool, bad: tuple[str, ...]) -> None:
    result = locate_bad_nodes(["solo"], lambda g: healthy)
    assert (result.bad, result.probes_used) == (bad, 1)


def test_healthy_fleet_costs_one_probe() -> None:
    calls: list[tuple[str, ...]] = []
    result = locate_bad_nodes(fleet(256), group_probe(set(), calls))
    assert (result.bad, result.probes_used, len(calls)) == ((), 1, 1)


def test_every_position_of_one_bad_node_among_256_within_32_probes() -> None:
    nodes = fleet(256)
    worst = 0
    for bad in nodes:
        calls: list[tuple[str, ...]] = []
        result = locate_bad_nodes(nodes, group_probe({bad}, calls))
        assert result.bad == (bad,)
        assert result.undetermined == ()
        assert result.probes_used == len(calls) == len(result.probes)
        assert all(len(g) >= 2 for g in calls)  # a probe is at least a pair
        # a pair or group is blamed only when the bad node is in it
        assert all((bad in r.group) != r.healthy for r in result.probes)
        worst = max(worst, result.probes_used)
    assert worst <= 32
    assert worst < 256 * 255 // 2


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("n", [8, 64, 232])
def test_several_bad_nodes_are_all_found(n: int, k: int) -> None:
    nodes = fleet(n)
    for seed in range(20):
        bad = set(random.Random(seed).sample(nodes, k))
        result = locate_bad_nodes(nodes, group_probe(bad, []))
        assert set(result.bad) == bad, (seed, bad, result.bad)
        assert result.undetermined == ()


def test_two_nodes_cannot_be_told_apart_by_pair_probes() -> None:
    result = locate_bad_nodes(["a", "b"], group_probe({"b"}, []))
    assert result.bad == ()
    assert result.undetermined == ("a", "b")


def test_three_nodes_one_bad_is_resolved() -> None:
    for bad in "abc":
        result = locate_bad_nodes(["a", "b", "c"], group_probe({bad}, []))
        assert result.bad == (bad,)


def test_only_one_good_node_left_is_reported_not_guessed() -> None:
    nodes = ["a", "b", "c", "d"]
    result = locate_bad_nodes(nodes, group_probe({"a", "b", "c"}, []))
    assert set(result.bad) <= {"a", "b", "c"}
    assert set(result.bad) | set(result.undetermined) >= {"a", "b", "c"}


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unique"):
        locate_bad_nodes(["a", "a"], lambda g: True)


def test_result_json() -> None:
    result = locate_bad_nodes(fleet(16), group_probe({"r00-n05"}, []))
    data = json.loads(json.dumps(result.to_json()))
    assert data["bad"] == ["r00-n05"]
    assert data["probes_used"] == len(data["probes"])
