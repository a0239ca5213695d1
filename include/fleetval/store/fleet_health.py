"""Every read the fleet-health page makes, in one place: what it shows is what these return.

Reads only (writes stay in `Store`); PostgreSQL and SQLite alike (the demo's store is SQLite).
Each view reads a bounded slice, so its cost follows the fleet, not the history:

- the heatmap and the coverage read the verdicts of runs started within a horizon (default 90
  days), counted per (node or subject, criterion, run, judgement time): on PostgreSQL the
  `verdict_groups` table that triggers keep (an index range on its run id; about 2.4x fewer rows
  than verdicts at 16k nodes, the GPU records folded in), on SQLite grouped at each load;
- node pages, NCCL curves, Kueue and onboarding results read by indexed node, subject, probe or run.

The inventory (which nodes exist, their racks) is the newest weekly sweep's plan — the GPU nodes
the cluster reported then, swept or not — plus every node a verdict or node event names.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import JSON, Engine, and_, case, column, func, literal, or_, select, table, type_coerce

from fleetval.criteria import BY_ID, CRITERIA, IMPLEMENTED_BY
from fleetval.policy.node_health import TREND_CRITERION
from fleetval.records import Result
from fleetval.store.models import Baseline, Measurement, NodeEvent, Probe, Run, VerdictRow, unescape_json

RESULTS: Final = tuple(r.value for r in sorted(Result, key=lambda r: r.severity))
SEVERITY: Final = {r.value: r.severity for r in Result}
# Layers whose verdicts are about one node, in the catalog's order: the heatmap's columns.
NODE_LAYERS: Final = ("operator", "device", "network", "sharing")
DEFAULT_HORIZON_DAYS: Final = 90
R2_CRITERIA: Final = ("D-DEV-01", "D-DEV-03")  # a DCGM r2 at onboarding or in the weekly sweep
NCCL_METRIC: Final = "nccl.busbw"
NCCL_SUITE: Final = "post_upgrade_nccl"
KUEUE_SUITE: Final = "kueue_contention"
WEEKLY_SUITE: Final = "weekly"
# The rack onboarding DAG's runs (suite `rack_onboarding`; any suite starting "onboarding" too).
ONBOARDING_SUITES: Final = ("rack_onboarding",)
ONBOARDING_SUITE_PREFIX: Final = "onboarding"
UNKNOWN_RACK: Final = "(rack unknown)"
# Verdicts of one run judged this close to its newest verdict on a node are one judgement.
BATCH_WINDOW: Final = dt.timedelta(seconds=60)
# A retest decides its node's layer: a verdict of these criteria replaces what its run judged on
# the node in that layer before it (the r3 after an Xid or a failed r2 decides whether the node
# returns to service; the cordon decision it was scheduled by is history, however soon before).
RETEST_CRITERIA: Final = ("D-DEV-02",)
# Early warnings (fleetval.trends): recorded and listed on the node's page, but they are not a
# judgement of the node's layer: a trend verdict judged after the sweep's r2 must not replace its cell.
TREND_CRITERIA: Final = tuple(TREND_CRITERION.values())

_LAYER_OF: Final = {c.id: c.layer for c in CRITERIA}
_SEV_SQL = case(SEVERITY, value=VerdictRow.result, else_=SEVERITY["error"])


def result_of(severity: int) -> str:
    return RESULTS[max(0, min(severity, len(RESULTS) - 1))]


def layer_of(criterion: str) -> str:
    return _LAYER_OF.get(criterion, "other")


_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[Any, ...]:
    """r2-n9 before r10-n10: digit runs compare as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(name))


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    # SQLite gives naive datetimes back; everything stored is UTC.
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


def first_run_since(engine: Engine, since: dt.datetime | None) -> int:
    """The lowest run id started at or after `since` (0: every run); the verdicts of later runs
    are an index range on their key."""
    if since is None:
        return 0
    with engine.connect() as conn:
        found = conn.execute(select(func.min(Run.id)).where(Run.started_at >= since)).scalar()
        if found is None:  # no run that recent: an empty range
            found = (conn.execute(select(func.max(Run.id))).scalar() or 0) + 1
    return int(found)


# --- inventory ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Inventory:
    rack_of: dict[str, str]
    skipped: dict[str, str]  # node → why the newest weekly sweep did not probe it
    source: dict[str, Any] | None  # the weekly run the plan came from (id, run_key, started_at)

    @functools.cached_property
    def by_rack(self) -> dict[str, list[str]]:
        return self.racks()

    def racks(self) -> dict[str, list[str]]:
        by_rack: dict[str, list[str]] = defaultdict(list)
        for node, rack in self.rack_of.items():
            by_rack[rack].append(node)
        return {r: sorted(by_rack[r], key=natural_key) for r in sorted(by_rack, key=natural_key)}


def inventory(engine: Engine, *, extra_nodes: Iterable[str] = ()) -> Inventory:
    """The newest weekly plan's GPU nodes and racks, plus the nodes later onboarding runs judged
    (a rack onboarded since) and `extra_nodes`; their racks from the run's request
    (`meta.request.rack`, as rack onboarding keeps it) or their node events, else unknown."""
    plan_run: int | None = None
    with engine.connect() as conn:
        for run_id, run_key, started_at in conn.execute(
            select(Run.id, Run.run_key, Run.started_at)
            .where(Run.suite == WEEKLY_SUITE)
            .order_by(Run.id.desc())
        ):
            plan = _plan_of(conn, int(run_id))
            if plan is not None:
                plan_run = int(run_id)
                source = {"run_id": plan_run, "run_key": run_key, "started_at": _aware(started_at)}
                break
        else:
            plan, source = {}, None
    rack_of = {str(k): str(v) for k, v in (plan.get("rack_of") or {}).items()}
    skipped = {str(k): str(v) for k, v in (plan.get("skipped") or {}).items()}
    later = _nodes_judged_after(engine, plan_run) if plan_run is not None else {}
    missing = sorted((set(extra_nodes) | later.keys()) - rack_of.keys())
    if missing:
        racks = _racks_from_events(engine, missing)
        rack_of.update({n: later.get(n) or racks[n] for n in missing})
    return Inventory(rack_of, skipped, source)


