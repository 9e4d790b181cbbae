"""Partial admission: the largest pod counts (down to each pod set's minCount) that can be admitted.

Counts shrink together: a reduction step `d` of `total` takes ceil(d × delta_i / total) pods from pod set i, so
every pod set reaches its minCount at the last step. The search is a binary search over `d`, which assumes what
fits at a smaller count also fits at a larger reduction — true for quota, which only ever gets easier.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from quota.pod_set import PodSet

R = TypeVar("R")


def can_shrink(pod_sets: Sequence[PodSet]) -> bool:
    return any(ps.min_count is not None and ps.min_count < ps.count for ps in pod_sets)


def counts_at(pod_sets: Sequence[PodSet], step: int, total: int) -> dict[str, int]:
    counts = {}
    for ps in pod_sets:
        delta = ps.count - ps.min_count if ps.min_count is not None and ps.min_count < ps.count else 0
        counts[ps.name] = ps.count - (-(-step * delta // total) if total else 0)
    return counts


def search(pod_sets: Sequence[PodSet], attempt: Callable[[dict[str, int]], R | None]) -> R | None:
    """The result of `attempt` at the smallest reduction that works, or None when even minCount fails.

    The full count (step 0) is the caller's business: it was tried before, with preemption.
    """
    total = sum(ps.count - ps.min_count for ps in pod_sets if ps.min_count is not None and ps.min_count < ps.count)
    if total == 0:
        return None
    low, high = 1, total
    best: R | None = None
    while low <= high:
        middle = (low + high) // 2
        result = attempt(counts_at(pod_sets, middle, total))
        if result is not None:
            best = result
            high = middle - 1
        else:
            low = middle + 1
    return best
