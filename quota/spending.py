"""Resource spending over time, exact: milli-units × milliseconds, from usage intervals.

Per team and resource the book keeps the cumulative spending S(t) as a piecewise-linear curve: a breakpoint
(time, S at that time, rate from then on) wherever a usage interval opens or closes. What was spent in a window
[a, b) is S(b) − S(a), read with two binary searches, so a budget check costs the same whatever the number of
intervals behind it, and the curve is kept incrementally as work starts and stops (the controller) or rebuilt
from the ledger's intervals (a new leader), with the same result.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from quota.credits import UsageInterval


@dataclass(slots=True)
class _Curve:
    times: list[int] = field(default_factory=list)
    totals: list[int] = field(default_factory=list)
    """S at each breakpoint: milli-unit-milliseconds spent since the curve began."""
    rates: list[int] = field(default_factory=list)
    """Milli-units in use from each breakpoint on (the slope of S)."""

    def at(self, t: int) -> int:
        """S(t); before the first breakpoint nothing was spent (as far as the curve knows)."""
        index = bisect_right(self.times, t) - 1
        if index < 0:
            return self.totals[0] if self.totals else 0
        return self.totals[index] + self.rates[index] * (t - self.times[index])

    def change(self, t: int, delta: int) -> None:
        """The rate changes by `delta` at `t`. Usually `t` is the latest time seen (the controller's clock only goes
        forward); an earlier one (a running workload opened from its admission after past intervals were loaded)
        is inserted where it belongs and every later breakpoint shifted, so the curve stays exact."""
        if not self.times or t > self.times[-1]:
            total = self.at(t) if self.times else 0
            self.times.append(t)
            self.totals.append(total)
            self.rates.append(max(0, self.rate + delta))
            return
        index = bisect_right(self.times, t) - 1
        if index < 0 or self.times[index] != t:
            before = self.rates[index] if index >= 0 else 0
            self.totals.insert(index + 1, self.at(t))
            self.times.insert(index + 1, t)
            self.rates.insert(index + 1, before)
            index += 1
        for later in range(index, len(self.times)):
            self.totals[later] += delta * (self.times[later] - t)
            self.rates[later] = max(0, self.rates[later] + delta)

    @property
    def rate(self) -> int:
        return self.rates[-1] if self.rates else 0

    def prune(self, before: int) -> None:
        """Forget breakpoints no window will read again (keeping the one that `before` falls after)."""
        index = bisect_right(self.times, before) - 1
        if index > 0:
            del self.times[:index], self.totals[:index], self.rates[:index]


class SpendingBook:
    """Spending per team and resource, exact, from usage that opens and closes over time."""

    def __init__(self) -> None:
        self._curves: dict[tuple[str, str], _Curve] = {}
        self._open: dict[str, tuple[str, dict[str, int], int]] = {}

    def open(self, key: str, team: str, usage: Mapping[str, int], at: int) -> None:
        """Workload `key` of `team` holds `usage` (resource → milli-units) from `at` on."""
        if key in self._open:
            self.close(key, at)
        held = {r: q for r, q in usage.items() if q > 0}
        self._open[key] = (team, held, at)
        for resource, quantity in held.items():
            self._curve(team, resource).change(at, quantity)

    def close(self, key: str, at: int) -> None:
        opened = self._open.pop(key, None)
        if opened is None:
            return
        team, held, _ = opened
        for resource, quantity in held.items():
            self._curve(team, resource).change(at, -quantity)

    def load(self, intervals: Iterable[UsageInterval]) -> None:
        """Add the ledger's intervals (closed ones; an open one must carry an end, as CreditBook.load's do)."""
        steps: list[tuple[int, int, str, str, int]] = []
        for interval in intervals:
            if interval.end_ms is None or interval.end_ms <= interval.start_ms or interval.quantity_milli <= 0:
                continue
            steps.append((interval.start_ms, 1, interval.team, interval.resource, interval.quantity_milli))
            steps.append((interval.end_ms, 0, interval.team, interval.resource, -interval.quantity_milli))
        # Ends before starts at one instant: the rate never counts two intervals that only touch.
        for at, _, team, resource, delta in sorted(steps):
            self._curve(team, resource).change(at, delta)

    def spent(self, team: str, resource: str, start: int, end: int) -> int:
        """Milli-unit-milliseconds `team` spent of `resource` in [start, end)."""
        curve = self._curves.get((team, resource))
        if curve is None or end <= start:
            return 0
        return curve.at(end) - curve.at(start)

    def rate(self, team: str, resource: str) -> int:
        """Milli-units of `resource` `team` holds now."""
        curve = self._curves.get((team, resource))
        return curve.rate if curve is not None else 0

    def prune(self, before: int) -> None:
        for curve in self._curves.values():
            curve.prune(before)

    def _curve(self, team: str, resource: str) -> _Curve:
        curve = self._curves.get((team, resource))
        if curve is None:
            curve = self._curves[(team, resource)] = _Curve()
        return curve