def _nodes_judged_after(engine: Engine, run_id: int) -> dict[str, str | None]:
    """node → the rack its run asked for (or None), for nodes judged by onboarding runs after
    `run_id` (a rack's worth of verdicts each)."""
    out: dict[str, str | None] = {}
    onboarding = or_(
        Run.suite.in_(ONBOARDING_SUITES), Run.suite.startswith(ONBOARDING_SUITE_PREFIX, autoescape=True)
    )
    with engine.connect() as conn:
        runs = {
            int(r.id): r.meta
            for r in conn.execute(select(Run.id, Run.meta).where(Run.id > run_id, onboarding))
        }
        if not runs:
            return out
        for node, judged_by in conn.execute(
            select(VerdictRow.node, VerdictRow.run_id)
            .where(VerdictRow.run_id.in_(list(runs)), VerdictRow.node.is_not(None))
            .distinct()
        ):
            meta = runs.get(int(judged_by)) or {}
            request = meta.get("request") if isinstance(meta, dict) else None
            rack = request.get("rack") if isinstance(request, dict) else None
            if node is not None and out.get(node) is None:
                out[node] = str(rack) if rack else None
    return out


def _plan_of(conn: Any, run_id: int) -> dict[str, Any] | None:
    """Only the plan's rack_of and skipped: a 16k-node plan's waves are not decoded."""
    if conn.dialect.name == "postgresql":
        row = conn.exec_driver_sql(
            "SELECT meta->'plan'->'rack_of', meta->'plan'->'skipped' FROM runs WHERE id = %s", (run_id,)
        ).first()
        if row is None or row[0] is None:
            return None
        return {"rack_of": unescape_json(row[0]), "skipped": unescape_json(row[1] or {})}
    meta = conn.execute(select(Run.meta).where(Run.id == run_id)).scalar()
    plan = (meta or {}).get("plan")
    return dict(plan) if isinstance(plan, dict) and "rack_of" in plan else None


def _racks_from_events(engine: Engine, nodes: Sequence[str]) -> dict[str, str]:
    out = dict.fromkeys(nodes, UNKNOWN_RACK)
    with engine.connect() as conn:
        for start in range(0, len(nodes), 1000):
            chunk = nodes[start : start + 1000]
            for node, details in conn.execute(
                select(NodeEvent.node, NodeEvent.details)
                .where(NodeEvent.node.in_(chunk))
                .order_by(NodeEvent.id)
            ):
                rack = (details or {}).get("rack")
                if rack:
                    out[node] = str(rack)
    return out


# --- the heatmap --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Cell:
    """A node's latest judgement in one layer: the worst result among the verdicts of the newest
    run that judged the node there, judged within `BATCH_WINDOW` of that run's newest one (one
    judgement is one batch: a weekly r2's node and GPU verdicts; an Xid run's r3 verdict replaces
    its cordon decision, judged minutes before)."""

    result: str
    run_id: int
    at: dt.datetime | None
    verdicts: int


@dataclass(frozen=True, slots=True)
class FleetGrid:
    inventory: Inventory
    cells: dict[str, dict[str, Cell]]  # node → layer → cell
    layers: tuple[str, ...]
    since: dt.datetime | None

    def worst(self, node: str) -> str | None:
        cells = self.cells.get(node)
        if not cells:
            return None
        return max((c.result for c in cells.values()), key=SEVERITY.__getitem__)

    def state(self, node: str, layer: str | None = None) -> str:
        """A node's current state (in `layer`, else over all its layers): what the page colours
        it and `fleetval nodes` prints; "untested" without a verdict there."""
        if layer is None:
            return self.worst(node) or "untested"
        cell = self.cells.get(node, {}).get(layer)
        return cell.result if cell else "untested"

    def counts(self) -> dict[str, Counter[str]]:
        """layer → result → nodes; "untested" for inventory nodes without a verdict there."""
        out: dict[str, Counter[str]] = {layer: Counter() for layer in self.layers}
        for node in self.inventory.rack_of:
            cells = self.cells.get(node, {})
            for layer in self.layers:
                cell = cells.get(layer)
                out[layer][cell.result if cell else "untested"] += 1
        return out


@dataclass(frozen=True, slots=True)
class R2:
    """A node's newest judged DCGM r2."""

    at: dt.datetime
    result: str
    criterion: str
    run_id: int


@dataclass(frozen=True, slots=True)
class Cells:
    """node → layer → Cell, and node → newest r2, over the runs with id >= `from_run`. A verdict's
    node is its `node` column, else its subject (an isolated node's blame has no node column);
    subjects that are not nodes (pairs, "cluster", scenarios) are in `cells` too, for the caller
    to drop."""

    cells: dict[str, dict[str, Cell]]
    r2: dict[str, R2]
    from_run: int


