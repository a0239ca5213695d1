"""verdict groups (PostgreSQL): the verdicts counted per (run, node or subject, criterion,
judged_at) and result, kept by statement-level triggers on verdicts, so the fleet page's first
load reads ~110k groups instead of the horizon's ~770k verdicts at 16k nodes. Counts, not maxima:
an insert adds, a delete subtracts, an update does both, each from the statement's transition
tables (one set-based upsert per statement, never per row, never a read of verdicts); a group
whose counts reach zero is deleted. SQLite (the demo's store) keeps computing them per load.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 04:50:00
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# Frozen here: fleetval.records.Result's severities (pass < warn < inconclusive < fail < error);
# a result the catalog does not know counts as an error, as fleetval.store.fleet_health reads it.
SEVERITY = {"pass": 0, "warn": 1, "inconclusive": 2, "fail": 3, "error": 4}
LEVELS = range(5)

_SEV = "CASE result " + " ".join(f"WHEN '{r}' THEN {s}" for r, s in SEVERITY.items()) + " ELSE 4 END"
# n<s>: verdicts of severity s; r<s>: those that can be a node's r2 (a node column, not an error)
_COUNTS = ", ".join(
    [f"coalesce(sum(sign) FILTER (WHERE sev = {s}), 0) AS n{s}" for s in LEVELS]
    + [
        f"coalesce(sum(sign) FILTER (WHERE sev = {s} AND node IS NOT NULL AND result <> 'error'), 0) AS r{s}"
        for s in LEVELS
    ]
)
_COLUMNS = ", ".join([f"n{s}" for s in LEVELS] + [f"r{s}" for s in LEVELS])
_ADD = ", ".join(f"{c} = g.{c} + excluded.{c}" for c in _COLUMNS.split(", "))
_KEY = "run_id, who, criterion, judged_at"


def _apply(rows_sql: str) -> str:
    """Add the signed counts of `rows_sql` (verdict columns and a sign) to their groups; a group
    whose counts do not move (a verdict updated in place) is not written."""
    nonzero = " OR ".join(f"{c} <> 0" for c in _COLUMNS.split(", "))
    return f"""
        INSERT INTO verdict_groups AS g ({_KEY}, {_COLUMNS})
        SELECT {_KEY}, {_COLUMNS}
        FROM (
            SELECT run_id, coalesce(node, subject) AS who, criterion, judged_at, {_COUNTS}
            FROM (SELECT *, {_SEV} AS sev FROM ({rows_sql}) AS changed) AS rated
            GROUP BY 1, 2, 3, 4
        ) AS delta
        WHERE {nonzero}
        ON CONFLICT ({_KEY}) DO UPDATE SET {_ADD}"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    counts = ", ".join(f"{c} integer NOT NULL DEFAULT 0" for c in _COLUMNS.split(", "))
    op.execute(
        f"""CREATE TABLE verdict_groups (
            run_id bigint NOT NULL,  -- no foreign key: a run's deletion reaches it through its verdicts
            who varchar(253) COLLATE "C" NOT NULL,
            criterion varchar(32) NOT NULL,
            judged_at timestamptz NOT NULL,
            {counts},
            PRIMARY KEY ({_KEY})
        )"""
    )
    for event, rows in (
        ("INSERT", "SELECT *, 1 AS sign FROM new_rows"),
        ("DELETE", "SELECT *, -1 AS sign FROM old_rows"),
        ("UPDATE", "SELECT *, -1 AS sign FROM old_rows UNION ALL SELECT *, 1 AS sign FROM new_rows"),
    ):
        cleanup = (
            ""
            if event == "INSERT"
            else f"""
            DELETE FROM verdict_groups g USING (
                SELECT DISTINCT run_id, coalesce(node, subject) AS who, criterion, judged_at FROM old_rows
            ) AS k
            WHERE (g.run_id, g.who, g.criterion, g.judged_at) = (k.run_id, k.who, k.criterion, k.judged_at)
              AND {" + ".join(f"g.n{s}" for s in LEVELS)} = 0;"""
        )
        op.execute(
            f"""CREATE FUNCTION verdict_groups_{event.lower()}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                {_apply(rows)};{cleanup}
                RETURN NULL;
            END $$"""
        )
        tables = {
            "INSERT": "NEW TABLE AS new_rows",
            "DELETE": "OLD TABLE AS old_rows",
            "UPDATE": "OLD TABLE AS old_rows NEW TABLE AS new_rows",
        }[event]
        op.execute(
            f"""CREATE TRIGGER verdict_groups_{event.lower()} AFTER {event} ON verdicts
            REFERENCING {tables} FOR EACH STATEMENT EXECUTE FUNCTION verdict_groups_{event.lower()}()"""
        )
    op.execute(
        """CREATE FUNCTION verdict_groups_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN TRUNCATE verdict_groups; RETURN NULL; END $$"""
    )
    op.execute(
        "CREATE TRIGGER verdict_groups_truncate AFTER TRUNCATE ON verdicts "
        "FOR EACH STATEMENT EXECUTE FUNCTION verdict_groups_truncate()"
    )
    op.execute(_apply("SELECT *, 1 AS sign FROM verdicts"))  # the verdicts already stored
    op.execute("ANALYZE verdict_groups")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for event in ("insert", "delete", "update", "truncate"):
        op.execute(f"DROP TRIGGER IF EXISTS verdict_groups_{event} ON verdicts")
        op.execute(f"DROP FUNCTION IF EXISTS verdict_groups_{event}()")
    op.execute("DROP TABLE IF EXISTS verdict_groups")
