"""Reads of the ledger for the admin API, recovery and fair-share credits. Every function takes the engine
(``ledger.engine`` or one from ``accounting.database.create_engine``)."""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

from sqlalchemy import Select, func, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from accounting.events import WORKLOAD_EVENT_TYPES, WorkloadId
from accounting.models import (
    Admission,
    AuditLogEntry,
    ConfigVersion,
    Preemption,
    UsageInterval,
    Workload,
    WorkloadEventRow,
)
from accounting.records import (
    AdmissionRecord,
    AuditRecord,
    ConfigVersionRecord,
    PreemptionRecord,
    RecordedEvent,
    UsageIntervalRecord,
    WorkloadDetail,
    WorkloadRecord,
)
from accounting.rows import flavor_resource_map

_T = TypeVar("_T")

# Events stamped with the same instant are shown in lifecycle order.
_LIFECYCLE_RANK = {event_type.kind: rank for rank, event_type in enumerate(WORKLOAD_EVENT_TYPES)}


async def workload_detail(engine: AsyncEngine, workload_id: WorkloadId) -> WorkloadDetail | None:
    """The workload, its admissions, preemptions and full event history; None if the ledger never heard of it."""
    async with AsyncSession(engine) as session:
        workload = await session.get(Workload, workload_id)
        admissions = await session.scalars(
            select(Admission).where(Admission.workload_id == workload_id).order_by(Admission.attempt)
        )
        preemptions = await session.execute(_preemptions_query().where(Preemption.victim == workload_id))
        history = await session.scalars(select(WorkloadEventRow).where(WorkloadEventRow.workload_id == workload_id))
        detail = WorkloadDetail(
            workload=_workload(workload) if workload is not None else None,
            admissions=[_admission(row) for row in admissions],
            preemptions=[_preemption(row, team) for row, team in preemptions],
            history=sorted(
                (RecordedEvent(kind=row.kind, at=row.at, key=row.event_key, data=row.payload) for row in history),
                key=lambda e: (e.at, _LIFECYCLE_RANK.get(e.kind, len(_LIFECYCLE_RANK)), e.key),
            ),
        )
    if detail.workload is None and not detail.admissions and not detail.history:
        return None
    return detail


async def list_workloads(
    engine: AsyncEngine, *, team: str | None = None, limit: int = 100, offset: int = 0
) -> list[WorkloadRecord]:
    """Workloads, newest first."""
    query = select(Workload).order_by(Workload.created_at.desc(), Workload.id).limit(limit).offset(offset)
    if team is not None:
        query = query.where(Workload.team == team)
    async with AsyncSession(engine) as session:
        return [_workload(row) for row in await session.scalars(query)]


async def list_preemptions(
    engine: AsyncEngine,
    *,
    team: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int | None = None,
) -> list[PreemptionRecord]:
    """Preemptions issued in [since, until), newest first; ``team`` filters on the victim's team."""
    query = (
        _preemptions_query()
        .order_by(None)
        .order_by(Preemption.issued_at.desc(), Preemption.victim, Preemption.victim_attempt)
    )
    if team is not None:
        query = query.where(Admission.team == team)
    if since is not None:
        query = query.where(Preemption.issued_at >= since)
    if until is not None:
        query = query.where(Preemption.issued_at < until)
    if limit is not None:
        query = query.limit(limit)
    async with AsyncSession(engine) as session:
        return [_preemption(row, victim_team) for row, victim_team in await session.execute(query)]


async def admitted_workloads(engine: AsyncEngine) -> list[AdmissionRecord]:
    """Admissions the ledger considers running (not yet evicted, finished or recovered), oldest first. After a
    restart the queue manager charges these to their teams instead of admitting them again."""
    query = (
        select(Admission)
        .where(Admission.ended_at.is_(None))
        .order_by(Admission.admitted_at, Admission.workload_id, Admission.attempt)
    )
    async with AsyncSession(engine) as session:
        return [_admission(row) for row in await session.scalars(query)]


async def last_admission_attempts(engine: AsyncEngine) -> dict[WorkloadId, int]:
    """The highest admission attempt recorded per workload: its next admission is that + 1."""
    query = select(Admission.workload_id, func.max(Admission.attempt)).group_by(Admission.workload_id)
    async with AsyncSession(engine) as session:
        return {workload_id: attempt for workload_id, attempt in await session.execute(query)}


async def open_intervals(engine: AsyncEngine) -> list[UsageIntervalRecord]:
    """Usage intervals not yet closed, by start time."""
    return await _intervals(engine, select(UsageInterval).where(UsageInterval.ended_at.is_(None)))


async def team_usage_intervals(
    engine: AsyncEngine, since: datetime, until: datetime | None = None
) -> list[UsageIntervalRecord]:
    """Every interval that overlaps [since, until) (open-ended when ``until`` is None), unclipped, by start time.
    Fair-share credits decay usage from these alone, so they can be recomputed after any restart."""
    return await _intervals(engine, _overlapping(select(UsageInterval), since, until))


