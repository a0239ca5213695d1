"""Probes needed to locate one bad node among N with `locate_bad_nodes`, vs probing all pairs.

Run: `.venv/bin/python bench/nccl_isolation.py [--seeds 500]`. For each N (16, 64, 232 — the fleet
size a published peer needed ~55 probes for — 256, 1024), one bad node is placed at random
(seeded) and a simulated probe says whether a group is healthy (no bad node in it). Prints
max / mean probes, the all-pairs count N(N-1)/2 and the ratio, all measured in this run; a second
table does the same for 0, 2 and 3 bad nodes. The last line is the figure for 256 nodes.

The isolation task runs its probes as MPIJobs and resumes the search by replaying it over the
answers stored so far (`resume_search`), once per round: a third table checks that the replayed
search asks the same groups and measures what the replays cost in CPU time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from fleetval.nccl.isolation_search import locate_bad_nodes, resume_search

SIZES = (16, 64, 232, 256, 1024)


def measure(n: int, k: int, seeds: int) -> list[int]:
    nodes = [f"node-{i:04d}" for i in range(n)]
    used: list[int] = []
    for seed in range(seeds):
        bad = set(random.Random(seed * 7919 + n).sample(nodes, k))
        result = locate_bad_nodes(nodes, lambda group, bad=bad: not (set(group) & bad))  # type: ignore[misc]
        if set(result.bad) != bad:
            raise SystemExit(f"wrong answer: N={n} k={k} seed={seed}: {sorted(bad)} vs {result.bad}")
        used.append(result.probes_used)
    return used


def replayed(n: int, k: int, seed: int) -> tuple[int, float]:
    """Probes asked and seconds spent when every answer comes back through a replay."""
    nodes = [f"node-{i:04d}" for i in range(n)]
    bad = set(random.Random(seed * 7919 + n).sample(nodes, k))
    direct = locate_bad_nodes(nodes, lambda group: not (set(group) & bad))
    answers: dict[frozenset[str], bool] = {}
    started = time.perf_counter()
    while (group := resume_search(nodes, lambda g: answers.get(frozenset(g))).next_group) is not None:
        answers[frozenset(group)] = not (set(group) & bad)
    elapsed = time.perf_counter() - started
    if len(answers) > direct.probes_used:
        raise SystemExit(f"replay asked more than the direct search: N={n} k={k} seed={seed}")
    return len(answers), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=500, help="random placements per N (default 500)")
    args = parser.parse_args()

    print(f"one bad node, {args.seeds} random placements per N")
    print(f"{'N':>6} {'max':>5} {'mean':>7} {'all-pairs':>10} {'pairs/max':>10}")
    figures: dict[int, tuple[int, int]] = {}
    for n in SIZES:
        used = measure(n, 1, args.seeds)
        pairs = n * (n - 1) // 2
        figures[n] = (max(used), pairs)
        print(f"{n:>6} {max(used):>5} {statistics.fmean(used):>7.2f} {pairs:>10} {pairs / max(used):>10.0f}")

    print(f"\nk bad nodes (correctness checked), {args.seeds // 5} placements per cell: max / mean probes")
    print(f"{'N':>6} " + " ".join(f"{'k=' + str(k):>13}" for k in (0, 2, 3)))
    for n in SIZES:
        cells = []
        for k in (0, 2, 3):
            used = measure(n, k, max(1, args.seeds // 5))
            cells.append(f"{max(used):>5} / {statistics.fmean(used):>5.1f}")
        print(f"{n:>6} " + " ".join(f"{c:>13}" for c in cells))

    print("\nresumed by replay (one replay per round), 20 placements per cell: rounds, max replay CPU")
    print(f"{'N':>6} " + " ".join(f"{'k=' + str(k):>16}" for k in (1, 3)))
    for n in SIZES:
        cells = []
        for k in (1, 3):
            runs = [replayed(n, k, seed) for seed in range(20)]
            cells.append(f"{max(r for r, _ in runs):>4} / {max(t for _, t in runs) * 1000:>6.1f} ms")
        print(f"{n:>6} " + " ".join(f"{c:>16}" for c in cells))

    worst, pairs = figures[256]
    print(f"\nprobes for 1 bad among 256: max {worst} (all-pairs {pairs})")


if __name__ == "__main__":
    main()
