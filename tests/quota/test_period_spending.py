"""A replay's budget report (quota.budgets.period_spending): every calendar window the period overlaps, each with
its exact spending (before the period included), what remained and when it was first found spent."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.budgets import DAY_MS, HOUR_MS, epoch_ms_of, period_spending
from quota.credits import UsageInterval
from quota.loader import load_config_text
from quota.spending import SpendingBook

CONFIG = load_config_text("""
flavors: [{name: a100}]
cohorts: [{name: lab, budgets: [{window: week, resources: {nvidia.com/gpu: 100}}]}]
teams:
  - name: nlp
    parent: lab
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
    budgets:
      - {window: day, resources: {nvidia.com/gpu: 10}}
      - {rolling: 24h, resources: {cpu: 1.5}}
  - name: vision
    parent: lab
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
""")
# Sunday 28 February 2021, 12:00 UTC: the period below crosses a month, an ISO week and two days.
START = epoch_ms_of(datetime(2021, 2, 28, 12, tzinfo=UTC))
HOUR = 1000 * HOUR_MS
"""One resource-hour in milli-unit-milliseconds."""


def test_windows_labels_and_exhaustion() -> None:
    book = SpendingBook()
    # nlp: 4 GPUs from 10:00 (before the period) to 16:00 on the 28th; vision: 2 GPUs all of 1 March.
    book.load([UsageInterval("nlp", "nvidia.com/gpu", 4000, START - 2 * HOUR_MS, START + 4 * HOUR_MS)])
    book.load([UsageInterval("vision", "nvidia.com/gpu", 2000, START + 12 * HOUR_MS, START + 36 * HOUR_MS)])
    spent_at = START + 30 * 60_000
    key = ("nlp", False, "nvidia.com/gpu", "day", START - 12 * HOUR_MS)
    found = period_spending(CONFIG, book, {key: spent_at}, START, START + 36 * HOUR_MS)
    rows = [(w.owner, w.resource, w.label, w.spent // HOUR, w.remaining // HOUR, w.exhausted_at) for w in found]
    assert rows == [
        ("lab", "nvidia.com/gpu", "2021-W08", 24, 76, None),  # ends Monday 00:00: 24 of nlp's
        ("lab", "nvidia.com/gpu", "2021-W09", 48, 52, None),  # vision's whole of 1 March
        ("nlp", "nvidia.com/gpu", "2021-02-28", 24, 0, spent_at),  # 10:00 to 16:00: 24 of 10, from before too
        ("nlp", "nvidia.com/gpu", "2021-03-01", 0, 10, None),
        ("nlp", "cpu", "24h", 0, 1, None),  # rolling: the 24 hours up to the period's end (1.5 h, shown whole)
    ]
    last = found[-1]
    assert (last.start, last.end) == (START + 12 * HOUR_MS, START + 36 * HOUR_MS)
    assert found[3].as_dict()["end"] == "2021-03-02T00:00:00Z"  # the period ends at midnight
    assert found[2].as_dict()["exhausted_at"] == "2021-02-28T12:30:00Z"
    assert found[4].as_dict()["budget_hours"] == "1.5"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5 * DAY_MS), st.integers(1, 3 * DAY_MS), st.integers(1, 16_000)),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 4 * DAY_MS),
)
def test_the_day_windows_add_up_to_the_period_exactly(intervals: list[tuple[int, int, int]], length: int) -> None:
    """However the usage falls, the day windows split the spending from the first window's midnight to the period's
    end without losing or doubling a milli-unit-millisecond."""
    book = SpendingBook()
    book.load(
        UsageInterval("nlp", "nvidia.com/gpu", quantity, START - DAY_MS + at, START - DAY_MS + at + span)
        for at, span, quantity in intervals
    )
    end = START + length
    days = [w for w in period_spending(CONFIG, book, {}, START, end) if w.window == "day"]
    assert days[0].start == START - 12 * HOUR_MS and days[-1].end == end
    assert all(a.end == b.start for a, b in itertools.pairwise(days))
    assert sum(w.spent for w in days) == book.spent("nlp", "nvidia.com/gpu", days[0].start, end)
