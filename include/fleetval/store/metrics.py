"""The reads behind `fleetval metrics serve` (fleetval.metrics): what the store says about each
node, breaker, baseline and scenario, in a fixed number of queries whatever the fleet's size.

Reads only; PostgreSQL and SQLite alike. The verdicts are read through the fleet page's
per-criterion groups (`fleet_health.criterion_groups`: on PostgreSQL the `verdict_groups` table
the triggers keep), within a horizon of runs; node states are replayed from the node events.
`fingerprint` is one cheap statement that changes whenever any of it does, so a caller can skip
reading an unchanged store.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import JSON, Engine, and_, case, func, literal, or_, select, type_coerce, union_all

from fleetval.criteria import CRITERIA
from fleetval.nodes import QUARANTINE_LABEL
from fleetval.records import Result
from fleetval.store import fleet_health as fh
from fleetval.store.models import Baseline, NodeEvent, Run, VerdictRow

SEVERITY: Final = fh.SEVERITY  # result → its severity: pass 0 … error 4
UNKNOWN_SEVERITY: Final = SEVERITY["error"]  # a result the catalog does not know counts as an error
# Results that say the node was looked at: an inconclusive or error judgement did not.
CONCLUSIVE: Final = ("pass", "warn", "fail")
CONCLUSIVE_SEVERITIES: Final = tuple(SEVERITY[r] for r in CONCLUSIVE)
R3_CRITERION: Final = "D-DEV-02"  # a conclusive r3 ends a node's wait for it
SAFETY_CRITERION: Final = "F-SAFE-01"  # the blast-radius breaker's alert verdicts
# Layers whose verdicts are about one node: their criteria are read per node.
NODE_CRITERIA: Final = tuple(c.id for c in CRITERIA if c.layer in fh.NODE_LAYERS)
# Which conclusive (pass, warn, fail) judgements cover a node in a layer (the others are reactions,
# not diagnostics: the Xid decision and its time-to-cordon are not a look at the node's health).
COVERAGE_CRITERIA: Final[dict[str, tuple[str, ...]]] = {
    "operator": ("D-OP-01", "D-OP-02"),
    "device": ("D-DEV-01", "D-DEV-02", "D-DEV-03"),  # DCGM r2 (onboarding, weekly) and r3
    "network": ("D-NET-NCCL-01", "D-NET-NCCL-02"),
    "sharing": ("D-GPU-MIG-01", "D-GPU-TS-01"),
}
# A breaker trip whose verdict names no window (the action budget is per run) reads as open this
# long after it: long enough for an alert's `for:` to see it.
DEFAULT_BREAKER_WINDOW_S: Final = 3600.0


@dataclass(frozen=True, slots=True)
class Breaker:
    domain: str  # the rack the withheld action was in
    rule: str  # which breaker: the alert verdict's rule id
    last_trip: dt.datetime
    window_s: float | None  # the breaker's window, where its verdict names one

    def is_open(self, now: dt.datetime) -> bool:
        """Within its window of the last trip (`DEFAULT_BREAKER_WINDOW_S` where none is named)."""
        window = DEFAULT_BREAKER_WINDOW_S if self.window_s is None else self.window_s
        return (now - self.last_trip).total_seconds() <= window


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one read of the store found; ages and open breakers are worked out at each scrape."""

    racks: dict[str, str]  # inventory node → rack
    latest: dict[tuple[str, str], int]  # (node, criterion) → severity of its newest judgement
    covered: dict[tuple[str, str], dt.datetime]  # (node, criterion) → newest conclusive judgement
    states: dict[tuple[str, bool], frozenset[str]]  # (node, shadow) → its states
    breakers: tuple[Breaker, ...]
    # profile, metric, scope, version, value, unit of each promoted baseline
    baselines: tuple[tuple[str, str, str, int, float, str], ...]
    scenarios: dict[tuple[str, str], int]  # (scenario, criterion) → worst severity
    scenario_run_at: dt.datetime | None

    def layer_coverage(self) -> dict[tuple[str, str], dt.datetime]:
        """(node, layer) → the node's newest conclusive judgement of the layer's `COVERAGE_CRITERIA`."""
        covered: dict[tuple[str, str], dt.datetime] = {}
        for layer, criteria in COVERAGE_CRITERIA.items():
            for (node, criterion), at in self.covered.items():
                if criterion in criteria and ((node, layer) not in covered or at > covered[(node, layer)]):
                    covered[(node, layer)] = at
        return covered


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    if value is not None and value.tzinfo is None:  # SQLite: naive UTC
        return value.replace(tzinfo=dt.UTC)
    return value


def _severity(result: str) -> int:
    return SEVERITY.get(result, UNKNOWN_SEVERITY)


