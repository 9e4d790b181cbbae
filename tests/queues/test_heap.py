"""The collector's tuning: what is alive at a freeze leaves the collections, and is still freed when dropped."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from queues.heap import THRESHOLDS, freeze_what_is_alive, tune_collector


class _Body:
    """Stands for a Job body the controller keeps (a class instance, so it can be weakly referenced)."""


@pytest.fixture
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_collector")
def test_frozen_objects_leave_the_collections_and_are_freed_by_their_count() -> None:
    kept = _Body()
    before = gc.get_freeze_count()
    freeze_what_is_alive()
    assert gc.get_freeze_count() > before
    assert not any(o is kept for o in gc.get_objects())  # out of every generation the collector walks
    gone = weakref.ref(kept)
    del kept
    assert gone() is None  # reference counting frees it at once, frozen or not


@pytest.mark.usefixtures("restored_collector")
def test_objects_made_after_a_freeze_are_collected_as_usual() -> None:
    freeze_what_is_alive()
    later = _Body()
    assert any(o is later for o in gc.get_objects())


@pytest.mark.usefixtures("restored_collector")
def test_the_young_generation_is_larger_than_the_default() -> None:
    tune_collector()
    assert gc.get_threshold() == THRESHOLDS
    assert THRESHOLDS[0] > 700
