"""Properties of budget spending over random usage: exact, never negative, monotone within a window, and the same
whether kept as work starts and stops, rebuilt from the ledger's intervals, or opened out of order."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.credits import UsageInterval
from quota.spending import SpendingBook

SETTINGS = settings(max_examples=int(os.environ.get("KUOTA_HYPOTHESIS_EXAMPLES", "150")), deadline=None)

TEAMS = ("nlp", "vision")
RESOURCES = ("nvidia.com/gpu", "cpu")


@st.composite
def intervals(draw: st.DrawFn) -> list[UsageInterval]:
    out = []
    for _ in range(draw(st.integers(0, 25))):
        start = draw(st.integers(0, 10_000_000))
        length = draw(st.integers(0, 5_000_000))
        out.append(
            UsageInterval(
                team=draw(st.sampled_from(TEAMS)),
                resource=draw(st.sampled_from(RESOURCES)),
                quantity_milli=draw(st.integers(1, 64_000)),
                start_ms=start,
                end_ms=start + length,
            )
        )
    return out


def clipped_sum(found: list[UsageInterval], team: str, resource: str, start: int, end: int) -> int:
    """The definition: every interval's quantity × its overlap with [start, end)."""
    total = 0
    for i in found:
        if i.team == team and i.resource == resource:
            assert i.end_ms is not None
            total += i.quantity_milli * max(0, min(i.end_ms, end) - max(i.start_ms, start))
    return total


def incremental(found: list[UsageInterval]) -> SpendingBook:
    """The controller's way: open and close in time order (at one instant, ends of earlier work first)."""
    steps = []
    for index, i in enumerate(found):
        steps.append((i.start_ms, 1, index))
        steps.append((i.end_ms, 0 if i.end_ms != i.start_ms else 2, index))  # a job that ends as it starts
    book = SpendingBook()
    for at, opening, index in sorted(steps):
        i = found[index]
        if opening == 1:
            book.open(f"w{index}", i.team, {i.resource: i.quantity_milli}, at)
        else:
            book.close(f"w{index}", at)
    return book


windows = st.tuples(st.integers(-1_000_000, 16_000_000), st.integers(0, 16_000_000))


@SETTINGS
@given(intervals(), windows)
def test_spending_is_the_sum_of_intervals_clipped_to_the_window(
    found: list[UsageInterval], window: tuple[int, int]
) -> None:
    start, length = window
    loaded = SpendingBook()
    loaded.load(found)
    kept = incremental(found)
    for team in TEAMS:
        for resource in RESOURCES:
            want = clipped_sum(found, team, resource, start, start + length)
            assert loaded.spent(team, resource, start, start + length) == want
            assert kept.spent(team, resource, start, start + length) == want


@SETTINGS
@given(intervals(), st.integers(0, 16_000_000), st.lists(st.integers(0, 16_000_000), min_size=2, max_size=8))
def test_spending_is_never_negative_and_monotone_within_a_window(
    found: list[UsageInterval], start: int, ends: list[int]
) -> None:
    book = SpendingBook()
    book.load(found)
    for team in TEAMS:
        for resource in RESOURCES:
            seen = [book.spent(team, resource, start, max(start, end)) for end in sorted(ends)]
            assert all(value >= 0 for value in seen)
            assert seen == sorted(seen)


@SETTINGS
@given(intervals(), st.integers(0, 16_000_000), st.integers(0, 16_000_000))
def test_a_workload_opened_from_its_past_admission_after_loading_counts_exactly(
    found: list[UsageInterval], admitted: int, now: int
) -> None:
    # A scenario (or a test) loads past intervals, then opens a running workload from its admission, which may
    # come before the last loaded breakpoint: inserted where it belongs, the curve stays exact.
    book = SpendingBook()
    book.load(found)
    book.open("running", "nlp", {"nvidia.com/gpu": 3000}, admitted)
    running = UsageInterval("nlp", "nvidia.com/gpu", 3000, admitted, max(admitted, now) + 10_000_000)
    window_end = max(admitted, now)
    want = clipped_sum([*found, running], "nlp", "nvidia.com/gpu", 0, window_end)
    assert book.spent("nlp", "nvidia.com/gpu", 0, window_end) == want


@SETTINGS
@given(intervals(), st.integers(0, 16_000_000), windows)
def test_pruning_keeps_every_window_that_starts_after_the_horizon(
    found: list[UsageInterval], horizon: int, window: tuple[int, int]
) -> None:
    start, length = max(window[0], horizon), window[1]
    book = SpendingBook()
    book.load(found)
    book.prune(horizon)
    for team in TEAMS:
        for resource in RESOURCES:
            assert book.spent(team, resource, start, start + length) == clipped_sum(
                found, team, resource, start, start + length
            )
