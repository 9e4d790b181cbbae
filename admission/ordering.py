"""In what order a cycle considers the heads of the teams' queues (semantics.md, step 4).

Classical: heads that do not borrow first, then those borrowing from a closer cohort, then higher priority, then
higher fair-share factor, then older, then name. Under fair sharing: a tournament in every cohort, bottom-up, where
the child whose subtree would not borrow wins, then the one with the lowest dominant resource share after
admitting its head; after every pick the cohorts above the picked team look again, because its admission changed
their shares.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from admission.flavors import Assignment
from admission.preemption import Target
from admission.snapshot import Snapshot
from admission.workload import Workload
from quota.tree import Node, ShareKey


@dataclass(slots=True)
class Entry:
    """A head with what nomination found for it."""

    workload: Workload
    team: Node
    assignment: Assignment
    targets: list[Target] = field(default_factory=list)


def order_heads(snapshot: Snapshot, entries: Sequence[Entry]) -> Iterator[Entry]:
    if snapshot.fair_sharing:
        return _FairOrder(snapshot, entries).__iter__()
    return iter(_classical_order(snapshot, entries))


def classical_key(snapshot: Snapshot, entry: Entry) -> tuple[int, int, Fraction, int, str]:
    """The classical order's whole key: borrowing, priority, fair-share factor, age, name."""
    factor = snapshot.factor(entry.workload.team) or Fraction(1)
    w = entry.workload
    return (entry.assignment.borrowing, -w.priority, -factor, w.created_at, w.name)


def _classical_order(snapshot: Snapshot, entries: Sequence[Entry]) -> list[Entry]:
    """`entries` sorted by `classical_key`, reading factors only where borrowing and priority tie.

    Sorting by the key without its factor, then each run of equal borrowing and priority again by factor alone
    (a stable sort keeps age and name in order inside equal factors), gives the whole key's order. Most cycles
    order one head or heads of different priorities, and then need no factor at all (the controller computes
    them only when first read)."""

    def rank(entry: Entry) -> tuple[int, int]:
        return (entry.assignment.borrowing, -entry.workload.priority)

    ordered = sorted(entries, key=lambda e: (*rank(e), e.workload.created_at, e.workload.name))
    start = 0
    while start < len(ordered):
        end = start + 1
        while end < len(ordered) and rank(ordered[end]) == rank(ordered[start]):
            end += 1
        if end - start > 1:
            ordered[start:end] = sorted(
                ordered[start:end], key=lambda e: -(snapshot.factor(e.workload.team) or Fraction(1))
            )
        start = end
    return ordered


def _tiebreak(entry: Entry) -> tuple[int, int, str]:
    w = entry.workload
    return (-w.priority, w.created_at, w.name)


_FairKey = tuple[tuple[bool, ShareKey], int, int, str]
"""At a cohort, a child's candidate: (whether the child's subtree would borrow, its DRS), then the tie-break."""


class _FairOrder:
    """The fair-sharing tournament, kept between picks instead of replayed.

    A candidate's key at a cohort is the share of the cohort's child it comes through, with its head admitted;
    that share reads only the usage inside that child's subtree. A pick charges the winner's team alone, so only the
    cohorts on that team's path can change their winner: each pick refreshes one candidate per level (a heap per
    cohort holds the others' keys as they were), where replaying the whole tournament cost every head of the tree
    a share at every level, after every pick — heads² in a cohort tree. Every charge the cycle makes goes through
    `Snapshot.charge`; the teams charged since a pick are the ones refreshed."""

    def __init__(self, snapshot: Snapshot, entries: Sequence[Entry]) -> None:
        self.snapshot = snapshot
        self.waiting: dict[Node, list[Entry]] = {}
        """Per team, its entries in the order given (one in a cycle; a team that is its own root takes the first,
        a team in a cohort the last: how the replayed tournament read them)."""
        for entry in entries:
            self.waiting.setdefault(entry.team, []).append(entry)
        self.heaps: dict[Node, list[tuple[_FairKey, int, Node, Entry]]] = {}
        self.current: dict[Node, tuple[_FairKey, int, Node, Entry]] = {}
        """Per child node, its live heap item in its parent's heap (older items for it are stale)."""
        self.roots: list[tuple[tuple[int, int, int, str], int, Node, Entry]] = []
        self.current_root: dict[Node, tuple[tuple[int, int, int, str], int, Node, Entry]] = {}
        self.sequence = 0

    def __iter__(self) -> Iterator[Entry]:
        self._build()
        while True:
            roots = self.roots
            while roots and self.current_root.get(roots[0][2]) is not roots[0]:
                heapq.heappop(roots)
            if not roots:
                return
            winner = roots[0][3]
            queue = self.waiting[winner.team]
            queue.pop(next(i for i, e in enumerate(queue) if e is winner))
            charged = len(self.snapshot.charged)
            yield winner  # the caller charges the snapshot before we look again
            changed = {winner.team: None}
            changed.update(dict.fromkeys(self.snapshot.charged[charged:]))
            for team in changed:
                self._refresh_path(team)

    def _build(self) -> None:
        cohorts: dict[Node, None] = {}
        for team in self.waiting:
            if team.parent is None:
                self._refresh_root(team)
                continue
            self._refresh(team)
            cohorts.update(dict.fromkeys(team.ancestors()))
        # Bottom-up: a cohort's candidate is its heap's best, so its children's come first.
        for cohort in sorted(cohorts, key=lambda c: c.height):
            if cohort.parent is None:
                self._refresh_root(cohort)
            else:
                self._refresh(cohort)

    def _refresh_path(self, team: Node) -> None:
        node = team
        while node.parent is not None:
            self._refresh(node)
            node = node.parent
        self._refresh_root(node)

    def _winner(self, node: Node) -> Entry | None:
        if node.is_team:
            queue = self.waiting.get(node)
            if not queue:
                return None
            return queue[0] if node.parent is None else queue[-1]
        heap = self.heaps.get(node)
        while heap and self.current.get(heap[0][2]) is not heap[0]:
            heapq.heappop(heap)
        return heap[0][3] if heap else None

    def _refresh(self, child: Node) -> None:
        """Put `child`'s candidate, with its key as the tree is now, in its parent's heap."""
        assert child.parent is not None
        entry = self._winner(child)
        if entry is None:
            self.current.pop(child, None)
            return
        factor = self.snapshot.factor(child.name) if child.is_team else None
        share = self.snapshot.tree.share_with(child, entry.team, entry.assignment.usage, factor)
        self.sequence += 1
        item = ((share.borrowing, share.sort_key), *_tiebreak(entry)), self.sequence, child, entry
        self.current[child] = item
        heapq.heappush(self.heaps.setdefault(child.parent, []), item)

    def _refresh_root(self, root: Node) -> None:
        entry = self._winner(root)
        if entry is None:
            self.current_root.pop(root, None)
            return
        self.sequence += 1
        item = (entry.assignment.borrowing, *_tiebreak(entry)), self.sequence, root, entry
        self.current_root[root] = item
        heapq.heappush(self.roots, item)
