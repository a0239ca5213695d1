"""sim objects: the simulated cluster's Kubernetes API objects

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 12:55:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sim_objects",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("fleet", sa.String(length=128), nullable=False),
        sa.Column("resource", sa.String(length=128), nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("sim", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sim_objects")),
        sa.UniqueConstraint("fleet", "resource", "namespace", "name", name=op.f("uq_sim_objects_fleet")),
    )


def downgrade() -> None:
    op.drop_table("sim_objects")
