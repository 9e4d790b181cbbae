"""The garbage collector tuned for a long-running controller that holds every object it watches.

A controller keeps the latest body of every Job it manages: with 15,000 Jobs that is about a million small dicts
and lists, which live for minutes, while each watch event allocates a hundred more that die within the
millisecond. With CPython's default thresholds (700, 10, 10) the young generation is collected every few events
and survivors are promoted before they die; every full collection then walks the whole heap again. Measured in
bench/e2e.py, garbage collection was an eighth of the controller's CPU.

Two measures: larger thresholds, so most short-lived objects are freed by their reference count before a
collection sees them, and `gc.freeze()` after start-up and after a large load (a leader's first list), which moves
everything alive then out of the collector's sight: full collections walk only what came later. Frozen objects are
still freed by their reference count when they go (a replaced Job body); only a cycle among them would wait.
"""

from __future__ import annotations

import gc

#: Allocations (net of deallocations) between young collections, and collections between older ones.
THRESHOLDS = (20_000, 20, 20)


def tune_collector() -> None:
    """Larger generations for a process that allocates in bursts and keeps a large, long-lived heap."""
    gc.set_threshold(*THRESHOLDS)


def freeze_what_is_alive() -> None:
    """Collect once, then move every object alive now out of later collections (start-up, a large load)."""
    gc.collect()
    gc.freeze()
