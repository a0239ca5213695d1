"""Fault isolation: locate the bad node(s) among N with few NCCL probes, not all N(N-1)/2 pairs.

A probe runs one multi-node NCCL test over a *group* of nodes (a pair is the smallest group; a
ring over many nodes is one probe) and says whether the group was healthy — its busbw within the
baseline and no errors. A group with a bad node in it is unhealthy; a group of good nodes is
healthy. That makes isolation adaptive group testing:

1. probe every node not yet cleared, as one group; healthy → done (0 bad: 1 probe);
2. otherwise binary-split the suspects: probe the first half; healthy → the fault is in the other
   half (and the first half becomes known-good partners); unhealthy → it is in the first half;
3. a lone suspect is probed paired with a known-good node, so a pair never blames a good node;
4. record the bad node and go back to 1 for the rest — which also finds a 2nd, 3rd... bad node.

One bad node among N costs about log2(N) + 2 probes (256 nodes: 10, at most 11) against
N(N-1)/2 = 32640 pairs; k bad nodes cost about k(log2(N) + 1) + 1. Probes are assumed
consistent: a flaky probe can clear a bad node; re-probe the result to confirm it.
If no known-good partner can be found (2 nodes, or every other node bad), the suspects that cannot
be told apart are returned in `undetermined` rather than guessed.

Each probe depends on the answers before it. `locate_bad_nodes` asks a callable and waits;
`resume_search` is the same search for a caller that runs probes elsewhere (an MPIJob per group,
minutes each): it replays the search over the answers known so far and stops at the first group
it has no answer for. The search is deterministic, so replaying it is how it resumes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Probe = Callable[[tuple[str, ...]], bool]


@dataclass(frozen=True, slots=True)
class ProbeRecord:
    group: tuple[str, ...]
    healthy: bool

    def to_json(self) -> dict[str, Any]:
        return {"group": list(self.group), "healthy": self.healthy}


@dataclass(frozen=True, slots=True)
class IsolationResult:
    bad: tuple[str, ...]
    probes_used: int
    probes: list[ProbeRecord] = field(default_factory=list)
    undetermined: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "bad": list(self.bad),
            "probes_used": self.probes_used,
            "probes": [p.to_json() for p in self.probes],
            "undetermined": list(self.undetermined),
        }


class _Search:
    def __init__(self, nodes: tuple[str, ...], probe: Probe) -> None:
        self.nodes = nodes
        self.probe = probe
        self.good: set[str] = set()
        self.bad: list[str] = []
        self.undetermined: list[str] = []
        self.records: list[ProbeRecord] = []
        self.unhealthy: set[frozenset[str]] = set()

    def run(self, group: tuple[str, ...]) -> bool:
        if frozenset(group) in self.unhealthy:
            return False  # already seen failing; probes are assumed consistent
        healthy = bool(self.probe(group))
        self.records.append(ProbeRecord(group, healthy))
        if healthy:
            self.good.update(group)
        else:
            self.unhealthy.add(frozenset(group))
        return healthy

    def partner(self, exclude: set[str]) -> str | None:
        """A known-good node; if none is known yet, clear some unknown nodes outside `exclude`."""
        for node in self.nodes:  # deterministic: first known-good in the caller's order
            if node in self.good:
                return node
        candidates = [n for n in self.nodes if n not in exclude and n not in self.bad and n not in self.good]
        # Probe the unknown outsiders, halving unhealthy groups, until one group is healthy
        # (one probe when there is a single bad node).
        queue = [candidates]
        while queue:
            group = queue.pop(0)
            if len(group) < 2:
                continue
            if self.run(tuple(group)):
                return group[0]
            queue.extend([group[: len(group) // 2], group[len(group) // 2 :]])
        # Dense faults: any two unknown nodes (suspects included) that pass together are good.
        unknown = [n for n in self.nodes if n not in self.bad and n not in self.good]
        for i, a in enumerate(unknown):
            for b in unknown[i + 1 :]:
                if self.run((a, b)):
                    return a
        return None

    def group_for(self, members: list[str], suspects: list[str]) -> tuple[str, ...] | None:
        if len(members) >= 2:
            return tuple(members)
        mate = self.partner(set(suspects))
        return None if mate is None else (members[0], mate)

    def find_one(self, suspects: list[str]) -> str | None:
        """One bad node among `suspects`, known to hold at least one; None if undecidable."""
        s = list(suspects)
        while len(s) > 1:
            cut = len(s) // 2
            if cut == 1 and not self.good:
                cut = len(s) - 1  # no partner yet: keep the probed half a real group (3 → 2 + 1)
            half = s[:cut]
            group = self.group_for(half, s)
            if group is None:
                self.undetermined.extend(s)
                return None
            s = s[cut:] if self.run(group) else half
        return s[0]


def locate_bad_nodes(nodes: Sequence[str], probe: Probe) -> IsolationResult:
    """Find every bad node among `nodes`; `probe(group)` is True when the group is healthy.

    Groups passed to `probe` have at least two nodes whenever `nodes` has two or more (a single
    node is probed alone only when it is the whole fleet).
    """
    ordered = tuple(nodes)
    if len(set(ordered)) != len(ordered):
        raise ValueError("node names must be unique")
    search = _Search(ordered, probe)
    _locate(search)
    return _result(search)


@dataclass(frozen=True, slots=True)
class SearchProgress:
    """Where a resumed search stands: the next group to probe (None: the search is over), and
    what is known so far (`result`: final when `next_group` is None; `cleared`: nodes a healthy
    group vouched for)."""

    next_group: tuple[str, ...] | None
    result: IsolationResult
    cleared: tuple[str, ...] = ()


class _Unanswered(Exception):
    def __init__(self, group: tuple[str, ...]) -> None:
        super().__init__(group)
        self.group = group


def resume_search(nodes: Sequence[str], answer: Callable[[tuple[str, ...]], bool | None]) -> SearchProgress:
    """`locate_bad_nodes` over the answers known so far: `answer(group)` is True/False for a group
    already probed, None for one that was not. Stops at the first unanswered group."""
    ordered = tuple(nodes)
    if len(set(ordered)) != len(ordered):
        raise ValueError("node names must be unique")

    def probe(group: tuple[str, ...]) -> bool:
        known = answer(group)
        if known is None:
            raise _Unanswered(group)
        return known

    search = _Search(ordered, probe)
    try:
        _locate(search)
    except _Unanswered as pending:
        return SearchProgress(pending.group, _result(search), _cleared(search))
    return SearchProgress(None, _result(search), _cleared(search))


def _cleared(search: _Search) -> tuple[str, ...]:
    return tuple(n for n in search.nodes if n in search.good)


def _result(search: _Search) -> IsolationResult:
    bad = tuple(n for n in search.nodes if n in search.bad)
    undetermined = tuple(n for n in search.nodes if n in search.undetermined)
    return IsolationResult(
        bad=bad, probes_used=len(search.records), probes=list(search.records), undetermined=undetermined
    )


def _locate(search: _Search) -> None:
    ordered = search.nodes
    if not ordered:
        return
    if len(ordered) == 1:
        if not search.run(ordered):
            search.bad.append(ordered[0])
        return
    while True:
        suspects = [
            n
            for n in ordered
            if n not in search.good and n not in search.bad and n not in search.undetermined
        ]
        if not suspects:
            break
        group = search.group_for(suspects, suspects)
        if group is None:
            search.undetermined.extend(suspects)
            break
        if search.run(group):
            break
        found = search.find_one(suspects)
        if found is not None:
            search.bad.append(found)
