"""fleet page indexes: verdicts by judged_at (what changed since the fleet page last looked) and by
(criterion, run_id) (the newest run that judged a criterion; a criterion's verdicts in a run range)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 23:40:00
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_verdicts_judged_at", "verdicts", ["judged_at"], unique=False)
    op.create_index("ix_verdicts_criterion_run_id", "verdicts", ["criterion", "run_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_verdicts_criterion_run_id", table_name="verdicts")
    op.drop_index("ix_verdicts_judged_at", table_name="verdicts")
