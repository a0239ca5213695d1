"""The fleetval schema: runs, probes (raw output kept verbatim), measurements, verdicts,
baselines, node events, and the simulator's cluster state.

Every table a task writes has a natural unique key so that a retried task or a re-run DAG
upserts instead of duplicating.

Evidence is stored losslessly. PostgreSQL's TEXT refuses NUL, its JSONB refuses `\u0000`, lone
surrogates and NaN, and psycopg refuses to send lone surrogates (what `surrogateescape` decoding
makes of bytes that are not UTF-8): one such character in one node's output must not fail a
wave. So a probe's raw output is its exact bytes (`raw`, bytea), and text and JSON that hold
evidence (`LosslessText`, `LosslessJson`) keep such strings and numbers in an escaped form that
reads back as the value written.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any, Final

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeEngine

# --- the escaped form ----------------------------------------------------------------------------
# U+FFFE is a Unicode noncharacter: no tool prints it, so a string that starts with it is ours.
# After it, "s" + the string's `unicode_escape` form (ASCII, round-trips any str), or "f" + the
# repr of a float JSON cannot hold (nan, inf, -inf). Real strings that start with the mark are
# escaped too, so reading back is never ambiguous.
ESCAPE_MARK: Final = "\ufffe"
ESCAPED_TEXT: Final = ESCAPE_MARK + "s"
ESCAPED_FLOAT: Final = ESCAPE_MARK + "f"


def _storable_text(text: str) -> bool:
    if "\x00" in text or text.startswith(ESCAPE_MARK):
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def escape_text(text: str) -> str:
    """`text` as PostgreSQL can store it: unchanged unless it holds NUL or a lone surrogate."""
    if _storable_text(text):
        return text
    return ESCAPED_TEXT + text.encode("unicode_escape").decode("ascii")


def unescape_text(text: str) -> str:
    if text.startswith(ESCAPED_TEXT):
        return text[len(ESCAPED_TEXT) :].encode("ascii").decode("unicode_escape")
    return text


def escape_json(value: Any) -> Any:
    """A JSON document as JSONB can store it (strings as `escape_text`, non-finite floats marked)."""
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return ESCAPED_FLOAT + repr(value)
    if isinstance(value, dict):
        return {escape_text(k) if isinstance(k, str) else k: escape_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [escape_json(v) for v in value]
    return value


def unescape_json(value: Any) -> Any:
    if isinstance(value, str):
        if value.startswith(ESCAPED_FLOAT):
            return float(value[len(ESCAPED_FLOAT) :])
        return unescape_text(value)
    if isinstance(value, dict):
        return {unescape_text(k) if isinstance(k, str) else k: unescape_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unescape_json(v) for v in value]
    return value


class LosslessText(TypeDecorator[str]):
    """TEXT that reads back exactly the str written, NUL and lone surrogates included."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else escape_text(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else unescape_text(value)


class LosslessJson(TypeDecorator[Any]):
    """JSONB on PostgreSQL (indexable, compact), JSON text elsewhere; reads back exactly the
    document written, strings PostgreSQL refuses and NaN included."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return dialect.type_descriptor(JSONB() if dialect.name == "postgresql" else JSON())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        return escape_json(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        return unescape_json(value)


# --- raw output: the exact bytes -------------------------------------------------------------
# A str read with `surrogateescape` is its bytes again under the same handler. A str that was
# never bytes may hold other lone surrogates: those are kept with `surrogatepass`, and the row
# says which handler reads it back.
RAW_BYTES: Final = "utf-8/surrogateescape"
RAW_SURROGATES: Final = "utf-8/surrogatepass"


def encode_raw(text: str) -> tuple[bytes, str]:
    """(bytes, codec) to store `text` as; `decode_raw` returns `text` from them."""
    try:
        return text.encode("utf-8", "surrogateescape"), RAW_BYTES
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass"), RAW_SURROGATES


def decode_raw(data: bytes, codec: str) -> str:
    return data.decode("utf-8", "surrogatepass" if codec == RAW_SURROGATES else "surrogateescape")


JsonDoc = LosslessJson()
# Integer ids autoincrement on SQLite only when declared INTEGER; BIGINT on PostgreSQL.
BigId = BigInteger().with_variant(Integer(), "sqlite")

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Run(Base):
    """One execution of a suite: a DAG run, a `fleetval sim run`, a backfill re-judgement."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_key: Mapped[str] = mapped_column(String(250), unique=True)
    suite: Mapped[str] = mapped_column(String(64))
    backend: Mapped[str] = mapped_column(String(16))
    fleet: Mapped[str | None] = mapped_column(String(128))
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    meta: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)


