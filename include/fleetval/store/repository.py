"""The store's write and read paths. Every write is idempotent on a natural key:

- runs on `run_key`, probes on `(run_id, probe_key)`, verdicts on `(run_id, criterion, subject)`,
  node events on `event_key`, baselines on `(profile, metric, scope, version)`;
- measurements belong to their probe: re-ingesting a probe replaces its measurements.

Rows are written by fleetval.store.bulk: COPY on PostgreSQL, so a 16k-node sweep ingests at close
to raw COPY speed; plain upserts on SQLite.

Raw output, evidence text and JSON are stored losslessly (fleetval.store.models). What still
cannot be stored (a GPU id from garbage output longer than its column, NUL in a subject, an exit
code out of range) fails alone: the batch is split until the bad probe is found, the others are
stored, and the bad one is kept with its raw output and a `store_error` in its spec, so it counts
as not swept rather than vanishing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, delete, func, insert, select, update
from sqlalchemy import exc as sa_exc

from fleetval.errors import FleetvalError
from fleetval.records import Verdict
from fleetval.store.bulk import (
    VerdictValues,
    dialect_insert,
    probe_ids_by_key,
    replace_measurements,
    stored_raw,
    upsert_probes,
    upsert_verdicts,
)
from fleetval.store.models import (
    Baseline,
    Measurement,
    NodeEvent,
    Probe,
    Run,
    SimFleet,
    VerdictRow,
    decode_raw,
    encode_raw,
    utcnow,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class MeasurementIn:
    node: str
    metric: str
    value: float | None
    gpu: str | None = None
    unit: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProbeIn:
    """A probe's raw output and what was parsed and judged from it, ready to store."""

    probe_key: str
    tool: str
    raw: str
    nodes: tuple[str, ...]
    tool_version: str | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    measurements: tuple[MeasurementIn, ...] = ()
    verdicts: tuple[Verdict, ...] = ()


# A stored probe's results: (probe_key, measurements, verdicts, node).
ProbeResults = tuple[str, Sequence[MeasurementIn], Sequence[Verdict], str | None]


@dataclass(frozen=True, slots=True)
class NodeEventIn:
    """An action on a node, ready to record (idempotent on `event_key`)."""

    event_key: str
    node: str
    kind: str
    reason: str
    dry_run: bool
    run_id: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    at: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class JudgementInputs:
    """What `Store.judgement_inputs` read: probe rows (as `Store.probes`) and node events (as
    `Store.node_events`)."""

    probes: list[dict[str, Any]]
    node_events: list[dict[str, Any]]


@dataclass(slots=True)
class IngestReport:
    """What `Store.ingest` stored. `unjudged`: probe key → why only its raw output could be stored
    (its measurements and verdicts could not); `rejected`: probe key → why nothing of it could."""

    probes: int = 0
    measurements: int = 0
    verdicts: int = 0
    unjudged: dict[str, str] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)


class RowsNotStored(FleetvalError):
    """Rows the store refused (a value no column can hold); the other rows were stored."""


def sha256_text(text: str) -> str:
    """The hash of `text` as stored: of its bytes (`encode_raw`)."""
    return hashlib.sha256(encode_raw(text)[0]).hexdigest()


def _unstorable(exc: BaseException) -> bool:
    """A value the database or its driver refuses, as opposed to an outage or a bug."""
    if isinstance(exc, sa_exc.DataError):  # too long, out of range, NUL or bad bytes in COPY
        return True
    if isinstance(exc, sa_exc.StatementError) and not isinstance(exc, sa_exc.DBAPIError) and exc.orig:
        exc = exc.orig  # a bind parameter that could not be converted
    return isinstance(exc, UnicodeError | OverflowError)  # lone surrogates; an int SQLite cannot hold


def _why(exc: BaseException) -> str:
    orig = exc.orig if isinstance(exc, sa_exc.StatementError) and exc.orig is not None else exc
    lines = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {lines[0] if lines else ''}"[:500]


