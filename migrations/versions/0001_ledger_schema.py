"""Ledger schema: workloads, admissions, usage intervals, preemptions, workload events, config versions,
audit log, usage rollups.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the column types in accounting/models.py: a migration must not change when the models do.
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite auto-increments INTEGER keys only
TIMESTAMP = sa.DateTime(timezone=True)
EXACT_DECIMAL = sa.Numeric(38, 6).with_variant(sa.String(64), "sqlite")  # exact: text on SQLite


def _id() -> sa.Column[int]:
    return sa.Column("id", BIG_ID, autoincrement=True, nullable=False)


def upgrade() -> None:
    op.create_table(
        "workloads",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("namespace", sa.String(), nullable=False),
        sa.Column("team", sa.String(), nullable=False),
        sa.Column("queue", sa.String(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("priority_class", sa.String(), nullable=True),
        sa.Column("pod_sets", sa.JSON(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.Column("succeeded", sa.Boolean(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
    )
    op.create_index(op.f("ix_workloads_team"), "workloads", ["team"])

    op.create_table(
        "admissions",
        sa.Column("workload_id", sa.String(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("team", sa.String(), nullable=False),
        sa.Column("admitted_at", TIMESTAMP, nullable=False),
        sa.Column("pod_sets", sa.JSON(), nullable=False),
        sa.Column("usage", sa.JSON(), nullable=False),
        sa.Column("borrowed", sa.JSON(), nullable=False),
        sa.Column("ended_at", TIMESTAMP, nullable=True),
        sa.Column("end_reason", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("workload_id", "attempt", name=op.f("pk_admissions")),
    )
    op.create_index(op.f("ix_admissions_ended_at"), "admissions", ["ended_at"])

    op.create_table(
        "usage_intervals",
        sa.Column("workload_id", sa.String(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("flavor", sa.String(), nullable=False),
        sa.Column("resource", sa.String(), nullable=False),
        sa.Column("team", sa.String(), nullable=False),
        sa.Column("quantity_milli", sa.BigInteger(), nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=False),
        sa.Column("ended_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["workload_id", "attempt"],
            ["admissions.workload_id", "admissions.attempt"],
            name=op.f("fk_usage_intervals_workload_id_attempt_admissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "workload_id", "attempt", "flavor", "resource", name=op.f("pk_usage_intervals")
        ),
    )
    op.create_index(op.f("ix_usage_intervals_ended_at"), "usage_intervals", ["ended_at"])

    op.create_table(
        "preemptions",
        sa.Column("victim", sa.String(), nullable=False),
        sa.Column("victim_attempt", sa.Integer(), nullable=False),
        sa.Column("preemptor", sa.String(), nullable=True),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("issued_at", TIMESTAMP, nullable=False),
        sa.Column("checkpoint_via", sa.String(), nullable=True),
        sa.Column("checkpoint_deadline", TIMESTAMP, nullable=True),
        sa.Column("checkpoint_requested_at", TIMESTAMP, nullable=True),
        sa.Column("checkpoint_acked_at", TIMESTAMP, nullable=True),
        sa.Column("checkpoint_timed_out_at", TIMESTAMP, nullable=True),
        sa.Column("checkpoint_id", sa.String(), nullable=True),
        sa.Column("suspended_at", TIMESTAMP, nullable=True),
        sa.Column("requeued_at", TIMESTAMP, nullable=True),
        sa.Column("lost_gpu_milliseconds", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("victim", "victim_attempt", name=op.f("pk_preemptions")),
    )
    op.create_index(op.f("ix_preemptions_issued_at"), "preemptions", ["issued_at"])

    op.create_table(
        "workload_events",
        sa.Column("workload_id", sa.String(), nullable=False),
        sa.Column("event_key", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("at", TIMESTAMP, nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("workload_id", "event_key", name=op.f("pk_workload_events")),
    )

    op.create_table(
        "config_versions",
        _id(),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("applied_at", TIMESTAMP, nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_config_versions")),
        sa.UniqueConstraint("sha256", "applied_at", name=op.f("uq_config_versions_sha256_applied_at")),
    )

    op.create_table(
        "audit_log",
        _id(),
        sa.Column("entry_key", sa.String(), nullable=False),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("action", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=True),
        sa.Column("at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
        sa.UniqueConstraint("entry_key", name=op.f("uq_audit_log_entry_key")),
    )
    op.create_index(op.f("ix_audit_log_actor"), "audit_log", ["actor"])
    op.create_index(op.f("ix_audit_log_at"), "audit_log", ["at"])

    op.create_table(
        "usage_rollups",
        sa.Column("period", sa.String(length=8), nullable=False),
        sa.Column("period_start", TIMESTAMP, nullable=False),
        sa.Column("team", sa.String(), nullable=False),
        sa.Column("flavor", sa.String(), nullable=False),
        sa.Column("resource", sa.String(), nullable=False),
        sa.Column("milli_seconds", EXACT_DECIMAL, nullable=False),
        sa.PrimaryKeyConstraint(
            "period", "period_start", "team", "flavor", "resource", name=op.f("pk_usage_rollups")
        ),
    )


def downgrade() -> None:
    op.drop_table("usage_rollups")
    op.drop_index(op.f("ix_audit_log_at"), table_name="audit_log")
    op.drop_index(op.f("ix_audit_log_actor"), table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_table("config_versions")
    op.drop_table("workload_events")
    op.drop_index(op.f("ix_preemptions_issued_at"), table_name="preemptions")
    op.drop_table("preemptions")
    op.drop_index(op.f("ix_usage_intervals_ended_at"), table_name="usage_intervals")
    op.drop_table("usage_intervals")
    op.drop_index(op.f("ix_admissions_ended_at"), table_name="admissions")
    op.drop_table("admissions")
    op.drop_index(op.f("ix_workloads_team"), table_name="workloads")
    op.drop_table("workloads")