class Probe(Base):
    """One probe execution; `raw` is the tool's output byte for byte, stored before parsing
    (`encode_raw`; `raw_sha256` is the hash of those bytes)."""

    __tablename__ = "probes"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    probe_key: Mapped[str] = mapped_column(String(250))
    tool: Mapped[str] = mapped_column(String(32))
    tool_version: Mapped[str | None] = mapped_column(String(64))
    nodes: Mapped[list[str]] = mapped_column(JsonDoc, default=list)
    spec: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)
    raw: Mapped[bytes] = mapped_column(LargeBinary)
    raw_codec: Mapped[str] = mapped_column(String(32), default=RAW_BYTES, server_default=RAW_BYTES)
    raw_sha256: Mapped[str] = mapped_column(String(64))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    __table_args__ = (UniqueConstraint("run_id", "probe_key"),)


class Measurement(Base):
    """A parsed number from a probe: one DCGM test result per GPU, one busbw row per size."""

    __tablename__ = "measurements"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    probe_id: Mapped[int] = mapped_column(ForeignKey("probes.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(253))
    gpu: Mapped[str | None] = mapped_column(String(64))
    metric: Mapped[str] = mapped_column(String(64))
    value: Mapped[float | None] = mapped_column(Float)
    unit: Mapped[str | None] = mapped_column(String(16))
    attrs: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)
    __table_args__ = (
        UniqueConstraint("probe_id", "seq"),
        Index("ix_measurements_metric_node", "metric", "node"),
    )


class VerdictRow(Base):
    """A judgement: criterion × subject within a run; keeps what it was judged against."""

    __tablename__ = "verdicts"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    probe_id: Mapped[int | None] = mapped_column(ForeignKey("probes.id", ondelete="SET NULL"), index=True)
    criterion: Mapped[str] = mapped_column(String(32), index=True)
    subject: Mapped[str] = mapped_column(String(253), index=True)
    node: Mapped[str | None] = mapped_column(String(253), index=True)
    result: Mapped[str] = mapped_column(String(16))
    action: Mapped[str] = mapped_column(String(64))
    rule_id: Mapped[str] = mapped_column(String(96))
    reason: Mapped[str] = mapped_column(LosslessText, default="")
    evidence: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)
    judged_against: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)
    policy_version: Mapped[str | None] = mapped_column(String(64))
    baseline_id: Mapped[int | None] = mapped_column(ForeignKey("baselines.id"))
    judged_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    __table_args__ = (UniqueConstraint("run_id", "criterion", "subject"),)


class Baseline(Base):
    """A measured reference per hardware profile and metric scope; versioned, never mutated
    after promotion (only its status moves: candidate → promoted → retired)."""

    __tablename__ = "baselines"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    profile: Mapped[str] = mapped_column(String(128))
    metric: Mapped[str] = mapped_column(String(64))
    scope: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default="candidate")
    value: Mapped[float] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(16))
    stats: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)
    source: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    promoted_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    retired_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    __table_args__ = (UniqueConstraint("profile", "metric", "scope", "version"),)


class NodeEvent(Base):
    """Something fleetval did (or, in dry-run, would have done) to a node."""

    __tablename__ = "node_events"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    event_key: Mapped[str] = mapped_column(String(250), unique=True)
    node: Mapped[str] = mapped_column(String(253), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(LosslessText, default="")
    dry_run: Mapped[bool] = mapped_column(Boolean, default=False)
    at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    details: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)


