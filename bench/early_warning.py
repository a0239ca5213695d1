"""Early warning from trends: how many sweeps before the hard fail the first `warn` comes, and how
many healthy nodes are warned, on a simulated fleet replayed sweep by sweep.

Run: `.venv/bin/python bench/early_warning.py [--nodes 1000 --sweeps 20 --seeds 0,1,2,3,4]`.

Each seed replays `fleetval.trends.replay` (1,000 nodes x 8 GPUs, 20 sweeps; 10 degrading nodes
per pattern: correctable-ECC rate rising to a DBE, row remaps accumulating to a remap failure,
busbw creeping down to D-NET-NCCL-01's fail; healthy nodes with SBE bursts, a steady SBE trickle,
lone remaps, driver reloads, throttling bursts, temperature and busbw jitter). After every sweep
the node's history so far is judged (`judge_device_trend`, `judge_link_trend`); the hard fail is
what fleetval's judges fail on (Xid table, DCGM r2's row-remap / retired-page checks, DBE,
busbw below min_ratio). A degrading node's replay ends at its hard fail.

Lead time = hard-fail sweep - first-warning sweep of the pattern's family (device or link), 0 when
no warning came before the fail. False-warning rate = healthy nodes warned at least once (device
or link, any sweep) / healthy nodes. Goal: lead >= 1 sweep on each pattern, <= 1 % flagged.
The load average is printed first and last; the figures are seeded and do not depend on it;
the CPU time per seed does. The figures are printed last.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from fleetval.trends.replay import PATTERNS, ReplayConfig, replay_fleet, score


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--sweeps", type=int, default=20)
    parser.add_argument("--degrading", type=int, default=10, help="degrading nodes per pattern")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    print(load())
    print(
        f"{args.nodes} nodes x {args.gpus} GPUs, {args.sweeps} sweeps, {args.degrading} degrading "
        f"nodes per pattern, seeds {seeds}"
    )

    leads: dict[str, list[int]] = {p: [] for p in PATTERNS}
    degrading = dict.fromkeys(PATTERNS, 0)
    healthy = flagged = 0
    by_rule: dict[str, int] = {}
    by_family = {"device": 0, "link": 0}
    print(f"\n{'seed':>4} {'cpu s':>6}  " + "  ".join(f"{p:>22}" for p in PATTERNS) + "  healthy flagged")
    for seed in seeds:
        cfg = ReplayConfig(
            nodes=args.nodes,
            gpus=args.gpus,
            sweeps=args.sweeps,
            degrading_per_pattern=args.degrading,
            seed=seed,
        )
        started = time.process_time()
        outcomes = replay_fleet(cfg)
        cpu = time.process_time() - started
        s = score(outcomes)
        cells = []
        for p in PATTERNS:
            ps = s["patterns"][p]
            leads[p] += ps.leads
            degrading[p] += ps.degrading
            med = statistics.median(ps.leads) if ps.leads else float("nan")
            cells.append(
                f"med {med:>3.1f} min {min(ps.leads, default=0):>2} "
                f"ahead {ps.warned_ahead():>2}/{ps.failed:<2}"
            )
        healthy += s["healthy"]
        flagged += s["healthy_flagged"]
        for rule, n in s["healthy_flagged_by_rule"].items():
            by_rule[rule] = by_rule.get(rule, 0) + n
        for family, n in s["healthy_flagged_by_family"].items():
            by_family[family] += n
        print(
            f"{seed:>4} {cpu:>6.1f}  "
            + "  ".join(f"{c:>22}" for c in cells)
            + f"  {s['healthy_flagged']}/{s['healthy']} ({s['healthy_flagged'] / s['healthy']:.2%})"
        )

    print(f"\nhealthy nodes warned, by rule: {by_rule or 'none'}; by family: {by_family}")
    print(load())
    print(
        f"\nfigures over {len(seeds)} seeds (lead = sweeps before the hard fail; goal >= 1, <= 1 % flagged):"
    )
    for p in PATTERNS:
        values = sorted(leads[p])
        ahead = sum(v >= 1 for v in values)
        dist = ", ".join(f"{k}:{values.count(k)}" for k in sorted(set(values)))
        print(
            f"  {p:<17} lead median {statistics.median(values):.1f} min {min(values)} max {max(values)}; "
            f">= 1 sweep ahead {ahead}/{len(values)} ({ahead / len(values):.0%}); failed in the replay "
            f"{len(values)}/{degrading[p]}; lead:count {dist}"
        )
    print(f"  false warnings: {flagged}/{healthy} healthy nodes ({flagged / healthy:.2%})")


if __name__ == "__main__":
    main()
