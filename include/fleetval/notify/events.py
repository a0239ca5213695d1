"""What the on-call hears about, as events: the difference between what the ledger last knew to be
true (its open incidents) and what the store says is true now.

A condition is one fact worth a notice while it holds: a node quarantined, a blast-radius
breaker open in a rack, a driver rollout halted, a node whose coverage is older than its limit, a
Kueue scenario failing. `fleet_state` reads them off one `fleetval.store.metrics.Snapshot` and the
recorded rollout halts; `diff` turns what appeared into opening events and what went away into
resolving ones (a quarantine that ends is a return to service). The same state twice is no event.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from fleetval.store import fleet_health as fh
from fleetval.store.metrics import SAFETY_CRITERION, Snapshot
from fleetval.store.notifications import RolloutHalt

FAIL_SEVERITY: Final = fh.SEVERITY["fail"]  # an error is the harness, not the node or scenario


class Kind(enum.StrEnum):
    QUARANTINE = "quarantine"
    RETURN_TO_SERVICE = "return_to_service"
    BREAKER_TRIP = "breaker_trip"
    ROLLOUT_HALT = "rollout_halt"
    COVERAGE_MISSED = "coverage_missed"
    SCENARIO_FAIL = "scenario_fail"


# The kinds an incident is opened under; a return to service resolves a quarantine.
INCIDENT_KINDS: Final = (
    Kind.QUARANTINE,
    Kind.BREAKER_TRIP,
    Kind.ROLLOUT_HALT,
    Kind.COVERAGE_MISSED,
    Kind.SCENARIO_FAIL,
)
RESOLVED_AS: Final = {Kind.QUARANTINE: Kind.RETURN_TO_SERVICE}


@dataclass(frozen=True, slots=True)
class Evidence:
    message: str
    criteria: tuple[str, ...] = ()
    verdict_ids: tuple[int, ...] = ()
    domain: str = ""  # the failure domain: the node's or breaker's rack
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "criteria": list(self.criteria),
            "verdict_ids": list(self.verdict_ids),
            "domain": self.domain,
            "details": dict(self.details),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Evidence:
        return cls(
            str(doc.get("message", "")),
            tuple(str(c) for c in doc.get("criteria", ())),
            tuple(int(i) for i in doc.get("verdict_ids", ())),
            str(doc.get("domain", "")),
            dict(doc.get("details") or {}),
        )


@dataclass(frozen=True, slots=True)
class Condition:
    """A fact that holds now, under the kind of incident it opens."""

    kind: Kind
    subject: str
    evidence: Evidence


@dataclass(frozen=True, slots=True)
class Event:
    kind: Kind  # what happened: a resolved quarantine is a return to service
    incident: Kind  # the kind of incident it opens or resolves
    subject: str
    opens: bool
    evidence: Evidence


FleetState = dict[tuple[Kind, str], Condition]


def fleet_state(
    snap: Snapshot,
    halts: Sequence[RolloutHalt],
    *,
    now: dt.datetime,
    coverage_max_age: Mapping[str, dt.timedelta],
) -> FleetState:
    """The conditions that hold at `now`. `coverage_max_age`: layer → how old a node's newest
    conclusive judgement of the layer may be."""
    conditions = [
        *_quarantines(snap),
        *_open_breakers(snap, now),
        *_halts(halts),
        *_coverage_missed(snap, now, coverage_max_age),
        *_failing_scenarios(snap),
    ]
    return {(c.kind, c.subject): c for c in conditions}


def _quarantines(snap: Snapshot) -> list[Condition]:
    """Quarantined nodes, with the criteria their newest judgements fail. Dry-run (shadow) states
    are not conditions: nothing was done to the node."""
    failing: dict[str, list[str]] = {}
    for (node, criterion), severity in sorted(snap.latest.items()):
        if severity == FAIL_SEVERITY:
            failing.setdefault(node, []).append(criterion)
    out = []
    for (node, shadow), states in sorted(snap.states.items()):
        if shadow or "quarantined" not in states:
            continue
        rack = snap.racks.get(node, fh.UNKNOWN_RACK)
        criteria = tuple(failing.get(node, ()))
        why = f"fails {', '.join(criteria)}" if criteria else "no failing verdict within the horizon"
        evidence = Evidence(f"{node} quarantined (rack {rack}): {why}", criteria, domain=rack)
        out.append(Condition(Kind.QUARANTINE, node, evidence))
    return out


def _open_breakers(snap: Snapshot, now: dt.datetime) -> list[Condition]:
    out = []
    for b in sorted(snap.breakers, key=lambda b: (b.domain, b.rule)):
        if b.is_open(now):
            rack = b.domain or fh.UNKNOWN_RACK
            message = f"blast-radius breaker {b.rule} tripped in rack {rack}: actions withheld"
            details = {"rule": b.rule, "last_trip": b.last_trip.isoformat(), "window_s": b.window_s}
            evidence = Evidence(message, (SAFETY_CRITERION,), (), rack, details)
            out.append(Condition(Kind.BREAKER_TRIP, f"{rack}/{b.rule}", evidence))
    return out


def _halts(halts: Sequence[RolloutHalt]) -> list[Condition]:
    out = []
    for halt in sorted(halts, key=lambda h: h.key):
        details: dict[str, Any] = {
            "at": halt.at.isoformat(),
            "failed_subjects": list(halt.failed_subjects[:20]),
        }
        evidence = Evidence(f"driver rollout halted: {halt.reason}", (), (), "", details)
        out.append(Condition(Kind.ROLLOUT_HALT, halt.key, evidence))
    return out


def _coverage_missed(snap: Snapshot, now: dt.datetime, limits: Mapping[str, dt.timedelta]) -> list[Condition]:
    """Inventory nodes whose newest coverage of a layer is older than its limit, or absent."""
    covered = snap.layer_coverage()
    out = []
    for node in sorted(snap.racks, key=fh.natural_key):
        stale = {
            layer: covered.get((node, layer))
            for layer, limit in sorted(limits.items())
            if covered.get((node, layer)) is None or now - covered[(node, layer)] > limit
        }
        if stale:
            ages = ", ".join(f"{layer} {_age(now, at)}" for layer, at in stale.items())
            details = {layer: at.isoformat() if at else None for layer, at in stale.items()}
            evidence = Evidence(f"{node}: coverage missed ({ages})", (), (), snap.racks[node], details)
            out.append(Condition(Kind.COVERAGE_MISSED, node, evidence))
    return out


def _failing_scenarios(snap: Snapshot) -> list[Condition]:
    """The newest Kueue contention run's scenarios with a failing criterion."""
    failing: dict[str, list[str]] = {}
    for (scenario, criterion), severity in sorted(snap.scenarios.items()):
        if severity == FAIL_SEVERITY:
            failing.setdefault(scenario, []).append(criterion)
    run_at = snap.scenario_run_at.isoformat() if snap.scenario_run_at else None
    return [
        Condition(
            Kind.SCENARIO_FAIL,
            scenario,
            Evidence(
                f"Kueue scenario {scenario} fails {', '.join(criteria)}",
                tuple(criteria),
                details={"run_at": run_at},
            ),
        )
        for scenario, criteria in failing.items()
    ]


