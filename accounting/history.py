"""Reads of the ledger for what-if replays: the workloads created in a window with their admissions and
preemptions, and the quota file in force at a moment. Turning them into jobs is `sim.history`'s (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from accounting.models import Admission, ConfigVersion, Preemption, Workload
from accounting.records import AdmissionRecord, ConfigVersionRecord, PreemptionRecord, WorkloadRecord
from accounting.repository import _admission, _preemption, _workload


@dataclass(frozen=True, slots=True)
class WindowHistory:
    workloads: list[WorkloadRecord]
    """Created in [start, end), by creation time then id."""
    admissions: list[AdmissionRecord]
    """Of those workloads, whenever they happened (a workload created in the window may run past its end)."""
    preemptions: list[PreemptionRecord]
    """Of those workloads' admissions."""


async def window_history(engine: AsyncEngine, start: datetime, end: datetime) -> WindowHistory:
    if start >= end:
        raise ValueError(f"empty window: {start.isoformat()} is not before {end.isoformat()}")
    created = (Workload.created_at >= start) & (Workload.created_at < end)
    ids = select(Workload.id).where(created)
    async with AsyncSession(engine) as session:
        workloads = [
            _workload(row)
            for row in await session.scalars(select(Workload).where(created).order_by(Workload.created_at, Workload.id))
        ]
        admissions = [
            _admission(row)
            for row in await session.scalars(
                select(Admission)
                .where(Admission.workload_id.in_(ids))
                .order_by(Admission.workload_id, Admission.attempt)
            )
        ]
        query = (
            select(Preemption, Admission.team)
            .outerjoin(
                Admission,
                (Admission.workload_id == Preemption.victim) & (Admission.attempt == Preemption.victim_attempt),
            )
            .where(Preemption.victim.in_(ids))
            .order_by(Preemption.victim, Preemption.victim_attempt)
        )
        preemptions = [_preemption(row, team) for row, team in await session.execute(query)]
    return WindowHistory(workloads, admissions, preemptions)


async def config_in_force(engine: AsyncEngine, at: datetime) -> ConfigVersionRecord | None:
    """The quota file last applied at or before `at`, or None when the ledger has none that early."""
    query = (
        select(ConfigVersion)
        .where(ConfigVersion.applied_at <= at)
        .order_by(ConfigVersion.applied_at.desc(), ConfigVersion.id.desc())
        .limit(1)
    )
    async with AsyncSession(engine) as session:
        row = await session.scalar(query)
    if row is None:
        return None
    return ConfigVersionRecord(sha256=row.sha256, text=row.text, applied_at=row.applied_at, source=row.source)
