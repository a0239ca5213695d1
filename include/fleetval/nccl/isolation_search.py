"""Fault isolation: which node — or which link between two nodes — makes NCCL probes fail.

A probe runs one multi-node NCCL test over a pair of nodes and says whether it was healthy. Three
things make that answer harder to use than "a group with a bad node fails":

- **Probes are noisy.** A healthy pair sometimes fails (a transient), a bad node sometimes passes.
  No single comparison decides anything: evidence is counted, and a decision needs a *margin*
  (`IsolationPolicy`, data with an id), like a sequential test.
- **Faults are nodes or links.** A bad node fails with every partner; a bad link (a cable, a
  switch port, a rail between two nodes) fails one pair whose members both pass with others.
- **busbw depends on group size.** The only inter-node baseline measured is the pair's
  (`inter-2x<gpus>`: `fleetval.nccl.plan.inter_scope`), and the judge compares every group
  against it (`fleetval.nccl.judge_stored`). A ring over 64–128 nodes is slower per rank than a
  pair, so against that baseline a healthy big group looks bad and group testing blames whoever
  happens to be in it. Hence **pairs only**: a probe's baseline is exactly the one measured, and a
  pair exercises exactly one link — its own — so "a link that fails only between ring
  neighbours" is the pair itself, never hidden inside a larger ring. The price is O(N) jobs
  instead of O(log N), but node-disjoint pairs run at once (one round: one MPIJob per pair), and
  after a sweep (every node already in a pair) only the suspects are probed again.

Evidence, recounted after every round (`IsolationPolicy` margins; cleared and blamed stick):

1. A pass vouches for both nodes (a bad node passes only by noise). A node is *cleared* when its
   passes exceed, by `clear_margin`, the number of partners it failed with that are not blamed
   for it (a failure counts against both members until one of them is blamed).
2. A node is *blamed* when the cleared partners it fails with outnumber its passes by
   `blame_margin` (partners, not probes: a bad link to one partner fails as often as it is
   probed, and counts once), and at least `min_blame_partners` of them. A fleet with fewer
   cleared nodes than the margin needs every one of them to fail with it.
3. A failing pair whose members are both cleared is a link question: the pair is re-probed, and
   its answers since it first failed decide (that failure was chosen for failing, the later
   answers were not) — failures ahead by `link_margin`: a bad link; passes ahead by
   `link_clear_margin`: it was noise. Answers given before both were cleared count: the decision
   waits for the clearing, the evidence does not.
4. What is still open when a node or a link has had its cap of probes (or no partner is left)
   is `undetermined` with the candidates: nodes that failed and were neither cleared nor blamed,
   links neither confirmed nor cleared. An innocent node is never blamed to end the search.

Rounds: each round is a set of node-disjoint pairs (a node's GPUs run one probe at a time).
Without prior evidence the search starts with the *screen*: node i with node i + N/2 (N/2 pairs
at once), `screen_repeats` times, so a bad node or link hides only if every screen probe of it
flips. Then: link re-probes first; then each suspect (a node with an unexplained failure):

- whose failures look like noise (each failing pair of it has passed, and has not failed again
  since it first failed), with that partner again: one probe is evidence for both nodes and for
  the link between them, so a flipped answer costs the rounds of one question, not of a
  clearing and then a link question, one after the other;
- with at least as many passes as failing partners (`reask_lead`: it may well be good), again
  with a cleared partner it failed with whose pair has not failed again since: the same link
  question, asked while the answers also clear it (a pair that failed again points at a real
  fault: a bad node needs distinct partners, a bad link is asked once both ends are cleared);
- otherwise with a cleared partner it has not been paired with yet (distinct partners: blame
  counts partners, and a pair that failed twice points at a real fault);

then nodes that still need passes, with cleared partners or with each other. A node's link
questions cannot share a round (its GPUs run one probe at a time): the rounds of a search are set
by the node with the most questions. After a sweep, its pairs are the `prior` evidence and there
is no screen (`SWEPT_POLICY`).

Each round depends on the answers before it. `locate_bad_nodes` asks a callable and waits;
`resume_search` is the same search for a caller that runs probes elsewhere (an MPIJob per pair,
minutes each): it replays the search over the answers known so far — `answer(group, attempt)`,
attempt counting earlier asks of the same pair — and stops at the first round with a missing
answer, returning that round's unanswered pairs. The search is deterministic, so replaying it is
how it resumes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

Group = tuple[str, ...]
Probe = Callable[[Group], bool]
Answer = Callable[[Group, int], bool | None]


@dataclass(frozen=True, slots=True)
class IsolationPolicy:
    """How much evidence decides (see module doc); a data record named by `policy_id`."""

    policy_id: str
    clear_margin: int
    blame_margin: int
    link_margin: int
    min_blame_partners: int = 2
    # Passes ahead that settle a link question as noise. 2 settles false alarms sooner (bench, 500
    # placements, 5 % noise: 256 nodes max 19-23 rounds instead of 22-23, 16 nodes p95 9-12
    # instead of 10-13) but missed or wrongly confirmed a link in 7 of 500 placements at 256
    # nodes (98.6 % correct, under the 99 % target): 3 by default.
    link_clear_margin: int = 3
    screen_repeats: int = 2  # without prior evidence: rounds of the screen matching first
    max_probes_per_node: int = 16  # an undecided node probed this often is undetermined
    max_link_probes: int = 13  # re-probes of one pair before its link is undetermined
    max_rounds: int = 64
    # A suspect this many passes ahead of its failing partners asks a failure again (module doc,
    # Rounds). 0: a good node's flipped failure costs the question's passes, which clear it too,
    # not fresh partners first (bench, 16 nodes, 1 bad link, 5 % noise: p95 12 rounds, was 13 with
    # 1). -1 (p95 11) re-asks for a bad node with one flipped pass too: its rounds go to questions
    # that say nothing about it (2 bad nodes: 98.6 % correct, undetermined at its probe cap).
    reask_lead: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# No prior evidence: every node needs two passes (the screen's two rounds give them), and every
# node is exposed to blame: at a 5 % flip rate a good node fails 4 times running with probability
# 0.05^4 ≈ 6e-6, ~0.2 % of 256-node searches (a margin of 3: 0.05^3 × 256 ≈ 3 %).
PAIRS_POLICY: Final = IsolationPolicy("nccl-isolation-pairs-1", clear_margin=2, blame_margin=4, link_margin=3)
# After a sweep: the isolation task reads each pair probe by the majority of its repeats
# (fleetval.nccl.isolation), so one flipped repeat is outvoted and one passing pair clears its
# nodes. Only the members of failing pairs are exposed to blame: a margin of 3 suffices there.
SWEPT_POLICY: Final = dataclasses.replace(
    PAIRS_POLICY, policy_id="nccl-isolation-swept-1", clear_margin=1, blame_margin=3
)
# One comparison decides: what the bench measures beside the policies above.
SINGLE_COMPARISON: Final = IsolationPolicy(
    "nccl-isolation-single-comparison",
    clear_margin=1,
    blame_margin=1,
    link_margin=1,
    min_blame_partners=1,
    link_clear_margin=1,
    screen_repeats=1,
)


@dataclass(frozen=True, slots=True)
class ProbeRecord:
    group: Group
    healthy: bool
    round: int = 0  # 0: prior evidence (the sweep); the search's rounds count from 1

    def to_json(self) -> dict[str, Any]:
        return {"group": list(self.group), "healthy": self.healthy, "round": self.round}


@dataclass(frozen=True, slots=True)
class IsolationResult:
    bad: tuple[str, ...]
    probes_used: int
    probes: list[ProbeRecord] = field(default_factory=list)
    undetermined: tuple[str, ...] = ()
    bad_links: tuple[tuple[str, str], ...] = ()
    undetermined_links: tuple[tuple[str, str], ...] = ()
    rounds: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "bad": list(self.bad),
            "probes_used": self.probes_used,
            "probes": [p.to_json() for p in self.probes],
            "undetermined": list(self.undetermined),
            "bad_links": [list(link) for link in self.bad_links],
            "undetermined_links": [list(link) for link in self.undetermined_links],
            "rounds": self.rounds,
        }


@dataclass(frozen=True, slots=True)
class SearchProgress:
    """Where a resumed search stands: the pairs of the current round still to probe (empty: the
    search is over), and what is known so far (`result`: final when `next_round` is empty;
    `cleared`: nodes the evidence vouches for)."""

    next_round: tuple[Group, ...]
    result: IsolationResult
    cleared: tuple[str, ...] = ()
    attempts: tuple[int, ...] = ()  # per pair of next_round: how often it was asked before

    @property
    def next_group(self) -> Group | None:
        return self.next_round[0] if self.next_round else None


def _edge(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


class _Search:
    """The evidence so far and the decisions it supports; `absorb` one round, then `plan`."""

    def __init__(self, nodes: Group, policy: IsolationPolicy, prior: Iterable[ProbeRecord]) -> None:
        self.nodes = nodes
        self.index = {n: i for i, n in enumerate(nodes)}
        self.policy = policy
        self.outcomes: dict[frozenset[str], list[bool]] = defaultdict(list)
        self.when: dict[frozenset[str], list[int]] = defaultdict(list)  # round of each outcome
        self.partners: dict[str, set[str]] = defaultdict(set)
        self.passes: Counter[str] = Counter()
        self.seen: Counter[str] = Counter()
        self.asked: Counter[frozenset[str]] = Counter()
        self.cleared: set[str] = set()
        self.blamed: set[str] = set()
        self.records: list[ProbeRecord] = []
        self.rounds = 0
        self.screen: list[Group] = []
        known = set(nodes)
        usable = [
            r for r in prior if len(r.group) == 2 and set(r.group) <= known and r.group[0] != r.group[1]
        ]
        if usable:
            self.absorb([ProbeRecord(r.group, r.healthy, 0) for r in usable], searched=False)
        elif len(nodes) > 1:
            self.screen = self._screen(list(nodes))

    # --- evidence -------------------------------------------------------------------------
    def absorb(self, records: Sequence[ProbeRecord], *, searched: bool = True) -> None:
        for r in records:
            if searched:
                self.records.append(r)
                self.asked[frozenset(r.group)] += 1
            if len(r.group) == 1:  # a one-node fleet: its own probe decides
                (self.blamed if not r.healthy else self.cleared).add(r.group[0])
                continue
            a, b = r.group
            self.outcomes[_edge(a, b)].append(r.healthy)
            self.when[_edge(a, b)].append(r.round)
            self.partners[a].add(b)
            self.partners[b].add(a)
            self.seen.update((a, b))
            if r.healthy:
                self.passes.update((a, b))
        if searched:
            self.rounds += 1
        self._decide()

    def _net(self, a: str, b: str) -> int:
        o = self.outcomes.get(_edge(a, b), [])
        return 2 * sum(o) - len(o)

    def _decide(self) -> None:
        p = self.policy
        for a in self.nodes:
            if a in self.cleared or a in self.blamed:
                continue
            # A failure is held against a node until its partner is blamed for it.
            against = sum(
                1 for t in self.partners[a] if t not in self.blamed and False in self.outcomes[_edge(a, t)]
            )
            if self.passes[a] - against >= p.clear_margin:
                self.cleared.add(a)
        # A tiny fleet has fewer cleared partners than the margin: then every one must fail.
        margin = max(p.min_blame_partners, min(p.blame_margin, len(self.cleared)))
        for a in self.nodes:
            if a in self.blamed or not self.partners[a]:
                continue
            # Partners, not probes: a link to one partner fails as often as it is probed.
            failing = sum(1 for t in self.partners[a] if t in self.cleared and self._net(a, t) < 0)
            if failing - self.passes[a] >= margin:
                self.blamed.add(a)
                self.cleared.discard(a)

    def _after_first_failure(self, edge: frozenset[str]) -> list[bool]:
        """The pair's answers since it first failed: that failure was chosen for failing, the
        later ones were not (a pair is asked at most once a round)."""
        outcomes, when = self.outcomes[edge], self.when[edge]
        first = min(r for h, r in zip(outcomes, when, strict=True) if not h)
        return [h for h, r in zip(outcomes, when, strict=True) if r > first]

    def _link(self, edge: frozenset[str]) -> str:
        """bad | fine | undetermined | open, for a failing pair of two cleared nodes."""
        after = self._after_first_failure(edge)
        score = (len(after) - sum(after)) - sum(after)
        if score >= self.policy.link_margin:
            return "bad"
        if score <= -self.policy.link_clear_margin:
            return "fine"
        return "undetermined" if len(after) >= self.policy.max_link_probes else "open"

    def _links(self) -> dict[tuple[str, str], str]:
        out: dict[tuple[str, str], str] = {}
        for edge, o in self.outcomes.items():
            if False in o and edge <= self.cleared:
                a, b = sorted(edge, key=self.index.__getitem__)
                out[(a, b)] = self._link(edge)
        return dict(sorted(out.items(), key=lambda kv: (self.index[kv[0][0]], self.index[kv[0][1]])))

    def _unexplained_fail(self, a: str) -> bool:
        """`a` failed with a partner that is not blamed for it."""
        return any(t not in self.blamed and False in self.outcomes[_edge(a, t)] for t in self.partners[a])

    def _undecided(self) -> list[str]:
        return [n for n in self.nodes if n not in self.cleared and n not in self.blamed]

    # --- the next round -------------------------------------------------------------------
    def _pair(self, a: str, b: str) -> Group:
        return (a, b) if self.index[a] < self.index[b] else (b, a)

    def _partner(self, s: str, candidates: Sequence[str], busy: set[str]) -> str | None:
        """A free partner for `s`: one it was never paired with first, else the one it did best
        with; never a pair already failing by the blame margin (probing it again says nothing)."""
        best: tuple[int, int, int, int] | None = None
        chosen = None
        for t in candidates:
            if t == s or t in busy:
                continue
            o = self.outcomes.get(_edge(s, t), [])
            if not o:
                return t
            net = 2 * sum(o) - len(o)
            if -net >= self.policy.blame_margin:
                continue
            key = (1, -net, len(o), self.index[t])
            if best is None or key < best:
                best, chosen = key, t
        return chosen

    def _again(self, s: str, busy: set[str]) -> str | None:
        """The partner suspect `s` is asked again with, if any (module doc, Rounds): one it failed
        with, the question with the fewest answers first."""
        failing = [
            t for t in self.partners[s] if t not in self.blamed and False in self.outcomes[_edge(s, t)]
        ]
        after = {t: self._after_first_failure(_edge(s, t)) for t in failing}
        if not failing:
            return None
        if not all(all(a) and True in self.outcomes[_edge(s, t)] for t, a in after.items()):
            if self.passes[s] - len(failing) < self.policy.reask_lead:
                return None
            # s may well be good: its failures with cleared partners are link questions, and
            # asking them again counts toward clearing s too; not a pair that failed again since
            # (a bad s would be asked the same failing question over and over)
            failing = [t for t in failing if t in self.cleared and all(after[t])]
        free = [t for t in failing if t not in busy and len(after[t]) < self.policy.max_link_probes]
        return min(free, key=lambda t: (len(after[t]), self.index[t]), default=None)

    def _screen(self, free: list[str]) -> list[Group]:
        """Fresh pairs among `free`, node i with node i + n/2 first (far apart in the order)."""
        n = len(free)
        taken: set[str] = set()
        out: list[Group] = []
        offsets = [*range(n // 2, n), *range(1, n // 2)]
        for i, s in enumerate(free):
            if s in taken:
                continue
            for off in offsets:
                t = free[(i + off) % n]
                if t != s and t not in taken and _edge(s, t) not in self.outcomes:
                    taken.update((s, t))
                    out.append(self._pair(s, t))
                    break
        return out

    def plan(self) -> list[Group]:
        if len(self.nodes) == 1:
            return [] if self.records else [self.nodes]
        if self.rounds >= self.policy.max_rounds:
            return []
        if self.screen and self.rounds < self.policy.screen_repeats:
            return list(self.screen)
        busy: set[str] = set()
        out: list[Group] = []

        def add(group: Group) -> None:
            busy.update(group)
            out.append(group)

        for (a, b), state in self._links().items():
            if state == "open" and a not in busy and b not in busy:
                add((a, b))
        cap = self.policy.max_probes_per_node
        undecided = [n for n in self._undecided() if self.seen[n] < cap]
        suspects = sorted(
            (n for n in undecided if self._unexplained_fail(n)), key=lambda n: (self.seen[n], self.index[n])
        )
        cleared = [n for n in self.nodes if n in self.cleared]
        for s in suspects:
            if s in busy:
                continue
            # no cleared node anywhere (a tiny or mostly broken fleet): pair undecided nodes
            t = self._again(s, busy) or self._partner(s, cleared if cleared else undecided, busy)
            if t is not None:
                add(self._pair(s, t))
        suspect_set = set(suspects)
        screening = [n for n in undecided if n not in suspect_set and n not in busy]
        waiting = []
        for s in screening:
            t = self._partner(s, cleared, busy) if cleared else None
            if t is None:
                waiting.append(s)
            else:
                add(self._pair(s, t))
        for group in self._screen([n for n in waiting if n not in busy]):
            add(group)
        return out

    # --- the answer -----------------------------------------------------------------------
    def result(self, *, final: bool) -> IsolationResult:
        links = self._links()
        undetermined: tuple[str, ...] = ()
        open_links: tuple[tuple[str, str], ...] = ()
        if final:
            undetermined = tuple(n for n in self._undecided() if self._unexplained_fail(n))
            open_links = tuple(link for link, s in links.items() if s in ("open", "undetermined"))
        return IsolationResult(
            bad=tuple(n for n in self.nodes if n in self.blamed),
            probes_used=len(self.records),
            probes=list(self.records),
            undetermined=undetermined,
            bad_links=tuple(link for link, s in links.items() if s == "bad"),
            undetermined_links=open_links,
            rounds=self.rounds,
        )

    def cleared_nodes(self) -> tuple[str, ...]:
        return tuple(n for n in self.nodes if n in self.cleared)


def _checked(nodes: Sequence[str]) -> Group:
    ordered = tuple(nodes)
    if len(set(ordered)) != len(ordered):
        raise ValueError("node names must be unique")
    return ordered


def resume_search(
    nodes: Sequence[str],
    answer: Answer,
    *,
    prior: Iterable[ProbeRecord] = (),
    policy: IsolationPolicy = PAIRS_POLICY,
) -> SearchProgress:
    """The search over the answers known so far: `answer(group, attempt)` is True/False for a pair
    already probed (`attempt`: how many times this pair was asked before), None for one that was
    not. Stops at the first round with an unanswered pair and returns those pairs."""
    search = _Search(_checked(nodes), policy, prior)
    while groups := search.plan():
        got: list[ProbeRecord] = []
        missing: list[Group] = []
        attempts: list[int] = []
        for group in groups:
            attempt = search.asked[frozenset(group)]
            known = answer(group, attempt)
            if known is None:
                missing.append(group)
                attempts.append(attempt)
            else:
                got.append(ProbeRecord(group, bool(known), search.rounds + 1))
        if missing:
            return SearchProgress(
                tuple(missing), search.result(final=False), search.cleared_nodes(), tuple(attempts)
            )
        search.absorb(got)
    return SearchProgress((), search.result(final=True), search.cleared_nodes())


def locate_bad_nodes(
    nodes: Sequence[str],
    probe: Probe,
    *,
    prior: Iterable[ProbeRecord] = (),
    policy: IsolationPolicy = PAIRS_POLICY,
) -> IsolationResult:
    """Find every bad node and bad link among `nodes`; `probe(pair)` is True when the pair was
    healthy (it may be wrong now and then: see module doc). Probes are pairs whenever `nodes` has
    two or more; a single node is probed alone only when it is the whole fleet."""
    search = _Search(_checked(nodes), policy, prior)
    while groups := search.plan():
        search.absorb([ProbeRecord(g, bool(probe(g)), search.rounds + 1) for g in groups])
    return search.result(final=True)
