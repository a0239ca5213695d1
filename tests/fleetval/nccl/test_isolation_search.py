"""Fault isolation by pair testing: bad nodes and bad links, flipped answers, rounds of disjoint
pairs, the sweep as prior evidence, and the replay that resumes the search."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Collection

import pytest

from fleetval.nccl.isolation_search import (
    PAIRS_POLICY,
    SWEPT_POLICY,
    IsolationResult,
    ProbeRecord,
    locate_bad_nodes,
    resume_search,
)

Group = tuple[str, ...]


def fleet(n: int) -> list[str]:
    return [f"r{i // 32:02d}-n{i % 32:02d}" for i in range(n)]


def fabric(
    bad: Collection[str] = (),
    links: Collection[Group] = (),
    calls: list[Group] | None = None,
    flip: Callable[[int], bool] = lambda i: False,
) -> Callable[[Group], bool]:
    """A pair fails when a member is bad or its own link is; `flip(i)` flips the i-th answer."""
    bad_links = {frozenset(link) for link in links}
    asked: list[Group] = [] if calls is None else calls

    def probe(group: Group) -> bool:
        healthy = not (set(group) & set(bad)) and frozenset(group) not in bad_links
        asked.append(group)
        return healthy != flip(len(asked) - 1)

    return probe


def rounds_of(result: IsolationResult) -> list[list[Group]]:
    out: dict[int, list[Group]] = {}
    for record in result.probes:
        out.setdefault(record.round, []).append(record.group)
    return [out[r] for r in sorted(out)]


def test_empty_fleet_needs_no_probe() -> None:
    assert locate_bad_nodes([], lambda g: True) == IsolationResult(bad=(), probes_used=0, probes=[])


@pytest.mark.parametrize(("healthy", "bad"), [(True, ()), (False, ("solo",))])
def test_single_node_is_probed_alone(healthy: bool, bad: tuple[str, ...]) -> None:
    result = locate_bad_nodes(["solo"], lambda g: healthy)
    assert (result.bad, result.probes_used) == (bad, 1)


def test_a_healthy_fleet_costs_the_screen_only() -> None:
    calls: list[Group] = []
    result = locate_bad_nodes(fleet(64), fabric(calls=calls))
    assert (result.bad, result.bad_links, result.undetermined) == ((), (), ())
    # the screen: node i with node i + 32, 32 pairs at once, twice
    assert result.rounds == PAIRS_POLICY.screen_repeats == 2 and len(calls) == 64
    assert calls[0] == ("r00-n00", "r01-n00")


def test_every_position_of_one_bad_node_among_24() -> None:
    nodes = fleet(24)
    for bad in nodes:
        result = locate_bad_nodes(nodes, fabric({bad}))
        assert (result.bad, result.bad_links, result.undetermined) == ((bad,), (), ()), bad
        assert all(len(g) == 2 for g in (r.group for r in result.probes))  # pairs only
        for round_ in rounds_of(result):  # a round never asks a node for its GPUs twice
            members = [n for g in round_ for n in g]
            assert len(members) == len(set(members))
        # blamed on failures with several partners, never on one comparison
        partners = {next(n for n in r.group if n != bad) for r in result.probes if bad in r.group}
        assert len(partners) >= PAIRS_POLICY.min_blame_partners
        assert result.rounds <= 8  # noise-free: the screen, then one partner per round


@pytest.mark.parametrize("k", [2, 3])
def test_several_bad_nodes_are_all_found(k: int) -> None:
    nodes = fleet(64)
    for seed in range(8):
        bad = set(random.Random(seed).sample(nodes, k))
        result = locate_bad_nodes(nodes, fabric(bad))
        assert set(result.bad) == bad, (seed, bad, result.bad)
        assert result.undetermined == () and result.bad_links == ()


def test_two_bad_nodes_paired_in_the_screen_are_both_found() -> None:
    nodes = fleet(16)
    result = locate_bad_nodes(nodes, fabric({"r00-n02", "r00-n10"}))  # node 2 meets node 2 + 8
    assert result.probes[0].group == ("r00-n00", "r00-n08")
    assert set(result.bad) == {"r00-n02", "r00-n10"} and result.bad_links == ()


def test_a_bad_link_is_the_link_not_either_node() -> None:
    nodes = fleet(16)
    link = ("r00-n03", "r00-n11")  # a pair of the screen
    result = locate_bad_nodes(nodes, fabric(links=[link]))
    assert (result.bad, result.bad_links, result.undetermined) == ((), (link,), ())
    # both members passed with other partners
    for node in link:
        assert any(r.healthy for r in result.probes if node in r.group)


def test_a_bad_link_beside_a_bad_node() -> None:
    nodes = fleet(32)
    result = locate_bad_nodes(nodes, fabric({"r00-n05"}, [("r00-n01", "r00-n17")]))
    assert result.bad == ("r00-n05",) and result.bad_links == (("r00-n01", "r00-n17"),)


def test_one_flipped_answer_anywhere_blames_no_one_wrongly() -> None:
    """Every single answer of the search flipped in turn: the bad node is still the only one
    blamed (or the search says it cannot tell), never an innocent node or link."""
    nodes = fleet(16)
    bad = "r00-n06"
    clean = locate_bad_nodes(nodes, fabric({bad}))
    for i in range(clean.probes_used + 4):
        result = locate_bad_nodes(nodes, fabric({bad}, flip=lambda j, i=i: j == i))  # type: ignore[misc]
        assert set(result.bad) <= {bad} and result.bad_links == (), i
        assert bad in result.bad + result.undetermined, i


def test_a_flipped_failure_between_good_nodes_is_not_a_link() -> None:
    nodes = fleet(16)
    # the first answer (r00-n00 + r00-n08, screen round 1) fails by noise
    result = locate_bad_nodes(nodes, fabric(flip=lambda j: j == 0))
    assert (result.bad, result.bad_links, result.undetermined, result.undetermined_links) == ((), (), (), ())


def test_a_flipped_screen_answer_is_asked_again_with_the_same_partner() -> None:
    """One probe then serves both nodes and the link: the flipped pair is asked again at once and
    the search ends when its answers since the failure settle it, not after a clearing with new
    partners followed by a link question."""
    nodes = fleet(16)
    result = locate_bad_nodes(nodes, fabric(flip=lambda j: j == 0))  # screen round 1, first pair
    pair = ("r00-n00", "r00-n08")
    assert (result.bad, result.bad_links, result.undetermined) == ((), (), ())
    assert rounds_of(result)[2:] == [[pair], [pair]]
    assert result.rounds == 4  # 2 screen rounds, then passes 2 and 3 since the failure


def test_a_bad_nodes_failing_pair_is_not_asked_again_in_a_row() -> None:
    """A pair that failed twice points at a real fault: its members get distinct partners (the
    blame counts partners), both after the screen and after a sweep whose pair failed."""
    nodes = fleet(16)
    bad, partner = "r00-n02", "r00-n10"
    result = locate_bad_nodes(nodes, fabric({bad}))
    assert result.bad == (bad,)
    later = [g for round_ in rounds_of(result)[2:] for g in round_]
    with_bad = [g for g in later if bad in g]
    assert (bad, partner) not in later and len(set(with_bad)) == len(with_bad) >= 3
    sweep = resume_search(nodes, lambda g, a: None).next_round
    prior = [ProbeRecord(g, bad not in g) for g in sweep]
    swept = locate_bad_nodes(nodes, fabric({bad}), prior=prior, policy=SWEPT_POLICY)
    assert swept.bad == (bad,) and (bad, partner) not in [r.group for r in swept.probes]


def test_a_link_question_counts_the_answers_since_the_pair_first_failed() -> None:
    """A bad link of the screen: its second screen failure counts toward the link (it was not
    chosen for failing), so two re-probes once both ends are cleared confirm it."""
    nodes = fleet(16)
    link = ("r00-n03", "r00-n11")
    result = locate_bad_nodes(nodes, fabric(links=[link]))
    assert result.bad_links == (link,)
    asked = [r for r in result.probes if r.group == link]
    assert [r.healthy for r in asked] == [False] * 4 and result.rounds == 7


def test_a_node_that_looks_good_asks_its_failures_again_while_it_clears() -> None:
    """A node with more passes than failing partners re-asks a failure with a cleared partner
    (a link question) instead of taking yet another new partner; a flipped answer there blames
    nothing."""
    nodes = fleet(16)
    link = ("r00-n03", "r00-n11")
    clean = locate_bad_nodes(nodes, fabric(links=[link]))
    # flip the first answer of a clearing probe of r00-n03 (after the screen)
    first = next(i for i, r in enumerate(clean.probes) if r.round > 2 and "r00-n03" in r.group)
    calls: list[Group] = []
    result = locate_bad_nodes(nodes, fabric(links=[link], calls=calls, flip=lambda j: j == first))
    assert (result.bad, result.bad_links, result.undetermined) == ((), (link,), ())
    flipped = calls[first]
    asked = [k for k, round_ in enumerate(rounds_of(result), 1) if flipped in round_]
    # asked again once the node's passes equal its failing partners (two each, before it is
    # cleared), three times: the question and the clearing share those rounds (11 rounds when it
    # waited for a third pass, 13 when it waited for the clearing)
    assert asked[1:] == [6, 7, 8] and result.rounds == 10


def test_a_bad_node_with_flipped_passes_is_not_asked_a_failing_question_over_and_over() -> None:
    """Two flipped passes give a bad node as many passes as failing partners: it asks a failure
    again, but a pair that failed again points at a real fault, so it gets distinct partners and
    is blamed (asking the same failing pairs again would leave it undetermined at its cap)."""
    nodes = fleet(16)
    for bad in ("r00-n02", "r00-n05", "r00-n12"):
        calls: list[Group] = []

        def probe(group: Group, bad: str = bad, calls: list[Group] = calls) -> bool:
            calls.append(group)
            after_screen = [g for g in calls[len(nodes) :] if bad in g]
            return bad not in group or (len(calls) > len(nodes) and len(after_screen) <= 2)

        result = locate_bad_nodes(nodes, probe)
        assert (result.bad, result.undetermined, result.bad_links) == ((bad,), (), ()), bad
        later = [r.group for r in result.probes if r.round > 2 and bad in r.group]
        assert max(later.count(g) for g in later) == 2, bad  # asked again once, then moved on


def test_five_percent_noisy_answers_seeded() -> None:
    nodes = fleet(32)
    outcomes = []
    for seed in range(40):
        rng = random.Random(seed)
        bad = rng.choice(nodes)
        result = locate_bad_nodes(nodes, fabric({bad}, flip=lambda j, rng=rng: rng.random() < 0.05))  # type: ignore[misc]
        assert set(result.bad) <= {bad} and result.bad_links == (), seed  # never an innocent
        outcomes.append(result.bad == (bad,))
    assert sum(outcomes) >= 38


def test_two_nodes_cannot_be_told_apart_by_pair_probes() -> None:
    result = locate_bad_nodes(["a", "b"], fabric({"b"}))
    assert result.bad == ()
    assert result.undetermined == ("a", "b")


def test_three_nodes_one_bad_is_resolved() -> None:
    for bad in "abc":
        result = locate_bad_nodes(["a", "b", "c"], fabric({bad}))
        assert result.bad == (bad,) and result.undetermined == ()


def test_only_one_good_node_left_is_reported_not_guessed() -> None:
    nodes = ["a", "b", "c", "d"]
    result = locate_bad_nodes(nodes, fabric({"a", "b", "c"}))
    assert "d" not in result.bad
    assert set(result.bad) | set(result.undetermined) >= {"a", "b", "c"}


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unique"):
        locate_bad_nodes(["a", "a"], lambda g: True)


def test_result_json() -> None:
    result = locate_bad_nodes(fleet(16), fabric({"r00-n05"}, [("r00-n01", "r00-n09")]))
    data = json.loads(json.dumps(result.to_json()))
    assert data["bad"] == ["r00-n05"] and data["bad_links"] == [["r00-n01", "r00-n09"]]
    assert data["probes_used"] == len(data["probes"]) and data["rounds"] == data["probes"][-1]["round"]


def test_the_sweep_as_prior_probes_only_the_suspects() -> None:
    nodes = fleet(64)
    bad = "r01-n04"
    sweep = resume_search(nodes, lambda g, a: None).next_round  # the same matching as the sweep
    prior = [ProbeRecord(g, bad not in g) for g in sweep]
    calls: list[Group] = []
    result = locate_bad_nodes(nodes, fabric({bad}, calls=calls), prior=prior, policy=SWEPT_POLICY)
    assert result.bad == (bad,) and result.undetermined == ()
    (partner,) = {n for g in sweep if bad in g for n in g} - {bad}
    assert {n for g in calls for n in g} - {bad, partner} <= {n for n in nodes if n not in (bad, partner)}
    assert all(bad in g or partner in g for g in calls)  # nobody else is probed
    assert result.probes_used <= 6


def replay(
    nodes: list[str], probe: Callable[[Group], bool], **kw: object
) -> tuple[IsolationResult, list[list[Group]]]:
    """Run the search the way the isolation task does: each round's pairs elsewhere, answers
    stored, the search replayed over them."""
    answers: dict[tuple[frozenset[str], int], bool] = {}
    asked: list[list[Group]] = []
    while True:
        progress = resume_search(nodes, lambda g, a: answers.get((frozenset(g), a)), **kw)  # type: ignore[arg-type]
        if not progress.next_round:
            return progress.result, asked
        asked.append(list(progress.next_round))
        for group, attempt in zip(progress.next_round, progress.attempts, strict=True):
            answers[(frozenset(group), attempt)] = probe(group)
        assert len(asked) <= 64


@pytest.mark.parametrize(("n", "k", "links"), [(2, 1, 0), (3, 1, 0), (16, 0, 0), (16, 1, 1), (64, 2, 1)])
def test_a_resumed_search_asks_the_same_rounds_and_finds_the_same(n: int, k: int, links: int) -> None:
    nodes = fleet(n)
    for seed in range(4):
        rng = random.Random(seed)
        bad = set(rng.sample(nodes, k))
        screen = resume_search(nodes, lambda g, a: None).next_round
        link = [rng.choice([g for g in screen if not set(g) & bad])] if links else []
        noise = [random.Random(seed).random() < 0.05 for _ in range(2000)]
        direct = locate_bad_nodes(nodes, fabric(bad, link, flip=noise.__getitem__))
        resumed, asked = replay(nodes, fabric(bad, link, flip=noise.__getitem__))
        assert asked == rounds_of(direct)
        assert resumed == direct


def test_a_partly_answered_round_asks_only_for_the_rest() -> None:
    nodes = fleet(8)
    first = resume_search(nodes, lambda g, a: None)
    assert len(first.next_round) == 4 and first.attempts == (0, 0, 0, 0)
    done = {frozenset(first.next_round[0])}
    progress = resume_search(nodes, lambda g, a: True if frozenset(g) in done and a == 0 else None)
    assert progress.next_round == first.next_round[1:]
    # the screen's second round asks the same pairs again: their second attempt
    answered = resume_search(nodes, lambda g, a: True if a == 0 else None)
    assert answered.next_round == first.next_round and answered.attempts == (1, 1, 1, 1)


def test_a_stopped_search_says_what_it_knows_so_far() -> None:
    nodes = fleet(16)
    bad = {"r00-n03", "r00-n11"}
    answers: dict[tuple[frozenset[str], int], bool] = {}
    progress = resume_search(nodes, lambda g, a: answers.get((frozenset(g), a)))
    while progress.next_round:
        assert progress.result.undetermined == ()  # not concluded while probes are pending
        assert not set(progress.cleared) & bad and set(progress.result.bad) <= bad
        for group, attempt in zip(progress.next_round, progress.attempts, strict=True):
            answers[(frozenset(group), attempt)] = not (set(group) & bad)
        progress = resume_search(nodes, lambda g, a: answers.get((frozenset(g), a)))
    assert set(progress.result.bad) == bad
