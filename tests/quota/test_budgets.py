"""Budgets in the quota file: how they are written and refused, their windows, and what spent budgets restrict."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from quota.budgets import (
    HOUR_MS,
    Restriction,
    format_hours,
    lowest_priority,
    restrictions,
    statuses,
    window_bounds,
)
from quota.config import BlockAbove, Budget, OnExhausted
from quota.loader import ConfigError, load_config_text
from quota.spending import SpendingBook

ORG = """
flavors: [{name: a100}]
priorityClasses: [{name: low, value: 10}, {name: high, value: 1000}]
cohorts:
  - {name: org}
  - name: lab
    parent: org
    budgets:
      - {rolling: 168h, resources: {nvidia.com/gpu: 100}, onExhausted: noBorrowing}
teams:
  - name: nlp
    parent: lab
    queues: [nlp/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
    budgets:
      - {window: month, resources: {nvidia.com/gpu: 10000}}
      - {window: day, resources: {nvidia.com/gpu: 1.5k}, onExhausted: block, blockAbove: zero}
  - name: vision
    parent: lab
    queues: [vision/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
    budgets:
      - {window: week, resources: {nvidia.com/gpu: 500m}, onExhausted: lowerPriority}
"""


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()) * 1000


def test_budgets_read_as_exact_milli_unit_hours() -> None:
    config = load_config_text(ORG)
    nlp = config.teams[0]
    assert nlp.budgets[0].resources == {"nvidia.com/gpu": 10_000_000}
    assert nlp.budgets[1].resources == {"nvidia.com/gpu": 1_500_000}
    assert nlp.budgets[1].blocks_above is BlockAbove.ZERO and nlp.budgets[0].blocks_above is BlockAbove.NOMINAL
    assert config.cohorts[1].budgets[0].window_name == "rolling:168h"
    assert config.teams[1].budgets[0].resources == {"nvidia.com/gpu": 500}


@pytest.mark.parametrize(
    ("budget", "where", "says"),
    [
        ("{window: month, rolling: 24h, resources: {cpu: 1}}", "budgets[0] (line 9)", "exactly one of"),
        ("{resources: {cpu: 1}}", "budgets[0] (line 9)", "exactly one of"),
        ("{window: fortnight, resources: {cpu: 1}}", "budgets[0].window (line 9)", "'day', 'week' or 'month'"),
        ("{rolling: 9000h, resources: {cpu: 1}}", "budgets[0] (line 9)", "at most 8784h"),
        ("{rolling: 0s, resources: {cpu: 1}}", "budgets[0] (line 9)", "longer than 0"),
        ("{window: day, resources: {cpu: -1}}", "budgets[0].resources.cpu (line 9)", "negative"),
        ("{window: day, resources: {cpu: 10E}}", "budgets[0].resources.cpu (line 9)", "too large"),
        ("{window: day, resources: {}}", "budgets[0] (line 9)", "resources is empty"),
        ("{window: day, resources: {cpu: 1}, onExhausted: noBorrowing, blockAbove: zero}", "budgets[0] (line 9)",
         "blockAbove only applies"),
        ("{window: day, resources: {cpu: 1}, onExhausted: stop}", "budgets[0].onExhausted (line 9)", "block"),
        ("{window: day, resources: {'not a name!': 1}}", "budgets[0].resources.not a name! (line 9)",
         "not a resource name"),
    ],
)  # fmt: skip
def test_bad_budgets_are_refused_with_path_and_line(budget: str, where: str, says: str) -> None:
    text = f"""
flavors: [{{name: a100}}]
teams:
  - name: nlp
    queues: [nlp/default]
    quotas: [{{flavor: a100, resources: {{cpu: {{nominal: 8}}}}}}]
    budgets:
      # the budget under test
      - {budget}
"""
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)
    rendered = caught.value.render()
    assert f"teams[0].{where}" in rendered and says in rendered, rendered


def test_one_budget_per_resource_and_window() -> None:
    text = ORG.replace(
        "      - {window: day, resources: {nvidia.com/gpu: 1.5k}, onExhausted: block, blockAbove: zero}",
        "      - {window: month, resources: {nvidia.com/gpu: 5}}",
    )
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)
    assert "teams[0].budgets[1].resources.nvidia.com/gpu (line 17): nvidia.com/gpu already has a month budget" in (
        caught.value.render()
    )


@pytest.mark.parametrize(
    ("window", "now", "start", "end"),
    [
        ("day", "2026-03-14T15:09:26", "2026-03-14T00:00:00", "2026-03-15T00:00:00"),
        ("week", "2026-03-14T15:09:26", "2026-03-09T00:00:00", "2026-03-16T00:00:00"),  # a Saturday: Monday the 9th
        ("week", "2026-03-16T00:00:00", "2026-03-16T00:00:00", "2026-03-23T00:00:00"),  # Monday 00:00 starts one
        ("week", "2021-01-03T23:59:59", "2020-12-28T00:00:00", "2021-01-04T00:00:00"),  # ISO week 53 of 2020
        ("month", "2026-12-31T23:59:59", "2026-12-01T00:00:00", "2027-01-01T00:00:00"),
        ("month", "2024-02-29T12:00:00", "2024-02-01T00:00:00", "2024-03-01T00:00:00"),
        ("month", "2026-01-01T00:00:00", "2026-01-01T00:00:00", "2026-02-01T00:00:00"),
    ],
)
def test_calendar_windows_in_utc(window: str, now: str, start: str, end: str) -> None:
    budget = Budget.model_validate({"window": window, "resources": {"cpu": 1}})
    assert window_bounds(budget, ms(now)) == (ms(start), ms(end))


def test_rolling_window_is_the_last_duration() -> None:
    budget = Budget.model_validate({"rolling": "720h", "resources": {"cpu": 1}})
    assert window_bounds(budget, 10 * 720 * HOUR_MS) == (9 * 720 * HOUR_MS, None)


def test_spent_budgets_restrict_their_teams_and_cohort_subtrees() -> None:
    config = load_config_text(ORG)
    now = ms("2026-03-14T12:00:00")
    book = SpendingBook()
    # nlp: 8 GPUs since midnight (96 GPU-hours of its day's 1,500: not spent); vision 1 GPU for 1 h (500m: spent).
    book.open("a", "nlp", {"nvidia.com/gpu": 8000}, ms("2026-03-14T00:00:00"))
    book.open("b", "vision", {"nvidia.com/gpu": 1000}, now - HOUR_MS)
    found = statuses(config, book, now)
    by_key = {(s.owner, s.window): s for s in found}
    assert by_key[("nlp", "day")].spent == 8000 * 12 * HOUR_MS and not by_key[("nlp", "day")].exhausted
    assert by_key[("lab", "rolling:168h")].spent == (8000 * 12 + 1000) * HOUR_MS  # both teams of the cohort
    assert by_key[("vision", "week")].exhausted
    limits = restrictions(config, found)
    assert limits == {"vision": Restriction(lowest_priority=True)}
    assert "vision's week budget of 0.5 nvidia.com/gpu-hours (1 spent)" in limits["vision"].reason

    # 2 more days of nlp: the lab's 100 GPU-hours of the rolling week are spent (noBorrowing: within the cohort,
    # distance 1), and nlp's own day is not (a new day began).
    later = now + 48 * HOUR_MS
    limits = restrictions(config, statuses(config, book, later))
    assert limits["nlp"] == Restriction(max_borrow=1)
    assert limits["vision"] == Restriction(max_borrow=1, lowest_priority=True)
    assert limits["nlp"].allows(1) and not limits["nlp"].allows(2)


def test_the_strictest_restriction_wins() -> None:
    config = load_config_text(ORG)
    now = ms("2026-03-14T12:00:00")
    book = SpendingBook()
    book.open("a", "nlp", {"nvidia.com/gpu": 200_000}, ms("2026-03-14T00:00:00"))  # 2,400 GPU-hours today
    limits = restrictions(config, statuses(config, book, now))
    # The day's block (zero) and the lab's noBorrowing (within the cohort) are spent; the month's 10,000 is not.
    assert limits["nlp"].admit is False and limits["nlp"].max_borrow == 1
    assert not limits["nlp"].allows(0)
    assert (
        "cohort lab's rolling:168h budget" in limits["nlp"].reason and "team nlp's day budget" in limits["nlp"].reason
    )
    assert OnExhausted.BLOCK in {s.on_exhausted for s in statuses(config, book, now) if s.exhausted}


def test_lowest_priority_is_below_every_class_and_below_zero() -> None:
    config = load_config_text(ORG)
    assert lowest_priority(config) == -1
    assert lowest_priority(load_config_text("priorityClasses: [{name: a, value: -50}]")) == -51


@pytest.mark.parametrize(
    ("milli_unit_ms", "text"),
    [(0, "0"), (1000 * HOUR_MS, "1"), (12_500 * HOUR_MS, "12.5"), (HOUR_MS, "0.001"), (HOUR_MS - 1, "0")],
)
def test_hours_are_printed_exactly_to_the_thousandth(milli_unit_ms: int, text: str) -> None:
    assert format_hours(milli_unit_ms) == text
