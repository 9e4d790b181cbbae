"""GPU-hour budgets (Slurm's GrpTRESMins, per calendar or rolling window): windows, spending, and what a spent
budget restricts.

A budget of a team or a cohort (whose budget caps the sum of its subtree's teams) gives resource-hours per window.
Spending is the exact integer milli-unit-milliseconds of the owner's usage intervals clipped to the window
(quota/spending.py). Once spending reaches the budget, `onExhausted` restricts the team's (or every subtree
team's) *new* admissions: running work is never stopped by a budget. All times are epoch milliseconds, UTC.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from quota.config import BlockAbove, Budget, BudgetWindow, OnExhausted, QuotaConfig
from quota.spending import SpendingBook

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
#: How far back spending is kept beyond the longest rolling window: past the start of any calendar month, so a
#: quota file that switches a budget to a calendar window mid-window is exact from the next cycle on.
KEEP_MS = 32 * DAY_MS
THRESHOLDS = (80, 100)
"""The percentages of a budget at which kuota warns (Events, the journal)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def window_bounds(budget: Budget, now: int) -> tuple[int, int | None]:
    """[start, end) of the window `now` falls in; a rolling window has no end (it slides)."""
    if budget.rolling is not None:
        return now - budget.rolling, None
    if budget.window is BudgetWindow.DAY:
        start = now - now % DAY_MS
        return start, start + DAY_MS
    if budget.window is BudgetWindow.WEEK:
        days = now // DAY_MS
        monday = days - (days + 3) % 7  # 1970-01-01 was a Thursday (ISO weekday 3 counting Monday as 0)
        return monday * DAY_MS, (monday + 7) * DAY_MS
    moment = _EPOCH + timedelta(milliseconds=now)
    first = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (
        first.replace(year=first.year + 1, month=1) if first.month == 12 else first.replace(month=first.month + 1)
    )
    return _ms(first), _ms(following)


def epoch_ms_of(moment: datetime) -> int:
    """An aware datetime as epoch milliseconds, exactly (no float)."""
    return _ms(moment)


def _ms(moment: datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def history_start(config: QuotaConfig, now: int) -> int:
    """The earliest time any budget of `config` can read at `now` (with margin): what the ledger is read from."""
    longest = max((b.rolling or 0 for h in (*config.cohorts, *config.teams) for b in h.budgets), default=0)
    return now - max(KEEP_MS, longest)


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    owner: str
    cohort: bool
    resource: str
    window: str
    """`day`, `week`, `month` or `rolling:DURATION`."""
    start: int
    end: int | None
    span: int
    """The window's length in milliseconds."""
    limit: int
    """Milli-unit-milliseconds (the budget's resource-hours × 1000 × 3,600,000)."""
    spent: int
    """Milli-unit-milliseconds spent in [start, now)."""
    rate: int
    """Milli-units the owner holds now: how fast it spends."""
    on_exhausted: OnExhausted
    block_above: BlockAbove

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.spent)

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.limit

    def reached(self, percent: int) -> bool:
        """Whether spending reached `percent` of the budget (exact: spent × 100 ≥ limit × percent)."""
        return self.spent * 100 >= self.limit * percent

    @property
    def owner_text(self) -> str:
        return f"{'cohort' if self.cohort else 'team'} {self.owner}"

    def hours(self, value: int) -> str:
        return format_hours(value)

    def effect(self) -> str:
        if self.on_exhausted is OnExhausted.LOWER_PRIORITY:
            return "its workloads are admitted only as the lowest priority, preemptible by anyone"
        if self.on_exhausted is OnExhausted.NO_BORROWING:
            return "no admission that borrows" + (" beyond the cohort" if self.cohort else "")
        if self.block_above is BlockAbove.ZERO:
            return "no new admissions"
        return "no new admission above nominal quota"

    def until(self) -> str:
        if self.end is not None:
            return f"until {datetime.fromtimestamp(self.end // 1000, UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
        return "until its spending in the rolling window falls below the budget"

    def message(self) -> str:
        return (
            f"budget spent: {self.owner_text}'s {self.window} budget of {self.hours(self.limit)} {self.resource}-hours "
            f"({self.hours(self.spent)} spent): {self.effect()} {self.until()}"
        )


def format_hours(milli_unit_ms: int) -> str:
    """Milli-unit-milliseconds as resource-hours, to the thousandth (rounded down): `10000`, `12.5`, `0.001`."""
    milli_hours = milli_unit_ms // HOUR_MS
    whole, frac = divmod(milli_hours, 1000)
    return str(whole) if not frac else f"{whole}.{frac:03d}".rstrip("0")


