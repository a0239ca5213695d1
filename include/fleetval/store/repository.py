"""The store's write and read paths. Every write is idempotent on a natural key:

- runs on `run_key`, probes on `(run_id, probe_key)`, verdicts on `(run_id, criterion, subject)`,
  node events on `event_key`, baselines on `(profile, metric, scope, version)`;
- measurements belong to their probe: re-ingesting a probe replaces its measurements.

Bulk paths use PostgreSQL COPY (through a staging table where a conflict rule is needed), so a
16k-node sweep ingests at close to raw COPY speed; SQLite uses executemany.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, Table, delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from fleetval.records import Verdict
from fleetval.store.models import (
    Baseline,
    Measurement,
    NodeEvent,
    Probe,
    Run,
    SimFleet,
    VerdictRow,
    utcnow,
)


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


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _dialect_insert(conn: Connection, table: Table) -> Any:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    if conn.dialect.name == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"unsupported database dialect {conn.dialect.name!r}")


def _copy_escape(value: Any) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, dict | list):
        value = json.dumps(value, separators=(",", ":"))
    elif isinstance(value, dt.datetime):
        value = value.isoformat()
    text = str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def copy_rows(
    conn: Connection, table_name: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> None:
    """PostgreSQL COPY FROM STDIN (text format) through the psycopg2 cursor."""
    buf = io.StringIO()
    for row in rows:
        buf.write("\t".join(_copy_escape(v) for v in row))
        buf.write("\n")
    buf.seek(0)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.copy_expert(f"COPY {table_name} ({', '.join(columns)}) FROM STDIN", buf)
    finally:
        cursor.close()


def _can_copy(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg2"


VERDICT_COLUMNS = (
    "run_id",
    "probe_id",
    "criterion",
    "subject",
    "node",
    "result",
    "action",
    "rule_id",
    "reason",
    "evidence",
    "judged_against",
    "policy_version",
    "baseline_id",
    "judged_at",
)
VERDICT_UPDATABLE = VERDICT_COLUMNS[1:]
MEASUREMENT_COLUMNS = ("probe_id", "seq", "node", "gpu", "metric", "value", "unit", "attrs")


def verdict_row(
    run_id: int, verdict: Verdict, *, probe_id: int | None, node: str | None, judged_at: dt.datetime
) -> dict[str, Any]:
    against = verdict.judged_against
    baseline_id = against.get("baseline_id")
    return {
        "run_id": run_id,
        "probe_id": probe_id,
        "criterion": verdict.criterion,
        "subject": verdict.subject,
        "node": node,
        "result": verdict.result.value,
        "action": verdict.action,
        "rule_id": verdict.rule_id,
        "reason": verdict.reason,
        "evidence": verdict.evidence,
        "judged_against": against,
        "policy_version": against.get("policy_version"),
        "baseline_id": baseline_id if isinstance(baseline_id, int) else None,
        "judged_at": judged_at,
    }


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
            stmt = _dialect_insert(conn, Run.__table__).values(  # type: ignore[arg-type]
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
    def ingest(self, run_id: int, probes: Sequence[ProbeIn]) -> dict[str, int]:
        """Store probes (raw first), their measurements and verdicts in one transaction.

        Re-ingesting the same probe keys replaces the raw output, measurements and verdicts of
        those probes; nothing is duplicated.
        """
        with self.engine.begin() as conn:
            probe_ids = self._upsert_probes(conn, run_id, probes)
            self._replace_measurements(conn, probes, probe_ids)
            rows = [
                verdict_row(
                    run_id, v, probe_id=probe_ids[p.probe_key], node=_single(p.nodes), judged_at=utcnow()
                )
                for p in probes
                for v in p.verdicts
            ]
            self._upsert_verdicts(conn, rows)
        return {
            "probes": len(probes),
            "measurements": sum(len(p.measurements) for p in probes),
            "verdicts": len(rows),
        }

    def attach_results(
        self,
        run_id: int,
        results: Sequence[tuple[str, Sequence[MeasurementIn], Sequence[Verdict], str | None]],
    ) -> int:
        """Add measurements and verdicts to probes already stored (raw first, judged after).

        `results` holds (probe_key, measurements, verdicts, node); re-attaching replaces them.
        """
        with self.engine.begin() as conn:
            keys = [r[0] for r in results]
            ids = _probe_ids(conn, run_id, keys)
            missing = set(keys) - ids.keys()
            if missing:
                raise KeyError(f"probes not stored for run {run_id}: {sorted(missing)[:5]}")
            probes = [ProbeIn(key, "", "", (), measurements=tuple(m)) for key, m, _, _ in results]
            self._replace_measurements(conn, probes, ids)
            now = utcnow()
            rows = [
                verdict_row(run_id, v, probe_id=ids[key], node=node, judged_at=now)
                for key, _, verdicts, node in results
                for v in verdicts
            ]
            self._upsert_verdicts(conn, rows)
            return len(rows)

    def probes(
        self, run_id: int, probe_keys: Sequence[str] | None = None, *, with_raw: bool = True
    ) -> list[dict[str, Any]]:
        columns = [c for c in Probe.__table__.c if with_raw or c.name != "raw"]
        query = select(*columns).where(Probe.run_id == run_id).order_by(Probe.id)
        if probe_keys is not None:
            query = query.where(Probe.probe_key.in_(list(probe_keys)))
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def probed_nodes(self, run_id: int, *, completed_only: bool = False) -> list[str]:
        """Nodes with a stored probe in this run (without loading raw outputs); `completed_only`
        leaves out probes that stand for a harness failure."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(Probe.nodes, Probe.spec).where(Probe.run_id == run_id))
            return sorted(
                {
                    node
                    for nodes, spec in rows
                    if not (completed_only and (spec or {}).get("harness_error"))
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
        now = utcnow()
        rows = [verdict_row(run_id, v, probe_id=probe_id, node=node, judged_at=now) for v in verdicts]
        with self.engine.begin() as conn:
            self._upsert_verdicts(conn, rows)
        return len(rows)

    def _upsert_probes(self, conn: Connection, run_id: int, probes: Sequence[ProbeIn]) -> dict[str, int]:
        if not probes:
            return {}
        rows = [
            {
                "run_id": run_id,
                "probe_key": p.probe_key,
                "tool": p.tool,
                "tool_version": p.tool_version,
                "nodes": list(p.nodes),
                "spec": p.spec,
                "raw": p.raw,
                "raw_sha256": sha256_text(p.raw),
                "exit_code": p.exit_code,
                "started_at": p.started_at,
                "finished_at": p.finished_at,
            }
            for p in probes
        ]
        stmt = _dialect_insert(conn, Probe.__table__)  # type: ignore[arg-type]
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id", "probe_key"],
            set_={
                c: stmt.excluded[c]
                for c in (
                    "tool",
                    "tool_version",
                    "nodes",
                    "spec",
                    "raw",
                    "raw_sha256",
                    "exit_code",
                    "started_at",
                    "finished_at",
                )
            },
        )
        for chunk in _chunks(rows, 2000):
            conn.execute(stmt, chunk)
        return _probe_ids(conn, run_id, [p.probe_key for p in probes])

    def _replace_measurements(
        self, conn: Connection, probes: Sequence[ProbeIn], probe_ids: Mapping[str, int]
    ) -> None:
        ids = [probe_ids[p.probe_key] for p in probes]
        for chunk in _chunks(ids, 5000):
            conn.execute(delete(Measurement).where(Measurement.probe_id.in_(chunk)))
        rows = (
            (probe_ids[p.probe_key], seq, m.node, m.gpu, m.metric, m.value, m.unit, m.attrs)
            for p in probes
            for seq, m in enumerate(p.measurements)
        )
        if _can_copy(conn):
            copy_rows(conn, "measurements", MEASUREMENT_COLUMNS, rows)
            return
        dict_rows = [dict(zip(MEASUREMENT_COLUMNS, r, strict=True)) for r in rows]
        for chunk_rows in _chunks(dict_rows, 5000):
            conn.execute(insert(Measurement), chunk_rows)

    def _upsert_verdicts(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        if _can_copy(conn) and len(rows) > 500:
            # COPY into a staging table, then one set-based upsert: conflict handling at COPY speed.
            conn.exec_driver_sql(
                "CREATE TEMP TABLE IF NOT EXISTS verdicts_stage "
                "(LIKE verdicts INCLUDING DEFAULTS) ON COMMIT DROP"
            )
            copy_rows(
                conn, "verdicts_stage", VERDICT_COLUMNS, ([r[c] for c in VERDICT_COLUMNS] for r in rows)
            )
            cols = ", ".join(VERDICT_COLUMNS)
            sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in VERDICT_UPDATABLE)
            conn.exec_driver_sql(
                f"INSERT INTO verdicts ({cols}) SELECT DISTINCT ON (run_id, criterion, subject) {cols} "
                f"FROM verdicts_stage ORDER BY run_id, criterion, subject "
                f"ON CONFLICT (run_id, criterion, subject) DO UPDATE SET {sets}"
            )
            conn.exec_driver_sql("DROP TABLE verdicts_stage")
            return
        stmt = _dialect_insert(conn, VerdictRow.__table__)  # type: ignore[arg-type]
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id", "criterion", "subject"],
            set_={c: stmt.excluded[c] for c in VERDICT_UPDATABLE},
        )
        for chunk in _chunks(list(_last_per_key(rows)), 2000):
            conn.execute(stmt, chunk)

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
        with self.engine.begin() as conn:
            stmt = _dialect_insert(conn, NodeEvent.__table__).values(  # type: ignore[arg-type]
                event_key=event_key,
                node=node,
                kind=kind,
                reason=reason,
                dry_run=dry_run,
                run_id=run_id,
                details=dict(details or {}),
                at=at or utcnow(),
            )
            result = conn.execute(stmt.on_conflict_do_nothing(index_elements=["event_key"]))
            return bool(result.rowcount)

    def node_events(
        self, node: str | None = None, *, run_id: int | None = None, kind: str | None = None
    ) -> list[dict[str, Any]]:
        query = select(*NodeEvent.__table__.c).order_by(NodeEvent.id)
        if node is not None:
            query = query.where(NodeEvent.node == node)
        if run_id is not None:
            query = query.where(NodeEvent.run_id == run_id)
        if kind is not None:
            query = query.where(NodeEvent.kind == kind)
        with self.engine.connect() as conn:
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
            return str(conn.execute(select(Probe.raw).where(Probe.id == probe_id)).scalar_one())

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


def _probe_ids(conn: Connection, run_id: int, keys: Sequence[str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    for chunk_keys in _chunks(keys, 5000):
        found = conn.execute(
            select(Probe.probe_key, Probe.id).where(Probe.run_id == run_id, Probe.probe_key.in_(chunk_keys))
        )
        ids.update({key: int(pid) for key, pid in found})
    return ids


def _single(nodes: Sequence[str]) -> str | None:
    return nodes[0] if len(nodes) == 1 else None


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _last_per_key(rows: Sequence[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    # One statement may not touch a conflict key twice; the last judgement wins.
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        by_key[(r["run_id"], r["criterion"], r["subject"])] = r
    return by_key.values()
