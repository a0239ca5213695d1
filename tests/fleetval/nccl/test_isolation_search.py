"""Fault-isolation planner: correctness for 0, 1 and k bad nodes, and the probe budget."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest

from fleetval.nccl.isolation_search import IsolationResult, locate_bad_nodes, resume_search


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


@pytest.mark.parametrize(("n", "k"), [(2, 1), (3, 1), (16, 0), (16, 1), (64, 2), (232, 3)])
def test_a_resumed_search_asks_the_same_groups_and_finds_the_same_nodes(n: int, k: int) -> None:
    """Probes that run elsewhere (an MPIJob each): replaying over the answers so far asks for the
    next group, one at a time, and ends where the direct search ends."""
    nodes = fleet(n)
    for seed in range(10):
        bad = set(random.Random(seed).sample(nodes, k))
        direct = locate_bad_nodes(nodes, group_probe(bad, []))
        answers: dict[frozenset[str], bool] = {}
        asked: list[tuple[str, ...]] = []
        while True:
            progress = resume_search(nodes, lambda g, known=answers: known.get(frozenset(g)))  # type: ignore[misc]
            if progress.next_group is None:
                break
            asked.append(progress.next_group)
            answers[frozenset(progress.next_group)] = not (set(progress.next_group) & bad)
            assert len(asked) <= direct.probes_used
        assert asked == [r.group for r in direct.probes]
        assert progress.result == direct
        assert set(progress.cleared) <= set(nodes) - bad


def test_a_stopped_search_says_what_it_knows_so_far() -> None:
    nodes = fleet(16)
    bad = {"r00-n03", "r00-n11"}
    answers: dict[frozenset[str], bool] = {}
    progress = resume_search(nodes, lambda g: answers.get(frozenset(g)))
    while not progress.result.bad:  # answer until the first bad node is located
        assert progress.next_group is not None
        answers[frozenset(progress.next_group)] = not (set(progress.next_group) & bad)
        progress = resume_search(nodes, lambda g: answers.get(frozenset(g)))
    assert progress.next_group is not None  # the search goes on for the second one
    assert set(progress.result.bad) < bad and not set(progress.cleared) & bad
