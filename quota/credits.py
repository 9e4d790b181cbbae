"""Fair-share credits: Slurm's classic fair-share factor over decayed, weighted usage.

Each team's usage is resource-seconds weighted by `fairSharing.resourceWeights` (GPUs dominate by default),
decayed with `usageHalfLife`: an interval [a, b] using q per second contributes
q · h/ln2 · (2^(−(now−b)/h) − 2^(−(now−a)/h)) at time `now`. From there, per team:

* U — its decayed usage as a fraction of the whole cluster's;
* S — its normalised share: its fraction of its siblings' weights times its parent's share;
* F = 2^(−U/S), the fair-share factor, in (0, 1]; credit = S − U (positive: burst to come).

The arithmetic is Decimal at a fixed precision, so the same ledger always yields the same factors, on any
machine and across restarts; ordering compares them as exact fractions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Context, Decimal, localcontext
from fractions import Fraction
from functools import lru_cache

from quota.config import QuotaConfig

PRECISION = 34
_LN2 = Context(prec=PRECISION).ln(Decimal(2))


@dataclass(frozen=True, slots=True)
class UsageInterval:
    team: str
    resource: str
    quantity_milli: int
    start_ms: int
    end_ms: int | None = None
    """None while the workload still runs."""


@dataclass(frozen=True, slots=True)
class TeamCredit:
    team: str
    usage: Decimal
    """Decayed weighted resource-seconds."""
    usage_share: Decimal
    """U: fraction of the cluster's decayed usage."""
    share: Decimal
    """S: normalised share from the weights of the tree."""
    factor: Decimal
    """F = 2^(−U/S)."""

    @property
    def credit(self) -> Decimal:
        return self.share - self.usage_share

    @property
    def factor_fraction(self) -> Fraction:
        return Fraction(self.factor)


def resource_weight(config: QuotaConfig, resource: str) -> Decimal:
    weights = config.fair_sharing.resource_weights
    if weights:
        return weights.get(resource, Decimal(0))
    # Without explicit weights GPUs are what fair share is about; everything else rides along for free.
    return Decimal(1) if resource.endswith("gpu") or "/gpu" in resource else Decimal(0)


def normalised_shares(config: QuotaConfig) -> dict[str, Decimal]:
    """S per team: weights divided down the tree, top-level siblings sharing the whole cluster."""
    with localcontext(Context(prec=PRECISION)):
        children: dict[str | None, list[tuple[str, Decimal, bool]]] = {}
        for cohort in config.cohorts:
            children.setdefault(cohort.parent, []).append((cohort.name, cohort.fair_sharing.weight, False))
        for team in config.teams:
            children.setdefault(team.parent, []).append((team.name, team.fair_sharing.weight, True))
        shares: dict[str, Decimal] = {}

        def descend(parent: str | None, share: Decimal) -> None:
            siblings = children.get(parent, [])
            total = sum((w for _, w, _ in siblings), Decimal(0))
            for name, weight, is_team in siblings:
                child_share = share * weight / total if total > 0 else Decimal(0)
                if is_team:
                    shares[name] = child_share
                else:
                    descend(name, child_share)

        descend(None, Decimal(1))
        return shares


@lru_cache(maxsize=8192)
def _decay(elapsed_ms: int, half_life_ms: int) -> Decimal:
    """2^(−elapsed/h). Cached: events land on whole seconds, so the same few gaps recur all the time."""
    with localcontext(Context(prec=PRECISION)):
        return (-(Decimal(elapsed_ms) / Decimal(half_life_ms)) * _LN2).exp()


