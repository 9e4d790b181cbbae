"""What the searches of one cycle's nominations read alike, read once.

While a cycle nominates its heads nothing changes for good: every search removes its victims and puts them back, so
the quota tree and the running work are the same at the start of each. The heads of one cohort therefore walk the
same borrowing teams and merge the same candidate orders; in a saturated cohort of 500 teams that was a hundred
sources walked and merged per head. Here a cohort's sources and their merged order are kept for the nominations and
read from the front by every search (each still skips what it has taken out itself, and classifies for its own
preemptor). Nothing here outlives the nominations: once heads are charged, the tree has moved.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from admission.running import CandidateKey
from quota.tree import FlavorResource, Node

T = TypeVar("T")

SegmentKey = tuple[int, int, frozenset[FlavorResource]]
"""(id of the cohort, id of the subtree skipped below it or 0, the contested flavor/resources)."""
StreamKey = tuple[int, int, frozenset[FlavorResource], bool, int | None]
"""A segment's key, whether the candidates are evicting, and the priority they must be below (None: any)."""


class Replay(Generic[T]):
    """An iterator's items, produced once and replayed to every reader (each from the start)."""

    __slots__ = ("_done", "_items", "_seen")

    def __init__(self, items: Iterator[T]) -> None:
        self._items = items
        self._seen: list[T] = []
        self._done = False

    def __iter__(self) -> Iterator[T]:
        index = 0
        seen = self._seen
        while True:
            if index < len(seen):
                yield seen[index]
                index += 1
            elif self._done or not self.pull():
                return

    def __bool__(self) -> bool:
        return bool(self._seen) or self.pull()

    def pull(self) -> bool:
        """Produce one more item; False once there are none."""
        for item in self._items:
            self._seen.append(item)
            return True
        self._done = True
        return False


class SharedReads:
    """The nominations' shared reads: per cohort segment, its source teams; per stream, its merged candidates."""

    __slots__ = ("streams", "teams")

    def __init__(self) -> None:
        self.teams: dict[SegmentKey, list[Node]] = {}
        self.streams: dict[StreamKey, Replay[tuple[CandidateKey, Node]]] = {}