async def workload_kinds(engine: AsyncEngine, since: datetime, until: datetime | None = None) -> dict[WorkloadId, str]:
    """The recorded kind of every workload with a usage interval overlapping [since, until)."""
    used = _overlapping(select(UsageInterval.workload_id), since, until)
    query = select(Workload.id, Workload.kind).where(Workload.id.in_(used))
    async with AsyncSession(engine) as session:
        return {workload_id: kind for workload_id, kind in await session.execute(query)}


def _overlapping(query: Select[_T], since: datetime, until: datetime | None) -> Select[_T]:
    query = query.where(or_(UsageInterval.ended_at.is_(None), UsageInterval.ended_at > since))
    return query if until is None else query.where(UsageInterval.started_at < until)


async def config_versions(engine: AsyncEngine, *, limit: int = 20) -> list[ConfigVersionRecord]:
    """Applied team-quota files, newest first."""
    query = select(ConfigVersion).order_by(ConfigVersion.applied_at.desc(), ConfigVersion.id.desc()).limit(limit)
    async with AsyncSession(engine) as session:
        return [
            ConfigVersionRecord(sha256=row.sha256, text=row.text, applied_at=row.applied_at, source=row.source)
            for row in await session.scalars(query)
        ]


async def audit_log(
    engine: AsyncEngine,
    *,
    actor: str | None = None,
    since: datetime | None = None,
    limit: int = 100,
) -> list[AuditRecord]:
    """Admin API actions, newest first."""
    query = select(AuditLogEntry).order_by(AuditLogEntry.at.desc(), AuditLogEntry.id.desc()).limit(limit)
    if actor is not None:
        query = query.where(AuditLogEntry.actor == actor)
    if since is not None:
        query = query.where(AuditLogEntry.at >= since)
    async with AsyncSession(engine) as session:
        return [
            AuditRecord(
                actor=row.actor, action=row.action, target=row.target, before=row.before, after=row.after, at=row.at
            )
            for row in await session.scalars(query)
        ]


# --- row mapping ------------------------------------------------------------------------------------------------


async def _intervals(engine: AsyncEngine, query: Select[UsageInterval]) -> list[UsageIntervalRecord]:
    query = query.order_by(
        UsageInterval.started_at,
        UsageInterval.workload_id,
        UsageInterval.attempt,
        UsageInterval.flavor,
        UsageInterval.resource,
    )
    async with AsyncSession(engine) as session:
        return [
            UsageIntervalRecord(
                workload_id=row.workload_id,
                attempt=row.attempt,
                team=row.team,
                flavor=row.flavor,
                resource=row.resource,
                quantity_milli=row.quantity_milli,
                started_at=row.started_at,
                ended_at=row.ended_at,
            )
            for row in await session.scalars(query)
        ]


def _preemptions_query() -> Select[Preemption, str | None]:
    # The victim's team is the team its preempted admission was charged to.
    return (
        select(Preemption, Admission.team)
        .outerjoin(
            Admission,
            (Admission.workload_id == Preemption.victim) & (Admission.attempt == Preemption.victim_attempt),
        )
        .order_by(Preemption.issued_at, Preemption.victim, Preemption.victim_attempt)
    )


def _workload(row: Workload) -> WorkloadRecord:
    return WorkloadRecord(
        workload_id=row.id,
        name=row.name,
        namespace=row.namespace,
        team=row.team,
        queue=row.queue,
        priority=row.priority,
        priority_class=row.priority_class,
        pod_sets=row.pod_sets,
        created_at=row.created_at,
        finished_at=row.finished_at,
        succeeded=row.succeeded,
    )


def _admission(row: Admission) -> AdmissionRecord:
    return AdmissionRecord(
        workload_id=row.workload_id,
        attempt=row.attempt,
        team=row.team,
        admitted_at=row.admitted_at,
        pod_sets=row.pod_sets,
        usage=flavor_resource_map(row.usage),
        borrowed=flavor_resource_map(row.borrowed),
        ended_at=row.ended_at,
        end_reason=row.end_reason,
    )


def _preemption(row: Preemption, victim_team: str | None) -> PreemptionRecord:
    return PreemptionRecord(
        victim=row.victim,
        victim_attempt=row.victim_attempt,
        victim_team=victim_team,
        preemptor=row.preemptor,
        reason=row.reason,
        issued_at=row.issued_at,
        checkpoint_via=row.checkpoint_via,
        checkpoint_deadline=row.checkpoint_deadline,
        checkpoint_requested_at=row.checkpoint_requested_at,
        checkpoint_acked_at=row.checkpoint_acked_at,
        checkpoint_timed_out_at=row.checkpoint_timed_out_at,
        checkpoint_id=row.checkpoint_id,
        suspended_at=row.suspended_at,
        requeued_at=row.requeued_at,
        lost_gpu_milliseconds=row.lost_gpu_milliseconds,
        node=row.node,
    )
