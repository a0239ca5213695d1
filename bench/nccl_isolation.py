"""Fault isolation on a simulated fabric with noisy probes: correct / undetermined / wrong answers,
rounds and jobs, for 1 bad node, 2 bad nodes and 1 bad link, at 0 %, 1 % and 5 % noise.

Run: `.venv/bin/python bench/nccl_isolation.py [--placements 500] [--sizes 16,256]`.

The simulated fabric (`Fabric`) answers a probe over a group of nodes:

- a bad node fails every group that contains it;
- a bad link (a pair of nodes) fails a group only when the group's ring uses it: a pair uses its
  own link, a ring over a larger group uses the links between neighbours in the group's order
  (and last-to-first), so a link between two members that are not ring neighbours goes unseen;
- a group of more than `BASELINE_NODES_MAX` nodes is judged against the pair baseline and looks
  bad even when healthy (busbw per rank falls with ring size: seen from 64–128 nodes);
- a noisy probe flips its answer (probability `noise`, independent per probe).

Each placement (seeded) draws the faults; the bad link is drawn among the pairs of the search's
first round (a link no probe crosses is invisible to any search that does not probe all
N(N-1)/2 pairs: the "link anywhere" row measures that miss). A placement's answer is **correct**
when it names exactly the faults and leaves nothing undetermined, **wrong** when it blames a node
or link that is fine or misses a fault without listing it among the undetermined candidates,
**undetermined** otherwise. Rounds count sequential steps (parallel jobs are one round, a repeat
is its own round); jobs count every probe, repeats included. In the pipeline every probe is
`plan.repeats` (3) nccl-tests runs, one per round: pipeline rounds = 3 × rounds.

Measured in the same run beside the policy: the same search deciding on a single comparison
(`SINGLE_COMPARISON`: margins of 1), the reference for what repeats and margins buy. A second
table starts from a simulated sweep (every node in one pair, answers as noisy) with
`SWEPT_POLICY`, as the isolation task does; a third times the replays of `resume_search`, which
the task runs once per round. Then the rounds of the one-fault cells against the 3·log2(N)
target. The load average is printed first; the last line is the headline (N = 256, 5 % noise).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fleetval.nccl.isolation_search import (
    PAIRS_POLICY,
    SINGLE_COMPARISON,
    SWEPT_POLICY,
    IsolationPolicy,
    IsolationResult,
    ProbeRecord,
    locate_bad_nodes,
    resume_search,
)

BASELINE_NODES_MAX = 64
PIPELINE_REPEATS = 3  # fleetval.nccl.plan.DEFAULT_REPEATS
NOISES = (0.0, 0.01, 0.05)
Link = frozenset[str]


def ring_links(group: Sequence[str]) -> set[Link]:
    """The links a ring over `group` (in its order) uses: neighbours, and last to first."""
    if len(group) < 2:
        return set()
    if len(group) == 2:
        return {frozenset(group)}
    return {frozenset((group[i], group[(i + 1) % len(group)])) for i in range(len(group))}


@dataclass
class Fabric:
    bad_nodes: frozenset[str]
    bad_links: frozenset[Link]
    noise: float
    rng: random.Random
    repeats: int = 1  # nccl-tests runs per probe, read by majority (the isolation task: 3)
    jobs: int = 0

    def truly_healthy(self, group: Sequence[str]) -> bool:
        if set(group) & self.bad_nodes or ring_links(group) & self.bad_links:
            return False
        return len(group) <= BASELINE_NODES_MAX

    def probe(self, group: Sequence[str]) -> bool:
        truth = self.truly_healthy(group)
        self.jobs += self.repeats
        healthy = sum(truth != (self.rng.random() < self.noise) for _ in range(self.repeats))
        return 2 * healthy > self.repeats


def fleet(n: int) -> list[str]:
    return [f"node-{i:04d}" for i in range(n)]


def first_round(nodes: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    return resume_search(nodes, lambda group, attempt: None).next_round


SCENARIOS = ("1 bad node", "2 bad nodes", "1 bad link", "link anywhere")


def place(scenario: str, nodes: list[str], rng: random.Random) -> tuple[frozenset[str], frozenset[Link]]:
    if scenario == "1 bad node":
        return frozenset(rng.sample(nodes, 1)), frozenset()
    if scenario == "2 bad nodes":
        return frozenset(rng.sample(nodes, 2)), frozenset()
    if scenario == "1 bad link":
        return frozenset(), frozenset({frozenset(rng.choice(first_round(nodes)))})
    return frozenset(), frozenset({frozenset(rng.sample(nodes, 2))})


def grade(result: IsolationResult, bad: frozenset[str], links: frozenset[Link]) -> str:
    blamed_links = {frozenset(link) for link in result.bad_links}
    open_links = {frozenset(link) for link in result.undetermined_links}
    if set(result.bad) - bad or blamed_links - links:
        return "wrong"
    if bad - set(result.bad) - set(result.undetermined) or links - blamed_links - open_links:
        return "wrong"  # a fault missed and not among the candidates
    if set(result.bad) == bad and blamed_links == links and not result.undetermined and not open_links:
        return "correct"
    return "undetermined"


@dataclass
class Cell:
    grades: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("correct", "undetermined", "wrong"), 0)
    )
    rounds: list[int] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)

    def add(self, grade_: str, rounds: int, jobs: int) -> None:
        self.grades[grade_] += 1
        self.rounds.append(rounds)
        self.jobs.append(jobs)

    def row(self) -> str:
        n = sum(self.grades.values())
        g = self.grades
        return (
            f"{g['correct'] / n:>8.1%} {g['undetermined']:>6} {g['wrong']:>6} "
            f"{statistics.fmean(self.rounds):>6.1f} {percentile(self.rounds, 0.95):>4} {max(self.rounds):>4} "
            f"{statistics.fmean(self.jobs):>7.1f} {max(self.jobs):>5}"
        )


HEADER = (
    f"{'correct':>8} {'undet':>6} {'wrong':>6} {'rounds':>6} {'p95':>4} {'max':>4} {'jobs':>7} {'max':>5}"
)


def percentile(values: Sequence[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(
    n: int,
    scenario: str,
    noise: float,
    placements: int,
    policy: IsolationPolicy,
    *,
    swept: bool = False,
) -> Cell:
    nodes = fleet(n)
    cell = Cell()
    for seed in range(placements):
        rng = random.Random(f"{n}/{scenario}/{noise}/{seed}")
        bad, links = place(scenario, nodes, rng)
        repeats = PIPELINE_REPEATS if swept else 1
        fabric = Fabric(bad, links, noise, random.Random(f"noise/{n}/{scenario}/{noise}/{seed}"), repeats)
        prior: list[ProbeRecord] = []
        if swept:  # the sweep: every node in one pair, as noisy as any probe, not counted
            prior = [ProbeRecord(g, fabric.probe(g)) for g in first_round(nodes)]
            fabric.jobs = 0
        result = locate_bad_nodes(nodes, fabric.probe, prior=prior, policy=policy)
        if result.probes_used * repeats != fabric.jobs:
            raise SystemExit(f"jobs miscounted: {result.probes_used} × {repeats} vs {fabric.jobs}")
        # a probe's repeats run one after another: each is a round, each a job
        cell.add(grade(result, bad, links), result.rounds * repeats, fabric.jobs)
    return cell


def replayed(n: int, seed: int) -> tuple[int, float]:
    """Rounds and CPU seconds when every round's answers come back through a replay."""
    nodes = fleet(n)
    rng = random.Random(seed)
    fabric = Fabric(frozenset(rng.sample(nodes, 1)), frozenset(), 0.05, rng)
    answers: dict[tuple[frozenset[str], int], bool] = {}

    def answer(group: tuple[str, ...], attempt: int) -> bool | None:
        return answers.get((frozenset(group), attempt))

    started = time.process_time()
    replays = 0
    while True:
        progress = resume_search(nodes, answer)
        replays += 1
        if not progress.next_round:
            break
        for group, attempt in zip(progress.next_round, progress.attempts, strict=True):
            answers[(frozenset(group), attempt)] = fabric.probe(group)
    return replays, time.process_time() - started


