"""In what order a cycle considers the heads of the teams' queues (semantics.md, step 4).

Classical: heads that do not borrow first, then those borrowing from a closer cohort, then higher priority, then
higher fair-share factor, then older, then name. Under fair sharing: a tournament in every cohort, bottom-up, where
the child whose subtree would not borrow wins, then the one with the lowest dominant resource share after
admitting its head; recomputed after every pick because each admission changes the shares.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from admission.flavors import Assignment
from admission.preemption import Target
from admission.snapshot import Snapshot
from admission.workload import Workload
from quota.tree import Node


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
    return iter(sorted(entries, key=lambda e: classical_key(snapshot, e)))


def classical_key(snapshot: Snapshot, entry: Entry) -> tuple[int, int, Fraction, int, str]:
    factor = snapshot.factor(entry.workload.team) or Fraction(1)
    w = entry.workload
    return (entry.assignment.borrowing, -w.priority, -factor, w.created_at, w.name)


def _tiebreak(entry: Entry) -> tuple[int, int, str]:
    w = entry.workload
    return (-w.priority, w.created_at, w.name)


class _FairOrder:
    def __init__(self, snapshot: Snapshot, entries: Sequence[Entry]) -> None:
        self.snapshot = snapshot
        self.by_root: dict[str, dict[str, Entry]] = {}
        self.roots: dict[str, Node] = {}
        for entry in entries:
            root = entry.team.root()
            # A standalone team is its own root; its name may equal a cohort's, so keep the kinds apart.
            key = f"team:{root.name}" if root.is_team else root.name
            self.roots[key] = root
            self.by_root.setdefault(key, {})[entry.workload.name] = entry
        self.winners: dict[str, Entry] = {}

    def __iter__(self) -> Iterator[Entry]:
        while self.by_root:
            for key in self.by_root:
                if key not in self.winners:
                    self.winners[key] = self._tournament(self.roots[key], self.by_root[key])
            key = min(
                self.winners,
                key=lambda k: (self.winners[k].assignment.borrowing, *_tiebreak(self.winners[k])),
            )
            winner = self.winners.pop(key)
            del self.by_root[key][winner.workload.name]
            if not self.by_root[key]:
                del self.by_root[key]
            yield winner  # the caller charges the snapshot before we compute this root's next winner

    def _tournament(self, root: Node, entries: dict[str, Entry]) -> Entry:
        if root.is_team:
            return next(iter(entries.values()))
        keys: dict[tuple[str, str], tuple[bool, tuple[int, Fraction]]] = {}
        tree = self.snapshot.tree
        by_team: dict[str, Entry] = {}
        for entry in entries.values():
            by_team[entry.team.name] = entry
            with self.snapshot.with_usage(entry.team, entry.assignment.usage):
                node = entry.team
                for ancestor in entry.team.ancestors():
                    factor = self.snapshot.factor(node.name) if node.is_team else None
                    share = tree.dominant_resource_share(node, factor=factor)
                    keys[(ancestor.name, entry.workload.name)] = (share.borrowing, share.sort_key)
                    node = ancestor
        winner = self._play(root, by_team, keys)
        assert winner is not None
        return winner

    def _play(
        self,
        cohort: Node,
        by_team: dict[str, Entry],
        keys: dict[tuple[str, str], tuple[bool, tuple[int, Fraction]]],
    ) -> Entry | None:
        candidates = [e for child in cohort.child_cohorts if (e := self._play(child, by_team, keys)) is not None]
        candidates += [by_team[t.name] for t in cohort.child_teams if t.name in by_team]
        if not candidates:
            return None
        return min(candidates, key=lambda e: (keys[(cohort.name, e.workload.name)], *_tiebreak(e)))
