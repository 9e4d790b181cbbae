"""Kind-qualified workload identity: `NAMESPACE/NAME` becomes `Job/NAMESPACE/NAME`, and workloads get a kind.

Every workload this ledger knew before was a batch/v1 Job, so each identity without a kind becomes a Job's. Rows
are keyed by identity, so each table's keys are rewritten in place; admissions are copied under the new identity
before their usage intervals move and the old rows go, so that the foreign key from usage intervals holds at every
statement on both databases. The audit log is left as it was written: it records what was said at the time.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# An identity without a kind has exactly one slash; LIKE has no "exactly", so: one, and not two.
_BARE = "{col} LIKE '%/%' AND {col} NOT LIKE '%/%/%'"
_JOB = "{col} LIKE 'Job/%/%' AND {col} NOT LIKE 'Job/%/%/%'"

_ADMISSION_COLUMNS = "attempt, team, admitted_at, pod_sets, usage, borrowed, ended_at, end_reason"


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("kind", sa.String(), nullable=False, server_default="Job"))
    _rewrite(add=True)


def downgrade() -> None:
    _rewrite(add=False)
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("kind")


def _rewrite(*, add: bool) -> None:
    """Give every bare identity the Job kind (`add`), or take it off every Job's identity (not `add`)."""
    which = _BARE if add else _JOB

    def new(col: str) -> str:
        return f"'Job/' || {col}" if add else f"substr({col}, 5)"

    execute = op.execute
    execute(f"UPDATE workloads SET id = {new('id')} WHERE {which.format(col='id')}")
    old_admissions = which.format(col="workload_id")
    execute(
        f"INSERT INTO admissions (workload_id, {_ADMISSION_COLUMNS}) "
        f"SELECT {new('workload_id')}, {_ADMISSION_COLUMNS} FROM admissions WHERE {old_admissions}"
    )
    execute(f"UPDATE usage_intervals SET workload_id = {new('workload_id')} WHERE {old_admissions}")
    execute(f"DELETE FROM admissions WHERE {old_admissions}")
    execute(f"UPDATE preemptions SET victim = {new('victim')} WHERE {which.format(col='victim')}")
    execute(f"UPDATE preemptions SET preemptor = {new('preemptor')} WHERE {which.format(col='preemptor')}")
    # Event keys name their workload after the first bar (`Kind|workload` or `Kind|workload|attempt`): with a bar
    # appended, the workload is always between two, and that part is rewritten; then the bar comes off again.
    replaced = f"replace(event_key || '|', '|' || workload_id || '|', '|' || {new('workload_id')} || '|')"
    execute(
        f"UPDATE workload_events SET event_key = substr({replaced}, 1, length({replaced}) - 1), "
        f"workload_id = {new('workload_id')} WHERE {old_admissions}"
    )
