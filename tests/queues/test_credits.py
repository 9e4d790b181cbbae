"""Fair-share credits against hand-computed values (half-life decay, normalised shares, factor, credit)."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from math import isclose, log

from quota.credits import CreditBook, UsageInterval, normalised_shares
from quota.loader import load_config_text

HOUR = 3_600_000
CONFIG = load_config_text(
    """
flavors: [{name: f}]
fairSharing: {enabled: true, usageHalfLife: 1h}
cohorts:
  - {name: org}
  - {name: research, parent: org, fairSharing: {weight: 3}}
teams:
  - name: nlp
    parent: research
    fairSharing: {weight: 2}
    quotas: [{flavor: f, resources: {nvidia.com/gpu: {nominal: 4}}}]
  - {name: vision, parent: research, quotas: [{flavor: f, resources: {nvidia.com/gpu: {nominal: 4}}}]}
  - {name: ops, parent: org, quotas: [{flavor: f, resources: {nvidia.com/gpu: {nominal: 4}, cpu: {nominal: 8}}}]}
"""
)


def test_shares_divide_weights_down_the_tree() -> None:
    shares = normalised_shares(CONFIG)
    # research gets 3/4 of org, ops 1/4; inside research nlp 2/3 and vision 1/3.
    assert shares == {"nlp": Decimal("0.5"), "vision": Decimal("0.25"), "ops": Decimal("0.25")}


def test_decay_of_one_gpu_hour() -> None:
    book = CreditBook(CONFIG)
    book.open("w", "nlp", {"nvidia.com/gpu": 1000, "cpu": 4000}, 0)
    book.close("w", HOUR)
    # ∫0..1h 2^-(1h-t)/1h dt = 3600 s / ln 2 × (1 − 1/2); cpu weighs nothing by default.
    expected = 3600 / log(2) * 0.5
    assert isclose(float(book.usage(HOUR)["nlp"]), expected, rel_tol=1e-12)
    # One half-life later it is worth half as much.
    assert isclose(float(book.usage(2 * HOUR)["nlp"]), expected / 2, rel_tol=1e-12)


def test_open_intervals_accrue_and_factor_follows_slurm() -> None:
    book = CreditBook(CONFIG)
    book.open("a", "nlp", {"nvidia.com/gpu": 3000}, 0)
    book.open("b", "ops", {"nvidia.com/gpu": 1000}, 0)
    credits = book.credits(HOUR)
    nlp, ops, vision = credits["nlp"], credits["ops"], credits["vision"]
    assert isclose(float(nlp.usage_share), 0.75) and isclose(float(ops.usage_share), 0.25)
    assert isclose(float(nlp.factor), 2 ** (-0.75 / 0.5), rel_tol=1e-12)
    assert isclose(float(ops.factor), 2 ** (-1.0), rel_tol=1e-12)
    assert vision.factor == 1 and vision.credit == Decimal("0.25"), "no usage: F = 1, all of its share to come"
    assert isclose(float(nlp.credit), 0.5 - 0.75)
    assert isinstance(book.factors(HOUR)["nlp"], Fraction)


def test_rebuilt_from_the_ledger_gives_the_same_credits() -> None:
    live = CreditBook(CONFIG)
    live.open("a", "nlp", {"nvidia.com/gpu": 2000}, 0)
    live.close("a", 2 * HOUR)
    live.open("b", "vision", {"nvidia.com/gpu": 1000}, HOUR)
    replayed = CreditBook(CONFIG)
    replayed.load(
        [
            UsageInterval("nlp", "nvidia.com/gpu", 2000, 0, 2 * HOUR),
            UsageInterval("vision", "nvidia.com/gpu", 1000, HOUR, None),
        ]
    )
    for team in ("nlp", "vision", "ops"):
        a, b = live.credits(3 * HOUR)[team], replayed.credits(3 * HOUR)[team]
        assert abs(a.factor - b.factor) < Decimal("1e-25")
        assert abs(a.usage - b.usage) < Decimal("1e-20")


def test_factors_read_later_are_those_of_the_moment_they_were_asked_for() -> None:
    book = CreditBook(CONFIG)
    book.open("a", "nlp", {"nvidia.com/gpu": 3000}, 0)
    book.open("b", "ops", {"nvidia.com/gpu": 1000}, 0)
    eager = book.factors(HOUR)
    lazy = book.factors_when_read(HOUR)
    # The book moves on before anyone reads them: they must not follow it.
    book.close("a", 2 * HOUR)
    book.open("c", "vision", {"nvidia.com/gpu": 8000}, 2 * HOUR)
    assert book.factors(HOUR) != eager, "the book itself has moved (the test would prove nothing otherwise)"
    assert dict(lazy) == eager
    assert lazy.get("nlp") == eager["nlp"] and lazy.get("nobody") is None and len(lazy) == len(eager)
