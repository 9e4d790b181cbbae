"""The ledger's tables. One schema for PostgreSQL and SQLite; migrations/ creates it, tests check they agree.

Every table that events write is keyed by the natural key of what it records (an admission is (workload,
attempt); an event, its idempotency key): the writer inserts with ``ON CONFLICT DO NOTHING`` and updates
idempotently, so replaying events never counts anything twice. Surrogate ids are kept only where nothing
natural identifies a row (config versions, audit entries). Every index costs each of the ledger's writes, so
there are only those the reads need. Quantities are integer milli-units; times are UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    Numeric,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Aware datetimes in, aware UTC datetimes out, on both databases.

    SQLite has no time zones: it stores the UTC wall time as fixed-width text, which also sorts correctly.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: the ledger stores aware UTC times only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class ExactDecimal(TypeDecorator[Decimal]):
    """Exact decimals: NUMERIC(38, 6) on PostgreSQL, decimal text on SQLite (whose NUMERIC rounds to a double)."""

    impl = Numeric(38, 6)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(64))
        return dialect.type_descriptor(Numeric(38, 6, asdecimal=True))

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> Decimal | str | None:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return format(value, "f")
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        return None if value is None else Decimal(value)


# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid alias), never a BIGINT one.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        Decimal: ExactDecimal(),
        dict[str, Any]: JSON(),
    }


class Workload(Base):
    __tablename__ = "workloads"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    """`KIND/NAMESPACE/NAME`."""
    kind: Mapped[str] = mapped_column(String, server_default="Job")
    name: Mapped[str] = mapped_column(String)
    namespace: Mapped[str] = mapped_column(String)
    team: Mapped[str] = mapped_column(String, index=True)
    queue: Mapped[str] = mapped_column(String)
    priority: Mapped[int] = mapped_column(Integer)
    priority_class: Mapped[str | None] = mapped_column(String)
    pod_sets: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    created_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    succeeded: Mapped[bool | None] = mapped_column(Boolean)


class Admission(Base):
    __tablename__ = "admissions"
    __table_args__ = (Index(None, "ended_at"),)

    workload_id: Mapped[str] = mapped_column(String, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    team: Mapped[str] = mapped_column(String)
    admitted_at: Mapped[datetime]
    pod_sets: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    # [{flavor, resource, milli}, ...]: JSON objects cannot have tuple keys.
    usage: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    borrowed: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    ended_at: Mapped[datetime | None]
    end_reason: Mapped[str | None] = mapped_column(String)


class UsageInterval(Base):
    """``quantity_milli`` of (flavor, resource) held by ``team`` from ``started_at`` until ``ended_at`` (open
    while NULL): one row per (admission, flavor, resource)."""

    __tablename__ = "usage_intervals"
    __table_args__ = (
        ForeignKeyConstraint(
            ["workload_id", "attempt"],
            ["admissions.workload_id", "admissions.attempt"],
            ondelete="CASCADE",
        ),
        # Reports and credits ask for what overlaps a period: still open, or ended after its start.
        Index(None, "ended_at"),
    )

    workload_id: Mapped[str] = mapped_column(String, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    flavor: Mapped[str] = mapped_column(String, primary_key=True)
    resource: Mapped[str] = mapped_column(String, primary_key=True)
    team: Mapped[str] = mapped_column(String)
    quantity_milli: Mapped[int] = mapped_column(BigInteger)
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]


class Preemption(Base):
    """One preemption and its checkpoint handshake; an admission (victim, victim_attempt) is preempted once."""

    __tablename__ = "preemptions"
    __table_args__ = (Index(None, "issued_at"),)

    victim: Mapped[str] = mapped_column(String, primary_key=True)
    victim_attempt: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    preemptor: Mapped[str | None] = mapped_column(String)
    reason: Mapped[str] = mapped_column(String)
    issued_at: Mapped[datetime]
    checkpoint_via: Mapped[str | None] = mapped_column(String)
    checkpoint_deadline: Mapped[datetime | None]
    checkpoint_requested_at: Mapped[datetime | None]
    checkpoint_acked_at: Mapped[datetime | None]
    checkpoint_timed_out_at: Mapped[datetime | None]
    checkpoint_id: Mapped[str | None] = mapped_column(String)
    suspended_at: Mapped[datetime | None]
    requeued_at: Mapped[datetime | None]
    # Thousandths of a GPU-second lost since the last checkpoint.
    lost_gpu_milliseconds: Mapped[int | None] = mapped_column(BigInteger)
    node: Mapped[str | None] = mapped_column(String)
    """The node whose failure caused it (reason NodeFailure); NULL for every other reason."""


class WorkloadEventRow(Base):
    """Every workload event as recorded, for the workload's history, keyed by its idempotency key."""

    __tablename__ = "workload_events"
    # The workload first: its history is one range of the primary key, with no second index to maintain. The
    # event key names the workload already, so it is unique on its own all the same.
    workload_id: Mapped[str] = mapped_column(String, primary_key=True)
    event_key: Mapped[str] = mapped_column(String, primary_key=True)
    kind: Mapped[str] = mapped_column(String)
    at: Mapped[datetime]
    payload: Mapped[dict[str, Any]]


class ConfigVersion(Base):
    __tablename__ = "config_versions"
    __table_args__ = (UniqueConstraint("sha256", "applied_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    sha256: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    applied_at: Mapped[datetime]
    source: Mapped[str] = mapped_column(String)


class AuditLogEntry(Base):
    __tablename__ = "audit_log"
    __table_args__ = (Index(None, "at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    entry_key: Mapped[str] = mapped_column(String, unique=True)
    actor: Mapped[str] = mapped_column(String, index=True)
    action: Mapped[str] = mapped_column(String)
    target: Mapped[str] = mapped_column(String)
    before: Mapped[Any] = mapped_column(JSON, nullable=True)
    after: Mapped[Any] = mapped_column(JSON, nullable=True)
    at: Mapped[datetime]


class UsageRollup(Base):
    """Usage per hour or day, team, flavor and resource in resource-milli-seconds (quantity in milli-units ×
    seconds, exact to the microsecond): the Slurm accounting model, for long-range reports."""

    __tablename__ = "usage_rollups"

    period: Mapped[str] = mapped_column(String(8), primary_key=True)  # "hour" | "day"
    period_start: Mapped[datetime] = mapped_column(primary_key=True)
    team: Mapped[str] = mapped_column(String, primary_key=True)
    flavor: Mapped[str] = mapped_column(String, primary_key=True)
    resource: Mapped[str] = mapped_column(String, primary_key=True)
    milli_seconds: Mapped[Decimal]