def _age(now: dt.datetime, at: dt.datetime | None) -> str:
    if at is None:
        return "never within the horizon"
    return f"{(now - at).total_seconds() / 86400:.1f} days ago"


def diff(known: Mapping[tuple[Kind, str], Evidence], now: FleetState) -> list[Event]:
    """The events between what the ledger knows to be open (`known`: its evidence then) and what
    holds now: a new condition opens, a known one that no longer holds resolves."""
    events = [
        Event(kind, kind, subject, True, condition.evidence)
        for (kind, subject), condition in now.items()
        if (kind, subject) not in known
    ]
    for (kind, subject), evidence in known.items():
        if (kind, subject) not in now:
            message = _resolved_message(kind, subject, evidence)
            events.append(
                Event(RESOLVED_AS.get(kind, kind), kind, subject, False, replace(evidence, message=message))
            )
    return sorted(events, key=lambda e: (not e.opens, e.incident, fh.natural_key(e.subject)))


def _resolved_message(kind: Kind, subject: str, evidence: Evidence) -> str:
    if kind is Kind.QUARANTINE:
        return f"{subject} returned to service (rack {evidence.domain})"
    if kind is Kind.BREAKER_TRIP:
        rule = evidence.details.get("rule", subject)
        return f"blast-radius breaker {rule} in rack {evidence.domain}: its window passed"
    if kind is Kind.COVERAGE_MISSED:
        return f"{subject}: covered again"
    if kind is Kind.SCENARIO_FAIL:
        return f"Kueue scenario {subject} passes again"
    return f"{kind.value} {subject}: no longer recorded within the horizon"


def with_verdict_ids(events: Iterable[Event], newest: Mapping[tuple[str, str], int]) -> list[Event]:
    """Opening events with the ids of the verdicts behind their criteria (`newest`: (verdict
    subject, criterion) → the newest verdict's id; a scenario's verdicts are `kueue/<scenario>`'s)."""
    out = []
    for event in events:
        who = f"kueue/{event.subject}" if event.incident is Kind.SCENARIO_FAIL else event.subject
        ids = tuple(newest[(who, c)] for c in event.evidence.criteria if (who, c) in newest)
        out.append(
            replace(event, evidence=replace(event.evidence, verdict_ids=ids)) if event.opens else event
        )
    return out


def verdict_lookups(events: Iterable[Event]) -> list[tuple[str, str]]:
    """The (verdict subject, criterion) pairs `with_verdict_ids` can use, for one read."""
    pairs: set[tuple[str, str]] = set()
    for event in events:
        if event.opens and event.incident in (Kind.QUARANTINE, Kind.SCENARIO_FAIL):
            who = f"kueue/{event.subject}" if event.incident is Kind.SCENARIO_FAIL else event.subject
            pairs.update((who, c) for c in event.evidence.criteria)
    return sorted(pairs)
