"""Accounting reports computed from the ledger: usage, waits, preemptions; and the hourly/daily rollups.

All amounts are exact: usage as resource-milli-seconds (Decimal) and resource-hours (Decimal; GPU-hours for
nvidia.com/gpu), waits in seconds, lost GPU time in GPU-seconds. Periods are half-open [start, end) in UTC.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Literal

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from accounting.database import dialect_insert, write_transaction
from accounting.events import WorkloadId, workload_kind
from accounting.models import Admission, UsageInterval, UsageRollup, Workload
from accounting.records import UsageIntervalRecord
from accounting.repository import list_preemptions, team_usage_intervals, workload_kinds
from accounting.usage import (
    Period,
    clip,
    floor_period,
    micros,
    milli_micros,
    split_by_period,
    to_milli_seconds,
    to_resource_hours,
)

Grouping = Literal["team", "flavor", "kind", "day"]
GROUPINGS: tuple[Grouping, ...] = ("team", "flavor", "kind", "day")


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Usage of ``resource`` by one team, one flavor, one kind of workload, or on one UTC day (``key``: the team,
    flavor, kind or ``YYYY-MM-DD``)."""

    key: str
    resource: str
    milli_micros: int  # quantity in milli-units × µs: the exact integer behind the two below

    @property
    def milli_seconds(self) -> Decimal:
        return to_milli_seconds(self.milli_micros)

    @property
    def hours(self) -> Decimal:
        """Resource-hours (GPU-hours for nvidia.com/gpu)."""
        return to_resource_hours(self.milli_micros)


def _check_period(start: datetime, end: datetime) -> None:
    if start.utcoffset() is None or end.utcoffset() is None:
        raise ValueError("report periods need timezone-aware datetimes")
    if start >= end:
        raise ValueError(f"empty period: {start.isoformat()} is not before {end.isoformat()}")


def summarize_usage(
    intervals: Iterable[UsageIntervalRecord],
    start: datetime,
    end: datetime,
    *,
    by: Grouping = "team",
    resource: str | None = None,
    now: datetime | None = None,
    kinds: Mapping[WorkloadId, str] | None = None,
) -> list[UsageRow]:
    """The arithmetic of ``usage_report`` on intervals already read: clip each to [start, end), open ones
    running until ``end`` or ``now``, whichever is first. By kind, a workload's kind is the one ``kinds`` (the
    ledger's workloads) records, or else the one its identity names."""
    _check_period(start, end)
    if by not in GROUPINGS:
        raise ValueError(f"by must be one of {', '.join(GROUPINGS)}, got {by!r}")
    open_until = min(end, now or datetime.now(UTC))
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for interval in intervals:
        if resource is not None and interval.resource != resource:
            continue
        ended_at = open_until if interval.ended_at is None else interval.ended_at
        piece = clip(interval.started_at, ended_at, start, end)
        if piece is None:
            continue
        if by == "day":
            for day, lo, hi in split_by_period(*piece, "day"):
                totals[(day.date().isoformat(), interval.resource)] += milli_micros(interval.quantity_milli, lo, hi)
        else:
            if by == "kind":
                key = (kinds or {}).get(interval.workload_id) or workload_kind(interval.workload_id)
            else:
                key = interval.team if by == "team" else interval.flavor
            totals[(key, interval.resource)] += milli_micros(interval.quantity_milli, *piece)
    return [UsageRow(key, res, amount) for (key, res), amount in sorted(totals.items()) if amount > 0]


async def usage_report(
    engine: AsyncEngine,
    start: datetime,
    end: datetime,
    *,
    by: Grouping = "team",
    resource: str | None = None,
    now: datetime | None = None,
) -> list[UsageRow]:
    """Usage in [start, end) grouped by team, flavor, kind of workload or UTC day, one row per (key, resource),
    sorted. ``now`` (default: the wall clock; the simulator passes its virtual time) bounds still-running
    intervals."""
    _check_period(start, end)
    intervals = await team_usage_intervals(engine, start, end)
    kinds = await workload_kinds(engine, start, end) if by == "kind" else None
    return summarize_usage(intervals, start, end, by=by, resource=resource, now=now, kinds=kinds)


# --- waits ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WaitRow:
    """Queueing wait (first admission − creation) of the workloads of ``team`` first admitted in the period."""

    team: str
    admitted: int
    mean_seconds: Decimal
    p95_seconds: Decimal  # nearest rank


async def wait_report(engine: AsyncEngine, start: datetime, end: datetime) -> list[WaitRow]:
    _check_period(start, end)
    first_admission = (
        select(
            Admission.workload_id,
            func.min(Admission.attempt).label("attempt"),
        )
        .group_by(Admission.workload_id)
        .subquery()
    )
    query = (
        select(Admission.team, Admission.admitted_at, Workload.created_at)
        .join(
            first_admission,
            (first_admission.c.workload_id == Admission.workload_id) & (first_admission.c.attempt == Admission.attempt),
        )
        .join(Workload, Workload.id == Admission.workload_id)
        .where(Admission.admitted_at >= start, Admission.admitted_at < end)
    )
    waits: dict[str, list[int]] = defaultdict(list)
    async with AsyncSession(engine) as session:
        for team, admitted_at, created_at in await session.execute(query):
            waits[team].append(max(0, micros(admitted_at - created_at)))
    return [_wait_row(team, sorted(values)) for team, values in sorted(waits.items())]


