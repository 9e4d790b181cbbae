"""One team's running workloads, kept in the order preemption considers them as victims.

Every preemption search walks the running work of some teams from the most to the least expendable. With
thousands of jobs running and a search for every head that needs room, classifying and sorting all of them per
search was the largest cost of a busy cycle; searches mostly stop after a few victims. So each team's running work
keeps its candidate order as workloads start, change and stop (a bisect per change, built only once a search first
asks for it), and searches read it lazily from the front.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import ItemsView, Iterable, Iterator, KeysView, MutableMapping, ValuesView
from typing import TypeVar, overload

from admission.workload import Workload
from quota.tree import FlavorResource

CandidateKey = tuple[bool, int, int, str]
"""(not evicting, priority, −admitted at, name): smaller keys are taken first."""

UsageSignature = tuple[tuple[FlavorResource, int], ...]
"""What a running workload holds, as sorted (flavor/resource, amount) pairs: look-alike jobs share one."""

_LOWEST = -(2**63)
_RUNNING_START: CandidateKey = (True, _LOWEST, _LOWEST, "")
_T = TypeVar("_T")


def candidate_sort_key(workload: Workload) -> CandidateKey:
    """Already-evicting first, then lower priority, then most recently admitted, then name."""
    admitted_at = workload.admission.admitted_at if workload.admission is not None else 0
    return (not workload.evicting, workload.priority, -admitted_at, workload.name)


def usage_signature(usage: dict[FlavorResource, int]) -> UsageSignature:
    return tuple(sorted(usage.items()))


class RunningWorkloads(MutableMapping[str, Workload]):
    """Name → workload (names are the workloads' own), with the candidate order maintained alongside."""

    __slots__ = ("_by_name", "_order", "_signatures")

    def __init__(self, workloads: Iterable[Workload] = ()) -> None:
        self._by_name: dict[str, Workload] = {}
        self._order: list[CandidateKey] | None = None
        self._signatures: dict[UsageSignature, int] = {}
        for workload in workloads:
            self[workload.name] = workload

    def __getitem__(self, name: str) -> Workload:
        return self._by_name[name]

    def __setitem__(self, name: str, workload: Workload) -> None:
        old = self._by_name.get(name)
        self._by_name[name] = workload
        if old is not None:
            self._count(old, -1)
        self._count(workload, 1)
        if self._order is not None:
            if old is not None:
                self._discard(candidate_sort_key(old))
            insort(self._order, candidate_sort_key(workload))

    def __delitem__(self, name: str) -> None:
        workload = self._by_name.pop(name)
        self._count(workload, -1)
        if self._order is not None:
            self._discard(candidate_sort_key(workload))

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    # dict's own get, rather than Mapping's (a __getitem__ and a caught KeyError per miss), with Mapping's overloads.
    @overload
    def get(self, name: str, /) -> Workload | None: ...

    @overload
    def get(self, name: str, default: Workload, /) -> Workload: ...

    @overload
    def get(self, name: str, default: _T, /) -> Workload | _T: ...

    def get(self, name: str, default: object = None, /) -> object:
        return self._by_name.get(name, default)

    def keys(self) -> KeysView[str]:
        return self._by_name.keys()

    def values(self) -> ValuesView[Workload]:
        return self._by_name.values()

    def items(self) -> ItemsView[str, Workload]:
        return self._by_name.items()

    def __repr__(self) -> str:
        return f"RunningWorkloads({list(self._by_name)!r})"

    def candidate_order(self, *, evicting: bool, below_priority: int | None = None) -> list[CandidateKey]:
        """Keys of the workloads that are (or are not) evicting, in candidate order, as a copy.

        `below_priority` keeps only workloads of a lower priority (the order is by priority within each part).
        A copy, so that a search may remove and restore workloads while it walks it.
        """
        order = self._ordered()
        # Evicting workloads sort first (their key starts with False): the rest begins at the first True.
        boundary = bisect_left(order, _RUNNING_START)
        start, end = (0, boundary) if evicting else (boundary, len(order))
        if below_priority is not None:
            end = bisect_left(order, (not evicting, below_priority, _LOWEST, ""), start, end)
        return order[start:end]

    def walk_candidates(self, *, evicting: bool, below_priority: int | None = None) -> Iterator[CandidateKey] | None:
        """`candidate_order`'s keys, read from the live order one at a time instead of copied; None when there
        are none (told without making a walk: most teams of a search have no evicting workload).

        Each key is the first one after the key given before, so workloads the reader removes and restores behind
        its position (the victims it takes, then gives back) do not disturb the walk. The same keys as the copy
        while nobody else changes this part of the order during the walk."""
        order = self._ordered()
        start = 0 if evicting else bisect_left(order, _RUNNING_START)
        if below_priority is not None:
            stop: CandidateKey | None = (not evicting, below_priority, _LOWEST, "")
        else:
            stop = _RUNNING_START if evicting else None
        if start == len(order) or (stop is not None and order[start] >= stop):
            return None
        return _walk(order, start, stop)

    def signatures(self) -> Iterable[UsageSignature]:
        """Every distinct usage among the workloads held (each once), whatever their order: a search that finds
        none of them acceptable knows every workload of the team is refused without reading one."""
        return self._signatures.keys()

    def _count(self, workload: Workload, change: int) -> None:
        signature = usage_signature(workload.usage())
        count = self._signatures.get(signature, 0) + change
        if count:
            self._signatures[signature] = count
        else:
            del self._signatures[signature]

    def _ordered(self) -> list[CandidateKey]:
        if self._order is None:
            self._order = sorted(candidate_sort_key(w) for w in self._by_name.values())
        return self._order

    def _discard(self, key: CandidateKey) -> None:
        assert self._order is not None
        index = bisect_left(self._order, key)
        # The key is always there: it was inserted with the workload it was computed from.
        del self._order[index]


def _walk(order: list[CandidateKey], index: int, stop: CandidateKey | None) -> Iterator[CandidateKey]:
    while index < len(order):
        key = order[index]
        if stop is not None and key >= stop:
            return
        yield key
        index = bisect_right(order, key)  # after `key`, whether the reader removed it meanwhile or not