# Layers as small integers in SQL (integers group and sort faster than text), through a CASE
# tried in order: the criteria of the layers holding most verdicts first.
_LAYERS: Final = tuple(sorted({*_LAYER_OF.values(), "other"}))
_BUSIEST_FIRST: Final = ("device", "network", "sharing", "operator")
_LAYER_NO: Final = {
    c: _LAYERS.index(_LAYER_OF[c])
    for c in sorted(
        _LAYER_OF, key=lambda c: _BUSIEST_FIRST.index(_LAYER_OF[c]) if _LAYER_OF[c] in _BUSIEST_FIRST else 9
    )
}


def _read(engine: Engine, query: Any) -> list[Any]:
    """Rows of a cells query. On PostgreSQL, with the memory to sort the horizon's groups at once
    (the default 4 MB spills them to disk) and without JIT (compiling this plan costs ~80 ms and
    saves nothing on a scan this simple)."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("SET LOCAL work_mem = '64MB'")
            conn.exec_driver_sql("SET LOCAL jit = off")
        # plain tuples: unpacking 40k Row objects in the merge costs more than copying them once
        return [tuple(row) for row in conn.execute(query)]


# PostgreSQL keeps the verdicts counted per (run, node or subject, criterion, judged_at) and
# severity in this table (triggers on verdicts, migration 0007); `r<s>`: those that can be an r2.
_VERDICT_GROUPS: Final = table(
    "verdict_groups",
    column("run_id"),
    column("who"),
    column("criterion"),
    column("judged_at"),
    *(column(f"{kind}{s}") for kind in "nr" for s in range(len(RESULTS))),
)


def criterion_groups(engine: Engine, runs: Callable[[Any], Any]) -> Any:
    """Per (node or subject, criterion, run, judged_at) of the runs `runs(run_id)` selects: worst
    severity, count, and the worst severity among those that can be an r2 (a node column, not an
    error; None if none). PostgreSQL reads them from `verdict_groups`; SQLite groups the verdicts."""
    if engine.dialect.name == "postgresql":
        t = _VERDICT_GROUPS.c
        levels = range(len(RESULTS) - 1, -1, -1)
        return (
            select(
                t.who.label("node"),
                t.criterion.label("criterion"),
                t.run_id.label("run_id"),
                t.judged_at.label("at"),
                case(*((t[f"n{s}"] > 0, s) for s in levels), else_=0).label("sev"),
                sum((t[f"n{s}"] for s in levels), start=literal(0)).label("n"),
                case(*((t[f"r{s}"] > 0, s) for s in levels)).label("ok_sev"),
            )
            .where(runs(t.run_id))
            .subquery()
        )
    who = func.coalesce(VerdictRow.node, VerdictRow.subject)
    can_be_r2 = and_(VerdictRow.result != "error", VerdictRow.node.is_not(None))
    return (
        select(
            who.label("node"),
            VerdictRow.criterion.label("criterion"),
            VerdictRow.run_id.label("run_id"),
            VerdictRow.judged_at.label("at"),
            func.max(_SEV_SQL).label("sev"),
            func.count().label("n"),
            func.max(case((can_be_r2, _SEV_SQL))).label("ok_sev"),
        )
        .where(runs(VerdictRow.run_id))
        .group_by(who, VerdictRow.criterion, VerdictRow.run_id, VerdictRow.judged_at)
        .subquery()
    )


def _groups(engine: Engine, runs: Callable[[Any], Any]) -> list[Any]:
    """For the runs `runs(run_id)` selects: per (node, layer), its newest run's verdicts grouped by
    judgement time (layer number, worst severity, count), and per node the group holding its
    newest r2 (severity, criterion). Counted per criterion first (`criterion_groups`: a node's
    GPU records are one group), then per layer; the rankings sort those groups, not verdicts."""
    c = criterion_groups(engine, runs).c
    node = _bytewise(engine, c.node)
    layer = case(_LAYER_NO, value=c.criterion, else_=_LAYERS.index("other"))
    is_r2 = c.criterion.in_(R2_CRITERIA)
    grouped = (
        select(
            node.label("node"),
            layer.label("layer"),
            c.run_id,
            c.at,
            func.max(c.sev).label("sev"),
            func.sum(c.n).label("n"),
            func.max(case((is_r2, c.ok_sev))).label("r2_sev"),
            func.max(case((and_(is_r2, c.ok_sev.is_not(None)), c.criterion))).label("r2_criterion"),
            func.max(case((c.criterion.in_(RETEST_CRITERIA), 1), else_=0)).label("retest"),
        )
        .where(c.criterion.not_in(TREND_CRITERIA))
        .group_by(node, layer, c.run_id, c.at)
        .subquery()
    )
    g = grouped.c
    newest = func.first_value(g.run_id).over(
        partition_by=(g.node, g.layer), order_by=(g.at.desc(), g.run_id.desc())
    )
    r2_rank = func.row_number().over(
        partition_by=g.node, order_by=(g.r2_sev.is_(None), g.at.desc(), g.run_id.desc())
    )
    ranked = select(grouped, newest.label("newest"), r2_rank.label("r2_rank")).subquery()
    r = ranked.c
    query = select(
        r.node,
        r.layer,
        r.run_id,
        r.at,
        r.sev,
        r.n,
        r.r2_sev,
        r.r2_criterion,
        r.retest,
        r.run_id == r.newest,
        r.r2_rank == 1,
    ).where(or_(r.run_id == r.newest, and_(r.r2_rank == 1, r.r2_sev.is_not(None))))
    return _read(engine, query)


def _bytewise(engine: Engine, column: Any) -> Any:
    # Grouping and partitioning only need equal names together: PostgreSQL sorts them by bytes
    # much faster than by the database's collation.
    return column.collate("C") if engine.dialect.name == "postgresql" else column


def _newer(at: dt.datetime | None, run_id: int, than: Cell) -> bool:
    epoch = dt.datetime.min.replace(tzinfo=dt.UTC)
    return (at or epoch, run_id) > (than.at or epoch, than.run_id)


def current_judgement(
    groups: Sequence[tuple[dt.datetime, int, int, int, int]],
) -> Sequence[tuple[dt.datetime, int, int, int, int]]:
    """Of one run's verdict groups (time, severity, count, run, retest) on a node in a layer, those
    that make its current state: from its newest retest on where it has one (`RETEST_CRITERIA`),
    else the newest judgement (`BATCH_WINDOW`). The one rule the page, `fleetval nodes` and the
    demo's console read."""
    retests = [g[0] for g in groups if g[4]]
    if retests:
        since = max(retests)
        return [g for g in groups if g[0] >= since]
    last = max(g[0] for g in groups)
    return [g for g in groups if g[0] >= last - BATCH_WINDOW]


