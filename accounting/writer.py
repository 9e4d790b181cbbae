"""Apply a batch of events in one transaction, idempotently, on PostgreSQL or SQLite."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import Executable, Integer, String, bindparam, case, func, update
from sqlalchemy.ext.asyncio import AsyncConnection

from accounting.database import dialect_insert
from accounting.events import LedgerEvent
from accounting.models import (
    Admission,
    AuditLogEntry,
    ConfigVersion,
    Preemption,
    UsageInterval,
    UTCDateTime,
    Workload,
    WorkloadEventRow,
)
from accounting.rows import Row, WritePlan, plan_writes


async def write_events(connection: AsyncConnection, events: Sequence[LedgerEvent]) -> None:
    """Write ``events`` inside the connection's current transaction. Writing them again changes nothing."""
    await apply_plan(connection, plan_writes(events))


async def apply_plan(connection: AsyncConnection, plan: WritePlan) -> None:
    s = _statements(connection.dialect.name)
    steps: list[tuple[Executable, list[Row]]] = [
        # Inserts first: every update below may target a row inserted by the same batch.
        (s.insert_workloads, plan.workloads),
        (s.insert_workload_events, plan.workload_events),
        (s.insert_admissions, plan.admissions),
        (s.insert_intervals, plan.intervals),
        (s.insert_preemptions, plan.preemptions),
        (s.insert_config_versions, plan.config_versions),
        (s.insert_audit_entries, plan.audit_entries),
        (s.checkpoint_requested, plan.checkpoint_requests),
        (s.checkpoint_acked, plan.checkpoint_acks),
        (s.checkpoint_timed_out, plan.checkpoint_timeouts),
        (s.suspended, plan.suspensions),
        (s.requeued, plan.requeues),
        # Evictions close their own attempt before Finished/recovery close whatever the workload has open.
        (s.close_attempt_intervals, plan.evictions),
        (s.close_attempt_admission, plan.evictions),
        (s.close_workload_intervals, plan.finishes),
        (s.finish_workload_admissions, plan.finishes),
        (s.finish_workload, plan.finishes),
        (s.close_workload_intervals, plan.recoveries),
        (s.recover_workload_admissions, plan.recoveries),
    ]
    for statement, rows in steps:
        if rows:
            await connection.execute(statement, rows)


@dataclass(frozen=True)
class _Statements:
    insert_workloads: Executable
    insert_workload_events: Executable
    insert_admissions: Executable
    insert_intervals: Executable
    insert_preemptions: Executable
    insert_config_versions: Executable
    insert_audit_entries: Executable
    checkpoint_requested: Executable
    checkpoint_acked: Executable
    checkpoint_timed_out: Executable
    suspended: Executable
    requeued: Executable
    close_attempt_intervals: Executable
    close_attempt_admission: Executable
    close_workload_intervals: Executable
    finish_workload_admissions: Executable
    finish_workload: Executable
    recover_workload_admissions: Executable


def _insert_ignoring(dialect_name: str, table: Any, *natural_key: str) -> Executable:
    statement: Executable = dialect_insert(dialect_name)(table).on_conflict_do_nothing(index_elements=list(natural_key))
    return statement


@cache
def _statements(dialect_name: str) -> _Statements:
    at = bindparam("b_at", type_=UTCDateTime())
    workload = bindparam("b_workload", type_=String())
    victim = bindparam("b_victim", type_=String())
    attempt = bindparam("b_attempt", type_=Integer())
    intervals, admissions, preemptions = UsageInterval.__table__, Admission.__table__, Preemption.__table__

    def fill(column: Any, value: Any) -> Any:
        # First write wins: a replayed or repeated step never moves a recorded time.
        return func.coalesce(column, value)

    def preemption_step(**values: Any) -> Executable:
        return (
            update(Preemption)
            .where(preemptions.c.victim == victim, preemptions.c.victim_attempt == attempt)
            .values({name: fill(preemptions.c[name], value) for name, value in values.items()})
        )

    # An interval never ends before it starts, whatever the clocks of the writers say.
    interval_end = case((intervals.c.started_at > at, intervals.c.started_at), else_=at)
    admission_end = case((admissions.c.admitted_at > at, admissions.c.admitted_at), else_=at)
    open_intervals = intervals.c.ended_at.is_(None)
    open_admissions = admissions.c.ended_at.is_(None)

    return _Statements(
        insert_workloads=_insert_ignoring(dialect_name, Workload.__table__, "id"),
        insert_workload_events=_insert_ignoring(dialect_name, WorkloadEventRow.__table__, "event_key"),
        insert_admissions=_insert_ignoring(dialect_name, admissions, "workload_id", "attempt"),
        insert_intervals=_insert_ignoring(dialect_name, intervals, "workload_id", "attempt", "flavor", "resource"),
        insert_preemptions=_insert_ignoring(dialect_name, preemptions, "victim", "victim_attempt"),
        insert_config_versions=_insert_ignoring(dialect_name, ConfigVersion.__table__, "sha256", "applied_at"),
        insert_audit_entries=_insert_ignoring(dialect_name, AuditLogEntry.__table__, "entry_key"),
        checkpoint_requested=preemption_step(
            checkpoint_requested_at=at,
            checkpoint_deadline=bindparam("b_deadline", type_=UTCDateTime()),
            checkpoint_via=bindparam("b_via"),
        ),
        checkpoint_acked=preemption_step(checkpoint_acked_at=at, checkpoint_id=bindparam("b_checkpoint_id")),
        checkpoint_timed_out=preemption_step(checkpoint_timed_out_at=at),
        suspended=preemption_step(suspended_at=at, lost_gpu_milliseconds=bindparam("b_lost")),
        requeued=preemption_step(requeued_at=at),
        close_attempt_intervals=(
            update(UsageInterval)
            .where(intervals.c.workload_id == workload, intervals.c.attempt == attempt, open_intervals)
            .values(ended_at=interval_end)
        ),
        close_attempt_admission=(
            update(Admission)
            .where(admissions.c.workload_id == workload, admissions.c.attempt == attempt, open_admissions)
            .values(ended_at=admission_end, end_reason=bindparam("b_reason"))
        ),
        close_workload_intervals=(
            update(UsageInterval)
            .where(intervals.c.workload_id == workload, open_intervals)
            .values(ended_at=interval_end)
        ),
        finish_workload_admissions=(
            update(Admission)
            .where(admissions.c.workload_id == workload, open_admissions)
            .values(ended_at=admission_end, end_reason="Finished")
        ),
        finish_workload=(
            update(Workload)
            .where(Workload.__table__.c.id == workload)
            .values(
                finished_at=fill(Workload.__table__.c.finished_at, at),
                succeeded=fill(Workload.__table__.c.succeeded, bindparam("b_succeeded")),
            )
        ),
        recover_workload_admissions=(
            update(Admission)
            .where(admissions.c.workload_id == workload, open_admissions)
            .values(ended_at=admission_end, end_reason="Recovered")
        ),
    )
