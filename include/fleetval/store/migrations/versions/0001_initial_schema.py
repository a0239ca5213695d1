"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 20:39:43.479488
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "baselines",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("profile", sa.String(length=128), nullable=False),
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("scope", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("unit", sa.String(length=16), nullable=False),
        sa.Column(
            "stats",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "source",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_baselines")),
        sa.UniqueConstraint("profile", "metric", "scope", "version", name=op.f("uq_baselines_profile")),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_key", sa.String(length=250), nullable=False),
        sa.Column("suite", sa.String(length=64), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("fleet", sa.String(length=128), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "meta",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("run_key", name=op.f("uq_runs_run_key")),
    )
    op.create_table(
        "sim_fleets",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column(
            "spec",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("loaded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_sim_fleets")),
    )
    op.create_table(
        "node_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("event_key", sa.String(length=250), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column(
            "details",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_node_events_run_id_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_events")),
        sa.UniqueConstraint("event_key", name=op.f("uq_node_events_event_key")),
    )
    op.create_index(op.f("ix_node_events_node"), "node_events", ["node"], unique=False)
    op.create_table(
        "probes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("probe_key", sa.String(length=250), nullable=False),
        sa.Column("tool", sa.String(length=32), nullable=False),
        sa.Column("tool_version", sa.String(length=64), nullable=True),
        sa.Column(
            "nodes",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "spec",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("raw", sa.Text(), nullable=False),
        sa.Column("raw_sha256", sa.String(length=64), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_probes_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_probes")),
        sa.UniqueConstraint("run_id", "probe_key", name=op.f("uq_probes_run_id")),
    )
    op.create_index(op.f("ix_probes_run_id"), "probes", ["run_id"], unique=False)
    op.create_table(
        "sim_nodes",
        sa.Column("fleet", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("rack", sa.String(length=128), nullable=False),
        sa.Column("profile", sa.String(length=128), nullable=False),
        sa.Column(
            "labels",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "taints",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("unschedulable", sa.Boolean(), nullable=False),
        sa.Column("gpu_pods", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["fleet"], ["sim_fleets.name"], name=op.f("fk_sim_nodes_fleet_sim_fleets"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("fleet", "name", name=op.f("pk_sim_nodes")),
    )
    op.create_table(
        "measurements",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("probe_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("gpu", sa.String(length=64), nullable=True),
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("unit", sa.String(length=16), nullable=True),
        sa.Column(
            "attrs",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["probe_id"], ["probes.id"], name=op.f("fk_measurements_probe_id_probes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_measurements")),
        sa.UniqueConstraint("probe_id", "seq", name=op.f("uq_measurements_probe_id")),
    )
    op.create_index("ix_measurements_metric_node", "measurements", ["metric", "node"], unique=False)
    op.create_table(
        "verdicts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("probe_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("criterion", sa.String(length=32), nullable=False),
        sa.Column("subject", sa.String(length=253), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=True),
        sa.Column("result", sa.String(length=16), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("rule_id", sa.String(length=96), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "evidence",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "judged_against",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("policy_version", sa.String(length=64), nullable=True),
        sa.Column("baseline_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("judged_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["baseline_id"], ["baselines.id"], name=op.f("fk_verdicts_baseline_id_baselines")
        ),
        sa.ForeignKeyConstraint(
            ["probe_id"], ["probes.id"], name=op.f("fk_verdicts_probe_id_probes"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_verdicts_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_verdicts")),
        sa.UniqueConstraint("run_id", "criterion", "subject", name=op.f("uq_verdicts_run_id")),
    )
    op.create_index(op.f("ix_verdicts_criterion"), "verdicts", ["criterion"], unique=False)
    op.create_index(op.f("ix_verdicts_node"), "verdicts", ["node"], unique=False)
    op.create_index(op.f("ix_verdicts_probe_id"), "verdicts", ["probe_id"], unique=False)
    op.create_index(op.f("ix_verdicts_subject"), "verdicts", ["subject"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_verdicts_subject"), table_name="verdicts")
    op.drop_index(op.f("ix_verdicts_probe_id"), table_name="verdicts")
    op.drop_index(op.f("ix_verdicts_node"), table_name="verdicts")
    op.drop_index(op.f("ix_verdicts_criterion"), table_name="verdicts")
    op.drop_table("verdicts")
    op.drop_index("ix_measurements_metric_node", table_name="measurements")
    op.drop_table("measurements")
    op.drop_table("sim_nodes")
    op.drop_index(op.f("ix_probes_run_id"), table_name="probes")
    op.drop_table("probes")
    op.drop_index(op.f("ix_node_events_node"), table_name="node_events")
    op.drop_table("node_events")
    op.drop_table("sim_fleets")
    op.drop_table("runs")
    op.drop_table("baselines")
