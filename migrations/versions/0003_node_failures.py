"""Node failures: a preemption records the node whose failure caused it (reason NodeFailure).

One nullable column: every preemption recorded before has no node, which is what NULL says.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("preemptions") as batch:
        batch.add_column(sa.Column("node", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("preemptions") as batch:
        batch.drop_column("node")