def _merge(
    cells: dict[str, dict[str, Cell]], r2: dict[str, R2], rows: Iterable[Any], *, rerun: frozenset[int]
) -> None:
    """Fold `_groups` rows in: a newer run's cell replaces a cell; so does the cell of a run in
    `rerun` (recomputed whole) where the old cell came from a run in `rerun`."""
    # (node, layer number) → the groups of its newest run: (time, severity, count, run, retest)
    newest: dict[tuple[str, int], list[tuple[dt.datetime, int, int, int, int]]] = defaultdict(list)
    for node, layer_no, run_id, at, sev, n, r2_sev, r2_criterion, retest, in_newest, is_r2 in rows:
        if at.tzinfo is None:  # SQLite: naive UTC (judged_at is never null, unlike `_aware`'s values)
            at = at.replace(tzinfo=dt.UTC)
        if in_newest:
            newest[(node, layer_no)].append((at, sev, n, run_id, retest))
        if is_r2 and r2_sev is not None:
            seen = r2.get(node)
            if seen is None or seen.run_id in rerun or (at, run_id) > (seen.at, seen.run_id):
                r2[node] = R2(at, RESULTS[r2_sev], str(r2_criterion), int(run_id))
    for (node, layer_no), groups in newest.items():
        batch = current_judgement(groups)
        last = max(g[0] for g in batch)
        cell = Cell(RESULTS[max(g[1] for g in batch)], int(groups[0][3]), last, int(sum(g[2] for g in batch)))
        by_layer = cells.setdefault(node, {})
        layer = _LAYERS[layer_no]
        old = by_layer.get(layer)
        if old is None or old.run_id in rerun or _newer(cell.at, cell.run_id, old):
            by_layer[layer] = cell


def latest_cells(engine: Engine, *, from_run: int = 0) -> Cells:
    """The cells and r2s over the verdicts of runs with id >= `from_run`, computed whole."""
    cells: dict[str, dict[str, Cell]] = {}
    r2: dict[str, R2] = {}
    _merge(cells, r2, _groups(engine, lambda run_id: run_id >= from_run), rerun=frozenset())
    return Cells(cells, r2, from_run)


class FleetCells:
    """`latest_cells` kept up to date between page loads, so a load costs what changed since the
    last one, not the fleet's history: each refresh asks which runs have verdicts judged since
    the newest it saw (the `judged_at` index; with a margin for transactions that committed
    late) and recomputes those runs whole (an index range each), merging them in. Runs leaving
    the horizon drop their cells; a store reset (its newest judgement older than seen) and
    `full_every` recompute everything. Thread-safe; one per store and process."""

    def __init__(
        self,
        engine: Engine,
        *,
        horizon_days: int | None = DEFAULT_HORIZON_DAYS,
        full_every: dt.timedelta = dt.timedelta(hours=6),
        margin: dt.timedelta = dt.timedelta(minutes=10),
    ) -> None:
        self.engine = engine
        self.horizon_days = horizon_days
        self.full_every = full_every
        self.margin = margin
        self._lock = threading.Lock()
        self._state: Cells | None = None
        self._mark: dt.datetime | None = None  # the newest judged_at seen
        self._recent = 0  # verdicts judged within the margin before it
        self._inventory: tuple[tuple[int | None, int | None], Inventory] | None = None
        self._full_at = 0.0
        self.last_refresh = "none"  # full, delta or cached: what the last call did

    def get(self, now: dt.datetime | None = None) -> Cells:
        with self._lock:
            from_run = first_run_since(self.engine, _since(self.horizon_days, now))
            mark, recent = self._fingerprint()
            state = self._state
            if state is not None and from_run > state.from_run:
                # Runs left the horizon: their cells go (a node whose newest verdict in a layer
                # is older than the horizon is untested there); no recomputation needed.
                state = Cells(
                    {
                        node: kept
                        for node, by_layer in state.cells.items()
                        if (kept := {k: c for k, c in by_layer.items() if c.run_id >= from_run})
                    },
                    {node: r for node, r in state.r2.items() if r.run_id >= from_run},
                    from_run,
                )
                self._state = state
            if (
                state is None
                or state.from_run != from_run
                or (mark is not None and self._mark is not None and mark < self._mark)  # a store reset
                or time.monotonic() - self._full_at > self.full_every.total_seconds()
            ):
                self._state = latest_cells(self.engine, from_run=from_run)
                self._full_at = time.monotonic()
                self.last_refresh = "full"
            elif (mark, recent) != (self._mark, self._recent) and mark is not None:
                # Something was judged (or judged again) since the last look: the runs judged
                # within the margin before the newest judgement seen then are recomputed whole.
                since = min(mark, self._mark or mark) - self.margin
                touched = self._runs_judged_since(since, from_run)
                cells = {n: dict(c) for n, c in state.cells.items()}
                r2 = dict(state.r2)
                if touched:
                    rows = _groups(self.engine, lambda run_id: run_id.in_(touched))
                    _merge(cells, r2, rows, rerun=frozenset(touched))
                self._state = Cells(cells, r2, from_run)
                self.last_refresh = "delta"
            else:
                self.last_refresh = "cached"
            self._mark, self._recent = mark, recent
            assert self._state is not None
            return self._state

    def inventory(self) -> Inventory:
        """`inventory(engine)`, kept while no run was added and the newest weekly run had its plan."""
        with self.engine.connect() as conn:
            newest = conn.execute(select(func.max(Run.id)).where(Run.suite == WEEKLY_SUITE)).scalar()
            last = conn.execute(select(func.max(Run.id))).scalar()
        key = (newest, last)
        cached = self._inventory
        if cached is not None and cached[0] == key and newest is not None:
            return cached[1]
        inv = inventory(self.engine)
        fresh = newest is not None and inv.source is not None and inv.source["run_id"] == newest
        self._inventory = (key, inv) if fresh else None
        return inv

    def _fingerprint(self) -> tuple[dt.datetime | None, int]:
        """The newest judgement, and how many verdicts were judged within the margin before it:
        a new verdict, one judged again (its judged_at moves) or one committed late changes it.
        Two lookups on the judged_at index."""
        with self.engine.connect() as conn:
            mark = _aware(conn.execute(select(func.max(VerdictRow.judged_at))).scalar())
            if mark is None:
                return None, 0
            recent = conn.execute(
                select(func.count()).where(VerdictRow.judged_at > mark - self.margin)
            ).scalar_one()
        return mark, int(recent)

    def _runs_judged_since(self, since: dt.datetime, from_run: int) -> list[int]:
        with self.engine.connect() as conn:
            found = conn.execute(
                select(VerdictRow.run_id).where(VerdictRow.judged_at > since).distinct()
            ).scalars()
            return sorted(int(r) for r in found if int(r) >= from_run)


