"""The notification policy, as data with an id, and `plan`: which notices one evaluation sends.

- **One incident per subject**: an incident is (kind, subject), with a dedup key that the stateful
  receivers (PagerDuty's dedup_key, Opsgenie's alias) keep; its return to service or end resolves
  that key. A subject that opens again within `flap_window` of its resolution reopens the same
  incident (same key, its count + 1) rather than a new one: a flapping node is one incident.
- **Storms**: `storm_threshold` or more subjects of one kind in one evaluation are one summary per
  channel (the count and a sample), never a notice per subject; their incidents are announced
  under the summary's key, which resolves when the last of them does.
- **Rate limit**: at most `rate_limit` notices per channel per `rate_window`. A notice over it is
  recorded as suppressed, never sent, and counted: the next notice the channel gets reports how
  many were held back, by kind (alone, as a digest, if nothing else goes out). A resolve on a
  stateful channel is never held back (it closes what was opened), though it counts.
- **Shadow mode**: the same plan, recorded as shadow notices; nothing is sent.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Protocol

from fleetval.criteria import BY_ID
from fleetval.errors import SpecError
from fleetval.notify.events import INCIDENT_KINDS, RESOLVED_AS, Event, Evidence, Kind
from fleetval.store.fleet_health import natural_key


class Channel(enum.StrEnum):
    SLACK = "slack"
    PAGERDUTY = "pagerduty"
    WEBHOOK = "webhook"  # Opsgenie's alert API, or any receiver that speaks it


# Receivers that keep one alert per dedup key: an open triggers it, a resolve closes that key.
STATEFUL: Final = frozenset({Channel.PAGERDUTY, Channel.WEBHOOK})
# PagerDuty's severities, most severe first (the Events API v2 accepts these four).
SEVERITIES: Final = ("critical", "error", "warning", "info")
# The kind of a notice that only reports notices the rate limit held back.
DIGEST: Final = "rate_limited"
MAX_KEY: Final = 255  # PagerDuty's dedup_key limit (Opsgenie's alias allows 512)


@dataclass(frozen=True, slots=True)
class NotificationPolicy:
    id: str
    storm_threshold: int  # this many subjects of one kind in one evaluation are one summary
    storm_sample: int  # subjects a summary names
    rate_limit: int  # notices per channel per rate_window
    rate_window: dt.timedelta
    flap_window: dt.timedelta  # reopening within it continues the incident
    coverage_max_age: Mapping[str, dt.timedelta]  # layer → how old its newest coverage may be
    halt_lookback: dt.timedelta  # a rollout halt recorded within it is news
    severity: Mapping[Kind, str]
    routes: Mapping[Channel, frozenset[Kind]]  # the incident kinds each channel hears of
    quiet_resolve: frozenset[Kind]  # incidents that end without a notice
    shadow: bool = False

    def __post_init__(self) -> None:
        if self.storm_threshold < 2 or self.storm_sample < 1 or self.rate_limit < 1:
            raise SpecError(f"{self.id}: storm_threshold >= 2, storm_sample >= 1 and rate_limit >= 1")
        if set(self.severity) != set(Kind) or not set(self.severity.values()) <= set(SEVERITIES):
            raise SpecError(f"{self.id}: a severity among {SEVERITIES} for every kind")


# D-DEV-03 asks for r2 at least weekly; the sweep that renews it takes a day to reach every node.
_WEEKLY_R2_DAYS: Final = int(BY_ID["D-DEV-03"].parameters["max_age_days"])

DEFAULT_POLICY: Final = NotificationPolicy(
    id="notify/2026-12-06.1",
    storm_threshold=5,
    storm_sample=10,
    rate_limit=20,
    rate_window=dt.timedelta(hours=1),
    flap_window=dt.timedelta(hours=6),
    coverage_max_age={"device": dt.timedelta(days=_WEEKLY_R2_DAYS + 1)},
    halt_lookback=dt.timedelta(days=1),
    severity={
        Kind.QUARANTINE: "error",
        Kind.RETURN_TO_SERVICE: "info",
        Kind.BREAKER_TRIP: "critical",
        Kind.ROLLOUT_HALT: "critical",
        Kind.COVERAGE_MISSED: "warning",
        Kind.SCENARIO_FAIL: "warning",
    },
    routes={
        Channel.SLACK: frozenset(INCIDENT_KINDS),
        Channel.WEBHOOK: frozenset(INCIDENT_KINDS),
        # a page is for what takes capacity away or stops a rollout
        Channel.PAGERDUTY: frozenset({Kind.QUARANTINE, Kind.BREAKER_TRIP, Kind.ROLLOUT_HALT}),
    },
    quiet_resolve=frozenset({Kind.ROLLOUT_HALT}),  # a person lifts a halt; its record only ages out
)


class Thresholds(Protocol):
    """What a deployment may change (fleetval.settings.NotifySettings: FLEETVAL_NOTIFY_*)."""

    @property
    def shadow(self) -> bool: ...
    @property
    def storm_threshold(self) -> int: ...
    @property
    def rate_limit(self) -> int: ...
    @property
    def rate_window_min(self) -> int: ...
    @property
    def flap_window_min(self) -> int: ...


def policy_from_settings(
    settings: Thresholds, base: NotificationPolicy = DEFAULT_POLICY
) -> NotificationPolicy:
    """`base` with the deployment's thresholds (FLEETVAL_NOTIFY_*); its id names what they changed."""
    changed = {
        "storm_threshold": settings.storm_threshold,
        "rate_limit": settings.rate_limit,
        "rate_window": dt.timedelta(minutes=settings.rate_window_min),
        "flap_window": dt.timedelta(minutes=settings.flap_window_min),
    }
    changed = {k: v for k, v in changed.items() if getattr(base, k) != v}
    suffix = "".join(f";{k}={v}" for k, v in changed.items())
    return replace(base, id=base.id + suffix, shadow=settings.shadow, **changed)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Incident:
    kind: Kind
    subject: str
    dedup_key: str
    opened_at: dt.datetime
    last_opened_at: dt.datetime
    resolved_at: dt.datetime | None
    count: int  # times opened: 1, plus one per reopening within the flap window
    evidence: Evidence
    announced: Mapping[str, str] = field(default_factory=dict)  # channel → the key its receivers know

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None


