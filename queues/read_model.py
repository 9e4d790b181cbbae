"""What the admin API may read of a running controller and its loop: a typed, read-only model.

admin sits above queues and could take the Controller itself, but it must never change the controller's state
behind the scheduling loop (operator actions go through the Runtime, which audits them and wakes the loop). These
Protocols name exactly what admin reads, as read-only properties over read-only collections: Controller,
QueueManager, TeamQueue, Tracking, CreditBook and ControllerLoop satisfy them as they are, and mypy checks every read
(a misspelt attribute, or a write) against them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Protocol

from admission.workload import Workload
from queues.manager import State
from quota.budgets import BudgetStatus, Restriction
from quota.config import QueueingStrategy
from quota.credits import TeamCredit
from quota.tree import FlavorResource, QuotaTree


class TeamQueueReader(Protocol):
    """One team's pending workloads (queues.pending.TeamQueue)."""

    @property
    def strategy(self) -> QueueingStrategy: ...

    @property
    def inadmissible(self) -> Mapping[str, Workload]: ...

    def __len__(self) -> int: ...

    def ordered(self) -> Iterator[Workload]: ...


class QueueManagerReader(Protocol):
    """The queue manager's state (queues.manager.QueueManager)."""

    @property
    def workloads(self) -> Mapping[str, Workload]: ...

    @property
    def state(self) -> Mapping[str, State]: ...

    @property
    def held(self) -> AbstractSet[str]: ...

    @property
    def awaiting(self) -> Mapping[str, AbstractSet[str]]: ...

    @property
    def delayed(self) -> AbstractSet[str]: ...

    @property
    def deactivated(self) -> AbstractSet[str]: ...

    @property
    def messages(self) -> Mapping[str, str]: ...

    @property
    def usage(self) -> Mapping[str, Mapping[FlavorResource, int]]: ...

    @property
    def queues(self) -> Mapping[str, TeamQueueReader]: ...

    @property
    def live(self) -> QuotaTree:
        """The quota tree with the usage of running work (read it, never change it)."""
        ...

    @property
    def cycles(self) -> int: ...

    def positions(self) -> dict[str, tuple[int, int]]: ...

    def inadmissible(self, name: str, /) -> bool: ...


class EvictionReader(Protocol):
    """A workload being asked to leave (queues.controller.Eviction)."""

    @property
    def deadline(self) -> int: ...

    @property
    def acked_at(self) -> int | None: ...


class TrackingReader(Protocol):
    """What the controller remembers about a workload beyond its queue state (queues.controller.Tracking)."""

    @property
    def evictions(self) -> int: ...

    @property
    def eligible_at(self) -> int: ...

    @property
    def eviction(self) -> EvictionReader | None: ...


class CreditsReader(Protocol):
    """Fair-share credits (quota.credits.CreditBook)."""

    def credits(self, now_ms: int, /) -> Mapping[str, TeamCredit]: ...


class BudgetsReader(Protocol):
    """Budget spending (queues.budgets.BudgetKeeper)."""

    @property
    def restrictions(self) -> Mapping[str, Restriction]:
        """What spent budgets restrict per team, as of the last cycle."""
        ...

    def current(self, now: int, /) -> list[BudgetStatus]: ...


class ControllerReader(Protocol):
    """The controller (queues.controller.Controller)."""

    @property
    def manager(self) -> QueueManagerReader: ...

    @property
    def tracking(self) -> Mapping[str, TrackingReader]: ...

    @property
    def credits(self) -> CreditsReader: ...

    @property
    def budgets(self) -> BudgetsReader: ...


class LoopReader(Protocol):
    """The scheduling loop's health (queues.loop.ControllerLoop)."""

    @property
    def healthy(self) -> bool: ...

    @property
    def failures(self) -> int: ...

    @property
    def last_error(self) -> str | None: ...
