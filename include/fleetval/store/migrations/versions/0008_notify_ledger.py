"""notify ledger: on-call incidents (one per kind and subject, reopened within the flap window)
and the notices planned for each channel (pending, sent, suppressed by the rate limit, shadow)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "notify_incidents",
        sa.Column("id", _id(), nullable=False),
        sa.Column("dedup_key", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("subject", sa.String(length=253), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("evidence", _json(), nullable=False),
        sa.Column("announced", _json(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_incidents")),
        sa.UniqueConstraint("dedup_key", name=op.f("uq_notify_incidents_dedup_key")),
    )
    op.create_index("ix_notify_incidents_kind_subject", "notify_incidents", ["kind", "subject"])
    op.create_index(op.f("ix_notify_incidents_resolved_at"), "notify_incidents", ["resolved_at"])
    op.create_table(
        "notify_notices",
        sa.Column("id", _id(), nullable=False),
        sa.Column("evaluated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("policy_id", sa.String(length=128), nullable=False),
        sa.Column("channel", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("dedup_key", sa.String(length=255), nullable=False),
        sa.Column("subjects", _json(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("payload", _json(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("shadow", sa.Boolean(), nullable=False),
        sa.Column("reported_by", _id(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_notices")),
    )
    op.create_index("ix_notify_notices_channel_evaluated_at", "notify_notices", ["channel", "evaluated_at"])
    op.create_index(op.f("ix_notify_notices_status"), "notify_notices", ["status"])


def downgrade() -> None:
    op.drop_table("notify_notices")
    op.drop_table("notify_incidents")
