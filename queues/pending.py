"""A team's pending workloads: the active queue in admission order, and the parked (inadmissible) ones.

Order inside a team: higher priority first, then older (creation time, which a requeued workload keeps), then
name. Under BestEffortFIFO a head that cannot fit is parked so the next one gets its turn, until capacity in its
cohort changes; under StrictFIFO it stays at the head and blocks the team. A head that is preempting stays the head
until it is admitted, found inadmissible or removed (`preemptor`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from admission.workload import Workload
from quota.config import QueueingStrategy

SortKey = tuple[int, int, str]

#: The creation time a workload pushed to the front of its queue sorts with: before any real one.
FRONT = -(2**63)

#: Up to this many look-alikes parked at once, each key is deleted from the sorted keys by bisection; more, and the
#: keys are filtered in one pass.
FEW_TWINS = 16


def queue_key(workload: Workload, front: bool = False) -> SortKey:
    """Admission order; `front`: first among its priority (a workload that lost its node through no fault of its
    own gets its turn back before any other work of its priority, older or newer)."""
    return (-workload.priority, FRONT if front else workload.created_at, workload.name)


Signature = tuple[object, ...]


def equivalence(workload: Workload) -> Signature:
    return (
        workload.priority,
        tuple(
            (
                ps.name,
                ps.count,
                ps.min_count,
                tuple(sorted(ps.requests.items())),
                tuple(sorted(ps.node_selector.items())),
            )
            for ps in workload.pod_sets
        ),
    )


class TeamQueue:
    def __init__(self, team: str, strategy: QueueingStrategy) -> None:
        self.team = team
        self.strategy = strategy
        self._keys: list[SortKey] = []
        self._active: dict[str, Workload] = {}
        self._parked: dict[str, Workload] = {}
        # Read once per workload: a busy controller parks and unparks thousands of look-alikes every second.
        self._key: dict[str, SortKey] = {}
        self._signature: dict[str, Signature] = {}
        self._twins: dict[Signature, set[str]] = {}
        """The active workloads by signature: parking a head's look-alikes reads its set, not the whole queue."""
        self._parked_twins: dict[Signature, set[str]] = {}
        """The parked workloads by signature, kept as they are parked: unparking merges a set per signature back
        into `_twins` instead of indexing every parked workload again (a busy cohort unparks its thousands of
        waiting workloads at every finish, and re-indexing them one by one was 7 % of a long replay)."""
        self._unpark_due = False
        """Capacity changed since the last look: everything parked is active again when the queue is next read.
        Every finished Job in a cohort unparks its teams, many times between two cycles; one merge is enough."""
        self.preemptor: str | None = None
        """BestEffortFIFO with `stickyPreemptors`: the head whose victims are leaving for it. It stays the team's head
        (unless skipped: while it waits for its victims the manager offers nothing of the team) until it is admitted,
        found inadmissible or removed. Otherwise its victims' leaving unparks the older work parked before it, which
        takes the team's turn in the next cycle while the quota the victims freed goes to another team's borrower,
        and the preemptor preempts again, indefinitely (Kueue's sticky workload, for the same loop:
        kubernetes-sigs/kueue#6947)."""

    @property
    def inadmissible(self) -> dict[str, Workload]:
        """The parked workloads (read only: park and unpark through the methods)."""
        self._settle()
        return self._parked

    @property
    def idle(self) -> bool:
        """Nothing active and nothing to unpark: no head (read for every team in every cycle, so kept cheap)."""
        return not self._keys and not self._unpark_due

    def __len__(self) -> int:
        return len(self._active) + len(self._parked)

    def __contains__(self, name: str) -> bool:
        return name in self._active or name in self._parked

    def push(self, workload: Workload, front: bool = False) -> None:
        """Queue `workload` in admission order, or at the front of its priority (`front`)."""
        self._settle()
        self.remove(workload.name)
        key = self._key[workload.name] = queue_key(workload, front)
        self._active[workload.name] = workload
        self._index(workload)
        bisect.insort(self._keys, key)

    def _index(self, workload: Workload) -> None:
        self._twins.setdefault(self._signature_of(workload), set()).add(workload.name)

    def _unindex(self, name: str, index: dict[Signature, set[str]] | None = None) -> None:
        """Take `name` out of `index` (the active workloads' by default)."""
        index = self._twins if index is None else index
        signature = self._signature[name]
        twins = index[signature]
        twins.discard(name)
        if not twins:
            del index[signature]

    def remove(self, name: str) -> Workload | None:
        if self.preemptor == name:
            self.preemptor = None
        workload = self._active.pop(name, None)
        if workload is not None:
            index = bisect.bisect_left(self._keys, self._key[name])
            del self._keys[index]
            self._unindex(name)
        else:
            workload = self._parked.pop(name, None)
            if workload is not None:
                self._unindex(name, self._parked_twins)
        if workload is not None:
            del self._key[name]
            self._signature.pop(name, None)
        return workload

    def at_front(self, name: str) -> bool:
        """Whether `name` was pushed to the front (so that a rebuilt queue keeps it there)."""
        key = self._key.get(name)
        return key is not None and key[1] == FRONT

    def _signature_of(self, workload: Workload) -> Signature:
        signature = self._signature.get(workload.name)
        if signature is None:
            signature = self._signature[workload.name] = equivalence(workload)
        return signature

    def head(self, skip: set[str] | frozenset[str] = frozenset()) -> Workload | None:
        self._settle()
        preemptor = self.preemptor
        if preemptor is not None and preemptor not in skip:
            return self._active[preemptor]
        for key in self._keys:
            if key[2] not in skip:
                return self._active[key[2]]
        return None

    def preempting(self, name: str) -> None:
        """`name`, an active workload, was this team's head and is preempting: it keeps the turn (`preemptor`) unless
        another preemptor of the team still has it."""
        if self.strategy is QueueingStrategy.BEST_EFFORT_FIFO and self.preemptor is None and name in self._active:
            self.preemptor = name

    def park(self, name: str) -> None:
        """Set a head aside until capacity changes (BestEffortFIFO only; StrictFIFO keeps it blocking)."""
        if self.strategy is QueueingStrategy.STRICT_FIFO:
            return
        if self.preemptor == name:
            self.preemptor = None
        self._settle()
        workload = self._active.pop(name, None)
        if workload is not None:
            del self._keys[bisect.bisect_left(self._keys, self._key[name])]
            self._unindex(name)
            self._parked[name] = workload
            self._parked_twins.setdefault(self._signature[name], set()).add(name)

    def park_equivalent(self, head: Workload) -> int:
        """Park every active workload that would get the head's answer: same priority and the same pod sets.

        Kueue's scheduling-equivalence hashing: when the head cannot fit, neither can its twins, and trying them
        one by one costs a cycle each. Only used where nobody reads which twin was tried (the controller), never
        in scenario runs, whose output says exactly which heads were parked.
        """
        if self.strategy is QueueingStrategy.STRICT_FIFO:
            return 0
        self._settle()
        signature = self._signature_of(head) if head.name in self else equivalence(head)
        twins = self._twins.pop(signature, set())
        if head.name in twins:
            twins.discard(head.name)
            self._twins[signature] = {head.name}  # the head itself stays where it is
        if self.preemptor in twins:
            self.preemptor = None
        for name in twins:
            self._parked[name] = self._active.pop(name)
        if twins:
            parked = self._parked_twins.get(signature)
            if parked is None:
                self._parked_twins[signature] = twins
            else:
                parked |= twins
        if len(twins) <= FEW_TWINS:
            for name in twins:
                del self._keys[bisect.bisect_left(self._keys, self._key[name])]
        else:  # one pass over the keys beats many deletions from the middle of a long list
            self._keys = [k for k in self._keys if k[2] not in twins]
        return len(twins)

    def unpark_all(self) -> int:
        """Make every parked workload active again; returns how many."""
        self._unpark_due = bool(self._parked)
        return len(self._parked)

    def _settle(self) -> None:
        if not self._unpark_due:
            return
        self._unpark_due = False
        keys = self._keys
        keys.extend(map(self._key.__getitem__, self._parked))
        # One sort beats thousands of insertions into a long list (and merging two sorted runs is linear).
        keys.sort()
        self._active.update(self._parked)
        self._parked.clear()
        twins = self._twins
        for signature, names in self._parked_twins.items():
            active = twins.get(signature)
            if active is None:
                twins[signature] = names
            else:
                active |= names
        self._parked_twins = {}

    def ordered(self) -> Iterator[Workload]:
        """Everything pending, active in admission order first, then the parked ones in the same order."""
        self._settle()
        for key in self._keys:
            yield self._active[key[2]]
        yield from sorted(self._parked.values(), key=lambda w: self._key[w.name])
