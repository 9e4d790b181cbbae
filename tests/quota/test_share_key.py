"""A dominant share's sort key orders shares exactly as their fractions do: the integer it puts before the exact
share (rounded down) may only break ties the fractions break the same way."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.tree import DominantShare
from tests.admission.fair_reference import plain_share_key as exact

fractions = st.fractions(min_value=0, max_value=10**6, max_denominator=10**9)
# Shares a hair apart (within 2**-32 of each other) are where the rounded integer ties and the fraction decides.
near = st.tuples(fractions, st.integers(-3, 3), st.integers(33, 80)).map(
    lambda t: max(Fraction(0), t[0] + Fraction(t[1], 2 ** t[2]))
)
shares = st.builds(
    DominantShare,
    st.one_of(st.just(Fraction(0)), fractions),
    st.one_of(fractions, near),
    st.just("nvidia.com/gpu"),
    st.booleans(),
)


@settings(max_examples=2000, deadline=None)
@given(shares, shares)
def test_the_key_orders_shares_as_their_fractions_do(a: DominantShare, b: DominantShare) -> None:
    assert (a.sort_key < b.sort_key) == (exact(a) < exact(b))
    assert (a.sort_key == b.sort_key) == (exact(a) == exact(b))
    assert (a.sort_key <= b.sort_key) == (exact(a) <= exact(b))


def test_shares_closer_than_the_rounding_are_told_apart_by_the_fraction() -> None:
    low = DominantShare(Fraction(1), Fraction(1, 3), "nvidia.com/gpu", True)
    high = DominantShare(Fraction(1), Fraction(1, 3) + Fraction(1, 2**40), "nvidia.com/gpu", True)
    assert low.sort_key[1] == high.sort_key[1]  # the same rounded integer: only the fraction orders them
    assert low.sort_key < high.sort_key