@dataclass(frozen=True, slots=True)
class Ledger:
    """What the notifier did before, as `plan` needs it."""

    # every open incident, and those resolved within the flap window
    incidents: Mapping[tuple[Kind, str], Incident]
    # channel → when the notices that count against its rate limit now were planned
    sent: Mapping[str, tuple[dt.datetime, ...]] = field(default_factory=dict)
    # channel → kind → notices held back by the rate limit and not yet reported
    held: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def known(self) -> dict[tuple[Kind, str], Evidence]:
        """The open incidents' evidence: what `events.diff` compares the fleet with."""
        return {k: i.evidence for k, i in self.incidents.items() if i.is_open}

    def after(self, plan: Plan) -> Ledger:
        """This ledger once `plan` is recorded (the store's writer does the same in SQL)."""
        incidents = dict(self.incidents)
        incidents.update({(i.kind, i.subject): i for i in plan.incidents})
        sent = {c: list(times) for c, times in self.sent.items()}
        held = {c: Counter(kinds) for c, kinds in self.held.items()}
        for notice in plan.notices:
            if notice.suppressed:
                held.setdefault(notice.channel, Counter())[notice.kind] += 1
                continue
            sent.setdefault(notice.channel, []).append(plan.evaluated_at)
            if notice.held_back:
                held[notice.channel] = Counter()
        return Ledger(
            incidents,
            {c: tuple(times) for c, times in sent.items()},
            {c: dict(kinds) for c, kinds in held.items() if kinds},
        )


@dataclass(frozen=True, slots=True)
class Notice:
    channel: Channel
    kind: str  # a Kind's value, or DIGEST
    resolves: bool
    dedup_key: str
    severity: str
    title: str
    subjects: tuple[str, ...]  # its subject, or a summary's sample
    count: int  # how many subjects it stands for
    evidence: Evidence
    incidents: tuple[str, ...]  # the incidents' own keys it announces or resolves
    opened: int = 1  # times its incident opened (a flapping node's count)
    held_back: Mapping[str, int] = field(default_factory=dict)  # kind → held back since the last report
    suppressed: bool = False  # over the rate limit: recorded, not sent


@dataclass(frozen=True, slots=True)
class Plan:
    policy_id: str
    evaluated_at: dt.datetime
    shadow: bool
    notices: tuple[Notice, ...]
    incidents: tuple[Incident, ...]  # each incident this evaluation opened, reopened, resolved or announced


def incident_key(kind: Kind, subject: str, opened_at: dt.datetime) -> str:
    return _bounded(f"fleetval/{kind.value}/{subject}/{_stamp(opened_at)}")


def storm_key(kind: str, at: dt.datetime, *, resolves: bool = False) -> str:
    return f"fleetval/storm/{kind}/{_stamp(at)}" + ("/resolved" if resolves else "")


