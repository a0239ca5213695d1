"""lossless evidence: probes.raw holds the output's exact bytes (bytea) with the codec that reads
them back; strings in evidence text and JSON that start with U+FFFE are escaped, since that mark
now introduces the escaped form of what PostgreSQL cannot hold (fleetval.store.models)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 10:00:00
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Frozen here, as fleetval.store.models defines them at this revision.
MARK = "\ufffe"
RAW_BYTES = "utf-8/surrogateescape"
TEXT_COLUMNS = (("verdicts", "reason"), ("node_events", "reason"), ("xid_inbox", "line"))
JSON_COLUMNS = (
    ("runs", "meta"),
    ("probes", "nodes"),
    ("probes", "spec"),
    ("measurements", "attrs"),
    ("verdicts", "evidence"),
    ("verdicts", "judged_against"),
    ("baselines", "stats"),
    ("baselines", "source"),
    ("node_events", "details"),
)


def _escaped(text: str) -> str:
    return MARK + "s" + text.encode("unicode_escape").decode("ascii") if text.startswith(MARK) else text


def _escaped_json(value: Any) -> Any:
    if isinstance(value, str):
        return _escaped(value)
    if isinstance(value, dict):
        return {_escaped(k): _escaped_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped_json(v) for v in value]
    return value


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    bind = op.get_bind()
    op.add_column(
        "probes",
        sa.Column("raw_codec", sa.String(length=32), nullable=False, server_default=RAW_BYTES),
    )
    if bind.dialect.name == "postgresql":
        # TEXT in the database is valid UTF-8: its bytes are exactly what the tool printed.
        op.alter_column(
            "probes",
            "raw",
            type_=sa.LargeBinary(),
            existing_type=sa.Text(),
            existing_nullable=False,
            postgresql_using="convert_to(raw, 'UTF8')",
        )
    else:
        # SQLite keeps a BLOB in a TEXT-declared column as it is; rebuilding the table (batch
        # mode) would cascade-delete the measurements that reference it.
        op.execute("UPDATE probes SET raw = CAST(raw AS BLOB) WHERE typeof(raw) = 'text'")
    # Rows written before the mark meant anything: a value starting with it is escaped now. Few
    # rows, if any, match the filter; only those are read back into Python.
    for table, column in TEXT_COLUMNS:
        t = sa.table(table, sa.column("id"), sa.column(column, sa.Text()))
        rows = bind.execute(sa.select(t.c.id, t.c[column]).where(t.c[column].startswith(MARK))).all()
        for row_id, text in rows:
            bind.execute(t.update().where(t.c.id == row_id).values({column: _escaped(text)}))
    for table, column in JSON_COLUMNS:
        t = sa.table(table, sa.column("id"), sa.column(column, _json()))
        as_text = sa.cast(t.c[column], sa.Text())
        # PostgreSQL prints the mark itself; SQLite's JSON text holds its \u escape.
        marked = sa.or_(as_text.contains(MARK), as_text.contains("\\ufffe", autoescape=True))
        for row_id, doc in bind.execute(sa.select(t.c.id, t.c[column]).where(marked)).all():
            doc = json.loads(doc) if isinstance(doc, str) else doc
            bind.execute(t.update().where(t.c.id == row_id).values({column: _escaped_json(doc)}))


def downgrade() -> None:
    # Raw output that is not valid UTF-8 has no TEXT form: the downgrade fails rather than lose it.
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.alter_column(
            "probes",
            "raw",
            type_=sa.Text(),
            existing_type=sa.LargeBinary(),
            existing_nullable=False,
            postgresql_using="convert_from(raw, 'UTF8')",
        )
    else:
        op.execute("UPDATE probes SET raw = CAST(raw AS TEXT) WHERE typeof(raw) = 'blob'")
    op.drop_column("probes", "raw_codec")