Run = Callable[[int, str, float, int], tuple[Cell, Cell]]


def table(
    title: str, sizes: Sequence[int], scenarios: Sequence[str], placements: int, run: Run
) -> dict[tuple[int, str, float], Cell]:
    print(f"\n{title}")
    print(f"{'':<27} {'this policy':<{len(HEADER)}} | single comparison (the same search, margins of 1)")
    print(f"{'N':>5} {'scenario':<14} {'noise':>5}  {HEADER} | {HEADER}")
    cells: dict[tuple[int, str, float], Cell] = {}
    for n in sizes:
        for scenario in scenarios:
            for noise in NOISES:
                started = time.perf_counter()
                cell, reference = run(n, scenario, noise, placements)
                cells[(n, scenario, noise)] = cell
                took = time.perf_counter() - started
                print(
                    f"{n:>5} {scenario:<14} {noise:>5.0%}  {cell.row()} | {reference.row()}  ({took:.0f} s)"
                )
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--placements", type=int, default=500, help="seeded placements per cell (default 500)"
    )
    parser.add_argument("--sizes", default="16,256", help="fleet sizes (default 16,256)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for policy in (PAIRS_POLICY, SWEPT_POLICY):
        print(
            f"policy {policy.policy_id}: clear {policy.clear_margin}, blame {policy.blame_margin}, "
            f"link {policy.link_margin} (cleared by {policy.link_clear_margin}), "
            f"re-ask lead {policy.reask_lead}"
        )
    print(
        f"{args.placements} placements per cell; correct in %, undet / wrong are counts; rounds: mean, "
        "95th percentile, max; jobs: mean, max"
    )

    def fresh(n: int, scenario: str, noise: float, placements: int) -> tuple[Cell, Cell]:
        return (
            measure(n, scenario, noise, placements, PAIRS_POLICY),
            measure(n, scenario, noise, placements, SINGLE_COMPARISON),
        )

    def swept(n: int, scenario: str, noise: float, placements: int) -> tuple[Cell, Cell]:
        return (
            measure(n, scenario, noise, placements, SWEPT_POLICY, swept=True),
            measure(n, scenario, noise, placements, SINGLE_COMPARISON, swept=True),
        )

    cells = table("no prior: screening rounds, then suspects", sizes, SCENARIOS, args.placements, fresh)
    table(
        f"after a sweep (its pairs given as prior, not counted), {SWEPT_POLICY.policy_id}: every "
        f"probe {PIPELINE_REPEATS} runs read by majority, as the isolation task does (rounds, jobs × 3)",
        sizes[-1:],
        SCENARIOS[:3],
        args.placements,
        swept,
    )

    print(
        "\nresumed by replay (one replay per round, 5 % noise, 1 bad node), 10 placements: replays, max CPU"
    )
    for n in sizes:
        runs = [replayed(n, seed) for seed in range(10)]
        worst = max(t for _, t in runs) * 1000
        print(f"{n:>5} {max(r for r, _ in runs):>4} replays, max {worst:>7.1f} ms CPU in all")

    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\nrounds for one fault (1 bad node, 1 bad link; no prior) against 3·log2(N):")
    for size in sizes:
        target = 3 * math.log2(size)
        for noise in NOISES:
            one = [cells[(size, scenario, noise)] for scenario in ("1 bad node", "1 bad link")]
            p95 = max(percentile(c.rounds, 0.95) for c in one)
            worst = max(max(c.rounds) for c in one)
            print(
                f"  N = {size:>4}, {noise:>3.0%} noise: p95 {p95:>3}, max {worst:>3} (target {target:.0f}:"
                f" p95 {'met' if p95 <= target else 'MISSED'}, max {'met' if worst <= target else 'MISSED'})"
            )
    n = sizes[-1]
    parts = []
    for scenario in SCENARIOS[:3]:
        cell = cells[(n, scenario, 0.05)]
        g = cell.grades
        parts.append(
            f"{scenario}: {g['correct']}/{sum(g.values())} correct, {g['undetermined']} undetermined, "
            f"{g['wrong']} wrong, {statistics.fmean(cell.rounds):.1f} rounds (max {max(cell.rounds)})"
        )
    print(f"N = {n}, 5 % noisy probes — " + "; ".join(parts))


if __name__ == "__main__":
    main()