def _isolating(
    items: Sequence[T], write: Callable[[Sequence[T]], None], failed: Callable[[T, str], None]
) -> None:
    """`write(items)`; when the store refuses a value, halve until each refused item is alone and
    hand it to `failed`: one transaction when all is well, a few more per bad item."""
    if not items:
        return
    try:
        write(items)
    except Exception as exc:
        if not _unstorable(exc):
            raise
        if len(items) == 1:
            failed(items[0], _why(exc))
            return
        middle = len(items) // 2
        _isolating(items[:middle], write, failed)
        _isolating(items[middle:], write, failed)


def verdict_values(
    run_id: int, verdict: Verdict, *, probe_id: int | None, node: str | None, judged_at: dt.datetime
) -> VerdictValues:
    against = verdict.judged_against
    baseline_id = against.get("baseline_id")
    return (
        run_id,
        probe_id,
        verdict.criterion,
        verdict.subject,
        node,
        verdict.result.value,
        verdict.action,
        verdict.rule_id,
        verdict.reason,
        verdict.evidence,
        against,
        against.get("policy_version"),
        baseline_id if isinstance(baseline_id, int) else None,
        judged_at,
    )


class Store:
    """Repository over one engine. Methods open their own transaction unless given `conn`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- runs -------------------------------------------------------------------------------
    def ensure_run(
        self,
        run_key: str,
        *,
        suite: str,
        backend: str,
        fleet: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        with self.engine.begin() as conn:
            stmt = dialect_insert(conn, Run.__table__).values(  # type: ignore[arg-type]
                run_key=run_key,
                suite=suite,
                backend=backend,
                fleet=fleet,
                meta=dict(meta or {}),
                started_at=utcnow(),
            )
            conn.execute(stmt.on_conflict_do_nothing(index_elements=["run_key"]))
            return int(conn.execute(select(Run.id).where(Run.run_key == run_key)).scalar_one())

    def find_run(self, run_key: str | None = None) -> tuple[int, str] | None:
        """(id, run_key) of the run with this key, or of the latest run when no key is given."""
        query = select(Run.id, Run.run_key).order_by(Run.id.desc())
        if run_key:
            query = query.where(Run.run_key == run_key)
        with self.engine.connect() as conn:
            row = conn.execute(query.limit(1)).first()
        return (int(row.id), str(row.run_key)) if row is not None else None

    # --- simulated fleets: the spec of each fleet served, so tools can name it ------------------
    def remember_fleet(self, name: str, seed: int, spec: Mapping[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(SimFleet).where(SimFleet.name == name))
            conn.execute(insert(SimFleet).values(name=name, seed=seed, spec=dict(spec)))

    def fleet_spec(self, name: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            found = conn.execute(select(SimFleet.spec).where(SimFleet.name == name)).scalar_one_or_none()
        return dict(found) if found is not None else None

    def run_id(self, run_key: str) -> int | None:
        with self.engine.connect() as conn:
            found = conn.execute(select(Run.id).where(Run.run_key == run_key)).scalar_one_or_none()
        return int(found) if found is not None else None

    def update_run_meta(self, run_id: int, **meta: Any) -> None:
        with self.engine.begin() as conn:
            current = conn.execute(select(Run.meta).where(Run.id == run_id)).scalar_one()
            conn.execute(update(Run).where(Run.id == run_id).values(meta={**(current or {}), **meta}))

    def run_meta(self, run_id: int) -> dict[str, Any]:
        with self.engine.connect() as conn:
            return dict(conn.execute(select(Run.meta).where(Run.id == run_id)).scalar_one() or {})

    def finish_run(self, run_id: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(Run).where(Run.id == run_id).values(finished_at=utcnow()))

    # --- probes, measurements, verdicts -----------------------------------------------------
    def ingest(self, run_id: int, probes: Sequence[ProbeIn]) -> IngestReport:
        """Store probes (raw first), their measurements and verdicts in one transaction.

        Re-ingesting the same probe keys replaces the raw output, measurements and verdicts of
        those probes; nothing is duplicated. A probe the store refuses fails alone (module doc):
        the report names it, and the log says why.
        """
        report = IngestReport()

        def write(batch: Sequence[ProbeIn]) -> None:
            with self.engine.begin() as conn:
                self._write_probes(conn, run_id, batch)
            report.probes += len(batch)
            report.measurements += sum(len(p.measurements) for p in batch)
            report.verdicts += sum(len(p.verdicts) for p in batch)

        def raw_only(probe: ProbeIn, why: str) -> None:
            kept = dataclasses.replace(
                probe, measurements=(), verdicts=(), spec={**probe.spec, "store_error": why}
            )
            try:
                with self.engine.begin() as conn:
                    self._write_probes(conn, run_id, [kept])
            except Exception as exc:
                if not _unstorable(exc):
                    raise
                report.rejected[probe.probe_key] = _why(exc)
                log.error("probe %r of run %s not stored: %s", probe.probe_key, run_id, _why(exc))
                return
            report.probes += 1
            report.unjudged[probe.probe_key] = why
            log.error(
                "probe %r of run %s: raw output stored, results refused: %s", probe.probe_key, run_id, why
            )

        _isolating(probes, write, raw_only)
        return report

    def _write_probes(self, conn: Connection, run_id: int, probes: Sequence[ProbeIn]) -> dict[str, int]:
        """Upsert the probes with their measurements and verdicts; returns probe key → id."""
        probe_ids, unchanged = self._upsert_probes(conn, run_id, probes)
        # Measurements are parsed from the raw output: a probe stored again with the same bytes
        # and no results (a retried probe task, results to come) keeps those parsed from them.
        self._replace_measurements(
            conn, [p for p in probes if p.measurements or p.probe_key not in unchanged], probe_ids
        )
        rows = [
            verdict_values(
                run_id, v, probe_id=probe_ids[p.probe_key], node=_single(p.nodes), judged_at=utcnow()
            )
            for p in probes
            for v in p.verdicts
        ]
        upsert_verdicts(conn, rows)
        return probe_ids

    def attach_results(self, run_id: int, results: Sequence[ProbeResults]) -> int:
        """Add measurements and verdicts to probes already stored (raw first, judged after).

        `results` holds (probe_key, measurements, verdicts, node); re-attaching replaces them.
        Results the store refuses fail alone: their probe keeps a `store_error` (so its node
        counts as not swept) and the log says why. Returns the number of verdicts stored.
        """
        with self.engine.connect() as conn:
            ids = _stored_probe_ids(conn, run_id, [r[0] for r in results])
        stored = 0

        def write(batch: Sequence[ProbeResults]) -> None:
            nonlocal stored
            with self.engine.begin() as conn:
                stored += self._write_results(conn, run_id, batch, ids)

        def refused(result: ProbeResults, why: str) -> None:
            key = result[0]
            with self.engine.begin() as conn:
                conn.execute(delete(Measurement).where(Measurement.probe_id == ids[key]))
                spec = conn.execute(select(Probe.spec).where(Probe.id == ids[key])).scalar_one()
                conn.execute(
                    update(Probe).where(Probe.id == ids[key]).values(spec={**spec, "store_error": why})
                )
            log.error("probe %r of run %s: results refused by the store: %s", key, run_id, why)

        _isolating(results, write, refused)
        return stored

    def _write_results(
        self, conn: Connection, run_id: int, results: Sequence[ProbeResults], ids: Mapping[str, int]
    ) -> int:
        probes = [ProbeIn(key, "", "", (), measurements=tuple(m)) for key, m, _, _ in results]
        self._replace_measurements(conn, probes, ids)
        now = utcnow()
        rows = [
            verdict_values(run_id, v, probe_id=ids[key], node=node, judged_at=now)
            for key, _, verdicts, node in results
            for v in verdicts
        ]
        upsert_verdicts(conn, rows)
        return len(rows)

    # --- a judge step: one read, one write ---------------------------------------------------
    def judgement_inputs(self, run_id: int, probe_keys: Sequence[str], *, event_kind: str) -> JudgementInputs:
        """The probes with these keys (raw output and spec) and the run's node events of
        `event_kind`, read in one transaction: one consistent view for the judge."""
        with self.engine.connect() as conn:
            return JudgementInputs(
                self._probe_rows(conn, run_id, probe_keys, with_raw=True),
                self._node_event_rows(conn, run_id=run_id, kind=event_kind),
            )

    def record_judgement(
        self,
        run_id: int,
        *,
        outputs: Sequence[ProbeIn],
        results: Sequence[ProbeResults],
        node_events: Sequence[NodeEventIn],
        verdicts: Sequence[Verdict],
    ) -> None:
        """Store a judge step's writes in ONE transaction: probe `outputs` (as `ingest`), `results`
        of stored probes (as `attach_results`), `node_events`, and run-level `verdicts`.

        All or nothing, so a retry after a crash finds the store as the step found it. Only when
        the store refuses a value is the transaction rolled back and each part stored as its own
        method does, where the refused rows fail alone (module doc)."""
        try:
            with self.engine.begin() as conn:
                self._write_probes(conn, run_id, outputs)
                ids = _stored_probe_ids(conn, run_id, [r[0] for r in results])
                self._write_results(conn, run_id, results, ids)
                for event in node_events:
                    self._insert_node_event(conn, event)
                now = utcnow()
                upsert_verdicts(
                    conn,
                    [verdict_values(run_id, v, probe_id=None, node=None, judged_at=now) for v in verdicts],
                )
        except Exception as exc:
            if not _unstorable(exc):
                raise
            log.warning(
                "run %s: the judgement's single write was refused (%s); storing it part by part",
                run_id,
                _why(exc),
            )
            self.ingest(run_id, outputs)
            self.attach_results(run_id, results)
            for event in node_events:
                self.record_event(event)
            self.add_verdicts(run_id, verdicts)

    def probes(
        self, run_id: int, probe_keys: Sequence[str] | None = None, *, with_raw: bool = True
    ) -> list[dict[str, Any]]:
        """Probe rows as dicts; `raw` is the str that was ingested (decoded from its bytes)."""
        with self.engine.connect() as conn:
            return self._probe_rows(conn, run_id, probe_keys, with_raw=with_raw)

    def _probe_rows(
        self, conn: Connection, run_id: int, probe_keys: Sequence[str] | None, *, with_raw: bool
    ) -> list[dict[str, Any]]:
        columns = [c for c in Probe.__table__.c if with_raw or c.name not in ("raw", "raw_codec")]
        query = select(*columns).where(Probe.run_id == run_id).order_by(Probe.id)
        if probe_keys is not None:
            query = query.where(Probe.probe_key.in_(list(probe_keys)))
        rows = [dict(r._mapping) for r in conn.execute(query)]
        for row in rows:
            if with_raw:
                row["raw"] = decode_raw(row["raw"], row.pop("raw_codec"))
        return rows

    def probed_nodes(self, run_id: int, *, completed_only: bool = False) -> list[str]:
        """Nodes with a stored probe in this run (without loading raw outputs); `completed_only`
        leaves out probes that stand for a harness failure or whose results the store refused."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(Probe.nodes, Probe.spec).where(Probe.run_id == run_id))
            return sorted(
                {
                    node
                    for nodes, spec in rows
                    if not (
                        completed_only
                        and ((spec or {}).get("harness_error") or (spec or {}).get("store_error"))
                    )
                    for node in nodes
                }
            )

    def add_verdicts(
        self,
        run_id: int,
        verdicts: Iterable[Verdict],
        *,
        probe_id: int | None = None,
        node: str | None = None,
    ) -> int:
        """Upsert verdicts; returns how many. Verdicts the store refuses fail alone: the others
        are stored, then RowsNotStored names the refused ones (a verdict is never dropped quietly)."""
        now = utcnow()
        rows = [verdict_values(run_id, v, probe_id=probe_id, node=node, judged_at=now) for v in verdicts]
        refused: dict[str, str] = {}

        def write(batch: Sequence[VerdictValues]) -> None:
            with self.engine.begin() as conn:
                upsert_verdicts(conn, batch)

        def failed(row: VerdictValues, why: str) -> None:
            refused[f"{row[2]} {row[3]!r}"] = why

        _isolating(rows, write, failed)
        if refused:
            first, why = next(iter(refused.items()))
            raise RowsNotStored(
                f"{len(refused)} of {len(rows)} verdicts of run {run_id} not stored ({first}: {why})"
            )
        return len(rows)

    def _upsert_probes(
        self, conn: Connection, run_id: int, probes: Sequence[ProbeIn]
    ) -> tuple[dict[str, int], set[str]]:
        """Upsert the probes; returns their ids and the keys whose stored raw output was already
        these bytes."""
        if not probes:
            return {}, set()
        stored = stored_raw(conn, run_id, [p.probe_key for p in probes])
        rows = []
        unchanged = set()
        for p in probes:
            raw, codec = encode_raw(p.raw)
            sha = hashlib.sha256(raw).hexdigest()
            if stored.get(p.probe_key) == (sha, codec):
                unchanged.add(p.probe_key)
            rows.append(
                {
                    "run_id": run_id,
                    "probe_key": p.probe_key,
                    "tool": p.tool,
                    "tool_version": p.tool_version,
                    "nodes": list(p.nodes),
                    "spec": p.spec,
                    "raw": raw,
                    "raw_codec": codec,
                    "raw_sha256": sha,
                    "exit_code": p.exit_code,
                    "started_at": p.started_at,
                    "finished_at": p.finished_at,
                }
            )
        return upsert_probes(conn, rows, stored, unchanged), unchanged

    def _replace_measurements(
        self, conn: Connection, probes: Sequence[ProbeIn], probe_ids: Mapping[str, int]
    ) -> None:
        ids = [probe_ids[p.probe_key] for p in probes]
        rows = (
            (probe_ids[p.probe_key], seq, m.node, m.gpu, m.metric, m.value, m.unit, m.attrs)
            for p in probes
            for seq, m in enumerate(p.measurements)
        )
        replace_measurements(conn, ids, rows)

    # --- node events ------------------------------------------------------------------------
    def record_node_event(
        self,
        event_key: str,
        *,
        node: str,
        kind: str,
        reason: str,
        dry_run: bool,
        run_id: int | None = None,
        details: Mapping[str, Any] | None = None,
        at: dt.datetime | None = None,
    ) -> bool:
        """Record an action on a node; returns False when this event was already recorded."""
        return self.record_event(
            NodeEventIn(event_key, node, kind, reason, dry_run, run_id, dict(details or {}), at)
        )

    def record_event(self, event: NodeEventIn) -> bool:
        """`record_node_event` for an event already built (a judge step's `take_actions`)."""
        with self.engine.begin() as conn:
            return self._insert_node_event(conn, event)

    def _insert_node_event(self, conn: Connection, event: NodeEventIn) -> bool:
        stmt = dialect_insert(conn, NodeEvent.__table__).values(  # type: ignore[arg-type]
            event_key=event.event_key,
            node=event.node,
            kind=event.kind,
            reason=event.reason,
            dry_run=event.dry_run,
            run_id=event.run_id,
            details=dict(event.details),
            at=event.at or utcnow(),
        )
        result = conn.execute(
            stmt.on_conflict_do_nothing(index_elements=["event_key"]),
            execution_options={"preserve_rowcount": True},  # an INSERT's is kept only if asked
        )
        return bool(result.rowcount)

    def node_events(
        self, node: str | None = None, *, run_id: int | None = None, kind: str | None = None
    ) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return self._node_event_rows(conn, node, run_id=run_id, kind=kind)

    def _node_event_rows(
        self, conn: Connection, node: str | None = None, *, run_id: int | None, kind: str | None
    ) -> list[dict[str, Any]]:
        query = select(*NodeEvent.__table__.c).order_by(NodeEvent.id)
        if node is not None:
            query = query.where(NodeEvent.node == node)
        if run_id is not None:
            query = query.where(NodeEvent.run_id == run_id)
        if kind is not None:
            query = query.where(NodeEvent.kind == kind)
        return [dict(r._mapping) for r in conn.execute(query)]

    # --- reads ------------------------------------------------------------------------------
    def verdicts(self, run_id: int | None = None, criterion: str | None = None) -> list[dict[str, Any]]:
        query = select(*VerdictRow.__table__.c).order_by(VerdictRow.id)
        if run_id is not None:
            query = query.where(VerdictRow.run_id == run_id)
        if criterion is not None:
            query = query.where(VerdictRow.criterion == criterion)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def count(self, model: type[Any]) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(model)).scalar_one())

    def probe_raw(self, probe_id: int) -> str:
        with self.engine.connect() as conn:
            raw, codec = conn.execute(select(Probe.raw, Probe.raw_codec).where(Probe.id == probe_id)).one()
        return decode_raw(raw, codec)

    # --- baselines --------------------------------------------------------------------------
    def add_baseline_candidate(
        self,
        *,
        profile: str,
        metric: str,
        scope: str,
        value: float,
        unit: str,
        stats: Mapping[str, Any],
        source: Mapping[str, Any],
    ) -> tuple[int, int]:
        """A new candidate baseline at the next version; returns (id, version)."""
        with self.engine.begin() as conn:
            latest = conn.execute(
                select(func.max(Baseline.version)).where(
                    Baseline.profile == profile, Baseline.metric == metric, Baseline.scope == scope
                )
            ).scalar_one()
            version = int(latest or 0) + 1
            new_id = conn.execute(
                insert(Baseline)
                .values(
                    profile=profile,
                    metric=metric,
                    scope=scope,
                    version=version,
                    status="candidate",
                    value=value,
                    unit=unit,
                    stats=dict(stats),
                    source=dict(source),
                    created_at=utcnow(),
                )
                .returning(Baseline.id)
            ).scalar_one()
            return int(new_id), version

    def promote_baseline(self, baseline_id: int) -> None:
        """Promote a candidate; the previously promoted baseline of its scope is retired atomically."""
        with self.engine.begin() as conn:
            row = conn.execute(select(*Baseline.__table__.c).where(Baseline.id == baseline_id)).one()
            if row.status != "candidate":
                raise ValueError(f"baseline {baseline_id} is {row.status}, only a candidate can be promoted")
            now = utcnow()
            conn.execute(
                update(Baseline)
                .where(
                    Baseline.profile == row.profile,
                    Baseline.metric == row.metric,
                    Baseline.scope == row.scope,
                    Baseline.status == "promoted",
                )
                .values(status="retired", retired_at=now)
            )
            conn.execute(
                update(Baseline).where(Baseline.id == baseline_id).values(status="promoted", promoted_at=now)
            )

    def promoted_baseline(self, *, profile: str, metric: str, scope: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(*Baseline.__table__.c).where(
                    Baseline.profile == profile,
                    Baseline.metric == metric,
                    Baseline.scope == scope,
                    Baseline.status == "promoted",
                )
            ).first()
            return dict(row._mapping) if row else None


def _stored_probe_ids(conn: Connection, run_id: int, keys: Sequence[str]) -> dict[str, int]:
    """probe key → id; results are attached only to probes already stored."""
    ids = probe_ids_by_key(conn, run_id, keys)
    missing = set(keys) - ids.keys()
    if missing:
        raise KeyError(f"probes not stored for run {run_id}: {sorted(missing)[:5]}")
    return ids


def _single(nodes: Sequence[str]) -> str | None:
    return nodes[0] if len(nodes) == 1 else None