class SimFleet(Base):
    """The simulated cluster's spec; one row per loaded fleet."""

    __tablename__ = "sim_fleets"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    seed: Mapped[int] = mapped_column(Integer)
    spec: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    loaded_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class SimObject(Base):
    """One object of the simulated cluster's Kubernetes API (a node, pod, custom resource…), so
    the simulated API server keeps its state across restarts. `sim` holds what only the
    simulator knows (a pod's container run: its output, exit code and timing)."""

    __tablename__ = "sim_objects"
    __table_args__ = (UniqueConstraint("fleet", "resource", "namespace", "name"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    fleet: Mapped[str] = mapped_column(String(128))
    resource: Mapped[str] = mapped_column(String(128))  # "v1/pods", "kubeflow.org/v2beta1/mpijobs"
    namespace: Mapped[str] = mapped_column(String(253), default="")
    name: Mapped[str] = mapped_column(String(253))
    # JSON text, not JSONB: an API object may hold any JSON string, "\u0000" included, which
    # PostgreSQL's JSONB refuses.
    body: Mapped[str] = mapped_column(Text)
    sim: Mapped[str] = mapped_column(Text, default="{}")


class XidInbox(Base):
    """Kernel Xid lines waiting for remediation, one row per line as the source delivered it.

    Sources: the simulator (`fleetval sim inject-xid`) and, on a cluster, node-problem-detector
    Events copied in by the trigger. The trigger marks rows `dispatch_id` (one DAG run each); the
    run marks them `claimed_run_id`. Rows are never deleted: they are the raw evidence.
    """

    __tablename__ = "xid_inbox"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    source_key: Mapped[str] = mapped_column(String(250), unique=True)
    node: Mapped[str] = mapped_column(String(253), index=True)
    line: Mapped[str] = mapped_column(LosslessText)
    source: Mapped[str] = mapped_column(String(32))
    received_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    dispatch_id: Mapped[str | None] = mapped_column(String(64), index=True)
    dispatched_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    claimed_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), index=True)


class NotifyIncident(Base):
    """One on-call incident (fleetval.notify): a kind and subject, open until it resolves; a
    subject that opens again within the flap window reopens this row (`count` + 1), same key."""

    __tablename__ = "notify_incidents"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    dedup_key: Mapped[str] = mapped_column(String(255), unique=True)
    kind: Mapped[str] = mapped_column(String(32))
    subject: Mapped[str] = mapped_column(String(253))
    opened_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    last_opened_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    last_seen: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    resolved_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    count: Mapped[int] = mapped_column(Integer, default=1)
    evidence: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)
    # channel → the key its receivers know the incident by: its own, or a storm summary's
    announced: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)
    __table_args__ = (Index("ix_notify_incidents_kind_subject", "kind", "subject"),)


class NotifyNotice(Base):
    """A notice one evaluation planned for one channel, with its payload as the receiver gets it:
    `pending` until delivered (`sent`, or `failed` after its attempts), `suppressed` by the rate
    limit (`reported_by`: the notice that reported it), `shadow` in shadow mode (never sent)."""

    __tablename__ = "notify_notices"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    evaluated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    policy_id: Mapped[str] = mapped_column(String(128))
    channel: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(32))
    action: Mapped[str] = mapped_column(String(16))  # trigger or resolve
    dedup_key: Mapped[str] = mapped_column(String(255))
    subjects: Mapped[list[str]] = mapped_column(JsonDoc, default=list)
    count: Mapped[int] = mapped_column(Integer, default=1)
    payload: Mapped[dict[str, Any]] = mapped_column(JsonDoc, default=dict)
    status: Mapped[str] = mapped_column(String(16), index=True)
    shadow: Mapped[bool] = mapped_column(Boolean, default=False)
    reported_by: Mapped[int | None] = mapped_column(BigId)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(LosslessText)
    sent_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    __table_args__ = (Index("ix_notify_notices_channel_evaluated_at", "channel", "evaluated_at"),)
