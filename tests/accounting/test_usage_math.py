"""The usage arithmetic, without a database: clipping, splitting by period, exact amounts."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from accounting.records import UsageIntervalRecord
from accounting.reports import compute_rollups, summarize_usage
from accounting.usage import clip, micros, split_by_period, to_milli_seconds, to_resource_hours
from tests.accounting.builders import GPU, at


def interval(
    team: str, quantity: int, start_h: float, end_h: float | None, flavor: str = "h100", resource: str = GPU
) -> UsageIntervalRecord:
    return UsageIntervalRecord(
        workload_id=f"{team}/{start_h}",
        attempt=1,
        team=team,
        flavor=flavor,
        resource=resource,
        quantity_milli=quantity,
        started_at=at(hours=start_h),
        ended_at=None if end_h is None else at(hours=end_h),
    )


def test_micros_are_exact() -> None:
    assert micros(timedelta(days=400, seconds=1, microseconds=7)) == (400 * 86_400 + 1) * 1_000_000 + 7


def test_amounts_are_exact() -> None:
    assert to_milli_seconds(1) == Decimal("0.000001")  # one milli-unit for one microsecond
    assert to_resource_hours(1000 * 3_600_000_000) == 1  # one GPU for one hour
    assert to_resource_hours(1000 * 1_000_000) == Decimal("0.000277777777778")  # one GPU-second, rounded at 1e-15
    assert to_resource_hours(1000 * 1_800_000_000) == Decimal("0.5")


def test_clip_keeps_the_part_inside_the_window_and_runs_open_intervals_to_its_end() -> None:
    assert clip(at(hours=1), at(hours=3), at(hours=2), at(hours=4)) == (at(hours=2), at(hours=3))
    assert clip(at(hours=1), None, at(hours=2), at(hours=4)) == (at(hours=2), at(hours=4))
    assert clip(at(hours=0), at(hours=2), at(hours=2), at(hours=4)) is None  # touching is not overlapping


def test_split_by_day_cuts_at_utc_midnight() -> None:
    pieces = list(split_by_period(at(hours=15), at(hours=17, minutes=30), "day"))  # 23:00 → 01:30 next day
    assert [(day.date().isoformat(), hi - lo) for day, lo, hi in pieces] == [
        ("2026-03-02", timedelta(hours=1)),
        ("2026-03-03", timedelta(hours=1, minutes=30)),
    ]


def test_summary_clips_to_the_period_and_counts_open_intervals_until_the_end_or_now() -> None:
    intervals = [
        interval("nlp", 2000, 1.5, 2.5),  # 09:30-10:30: half an hour inside → 1 GPU-hour
        interval("nlp", 1000, 2.25, 3, flavor="a100"),  # 10:15-11:00 → 0.75
        interval("vision", 4000, 3, None),  # from 11:00, still running
        interval("vision", 8000, 4, 5),  # 12:00-13:00: after the period
        interval("vision", 1000, 0, 2),  # 08:00-10:00: before it
    ]
    start, end = at(hours=2), at(hours=4)
    by_team = summarize_usage(intervals, start, end, by="team", now=at(hours=10))
    assert [(r.key, r.hours) for r in by_team] == [("nlp", Decimal("1.75")), ("vision", Decimal("4"))]
    by_team_at_1130 = summarize_usage(intervals, start, end, by="team", now=at(hours=3.5))
    assert [(r.key, r.hours) for r in by_team_at_1130] == [("nlp", Decimal("1.75")), ("vision", Decimal("2"))]
    by_flavor = summarize_usage(intervals, start, end, by="flavor", now=at(hours=10))
    assert [(r.key, r.hours) for r in by_flavor] == [("a100", Decimal("0.75")), ("h100", Decimal("5"))]


def test_rollups_of_whole_hours_add_up_to_the_summary() -> None:
    intervals = [interval("nlp", 2000, 1.5, 2.5), interval("nlp", 1000, 2.25, None, flavor="a100")]
    rows = compute_rollups(intervals, "hour", at(hours=1), at(hours=4))
    assert [(r.period_start, r.flavor, r.milli_seconds) for r in rows] == [
        (at(hours=1), "h100", Decimal(2000 * 1800)),
        (at(hours=2), "a100", Decimal(1000 * 2700)),
        (at(hours=2), "h100", Decimal(2000 * 1800)),
        (at(hours=3), "a100", Decimal(1000 * 3600)),
    ]
    summary = summarize_usage(intervals, at(hours=1), at(hours=4), by="team", now=at(hours=4))
    assert sum(r.milli_seconds for r in rows) == summary[0].milli_seconds
