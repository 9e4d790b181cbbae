"""The ledger's usage intervals since a time, as the spending book (quota/spending.py) and credits read them.

A new leader rebuilds budget spending from these alone, so spending survives restarts and leader changes: an
interval still open ends at `now` here, and the controller opens the running workload's usage again from `now` when
it submits it, so the rebuilt curve is the one the previous leader had, to the millisecond.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from accounting import repository
from quota.credits import UsageInterval


def _ms(moment: datetime) -> int:
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    delta = aware - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


async def usage_since(engine: AsyncEngine, since_ms: int, now_ms: int) -> list[UsageInterval]:
    """Every interval overlapping [since, now), unclipped (the book clips to each window); open ones end at now."""
    since = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=since_ms)
    found = await repository.team_usage_intervals(engine, since)
    return [
        UsageInterval(
            team=i.team,
            resource=i.resource,
            quantity_milli=i.quantity_milli,
            start_ms=_ms(i.started_at),
            end_ms=_ms(i.ended_at) if i.ended_at is not None else max(now_ms, _ms(i.started_at)),
        )
        for i in found
    ]