def _stamp(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def _bounded(key: str) -> str:
    if len(key) <= MAX_KEY:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{key[: MAX_KEY - 17]}~{digest}"


def plan(
    events: Sequence[Event],
    ledger: Ledger,
    policy: NotificationPolicy,
    now: dt.datetime,
    channels: Iterable[Channel] = tuple(Channel),
) -> Plan:
    """The notices for `events` on `channels` (those with a receiver configured) and the incidents
    as they stand after them. Pure: the caller records the plan, then sends what is not suppressed."""
    changed = _incident_changes(events, ledger, policy, now)
    open_after = {k: i for k, i in {**ledger.incidents, **changed}.items() if i.is_open}
    notices: list[Notice] = []
    for channel in channels:
        candidates = _opening(channel, events, changed, policy, now) + _resolving(
            channel, events, ledger, open_after, policy, now
        )
        notices += _rate_limited(channel, candidates, ledger, policy, now)
    by_key = {i.dedup_key: k for k, i in changed.items()}
    for notice in notices:  # an incident is announced where its opening notice goes out
        if notice.resolves or notice.suppressed or notice.kind == DIGEST:
            continue
        for own_key in notice.incidents:
            incident = changed[by_key[own_key]]
            announced = {**incident.announced, notice.channel.value: notice.dedup_key}
            changed[by_key[own_key]] = replace(incident, announced=announced)
    return Plan(policy.id, now, policy.shadow, tuple(notices), tuple(changed.values()))


def _incident_changes(
    events: Sequence[Event], ledger: Ledger, policy: NotificationPolicy, now: dt.datetime
) -> dict[tuple[Kind, str], Incident]:
    changed: dict[tuple[Kind, str], Incident] = {}
    for event in events:
        key = (event.incident, event.subject)
        prior = ledger.incidents.get(key)
        if not event.opens:
            if prior is not None and prior.is_open:
                changed[key] = replace(prior, resolved_at=now)
        elif prior is not None and prior.is_open:
            continue  # already open: nothing new (diff does not say so, a stale ledger might)
        elif prior is not None and prior.resolved_at and now - prior.resolved_at <= policy.flap_window:
            changed[key] = replace(
                prior,
                last_opened_at=now,
                resolved_at=None,
                count=prior.count + 1,
                evidence=event.evidence,
                announced={},
            )
        else:
            changed[key] = Incident(
                event.incident,
                event.subject,
                incident_key(event.incident, event.subject, now),
                now,
                now,
                None,
                1,
                event.evidence,
            )
    return changed


def _opening(
    channel: Channel,
    events: Sequence[Event],
    changed: Mapping[tuple[Kind, str], Incident],
    policy: NotificationPolicy,
    now: dt.datetime,
) -> list[Notice]:
    by_kind: dict[Kind, list[Incident]] = defaultdict(list)
    for event in events:
        incident = changed.get((event.incident, event.subject))
        if event.opens and incident is not None and event.incident in policy.routes.get(channel, ()):
            by_kind[event.incident].append(incident)
    notices = []
    for kind, incidents in by_kind.items():
        severity = policy.severity[kind]
        if len(incidents) >= policy.storm_threshold:
            notices.append(
                _summary(channel, kind, kind, False, incidents, severity, storm_key(kind, now), policy)
            )
            continue
        for i in incidents:
            title = i.evidence.message
            if i.count > 1:
                title += f" (again: opened {i.count} times since {i.opened_at:%Y-%m-%d %H:%M} UTC)"
            notices.append(_single(channel, kind, False, i, severity, title, i.evidence))
    return notices


def _single(
    channel: Channel,
    kind: Kind,
    resolves: bool,
    incident: Incident,
    severity: str,
    title: str,
    evidence: Evidence,
) -> Notice:
    """A notice about one incident, under its own key."""
    notice = _about(channel, kind, resolves, incident.dedup_key, severity, title, [incident], evidence)
    return replace(notice, opened=incident.count)


def _about(
    channel: Channel,
    kind: Kind,
    resolves: bool,
    key: str,
    severity: str,
    title: str,
    incidents: Sequence[Incident],
    evidence: Evidence,
    sample: int | None = None,
) -> Notice:
    """A notice about `incidents` under `key`, naming the first `sample` of them (all: None)."""
    subjects = tuple(i.subject for i in incidents[:sample])
    own_keys = tuple(i.dedup_key for i in incidents)
    return Notice(channel, kind, resolves, key, severity, title, subjects, len(incidents), evidence, own_keys)


def _resolving(
    channel: Channel,
    events: Sequence[Event],
    ledger: Ledger,
    open_after: Mapping[tuple[Kind, str], Incident],
    policy: NotificationPolicy,
    now: dt.datetime,
) -> list[Notice]:
    """Resolves go where the incident was announced: its own key, or its storm's key once the
    storm's last incident is resolved."""
    alone: dict[Kind, list[tuple[Incident, Event]]] = defaultdict(list)
    storms: dict[str, list[tuple[Incident, Event]]] = defaultdict(list)
    for event in events:
        prior = ledger.incidents.get((event.incident, event.subject))
        if event.opens or prior is None or not prior.is_open or event.incident in policy.quiet_resolve:
            continue
        announced = prior.announced.get(channel.value)
        if announced == prior.dedup_key:
            alone[event.incident].append((prior, event))
        elif announced is not None:
            storms[announced].append((prior, event))
    notices = []
    for kind, resolved in alone.items():
        as_kind = RESOLVED_AS.get(kind, kind)
        severity = policy.severity[as_kind]
        if channel not in STATEFUL and len(resolved) >= policy.storm_threshold:  # chat: one message
            key = storm_key(as_kind, now, resolves=True)
            notices.append(
                _summary(channel, kind, as_kind, True, [i for i, _ in resolved], severity, key, policy)
            )
            continue
        for i, event in resolved:
            notices.append(
                _single(channel, as_kind, True, i, severity, event.evidence.message, event.evidence)
            )
    still_open = {i.announced.get(channel.value) for i in open_after.values()}
    for key, resolved in storms.items():
        if key in still_open:
            continue  # the storm's summary resolves with its last incident
        kind = resolved[0][0].kind
        as_kind = RESOLVED_AS.get(kind, kind)
        notice = _summary(
            channel, kind, as_kind, True, [i for i, _ in resolved], policy.severity[as_kind], key, policy
        )
        noun, verb = _NOUNS[as_kind]
        title = f"{noun} {verb}: the last of the storm {key} ({', '.join(notice.subjects)})"
        notices.append(replace(notice, title=title))
    return notices


_NOUNS: Final = {
    Kind.QUARANTINE: ("nodes", "quarantined"),
    Kind.RETURN_TO_SERVICE: ("nodes", "returned to service"),
    Kind.BREAKER_TRIP: ("blast-radius breakers", "tripped"),
    Kind.ROLLOUT_HALT: ("driver rollouts", "halted"),
    Kind.COVERAGE_MISSED: ("nodes", "missed their coverage"),
    Kind.SCENARIO_FAIL: ("Kueue scenarios", "failing"),
}


def _summary(
    channel: Channel,
    incident_kind: Kind,
    kind: Kind,
    resolves: bool,
    incidents: Sequence[Incident],
    severity: str,
    key: str,
    policy: NotificationPolicy,
) -> Notice:
    """One notice for many incidents of one kind: the count, a sample, the domains and criteria."""
    ordered = sorted(incidents, key=lambda i: natural_key(i.subject))
    sample = tuple(i.subject for i in ordered[: policy.storm_sample])
    noun, verb = _NOUNS[kind]
    more = f" and {len(ordered) - len(sample)} more" if len(ordered) > len(sample) else ""
    title = f"{len(ordered)} {noun} {verb}: {', '.join(sample)}{more}"
    domains = Counter(i.evidence.domain for i in ordered if i.evidence.domain)
    criteria = sorted({c for i in ordered for c in i.evidence.criteria})
    evidence = Evidence(
        title,
        tuple(criteria),
        tuple(sorted({v for i in ordered for v in i.evidence.verdict_ids}))[:50],
        ", ".join(d for d, _ in domains.most_common(5)),
        {"incident_kind": incident_kind.value, "count": len(ordered), "by_domain": dict(domains)},
    )
    return _about(channel, kind, resolves, key, severity, title, ordered, evidence, policy.storm_sample)


def _rate_limited(
    channel: Channel, candidates: list[Notice], ledger: Ledger, policy: NotificationPolicy, now: dt.datetime
) -> list[Notice]:
    """The most severe first within the channel's budget; the rest suppressed. The first opening
    notice that goes out reports what was held back before (a digest if none goes out)."""
    since = now - policy.rate_window
    budget = policy.rate_limit - sum(1 for at in ledger.sent.get(channel.value, ()) if at > since)
    closing = channel in STATEFUL
    exempt = [n for n in candidates if n.resolves and closing]
    budget -= len(exempt)
    rest = sorted(
        (n for n in candidates if not (n.resolves and closing)),
        key=lambda n: (SEVERITIES.index(n.severity), n.resolves),
    )
    held = dict(ledger.held.get(channel.value, {}))
    out = list(exempt)
    for notice in rest:
        if budget <= 0:
            out.append(replace(notice, suppressed=True))
            continue
        budget -= 1
        if held and not notice.resolves:
            notice, held = replace(notice, held_back=held), {}
        out.append(notice)
    if held and budget > 0:
        total = sum(held.values())
        by_kind = ", ".join(f"{k} {n}" for k, n in sorted(held.items()))
        title = f"{total} notices were held back by the rate limit ({by_kind})"
        evidence = Evidence(title, details={"held_back": held, "policy": policy.id})
        out.append(
            Notice(
                channel,
                DIGEST,
                False,
                storm_key(DIGEST, now),
                "warning",
                title,
                (),
                total,
                evidence,
                (),
                held_back=held,
            )
        )
    return out
