"""xid inbox

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 21:01:56.550388
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "xid_inbox",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("source_key", sa.String(length=250), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dispatch_id", sa.String(length=64), nullable=True),
        sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claimed_run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.ForeignKeyConstraint(
            ["claimed_run_id"],
            ["runs.id"],
            name=op.f("fk_xid_inbox_claimed_run_id_runs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_xid_inbox")),
        sa.UniqueConstraint("source_key", name=op.f("uq_xid_inbox_source_key")),
    )
    op.create_index(op.f("ix_xid_inbox_claimed_run_id"), "xid_inbox", ["claimed_run_id"], unique=False)
    op.create_index(op.f("ix_xid_inbox_dispatch_id"), "xid_inbox", ["dispatch_id"], unique=False)
    op.create_index(op.f("ix_xid_inbox_node"), "xid_inbox", ["node"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_xid_inbox_node"), table_name="xid_inbox")
    op.drop_index(op.f("ix_xid_inbox_dispatch_id"), table_name="xid_inbox")
    op.drop_index(op.f("ix_xid_inbox_claimed_run_id"), table_name="xid_inbox")
    op.drop_table("xid_inbox")