class CreditBook:
    """Decayed usage per team, from usage intervals (the ledger's, or the simulator's), kept incrementally.

    Per team one accumulator (value A at time t, current rate R): between changes the usage is
    A·d + R·h/ln2·(1 − d) with d = 2^(−(now − t)/h), so opening or closing an interval, or reading every
    team's usage, costs one exponential per team — never one per interval.
    """

    def __init__(self, config: QuotaConfig) -> None:
        self.config = config
        self.half_life_ms = max(1, config.fair_sharing.usage_half_life)
        self._value: dict[str, Decimal] = {}
        self._rate: dict[str, Decimal] = {}
        self._at: dict[str, int] = {}
        self._open: dict[str, tuple[str, Decimal]] = {}
        self._shares = normalised_shares(config)

    def reconfigure(self, config: QuotaConfig) -> None:
        self.config = config
        self.half_life_ms = max(1, config.fair_sharing.usage_half_life)
        self._shares = normalised_shares(config)

    def rate(self, usage: Mapping[str, int]) -> Decimal:
        """Weighted units per second for a workload holding `usage` (resource → milli-units)."""
        return sum((resource_weight(self.config, r) * Decimal(q) / 1000 for r, q in usage.items()), Decimal(0))

    def open(self, key: str, team: str, usage: Mapping[str, int], at_ms: int) -> None:
        rate = self.rate(usage)
        self._open[key] = (team, rate)
        self._advance(team, at_ms)
        self._rate[team] = self._rate.get(team, Decimal(0)) + rate

    def close(self, key: str, at_ms: int) -> None:
        opened = self._open.pop(key, None)
        if opened is None:
            return
        team, rate = opened
        self._advance(team, at_ms)
        self._rate[team] = self._rate.get(team, Decimal(0)) - rate

    def load(self, intervals: Iterable[UsageInterval]) -> None:
        """Rebuild from the ledger: replay every start and end in time order (open intervals keep accruing)."""
        steps: list[tuple[int, int, str, str, Mapping[str, int]]] = []
        for index, interval in enumerate(intervals):
            key = f"ledger:{index}"
            held = {interval.resource: interval.quantity_milli}
            steps.append((interval.start_ms, 1, key, interval.team, held))
            if interval.end_ms is not None:
                steps.append((interval.end_ms, 0, key, interval.team, held))
        for at, opening, key, team, usage in sorted(steps, key=lambda s: (s[0], s[1], s[2])):
            if opening:
                self.open(key, team, usage, at)
            else:
                self.close(key, at)

    def usage(self, now_ms: int) -> dict[str, Decimal]:
        with localcontext(Context(prec=PRECISION)):
            out = {}
            for team, value in self._value.items():
                decay = self._decay(now_ms - self._at[team])
                out[team] = value * decay + self._rate.get(team, Decimal(0)) * self._scale() * (1 - decay)
            return out

    def credits(self, now_ms: int) -> dict[str, TeamCredit]:
        usage, total = self._usage_and_total(now_ms)
        return {team.name: self._credit(team.name, usage, total) for team in self.config.teams}

    def _usage_and_total(self, now_ms: int) -> tuple[dict[str, Decimal], Decimal]:
        usage = self.usage(now_ms)
        with localcontext(Context(prec=PRECISION)):
            return usage, sum(usage.values(), Decimal(0))

    def _credit(self, team: str, usage: Mapping[str, Decimal], total: Decimal) -> TeamCredit:
        """One team's credit, given every team's decayed usage and their total (each team's is independent)."""
        with localcontext(Context(prec=PRECISION)):
            used = usage.get(team, Decimal(0))
            fraction = used / total if total > 0 else Decimal(0)
            share = self._shares.get(team, Decimal(0))
            if fraction == 0:
                factor = Decimal(1)
            elif share == 0:
                factor = Decimal(0)
            else:
                factor = (-(fraction / share) * _LN2).exp()
            return TeamCredit(team, used, fraction, share, factor)

    def factors(self, now_ms: int) -> dict[str, Fraction]:
        return {name: credit.factor_fraction for name, credit in self.credits(now_ms).items()}

    def factors_when_read(self, now_ms: int) -> Mapping[str, Fraction]:
        """`factors(now_ms)`, computed the first time they are read, from the book as it is now.

        Exactly the values `factors(now_ms)` gives at this moment, however the book changes before they are read:
        the accumulators are copied (three small dicts). A cycle reads factors only when it orders two heads by
        them (ties of borrowing and priority) or compares shares under fair sharing; most cycles of a large
        replay do neither, and computing an exponential per team for each was a quarter of the run."""
        frozen = CreditBook.__new__(CreditBook)
        frozen.config = self.config
        frozen.half_life_ms = self.half_life_ms
        frozen._value = dict(self._value)
        frozen._rate = dict(self._rate)
        frozen._at = dict(self._at)
        frozen._open = {}
        frozen._shares = self._shares
        return _FactorsWhenRead(frozen, now_ms)

    # -- arithmetic ---------------------------------------------------------------------------------------------

    def _scale(self) -> Decimal:
        """h/ln2 in seconds: the integral of 2^(−t/h) from 0 to ∞."""
        return Decimal(self.half_life_ms) / 1000 / _LN2

    def _decay(self, elapsed_ms: int) -> Decimal:
        """2^(−elapsed/h)."""
        return _decay(elapsed_ms, self.half_life_ms)

    def _advance(self, team: str, at_ms: int) -> None:
        """Bring a team's accumulator to `at_ms` (an earlier time leaves it where it is)."""
        last = self._at.get(team)
        if last is None:
            self._value[team] = Decimal(0)
            self._at[team] = at_ms
            return
        if at_ms <= last:
            return
        with localcontext(Context(prec=PRECISION)):
            decay = self._decay(at_ms - last)
            rate = self._rate.get(team, Decimal(0))
            self._value[team] = self._value[team] * decay + rate * self._scale() * (1 - decay)
        self._at[team] = at_ms


class _FactorsWhenRead(Mapping[str, Fraction]):
    """Team → fair-share factor of a frozen book at one time: every team's decayed usage on the first read (a
    factor needs their total), each team's factor (an exponential) only when that team is read — a cycle under
    fair sharing reads those of the teams with heads, not all of them."""

    __slots__ = ("_book", "_factors", "_now", "_teams", "_total", "_usage")

    def __init__(self, book: CreditBook, now_ms: int) -> None:
        self._book = book
        self._now = now_ms
        self._teams = {team.name: None for team in book.config.teams}
        self._factors: dict[str, Fraction] = {}
        self._usage: dict[str, Decimal] | None = None
        self._total = Decimal(0)

    def _factor(self, team: str) -> Fraction:
        factor = self._factors.get(team)
        if factor is None:
            if self._usage is None:
                self._usage, self._total = self._book._usage_and_total(self._now)
            factor = self._factors[team] = self._book._credit(team, self._usage, self._total).factor_fraction
        return factor

    def __getitem__(self, team: str) -> Fraction:
        if team not in self._teams:
            raise KeyError(team)
        return self._factor(team)

    def get(self, team: str, default: object = None) -> object:  # type: ignore[override]
        return self._factor(team) if team in self._teams else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._teams)

    def __len__(self) -> int:
        return len(self._teams)
