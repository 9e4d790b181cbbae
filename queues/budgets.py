"""Budgets between cycles: the spending book kept as work starts and stops, reviewed before every cycle.

The controller (and the scenario runner) open a workload's usage when it is admitted (or found running) and close
it when it stops, exactly as for fair-share credits; `review(now)` reads every budget of the quota file at `now`,
says what the spent ones restrict (the engine's input) and which warning thresholds (80 %, 100 %) a budget
crossed for the first time in its window.

A replay's controller counts milliseconds from the start of what it replays; `epoch_ms` places that start on the
calendar (the epoch instant of its time 0), so day, week and month windows fall on real dates there too. The book
and every status hold epoch milliseconds; the controller's own times are translated on the way in and out.
"""

from __future__ import annotations

from collections.abc import Mapping

from quota.budgets import (
    THRESHOLDS,
    BudgetStatus,
    Restriction,
    history_start,
    lowest_priority,
    next_review,
    restrictions,
    statuses,
    subtree_teams,
)
from quota.config import QuotaConfig
from quota.credits import UsageInterval
from quota.spending import SpendingBook

PRUNE_EVERY_MS = 60_000
"""How often spending older than any window is forgotten (a minute's breakpoints are few; every cycle is many)."""

Crossing = tuple[BudgetStatus, int]
"""A budget and the percentage of it that spending reached."""


class BudgetKeeper:
    def __init__(self, config: QuotaConfig, epoch_ms: int = 0) -> None:
        self.config = config
        self.epoch_ms = epoch_ms
        """The epoch instant of the controller's time 0 (0 in a cluster, whose clock is the epoch's)."""
        self.book = SpendingBook()
        self.statuses: list[BudgetStatus] = []
        self.restrictions: dict[str, Restriction] = {}
        self.lowest = lowest_priority(config)
        self.members = subtree_teams(config)
        """Cohort → its subtree's teams and their distance (read every cycle: kept per quota file)."""
        self.active = _any_budget(config)
        """Whether the quota file has any budget (otherwise reviews only prune)."""
        self.record: SpendingBook | None = None
        """A second book never pruned, for a replay's report of every window it saw (`keep_record`)."""
        self.exhausted_at: dict[tuple[str, bool, str, str, int], int] = {}
        """(owner, is cohort, resource, window, window start) → the first review that found the budget spent there
        (epoch ms): when its restriction began. Rolling windows key by the window length they fall in. Kept with the
        record only, so a long-running controller does not grow it."""
        self._pruned_at: int | None = None
        self._warned: set[tuple[str, bool, str, str, int, int]] = set()
        """(owner, is cohort, resource, window, window start, percent) already announced."""

    def reconfigure(self, config: QuotaConfig) -> None:
        self.config = config
        self.lowest = lowest_priority(config)
        self.members = subtree_teams(config)
        self.active = _any_budget(config)

    def keep_record(self) -> None:
        """Keep all spending from now on (and what `load` adds) beyond what budgets read, for a replay's report."""
        self.record = SpendingBook()

    def open(self, key: str, team: str, usage: Mapping[str, int], at: int) -> None:
        self.book.open(key, team, usage, at + self.epoch_ms)
        if self.record is not None:
            self.record.open(key, team, usage, at + self.epoch_ms)

    def close(self, key: str, at: int) -> None:
        self.book.close(key, at + self.epoch_ms)
        if self.record is not None:
            self.record.close(key, at + self.epoch_ms)

    def load(self, intervals: list[UsageInterval]) -> None:
        """Past usage, in epoch milliseconds (the ledger's times), whatever the controller's clock."""
        self.book.load(intervals)
        if self.record is not None:
            self.record.load(intervals)

    def review(self, at: int) -> list[Crossing]:
        """Read every budget at `at`; returns the thresholds crossed for the first time in their window."""
        now = at + self.epoch_ms
        if self._pruned_at is None or now - self._pruned_at >= PRUNE_EVERY_MS or now < self._pruned_at:
            self.book.prune(history_start(self.config, now))
            self._pruned_at = now
        if not self.active:
            self.statuses, self.restrictions = [], {}
            return []
        self.statuses = statuses(self.config, self.book, now, self.members)
        self.restrictions = restrictions(self.config, self.statuses, self.members)
        crossed: list[Crossing] = []
        for status in self.statuses:
            for percent in THRESHOLDS:
                key = (status.owner, status.cohort, status.resource, status.window, status.start, percent)
                # A rolling window's start moves with every review: a crossing is announced once per window length.
                if status.end is None:
                    key = (*key[:4], status.start // max(1, status.span), percent)
                if status.reached(percent) and key not in self._warned:
                    self._warned.add(key)
                    crossed.append((status, percent))
                    if percent == 100 and self.record is not None:  # a replay's report; a cluster keeps none
                        self.exhausted_at.setdefault(key[:5], now)
        return crossed

    def current(self, at: int) -> list[BudgetStatus]:
        """Every budget at `at`, read only (what the admin API and metrics show between cycles)."""
        return statuses(self.config, self.book, at + self.epoch_ms, self.members) if self.active else []

    def next_review(self, at: int) -> int | None:
        due = next_review(self.statuses, at + self.epoch_ms)
        return due - self.epoch_ms if due is not None else None


def _any_budget(config: QuotaConfig) -> bool:
    return any(h.budgets for h in (*config.cohorts, *config.teams))
