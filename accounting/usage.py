"""Exact usage arithmetic over intervals. Pure.

Usage is kept as an integer of milli-unit-microseconds (quantity in milli-units × duration in µs) while summing,
so nothing is ever rounded; it leaves as resource-milli-seconds (a Decimal with at most 6 places, exact) or
resource-hours.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import Literal

Period = Literal["hour", "day"]

_EXACT = Context(prec=100)
_MICROS_PER_HOUR = 3_600 * 1_000_000
HOURS_PLACES = 15
"""Resource-hours are exact when they fit in 15 decimal places (whole seconds always do), else rounded there:
below a milli-unit held for a microsecond."""


def micros(delta: timedelta) -> int:
    """A timedelta in whole microseconds, exactly (no float on the way)."""
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def milli_micros(quantity_milli: int, start: datetime, end: datetime) -> int:
    """Usage of ``quantity_milli`` held over [start, end); 0 when the range is empty."""
    return quantity_milli * max(0, micros(end - start))


def to_milli_seconds(amount_milli_micros: int) -> Decimal:
    return Decimal(amount_milli_micros).scaleb(-6, context=_EXACT)


def to_resource_hours(amount_milli_micros: int) -> Decimal:
    """milli-unit-µs → unit-hours: ÷ 1000 (milli) ÷ 3.6e9 (µs per hour)."""
    hours = _EXACT.divide(Decimal(amount_milli_micros), Decimal(1000 * _MICROS_PER_HOUR))
    return hours.quantize(Decimal(1).scaleb(-HOURS_PLACES), rounding=ROUND_HALF_EVEN, context=_EXACT)


def clip(
    start: datetime, end: datetime | None, window_start: datetime, window_end: datetime
) -> tuple[datetime, datetime] | None:
    """The part of [start, end) inside [window_start, window_end); an open interval (end None) runs to the
    window's end. None when they do not overlap."""
    lo = max(start, window_start)
    hi = window_end if end is None else min(end, window_end)
    return (lo, hi) if lo < hi else None


def floor_period(moment: datetime, period: Period) -> datetime:
    moment = moment.astimezone(UTC)
    if period == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    return datetime.combine(moment.date(), time(), UTC)


def period_length(period: Period) -> timedelta:
    return timedelta(hours=1) if period == "hour" else timedelta(days=1)


def split_by_period(start: datetime, end: datetime, period: Period) -> Iterator[tuple[datetime, datetime, datetime]]:
    """(period start, piece start, piece end) for each UTC hour or day that [start, end) touches."""
    step = period_length(period)
    bucket = floor_period(start, period)
    while bucket < end:
        piece = clip(start, end, bucket, bucket + step)
        if piece is not None:
            yield bucket, piece[0], piece[1]
        bucket += step