def fleet_grid(
    engine: Engine,
    *,
    horizon_days: int | None = DEFAULT_HORIZON_DAYS,
    now: dt.datetime | None = None,
    cache: FleetCells | None = None,
) -> FleetGrid:
    """The inventory and each node's latest verdict per node layer within the horizon (through
    `cache` when given: its horizon applies)."""
    since = _since(cache.horizon_days if cache else horizon_days, now)
    cells = (cache.get(now) if cache else latest_cells(engine, from_run=first_run_since(engine, since))).cells
    inv = cache.inventory() if cache else inventory(engine)
    if not inv.rack_of:  # no weekly plan yet: the nodes the verdicts name
        inv = inventory(engine, extra_nodes=_node_column_values(engine))
    known = inv.rack_of.keys()
    cells = {n: c for n, c in cells.items() if n in known}
    layers = tuple(
        layer for layer in NODE_LAYERS if any(layer in c for c in cells.values()) or layer == "device"
    )
    return FleetGrid(inv, cells, layers, since)


def _since(horizon_days: int | None, now: dt.datetime | None) -> dt.datetime | None:
    if horizon_days is None:
        return None
    return (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=horizon_days)


def _node_column_values(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        nodes = set(
            conn.execute(select(VerdictRow.node).where(VerdictRow.node.is_not(None)).distinct()).scalars()
        )
        nodes |= set(conn.execute(select(NodeEvent.node).distinct()).scalars())
    return sorted(n for n in nodes if n is not None)


# --- one node -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NodePage:
    node: str
    rack: str | None
    verdicts: list[dict[str, Any]]  # newest first
    events: list[dict[str, Any]]  # newest first
    time_to_cordon: list[dict[str, Any]]  # D-DEV-05: seconds from the first Xid to the cordon
    truncated: bool


def node_page(engine: Engine, node: str, *, limit: int = 500) -> NodePage:
    """A node's verdicts (its own, and those whose subject it is), its node events and its
    time-to-cordon measurements, newest first; at most `limit` verdicts."""
    query = (
        select(
            VerdictRow.id,
            VerdictRow.criterion,
            VerdictRow.subject,
            VerdictRow.result,
            VerdictRow.action,
            VerdictRow.rule_id,
            VerdictRow.reason,
            VerdictRow.evidence,
            VerdictRow.judged_against,
            VerdictRow.judged_at,
            VerdictRow.run_id,
            Run.run_key,
            Run.suite,
        )
        .join(Run, Run.id == VerdictRow.run_id)
        .where(or_(VerdictRow.node == node, and_(VerdictRow.subject == node, VerdictRow.node.is_(None))))
        .order_by(VerdictRow.judged_at.desc(), VerdictRow.id.desc())
        .limit(limit + 1)
    )
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(query)]
        events = [
            dict(r._mapping)
            for r in conn.execute(
                select(
                    NodeEvent.kind,
                    NodeEvent.reason,
                    NodeEvent.dry_run,
                    NodeEvent.at,
                    NodeEvent.details,
                    NodeEvent.run_id,
                    Run.run_key,
                )
                .outerjoin(Run, Run.id == NodeEvent.run_id)
                .where(NodeEvent.node == node)
                .order_by(NodeEvent.at.desc(), NodeEvent.id.desc())
                .limit(limit)
            )
        ]
    truncated = len(rows) > limit
    rows = rows[:limit]
    for row in rows + events:
        for key in ("judged_at", "at"):
            if key in row:
                row[key] = _aware(row[key])
    ttc = [
        {
            "at": r["judged_at"],
            "seconds": (r["evidence"] or {}).get("time_to_cordon_s"),
            "result": r["result"],
            "run_key": r["run_key"],
            "dry_run": bool((r["evidence"] or {}).get("dry_run")),
        }
        for r in rows
        if r["criterion"] == "D-DEV-05"
    ]
    rack = next((str(e["details"]["rack"]) for e in events if (e["details"] or {}).get("rack")), None)
    if rack is None:
        rack = inventory(engine).rack_of.get(node)
    return NodePage(node, rack, rows, events, ttc, truncated)


