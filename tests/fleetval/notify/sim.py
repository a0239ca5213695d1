"""A fleet as the notifier reads it (`Snapshot`s built by hand) and the notifier's evaluations
one after another, the ledger kept as the store would keep it (`Ledger.after`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

from fleetval.notify.events import FleetState, diff, fleet_state
from fleetval.notify.policy import DEFAULT_POLICY, Channel, Ledger, Notice, NotificationPolicy, Plan, plan
from fleetval.store.metrics import Breaker, Snapshot
from fleetval.store.notifications import RolloutHalt

T0 = dt.datetime(2026, 12, 6, 3, 0, tzinfo=dt.UTC)
FAIL = 3


def node_names(count: int) -> list[str]:
    return [f"r{i // 8 + 1:02d}-n{i % 8 + 1:02d}" for i in range(count)]


def snapshot(
    nodes: Iterable[str],
    quarantined: Iterable[str] = (),
    *,
    now: dt.datetime,
    covered_at: dt.datetime | None = None,
    breakers: Sequence[Breaker] = (),
    scenarios: dict[tuple[str, str], int] | None = None,
    shadow_quarantined: Iterable[str] = (),
) -> Snapshot:
    """Every node covered by a weekly r2 a day before `now` (unless `covered_at`); the quarantined
    ones failing it."""
    racks = {n: n.split("-")[0] for n in nodes}
    bad = set(quarantined)
    at = covered_at or now - dt.timedelta(days=1)
    states = {(n, False): frozenset({"cordoned", "quarantined"}) for n in bad}
    states.update({(n, True): frozenset({"quarantined"}) for n in shadow_quarantined})
    return Snapshot(
        racks=racks,
        latest={(n, "D-DEV-03"): FAIL if n in bad else 0 for n in racks},
        covered={(n, "D-DEV-03"): at for n in racks},
        states=states,
        breakers=tuple(breakers),
        baselines=(),
        scenarios=scenarios or {},
        scenario_run_at=now - dt.timedelta(hours=1) if scenarios else None,
    )


class Notifier:
    """Evaluations in turn against one ledger, as the DAG runs them every ten minutes."""

    def __init__(
        self, policy: NotificationPolicy = DEFAULT_POLICY, channels: Sequence[Channel] = tuple(Channel)
    ) -> None:
        self.policy = policy
        self.channels = tuple(channels)
        self.ledger = Ledger({})
        self.plans: list[Plan] = []

    def state(self, snap: Snapshot, now: dt.datetime, halts: Sequence[RolloutHalt] = ()) -> FleetState:
        return fleet_state(snap, halts, now=now, coverage_max_age=self.policy.coverage_max_age)

    def evaluate(self, snap: Snapshot, now: dt.datetime, halts: Sequence[RolloutHalt] = ()) -> Plan:
        events = diff(self.ledger.known(), self.state(snap, now, halts))
        planned = plan(events, self.ledger, self.policy, now, self.channels)
        self.ledger = self.ledger.after(planned)
        self.plans.append(planned)
        return planned

    def sent(self, channel: Channel | None = None) -> list[Notice]:
        """Every notice that went out (not suppressed), oldest first."""
        return [
            n
            for p in self.plans
            for n in p.notices
            if not n.suppressed and (channel is None or n.channel is channel)
        ]