def read_snapshot(
    engine: Engine,
    *,
    criteria: Sequence[str],
    r3_label: str,
    horizon_days: int | None = fh.DEFAULT_HORIZON_DAYS,
    now: dt.datetime | None = None,
) -> Snapshot:
    """Everything the metrics show, in a bounded number of queries: the inventory nodes' newest
    judgement of each of `criteria`; node states (`r3_label`: the label that asks for an r3)."""
    now = now or dt.datetime.now(dt.UTC)
    since = None if horizon_days is None else now - dt.timedelta(days=horizon_days)
    from_run = fh.first_run_since(engine, since)
    latest, covered = _latest_judgements(engine, from_run, criteria)
    states = _node_states(engine, r3_label)
    racks = _inventory(engine, from_run, {n for n, _ in states})
    latest = {k: v for k, v in latest.items() if k[0] in racks}
    covered = {k: v for k, v in covered.items() if k[0] in racks}
    scenarios, scenario_run_at = _scenarios(engine)
    return Snapshot(
        racks=racks,
        latest=latest,
        covered=covered,
        states=states,
        breakers=_breakers(engine, from_run),
        baselines=_baselines(engine),
        scenarios=scenarios,
        scenario_run_at=scenario_run_at,
    )


def _latest_judgements(
    engine: Engine, from_run: int, criteria: Sequence[str]
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], dt.datetime]]:
    """(who, criterion) → the worst result of its newest judgement (the newest run's verdicts
    judged within `fh.BATCH_WINDOW` of its newest), and → its newest conclusive judgement's
    time, over the runs since `from_run`. One query, over the fleet page's per-criterion groups
    (PostgreSQL: the `verdict_groups` table; SQLite: grouped at each read)."""
    g = fh.criterion_groups(engine, lambda run_id: run_id >= from_run).c
    who = g.node.collate("C") if engine.dialect.name == "postgresql" else g.node  # bytewise: faster
    by_pair = (who, g.criterion)
    windowed = (
        select(
            g.node,
            g.criterion,
            g.run_id,
            g.at,
            g.sev,
            func.first_value(g.run_id)
            .over(partition_by=by_pair, order_by=(g.at.desc(), g.run_id.desc()))
            .label("newest"),
            func.max(case((g.sev.in_(CONCLUSIVE_SEVERITIES), g.at)))
            .over(partition_by=by_pair)
            .label("covered"),
        )
        .where(g.criterion.in_(list(criteria)))
        .subquery()
    )
    w = windowed.c
    query = select(w.node, w.criterion, w.at, w.sev, w.covered).where(w.run_id == w.newest)
    groups: dict[tuple[str, str], list[tuple[dt.datetime, int]]] = defaultdict(list)
    covered: dict[tuple[str, str], dt.datetime] = {}
    with engine.connect() as conn:
        for node, criterion, at, sev, covered_at in conn.execute(query):
            key = (str(node), str(criterion))
            groups[key].append((_aware(at) or dt.datetime.min.replace(tzinfo=dt.UTC), int(sev)))
            if covered_at is not None:
                covered[key] = _aware(covered_at)  # type: ignore[assignment]
    latest: dict[tuple[str, str], int] = {}
    for key, found in groups.items():
        newest = max(at for at, _ in found)
        latest[key] = max(sev for at, sev in found if at >= newest - fh.BATCH_WINDOW)
    return latest, covered


def _inventory(engine: Engine, from_run: int, event_nodes: set[str]) -> dict[str, str]:
    """node → rack: the fleet page's inventory; with no weekly plan yet, the nodes the horizon's
    verdicts (their node column) and the node events name."""
    inv = fh.inventory(engine)
    if inv.rack_of:
        return dict(inv.rack_of)
    with engine.connect() as conn:
        named = {
            str(node)
            for node in conn.execute(
                select(VerdictRow.node)
                .where(VerdictRow.run_id >= from_run, VerdictRow.node.is_not(None))
                .distinct()
            ).scalars()
        }
    return dict(fh.inventory(engine, extra_nodes=sorted(named | event_nodes)).rack_of)