# --- NCCL ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NcclCurve:
    profile: str
    scope: str
    subject: str
    run_id: int | None
    run_key: str | None
    points: list[dict[str, Any]]  # size, repeat, busbw_gbps (one per measured row)
    baseline: dict[str, Any] | None  # the promoted baseline: value, version, per-size stats, min_ratio
    verdicts: list[dict[str, Any]]
    via: str | None = None  # the pair whose probes are shown, for a node with none of its own


def nccl_scopes(engine: Engine) -> list[dict[str, Any]]:
    """(profile, scope) series that have a baseline version, with the promoted one's value."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(Baseline.profile, Baseline.scope, Baseline.status, Baseline.version, Baseline.value)
            .where(Baseline.metric == NCCL_METRIC)
            .order_by(Baseline.profile, Baseline.scope, Baseline.version)
        )
        series: dict[tuple[str, str], dict[str, Any]] = {}
        for profile, scope, status, version, value in rows:
            entry = series.setdefault(
                (profile, scope), {"profile": profile, "scope": scope, "promoted": None}
            )
            if status == "promoted":
                entry["promoted"] = {"version": version, "value": value}
    return sorted(series.values(), key=lambda s: (s["profile"], natural_key(s["scope"])))


def nccl_subjects(engine: Engine, *, profile: str, scope: str, limit: int = 200) -> dict[str, Any]:
    """The newest NCCL run's verdicts of this scope's busbw criterion, worst first: which
    subjects to look at. Its run too."""
    criterion = "D-NET-NCCL-02" if scope.startswith("inter-") else "D-NET-NCCL-01"
    with engine.connect() as conn:
        run = conn.execute(
            select(Run.id, Run.run_key, Run.started_at)
            .where(Run.suite == NCCL_SUITE)
            .where(
                select(VerdictRow.id)
                .where(VerdictRow.run_id == Run.id, VerdictRow.criterion == criterion)
                .exists()
            )
            .order_by(Run.id.desc())
            .limit(1)
        ).first()
        if run is None:
            return {"run": None, "criterion": criterion, "subjects": [], "total": 0}
        rows = conn.execute(
            select(
                VerdictRow.subject,
                VerdictRow.result,
                VerdictRow.reason,
                # read as plain JSON: only its profile and scope strings are compared
                type_coerce(VerdictRow.judged_against, JSON),
            )
            .where(VerdictRow.run_id == run.id, VerdictRow.criterion == criterion)
            .order_by(_SEV_SQL.desc(), VerdictRow.subject)
        )
        subjects: list[dict[str, Any]] = []
        total = 0
        for subject, result, reason, against in rows:
            against = against or {}
            if against.get("profile", profile) != profile or against.get("scope", scope) != scope:
                continue
            total += 1
            if len(subjects) < limit:
                subjects.append({"subject": subject, "result": result, "reason": reason})
    return {
        "run": {"id": int(run.id), "run_key": run.run_key, "started_at": _aware(run.started_at)},
        "criterion": criterion,
        "subjects": subjects,
        "total": total,
    }


def nccl_curve(engine: Engine, *, profile: str, scope: str, subject: str) -> NcclCurve:
    """busbw against message size for `subject`'s newest NCCL probes of this scope (every
    repeat), with the promoted baseline's per-size statistics."""
    with engine.connect() as conn:
        verdict_rows = [
            dict(r._mapping)
            for r in conn.execute(
                select(
                    VerdictRow.run_id,
                    VerdictRow.criterion,
                    VerdictRow.result,
                    VerdictRow.reason,
                    VerdictRow.evidence,
                    VerdictRow.judged_against,
                    Run.run_key,
                )
                .join(Run, Run.id == VerdictRow.run_id)
                .where(VerdictRow.subject == subject, Run.suite == NCCL_SUITE)
                .where(VerdictRow.criterion.in_(("D-NET-NCCL-01", "D-NET-NCCL-02")))
                .order_by(VerdictRow.run_id.desc())
            )
        ]
        verdict_rows = [
            v
            for v in verdict_rows
            if (v["judged_against"] or {}).get("scope", scope) == scope
            and (v["judged_against"] or {}).get("profile", profile) == profile
        ]
        run_id = verdict_rows[0]["run_id"] if verdict_rows else None
        run_key = verdict_rows[0]["run_key"] if verdict_rows else None
        latest = [v for v in verdict_rows if v["run_id"] == run_id]
        keys = _probe_keys(latest)
        via = None
        if run_id is not None and not keys:
            # A node located by pair testing has no probe of its own: show its worst pair's.
            pair = conn.execute(
                select(VerdictRow.subject, VerdictRow.evidence)
                .where(
                    VerdictRow.run_id == run_id,
                    VerdictRow.criterion == "D-NET-NCCL-02",
                    or_(
                        VerdictRow.subject.startswith(f"{subject}+"),
                        VerdictRow.subject.endswith(f"+{subject}"),
                    ),
                )
                .order_by(_SEV_SQL.desc(), VerdictRow.subject)
                .limit(1)
            ).first()
            if pair is not None:
                via = str(pair.subject)
                keys = _probe_keys([{"evidence": pair.evidence}])
        points: list[dict[str, Any]] = []
        if run_id is not None and keys:
            probe_ids = list(
                conn.execute(
                    select(Probe.id).where(Probe.run_id == run_id, Probe.probe_key.in_(keys))
                ).scalars()
            )
            for value, attrs in conn.execute(
                select(Measurement.value, Measurement.attrs)
                .where(Measurement.probe_id.in_(probe_ids), Measurement.metric == NCCL_METRIC)
                .order_by(Measurement.probe_id, Measurement.seq)
            ):
                attrs = attrs or {}
                if value is None or attrs.get("size") is None:
                    continue
                points.append(
                    {"size": int(attrs["size"]), "repeat": attrs.get("repeat"), "busbw_gbps": value}
                )
        promoted = conn.execute(
            select(*Baseline.__table__.c).where(
                Baseline.profile == profile,
                Baseline.metric == NCCL_METRIC,
                Baseline.scope == scope,
                Baseline.status == "promoted",
            )
        ).first()
    baseline = None
    if promoted is not None:
        stats = promoted.stats or {}
        min_ratio = next(
            (
                (v["evidence"] or {}).get("min_ratio")
                for v in latest
                if (v["evidence"] or {}).get("min_ratio") is not None
            ),
            0.9,
        )
        baseline = {
            "id": int(promoted.id),
            "version": int(promoted.version),
            "value": float(promoted.value),
            "unit": promoted.unit,
            "sizes": list(stats.get("sizes") or []),
            "min_size_bytes": (stats.get("headline") or {}).get("min_size_bytes"),
            "min_ratio": float(min_ratio or 0.9),
        }
    return NcclCurve(profile, scope, subject, run_id, run_key, points, baseline, latest, via)


