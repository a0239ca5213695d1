"""drop sim_nodes: the in-database simulator is gone; the simulated cluster keeps its nodes as
Kubernetes objects in sim_objects

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 16:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.drop_table("sim_nodes")


def downgrade() -> None:
    op.create_table(
        "sim_nodes",
        sa.Column("fleet", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("rack", sa.String(length=128), nullable=False),
        sa.Column("profile", sa.String(length=128), nullable=False),
        sa.Column("labels", _json(), nullable=False),
        sa.Column("taints", _json(), nullable=False),
        sa.Column("unschedulable", sa.Boolean(), nullable=False),
        sa.Column("gpu_pods", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["fleet"], ["sim_fleets.name"], name=op.f("fk_sim_nodes_fleet_sim_fleets"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("fleet", "name", name=op.f("pk_sim_nodes")),
    )