def _wait_row(team: str, waits_micros: list[int]) -> WaitRow:
    count = len(waits_micros)
    mean = Decimal(sum(waits_micros)) / Decimal(count) / Decimal(1_000_000)
    p95 = Decimal(waits_micros[math.ceil(0.95 * count) - 1]).scaleb(-6)
    return WaitRow(team=team, admitted=count, mean_seconds=mean.quantize(Decimal("0.000001")), p95_seconds=p95)


# --- preemptions ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreemptionSummary:
    """Preemptions issued in the period against ``team``'s workloads, and the GPU time they lost."""

    team: str
    preemptions: int
    lost_gpu_milliseconds: int
    by_reason: dict[str, int] = field(default_factory=dict)

    @property
    def lost_gpu_seconds(self) -> Decimal:
        return Decimal(self.lost_gpu_milliseconds).scaleb(-3)


async def preemption_report(engine: AsyncEngine, start: datetime, end: datetime) -> list[PreemptionSummary]:
    _check_period(start, end)
    counts: dict[str, int] = defaultdict(int)
    lost: dict[str, int] = defaultdict(int)
    reasons: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for preemption in await list_preemptions(engine, since=start, until=end):
        team = preemption.victim_team or "unknown"
        counts[team] += 1
        lost[team] += preemption.lost_gpu_milliseconds or 0
        reasons[team][preemption.reason] += 1
    return [
        PreemptionSummary(
            team=team,
            preemptions=counts[team],
            lost_gpu_milliseconds=lost[team],
            by_reason=dict(sorted(reasons[team].items())),
        )
        for team in sorted(counts)
    ]


# --- rollups ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RollupRow:
    period: Period
    period_start: datetime
    team: str
    flavor: str
    resource: str
    milli_seconds: Decimal

    @property
    def hours(self) -> Decimal:
        return to_resource_hours(int(self.milli_seconds.scaleb(6)))


def compute_rollups(
    intervals: Iterable[UsageIntervalRecord], period: Period, since: datetime, until: datetime
) -> list[RollupRow]:
    """Usage per whole period in [since, until) (both on period boundaries); open intervals run to ``until``."""
    totals: dict[tuple[datetime, str, str, str], int] = defaultdict(int)
    for interval in intervals:
        piece = clip(interval.started_at, interval.ended_at, since, until)
        if piece is None:
            continue
        for bucket, lo, hi in split_by_period(*piece, period):
            totals[(bucket, interval.team, interval.flavor, interval.resource)] += milli_micros(
                interval.quantity_milli, lo, hi
            )
    return [
        RollupRow(period, bucket, team, flavor, resource, to_milli_seconds(amount))
        for (bucket, team, flavor, resource), amount in sorted(totals.items())
        if amount > 0
    ]


async def rollup(
    engine: AsyncEngine,
    period: Period,
    up_to: datetime,
    *,
    since: datetime | None = None,
    now: datetime | None = None,
) -> int:
    """(Re)compute the ``period`` rollups of every complete period from ``since`` (default: the first recorded
    usage) up to ``up_to``; returns the number of rows written. Idempotent: a period's rows are replaced, so a
    rerun — e.g. after recovery closed an interval — corrects them. Open intervals count until ``now`` (default:
    the wall clock), so a period is only rolled up once it has ended by then."""
    if period not in ("hour", "day"):
        raise ValueError(f"period must be 'hour' or 'day', got {period!r}")
    until = floor_period(min(up_to, now or datetime.now(UTC)), period)
    if since is None:
        async with AsyncSession(engine) as session:
            first = await session.scalar(select(func.min(UsageInterval.started_at)))
        if first is None:
            return 0
        since = first
    since = floor_period(since, period)
    if since >= until:
        return 0
    rows = compute_rollups(await team_usage_intervals(engine, since, until), period, since, until)
    async with write_transaction(engine) as connection:
        await connection.execute(
            delete(UsageRollup).where(
                UsageRollup.period == period, UsageRollup.period_start >= since, UsageRollup.period_start < until
            )
        )
        if rows:
            # Upsert, not insert: a concurrent rerun for the same periods must not fail on the primary key.
            upsert = dialect_insert(connection.dialect.name)(UsageRollup)
            upsert = upsert.on_conflict_do_update(
                index_elements=["period", "period_start", "team", "flavor", "resource"],
                set_={"milli_seconds": upsert.excluded.milli_seconds},
            )
            await connection.execute(
                upsert,
                [
                    {
                        "period": row.period,
                        "period_start": row.period_start,
                        "team": row.team,
                        "flavor": row.flavor,
                        "resource": row.resource,
                        "milli_seconds": row.milli_seconds,
                    }
                    for row in rows
                ],
            )
    return len(rows)


async def rollups(
    engine: AsyncEngine, period: Period, start: datetime, end: datetime, *, team: str | None = None
) -> list[RollupRow]:
    """Stored rollups with ``period_start`` in [start, end)."""
    query = (
        select(UsageRollup)
        .where(UsageRollup.period == period, UsageRollup.period_start >= start, UsageRollup.period_start < end)
        .order_by(UsageRollup.period_start, UsageRollup.team, UsageRollup.flavor, UsageRollup.resource)
    )
    if team is not None:
        query = query.where(UsageRollup.team == team)
    async with AsyncSession(engine) as session:
        return [
            RollupRow(period, row.period_start, row.team, row.flavor, row.resource, row.milli_seconds)
            for row in await session.scalars(query)
        ]