def _probe_keys(verdicts: Iterable[Mapping[str, Any]]) -> list[str]:
    return sorted(
        {
            str(rep["probe_key"])
            for v in verdicts
            for rep in (v["evidence"] or {}).get("repeats") or []
            if isinstance(rep, Mapping) and rep.get("probe_key")
        }
    )


# --- baselines ----------------------------------------------------------------------------------
def baselines(engine: Engine) -> list[dict[str, Any]]:
    """Every baseline version (without per-size statistics), series by series, newest first."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                Baseline.id,
                Baseline.profile,
                Baseline.metric,
                Baseline.scope,
                Baseline.version,
                Baseline.status,
                Baseline.value,
                Baseline.unit,
                Baseline.source,
                Baseline.created_at,
                Baseline.promoted_at,
                Baseline.retired_at,
            ).order_by(Baseline.profile, Baseline.metric, Baseline.scope, Baseline.version.desc())
        )
        out = []
        for r in rows:
            row = dict(r._mapping)
            for key in ("created_at", "promoted_at", "retired_at"):
                row[key] = _aware(row[key])
            out.append(row)
    return sorted(out, key=lambda r: (r["profile"], r["metric"], natural_key(r["scope"]), -r["version"]))


# --- coverage -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Coverage:
    as_of: dt.datetime
    since: dt.datetime | None
    last_r2: dict[str, dict[str, Any]]  # node → {"at", "result", "criterion"}: the newest judged r2
    never: list[str]  # inventory nodes with no r2 ever
    stale: list[str]  # inventory nodes with an r2, but none within the horizon
    inventory: Inventory

    def age_days(self, node: str) -> float | None:
        last = self.last_r2.get(node)
        if last is None or last["at"] is None:
            return None
        at: dt.datetime = last["at"]
        return (self.as_of - at).total_seconds() / 86400


def coverage(
    engine: Engine,
    *,
    horizon_days: int | None = DEFAULT_HORIZON_DAYS,
    now: dt.datetime | None = None,
    cache: FleetCells | None = None,
) -> Coverage:
    """Each inventory node's newest r2 (D-DEV-01/D-DEV-03 on the node; an `error` is a harness
    failure, not an r2) within the horizon; the rest, whether they ever had one."""
    as_of = now or dt.datetime.now(dt.UTC)
    since = _since(cache.horizon_days if cache else horizon_days, as_of)
    state = cache.get(now) if cache else latest_cells(engine, from_run=first_run_since(engine, since))
    from_run = state.from_run
    last = {
        node: {"at": r.at, "result": r.result, "criterion": r.criterion, "run_id": r.run_id}
        for node, r in state.r2.items()
    }
    inv = cache.inventory() if cache else inventory(engine)
    if not inv.rack_of:
        inv = inventory(engine, extra_nodes=last)
    untested = sorted(set(inv.rack_of) - last.keys(), key=natural_key)
    stale: set[str] = set()
    if untested and from_run > 0:  # tested before the horizon?
        with engine.connect() as conn:
            for start in range(0, len(untested), 1000):
                chunk = untested[start : start + 1000]
                stale.update(
                    str(n)
                    for n in conn.execute(
                        select(VerdictRow.node)
                        .where(
                            VerdictRow.node.in_(chunk),
                            VerdictRow.criterion.in_(R2_CRITERIA),
                            VerdictRow.result != "error",
                        )
                        .distinct()
                    ).scalars()
                )
    never = [n for n in untested if n not in stale]
    return Coverage(as_of, since, last, never, sorted(stale, key=natural_key), inv)


# --- criteria -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CriterionRow:
    id: str
    layer: str
    statement: str
    implemented_by: str
    run: dict[str, Any] | None  # the newest run that judged it
    counts: dict[str, int]  # result → verdicts in that run


def criteria_matrix(engine: Engine) -> list[CriterionRow]:
    """Each catalog criterion with what implements it and the results of the newest run that
    judged it (one indexed lookup per criterion, then that run's counts)."""
    out: list[CriterionRow] = []
    with engine.connect() as conn:
        for criterion in CRITERIA:
            run_id = conn.execute(
                select(func.max(VerdictRow.run_id)).where(VerdictRow.criterion == criterion.id)
            ).scalar()
            run = None
            counts: dict[str, int] = {}
            if run_id is not None:
                found = conn.execute(
                    select(Run.id, Run.run_key, Run.suite, Run.started_at).where(Run.id == run_id)
                ).one()
                run = {
                    "id": int(found.id),
                    "run_key": found.run_key,
                    "suite": found.suite,
                    "started_at": _aware(found.started_at),
                }
                counts = {
                    str(result): int(n)
                    for result, n in conn.execute(
                        select(VerdictRow.result, func.count())
                        .where(VerdictRow.run_id == run_id, VerdictRow.criterion == criterion.id)
                        .group_by(VerdictRow.result)
                    )
                }
            out.append(
                CriterionRow(
                    criterion.id,
                    criterion.layer,
                    criterion.statement,
                    IMPLEMENTED_BY.get(criterion.id, ""),
                    run,
                    counts,
                )
            )
    return out


# --- runs of one suite: Kueue scenarios, onboarding reports -------------------------------------
@dataclass(frozen=True, slots=True)
class SuiteRun:
    id: int
    run_key: str
    suite: str
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    meta: dict[str, Any]
    verdicts: list[dict[str, Any]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return dict(Counter(v["result"] for v in self.verdicts))


def suite_runs(
    engine: Engine,
    *,
    suites: Sequence[str] = (),
    suite_prefix: str | None = None,
    limit: int = 10,
    with_verdicts: int = 1,
    verdict_limit: int = 2000,
) -> list[SuiteRun]:
    """The newest `limit` runs of these suites (and of every suite starting with `suite_prefix`),
    newest first; the first `with_verdicts` of them with their verdicts (at most `verdict_limit`
    each, worst first)."""
    query = select(Run.id, Run.run_key, Run.suite, Run.started_at, Run.finished_at, Run.meta)
    if suite_prefix is not None:
        query = query.where(
            or_(Run.suite.in_(list(suites)), Run.suite.startswith(suite_prefix, autoescape=True))
        )
    else:
        query = query.where(Run.suite.in_(list(suites)))
    out: list[SuiteRun] = []
    with engine.connect() as conn:
        for r in conn.execute(query.order_by(Run.id.desc()).limit(limit)):
            verdicts: list[dict[str, Any]] = []
            if len(out) < with_verdicts:
                verdicts = [
                    dict(v._mapping)
                    for v in conn.execute(
                        select(
                            VerdictRow.criterion,
                            VerdictRow.subject,
                            VerdictRow.node,
                            VerdictRow.result,
                            VerdictRow.action,
                            VerdictRow.reason,
                            VerdictRow.evidence,
                            VerdictRow.judged_against,
                            VerdictRow.judged_at,
                        )
                        .where(VerdictRow.run_id == r.id)
                        .order_by(_SEV_SQL.desc(), VerdictRow.subject, VerdictRow.criterion)
                        .limit(verdict_limit)
                    )
                ]
            out.append(
                SuiteRun(
                    int(r.id),
                    r.run_key,
                    r.suite,
                    _aware(r.started_at),
                    _aware(r.finished_at),
                    dict(r.meta or {}),
                    verdicts,
                )
            )
    return out


def run_result_counts(engine: Engine, run_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """run → result → verdicts, for a few runs (an index range each)."""
    out: dict[int, dict[str, int]] = {int(r): {} for r in run_ids}
    if not run_ids:
        return out
    with engine.connect() as conn:
        for run_id, result, n in conn.execute(
            select(VerdictRow.run_id, VerdictRow.result, func.count())
            .where(VerdictRow.run_id.in_(list(run_ids)))
            .group_by(VerdictRow.run_id, VerdictRow.result)
        ):
            out[int(run_id)][str(result)] = int(n)
    return out


def kueue_results(engine: Engine, *, limit: int = 10) -> list[SuiteRun]:
    """The newest kueue_contention runs; the newest with its verdicts (one per scenario and
    criterion: subject `kueue/<scenario>`)."""
    return suite_runs(engine, suites=(KUEUE_SUITE,), limit=limit)


def onboarding_reports(engine: Engine, *, limit: int = 20) -> list[SuiteRun]:
    """The newest rack onboarding runs (suite `rack_onboarding`, or `onboarding…`), the newest
    with its verdicts; each run's stored report is in its meta (`report` or `summary`)."""
    return suite_runs(engine, suites=ONBOARDING_SUITES, suite_prefix=ONBOARDING_SUITE_PREFIX, limit=limit)


def report_of(run: SuiteRun) -> Mapping[str, Any] | str | None:
    """The report an onboarding run stored in its meta, if any."""
    for key in ("report", "summary"):
        if run.meta.get(key):
            value = run.meta[key]
            return value if isinstance(value, Mapping | str) else str(value)
    return None


def criterion_known(criterion: str) -> bool:
    return criterion in BY_ID