def holders(config: QuotaConfig) -> Iterator[tuple[str, bool, Budget]]:
    for cohort in config.cohorts:
        for budget in cohort.budgets:
            yield cohort.name, True, budget
    for team in config.teams:
        for budget in team.budgets:
            yield team.name, False, budget


def subtree_teams(config: QuotaConfig) -> dict[str, list[tuple[str, int]]]:
    """Cohort → its subtree's teams with their distance from it (a direct member is 1)."""
    parents = {c.name: c.parent for c in config.cohorts}
    out: dict[str, list[tuple[str, int]]] = {c.name: [] for c in config.cohorts}
    for team in config.teams:
        cohort, depth, seen = team.parent, 1, set()
        while cohort is not None and cohort in out and cohort not in seen:
            seen.add(cohort)
            out[cohort].append((team.name, depth))
            cohort, depth = parents.get(cohort), depth + 1
    return out


def statuses(
    config: QuotaConfig, book: SpendingBook, now: int, members: Mapping[str, list[tuple[str, int]]] | None = None
) -> list[BudgetStatus]:
    """Every budget of `config` at `now`, in file order (cohorts first); `members`: `subtree_teams(config)`, when
    the caller keeps it."""
    members = members if members is not None else subtree_teams(config)
    out = []
    for owner, is_cohort, budget in holders(config):
        start, end = window_bounds(budget, now)
        teams = [name for name, _ in members[owner]] if is_cohort else [owner]
        for resource, hours in budget.resources.items():
            out.append(
                BudgetStatus(
                    owner=owner,
                    cohort=is_cohort,
                    resource=resource,
                    window=budget.window_name,
                    start=start,
                    end=end,
                    span=(end - start) if end is not None else now - start,
                    limit=hours * HOUR_MS,
                    spent=sum(book.spent(team, resource, start, now) for team in teams),
                    rate=sum(book.rate(team, resource) for team in teams),
                    on_exhausted=budget.on_exhausted,
                    block_above=budget.blocks_above,
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class Restriction:
    """What spent budgets allow a team's new admissions; the engine applies it (admission/cycle.py)."""

    admit: bool = True
    """False: no new admission at all (`block` with `blockAbove: zero`)."""
    max_borrow: int | None = None
    """The highest borrowing level an admission may have (admission.flavors.Outcome.borrow: 0 is within the team's
    nominal quota, d within the quota of the cohort d levels up); None: no limit."""
    lowest_priority: bool = False
    """The team's work counts as the lowest priority (`lowerPriority`)."""
    reason: str = field(default="", compare=False)
    """Not compared: spending grows every instant, and only a change of what is allowed lets parked work look again."""

    def allows(self, borrowing: int) -> bool:
        return self.admit and (self.max_borrow is None or borrowing <= self.max_borrow)


def restrictions(
    config: QuotaConfig, found: Iterable[BudgetStatus], members: Mapping[str, list[tuple[str, int]]] | None = None
) -> dict[str, Restriction]:
    """Per team, what its exhausted budgets (and its cohorts') restrict; teams with none are left out."""
    members = members if members is not None else subtree_teams(config)
    parts: dict[str, list[tuple[BudgetStatus, int]]] = {}
    for status in found:
        if not status.exhausted:
            continue
        reached = members[status.owner] if status.cohort else [(status.owner, 0)]
        for team, depth in reached:
            parts.setdefault(team, []).append((status, depth))
    out = {}
    for team, spent in parts.items():
        admit, lowest, max_borrow = True, False, None
        for status, depth in spent:
            if status.on_exhausted is OnExhausted.LOWER_PRIORITY:
                lowest = True
                continue
            if status.on_exhausted is OnExhausted.BLOCK and status.block_above is BlockAbove.ZERO:
                admit = False
                continue
            # noBorrowing on a cohort keeps its subtree within the cohort's quota; on a team (and `block` above
            # nominal anywhere) within the team's own nominal quota.
            level = depth if status.on_exhausted is OnExhausted.NO_BORROWING else 0
            max_borrow = level if max_borrow is None else min(max_borrow, level)
        reason = "; ".join(dict.fromkeys(status.message() for status, _ in spent))
        out[team] = Restriction(admit, max_borrow, lowest, reason)
    return out


def lowest_priority(config: QuotaConfig) -> int:
    """Below every priority class of the file (and below 0, a workload without a class)."""
    return min([0, *(c.value for c in config.priority_classes)]) - 1


def next_review(found: Iterable[BudgetStatus], now: int) -> int | None:
    """The earliest time after `now` at which a budget may cross a threshold or its window rolls over, were
    nothing to start or stop before then (starts and stops bring their own cycles)."""
    times: list[int] = []
    for status in found:
        if status.end is not None and status.spent > 0:
            times.append(status.end)
        if status.end is None and status.exhausted:
            times.append(now + 60_000)  # a rolling window sheds its oldest spending gradually: look again each minute
        if status.rate <= 0:
            continue
        for percent in THRESHOLDS:
            missing = -(-(status.limit * percent - status.spent * 100) // 100)  # ceiling, exact
            if missing > 0:
                times.append(now + max(1, -(-missing // status.rate)))
                break
    later = [t for t in times if t > now]
    return min(later) if later else None


def by_owner(found: Iterable[BudgetStatus]) -> Mapping[str, list[BudgetStatus]]:
    out: dict[str, list[BudgetStatus]] = {}
    for status in found:
        out.setdefault(status.owner, []).append(status)
    return out


@dataclass(frozen=True, slots=True)
class WindowSpending:
    """One budget in one window of a replayed period: what was spent there (before the period included), what
    remained at the window's end (or the period's), and when the budget was first found spent."""

    owner: str
    cohort: bool
    resource: str
    window: str
    start: int
    end: int
    """The window's end, or the period's where the period ends first (a rolling window: the period's end)."""
    limit: int
    spent: int
    exhausted_at: int | None

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.spent)

    @property
    def label(self) -> str:
        """The window as people name it: `2021-03` (month), `2021-W09` (ISO week), `2021-03-04` (day), `24h`."""
        moment = _EPOCH + timedelta(milliseconds=self.start)
        if self.window == BudgetWindow.MONTH.value:
            return moment.strftime("%Y-%m")
        if self.window == BudgetWindow.WEEK.value:
            year, week, _ = moment.isocalendar()
            return f"{year}-W{week:02d}"
        if self.window == BudgetWindow.DAY.value:
            return moment.strftime("%Y-%m-%d")
        return self.window.removeprefix("rolling:")

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: hours as text to the thousandth (rounded down), and the exact milli-unit-milliseconds."""
        return {
            "owner": self.owner,
            "scope": "cohort" if self.cohort else "team",
            "resource": self.resource,
            "window": self.window,
            "label": self.label,
            "start": _iso(self.start),
            "end": _iso(self.end),
            "budget_hours": format_hours(self.limit),
            "spent_hours": format_hours(self.spent),
            "remaining_hours": format_hours(self.remaining),
            "spent_milli_unit_ms": self.spent,
            "exhausted": self.exhausted_at is not None,
            "exhausted_at": _iso(self.exhausted_at) if self.exhausted_at is not None else None,
        }


def _iso(ms: int) -> str:
    moment = _EPOCH + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ms % 1000:03d}Z" if ms % 1000 else "Z")


def period_spending(
    config: QuotaConfig,
    book: SpendingBook,
    exhausted_at: Mapping[tuple[str, bool, str, str, int], int],
    start: int,
    end: int,
) -> list[WindowSpending]:
    """Every budget of `config` in every calendar window that overlaps [start, end) (a rolling budget: its window
    ending at `end`), in file order then time; `book` holds all spending of the period and before it, and
    `exhausted_at` the first instant each window's budget was found spent (BudgetKeeper.exhausted_at)."""
    members = subtree_teams(config)
    out: list[WindowSpending] = []
    for owner, is_cohort, budget in holders(config):
        teams = [name for name, _ in members[owner]] if is_cohort else [owner]
        windows: list[tuple[int, int]] = []
        if budget.rolling is not None:
            windows.append((end - budget.rolling, end))
        else:
            at = start
            while at < end or not windows:
                window_start, window_end = window_bounds(budget, at)
                assert window_end is not None
                windows.append((window_start, min(window_end, end)))
                at = window_end
        for resource, hours in budget.resources.items():
            for window_start, window_end in windows:
                if budget.rolling is not None:
                    found = [
                        t for k, t in exhausted_at.items() if k[:4] == (owner, is_cohort, resource, budget.window_name)
                    ]
                    first = min(found) if found else None
                else:
                    first = exhausted_at.get((owner, is_cohort, resource, budget.window_name, window_start))
                out.append(
                    WindowSpending(
                        owner=owner,
                        cohort=is_cohort,
                        resource=resource,
                        window=budget.window_name,
                        start=window_start,
                        end=window_end,
                        limit=hours * HOUR_MS,
                        spent=sum(book.spent(team, resource, window_start, window_end) for team in teams),
                        exhausted_at=first,
                    )
                )
    return out
