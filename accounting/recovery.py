"""Recovery after kuota was down: close the usage of work that ended meanwhile, at the time it ended.

Call it at start-up, before the queue manager records new events (or after ``await ledger.flush()``): it writes
directly, outside the ledger's outbox.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, union
from sqlalchemy.ext.asyncio import AsyncEngine

from accounting.database import write_transaction
from accounting.events import IntervalsClosedOnRecovery, WorkloadId
from accounting.models import Admission, UsageInterval, WorkloadEventRow
from accounting.writer import write_events


@dataclass(frozen=True, slots=True)
class OrphanRecovery:
    closed: dict[WorkloadId, datetime]  # workload → the time its open usage was closed at
    unresolved: frozenset[WorkloadId]  # not running, end unknown and no default given: left open


async def close_orphaned_intervals(
    engine: AsyncEngine,
    still_running: Set[WorkloadId],
    finished_at: Mapping[WorkloadId, datetime],
    *,
    default_end: datetime | None = None,
) -> OrphanRecovery:
    """Close the open usage (intervals and admissions) of every workload the ledger thinks is running but the
    cluster does not: at ``finished_at[workload]`` when known (e.g. the Job's completion time), else at
    ``default_end`` (e.g. when kuota was last seen alive), else leave it open and report it as unresolved.
    Workloads in ``still_running`` are left alone. Idempotent: a second run finds nothing open to close."""
    open_workloads = union(
        select(UsageInterval.workload_id).where(UsageInterval.ended_at.is_(None)),
        select(Admission.workload_id).where(Admission.ended_at.is_(None)),
    ).subquery()
    closed: dict[WorkloadId, datetime] = {}
    unresolved: set[WorkloadId] = set()
    async with write_transaction(engine) as connection:
        orphans = [w for (w,) in await connection.execute(select(open_workloads.c.workload_id))]
        for workload_id in orphans:
            if workload_id in still_running:
                continue
            end = finished_at.get(workload_id, default_end)
            if end is None:
                unresolved.add(workload_id)
            else:
                closed[workload_id] = end
        await write_events(
            connection, [IntervalsClosedOnRecovery(workload_id=w, at=at) for w, at in sorted(closed.items())]
        )
    return OrphanRecovery(closed=closed, unresolved=frozenset(unresolved))


async def last_activity(engine: AsyncEngine) -> datetime | None:
    """The latest time the ledger recorded anything happening to a workload: a fair ``default_end`` for
    ``close_orphaned_intervals`` when nothing better is known."""
    async with engine.connect() as connection:
        return await connection.scalar(select(func.max(WorkloadEventRow.at)))
