"""Which flavor outcome wins (semantics.md, step 2): under either preference a flavor with no possible victims
ranks below every Fit, reclaim and preempt, whatever the borrowing levels, and above NoFit."""

from __future__ import annotations

import itertools

import pytest

from admission.flavors import Mode, Outcome, _preferred
from quota.config import FlavorFungibility, FungibilityPreference

PREFERENCES = [FlavorFungibility(preference=p) for p in FungibilityPreference]


@pytest.mark.parametrize("fungibility", PREFERENCES, ids=lambda f: f.preference.value)
@pytest.mark.parametrize(("no_victims_level", "other_level"), list(itertools.product(range(3), range(3))))
@pytest.mark.parametrize("other", [Mode.FIT, Mode.RECLAIM, Mode.PREEMPT])
def test_no_victims_loses_to_every_fit_reclaim_and_preempt(
    fungibility: FlavorFungibility, no_victims_level: int, other_level: int, other: Mode
) -> None:
    stuck, good = Outcome(Mode.NO_CANDIDATES, no_victims_level), Outcome(other, other_level)
    assert _preferred(good, stuck, fungibility)
    assert not _preferred(stuck, good, fungibility)


@pytest.mark.parametrize("fungibility", PREFERENCES, ids=lambda f: f.preference.value)
def test_no_victims_beats_no_fit(fungibility: FlavorFungibility) -> None:
    assert _preferred(Outcome(Mode.NO_CANDIDATES, 5), Outcome(Mode.NO_FIT, 0), fungibility)
    assert not _preferred(Outcome(Mode.NO_FIT, 0), Outcome(Mode.NO_CANDIDATES, 5), fungibility)