def _node_states(engine: Engine, r3_label: str) -> dict[tuple[str, bool], frozenset[str]]:
    """(node, shadow) → its states, from the newest node event of each state's kinds (two
    queries: the events, and the newest conclusive r3 per node, which ends an r3 wait)."""
    details = type_coerce(NodeEvent.details, JSON)
    label = details[("op", 1)].as_string()  # remediation's ("label", key, value) operations
    source = details["source"].as_string()
    phase = details["phase"].as_string()  # onboarding's changes carry their phase
    kind = NodeEvent.kind
    # state → (which events move it, whether an event turns it on)
    facets: dict[str, tuple[Any, Any]] = {
        "cordoned": (kind.in_(("cordon", "uncordon")), kind == "cordon"),
        "quarantined": (
            and_(kind.in_(("label", "unlabel")), label == QUARANTINE_LABEL),
            kind == "label",
        ),
        "awaiting_r3": (
            or_(
                and_(kind.in_(("label", "unlabel")), label == r3_label),
                and_(kind == "cordon", source == "xid"),  # an Xid cordon schedules r3
            ),
            kind != "unlabel",
        ),
        "onboarding": (and_(kind.in_(("taint", "untaint")), phase.is_not(None)), kind == "taint"),
    }
    parts = [
        select(
            NodeEvent.node.label("node"),
            NodeEvent.dry_run.label("dry_run"),
            NodeEvent.at.label("at"),
            NodeEvent.id.label("id"),
            literal(state).label("state"),
            case((turns_on, 1), else_=0).label("on"),
        ).where(moves)
        for state, (moves, turns_on) in facets.items()
    ]
    events = union_all(*parts).subquery()
    e = events.c
    rank = func.row_number().over(
        partition_by=(e.node, e.dry_run, e.state), order_by=(e.at.desc(), e.id.desc())
    )
    ranked = select(e.node, e.dry_run, e.state, e.on, e.at, rank.label("rank")).subquery()
    r = ranked.c
    who = func.coalesce(VerdictRow.node, VerdictRow.subject)
    with engine.connect() as conn:
        rows = list(conn.execute(select(r.node, r.dry_run, r.state, r.on, r.at).where(r.rank == 1)))
        r3_done = {
            str(node): _aware(at)
            for node, at in conn.execute(
                select(who, func.max(VerdictRow.judged_at))
                .where(VerdictRow.criterion == R3_CRITERION, VerdictRow.result.in_(CONCLUSIVE))
                .group_by(who)
            )
        }
    states: dict[tuple[str, bool], set[str]] = defaultdict(set)
    for node, dry_run, state, on, at in rows:
        if not on:
            continue
        if state == "awaiting_r3":
            done = r3_done.get(str(node))
            if done is not None and done >= (_aware(at) or done):
                continue
        states[(str(node), bool(dry_run))].add(str(state))
    return {k: frozenset(v) for k, v in states.items()}


def _breakers(engine: Engine, from_run: int) -> tuple[Breaker, ...]:
    """The newest F-SAFE-01 alert per breaker (rule) and rack within the horizon."""
    evidence = type_coerce(VerdictRow.evidence, JSON)
    against = type_coerce(VerdictRow.judged_against, JSON)
    rack = func.coalesce(evidence["rack"].as_string(), "")
    window = against[("breaker", "window_s")].as_float()
    query = (
        select(VerdictRow.rule_id, rack, func.max(VerdictRow.judged_at), func.max(window))
        .where(
            VerdictRow.criterion == SAFETY_CRITERION,
            VerdictRow.result == Result.FAIL.value,
            VerdictRow.run_id >= from_run,
        )
        .group_by(VerdictRow.rule_id, rack)
    )
    with engine.connect() as conn:
        return tuple(
            Breaker(
                str(domain),
                str(rule),
                _aware(at) or dt.datetime.min.replace(tzinfo=dt.UTC),  # never null: a max of rows
                float(window_s) if window_s is not None else None,
            )
            for rule, domain, at, window_s in conn.execute(query)
        )


def _baselines(engine: Engine) -> tuple[tuple[str, str, str, int, float, str], ...]:
    query = select(
        Baseline.profile, Baseline.metric, Baseline.scope, Baseline.version, Baseline.value, Baseline.unit
    ).where(Baseline.status == "promoted")
    with engine.connect() as conn:
        return tuple(
            (str(p), str(m), str(s), int(v), float(value), str(unit))
            for p, m, s, v, value, unit in conn.execute(query)
        )


def _scenarios(engine: Engine) -> tuple[dict[tuple[str, str], int], dt.datetime | None]:
    """The newest Kueue contention run: (scenario, criterion) → worst result code."""
    runs = fh.kueue_results(engine, limit=1)
    if not runs:
        return {}, None
    out: dict[tuple[str, str], int] = {}
    for v in runs[0].verdicts:
        key = (str(v["subject"]).removeprefix("kueue/"), str(v["criterion"]))
        out[key] = max(out.get(key, 0), _severity(str(v["result"])))
    return out, runs[0].started_at


def fingerprint(engine: Engine) -> tuple[Any, ...]:
    """What changes whenever anything the metrics show changes (one statement of index lookups):
    a verdict written or judged again moves the newest id or judged_at; events and runs are only
    added; a promotion or retirement moves a baseline timestamp."""
    parts = (
        func.max(VerdictRow.id),
        func.max(VerdictRow.judged_at),
        func.max(NodeEvent.id),
        func.max(Run.id),
        func.max(Baseline.id),
        func.max(Baseline.promoted_at),
        func.max(Baseline.retired_at),
    )
    with engine.connect() as conn:
        return tuple(conn.execute(select(*(select(p).scalar_subquery() for p in parts))).one())
