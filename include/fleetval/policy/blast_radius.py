"""Blast-radius budgets: how much of the fleet may be under diagnosis or taken out at once.

Two budgets, both data:
- `DiagnosisBudget` splits the nodes to probe into waves; no wave holds more than
  `max_fleet_fraction` of the fleet nor `max_rack_fraction` of any rack. Waves run one at a
  time, so the budget holds whatever the pool sizes.
- `ActionBudget` is the circuit breaker for disruptive actions (cordon, quarantine): past
  `max_fleet_fraction` of the fleet or `max_rack_fraction` of a rack in one run, fleetval stops
  acting and raises an alert verdict instead.

Both are at least one node, so a small rack is not un-testable.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleetval.errors import SpecError


@dataclass(frozen=True, slots=True)
class DiagnosisBudget:
    max_fleet_fraction: float = 0.10
    max_rack_fraction: float = 0.25

    def __post_init__(self) -> None:
        for name in ("max_fleet_fraction", "max_rack_fraction"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise SpecError(f"{name} must be in (0, 1], got {value}")


def plan_waves(
    nodes: Sequence[str],
    rack_of: Mapping[str, str],
    *,
    fleet_size: int,
    rack_sizes: Mapping[str, int],
    budget: DiagnosisBudget,
    max_waves: int | None = None,
    max_wave_size: int | None = None,
) -> list[list[str]]:
    """Split `nodes` into waves that respect `budget`; linear in the number of nodes.

    Fractions are of the whole fleet and whole rack (not just of the nodes being probed). Nodes
    are taken round-robin across racks so every wave spreads over racks. Raises SpecError when
    more than `max_waves` waves would be needed. `max_wave_size` caps a wave further: a wave's
    nodes are one mapped task each, so a wave never exceeds Airflow's max_map_length.
    """
    fleet_cap = max(1, math.floor(fleet_size * budget.max_fleet_fraction))
    if max_wave_size is not None:
        fleet_cap = max(1, min(fleet_cap, max_wave_size))
    rack_cap = {
        rack: max(1, math.floor(size * budget.max_rack_fraction)) for rack, size in rack_sizes.items()
    }
    by_rack: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        by_rack[rack_of[node]].append(node)
    # Per-rack chunks of at most the rack cap; wave k takes chunk k of every rack, filled up to
    # the fleet cap, the overflow moving on to later waves.
    waves: list[list[str]] = []
    pending = {rack: list(members) for rack, members in by_rack.items()}
    cursor = dict.fromkeys(pending, 0)
    racks = sorted(pending)
    while any(cursor[r] < len(pending[r]) for r in racks):
        wave: list[str] = []
        for rack in racks:
            room = fleet_cap - len(wave)
            if room <= 0:
                break
            take = min(rack_cap[rack], room, len(pending[rack]) - cursor[rack])
            wave.extend(pending[rack][cursor[rack] : cursor[rack] + take])
            cursor[rack] += take
        # Start the next wave's rack scan where this one stopped, so no rack starves.
        racks = racks[1:] + racks[:1]
        waves.append(wave)
        if max_waves is not None and len(waves) > max_waves:
            raise SpecError(
                f"{len(nodes)} nodes need more than {max_waves} waves under budget {budget}; raise the budget"
            )
    return waves


@dataclass(frozen=True, slots=True)
class ActionBudget:
    """Circuit breaker for disruptive node actions within one run."""

    max_fleet_fraction: float = 0.05
    max_rack_fraction: float = 0.25

    def allows(
        self,
        node: str,
        rack: str,
        *,
        taken: Mapping[str, str],
        fleet_size: int,
        rack_sizes: Mapping[str, int],
    ) -> bool:
        """Whether one more disruptive action on `node` fits, given `taken` (node → rack) already acted on."""
        fleet_cap = max(1, math.floor(fleet_size * self.max_fleet_fraction))
        rack_cap = max(1, math.floor(rack_sizes.get(rack, 1) * self.max_rack_fraction))
        if node in taken:
            return True
        in_rack = sum(1 for r in taken.values() if r == rack)
        return len(taken) < fleet_cap and in_rack < rack_cap
