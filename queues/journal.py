"""What the controller tells the rest of the world about each step: the ledger, metrics, Kubernetes Events.

The controller calls one Journal; `Journals` fans out to several. Every method is synchronous and must not block:
the ledger queues into its outbox, metrics bump counters, the Kubernetes adapter schedules a task.
Times are integer milliseconds on the controller's clock (epoch ms in a cluster, virtual ms in a simulation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from admission.workload import FlavorResource, PreemptionReason, Workload

log = structlog.get_logger("kuota.controller")


class Journal(Protocol):
    def workload_seen(self, workload: Workload, at: int) -> None: ...

    def queued(self, workload: Workload, position: int, at: int) -> None: ...

    def admitted(
        self,
        workload: Workload,
        attempt: int,
        usage: Mapping[FlavorResource, int],
        borrowed: Mapping[FlavorResource, int],
        at: int,
    ) -> None: ...

    def finished(self, workload: Workload, attempt: int, succeeded: bool, at: int) -> None: ...

    def preemption_issued(
        self, victim: Workload, attempt: int, preemptor: str | None, reason: PreemptionReason | str, at: int
    ) -> None: ...

    def checkpoint_requested(self, victim: Workload, attempt: int, deadline: int, via: str, at: int) -> None: ...

    def checkpoint_acked(self, victim: Workload, attempt: int, checkpoint_id: str | None, at: int) -> None: ...

    def checkpoint_timed_out(self, victim: Workload, attempt: int, at: int) -> None: ...

    def suspended(self, victim: Workload, attempt: int, lost_gpu_milliseconds: int, at: int) -> None: ...

    def requeued(self, workload: Workload, attempt: int, eligible_at: int, at: int) -> None: ...

    def held(self, workload: Workload, actor: str, at: int) -> None: ...

    def released(self, workload: Workload, actor: str, at: int) -> None: ...

    def config_applied(self, text: str, source: str, at: int) -> None: ...

    def cycle(self, heads: int, admitted: int, preempting: int, duration_s: float, at: int) -> None: ...

    def decision_failed(self, workload: Workload, message: str, at: int) -> None: ...


class NullJournal:
    """Listens to nothing (scenario runs, benchmarks without a ledger)."""

    def __getattr__(self, name: str) -> Any:
        return _ignore


def _ignore(*_args: object, **_kwargs: object) -> None:
    return None


class LogJournal(NullJournal):
    """The log lines an operator needs beside the ledger and the Events: failed decisions, with their error."""

    def decision_failed(self, workload: Workload, message: str, at: int) -> None:
        log.error("decision_failed", workload=workload.name, team=workload.team, error=message)


class Journals:
    """Fan-out to several journals, in order."""

    def __init__(self, *journals: object) -> None:
        self.journals = list(journals)

    def __getattr__(self, name: str) -> Any:
        targets = [getattr(j, name) for j in self.journals]

        def call(*args: object, **kwargs: object) -> None:
            for target in targets:
                target(*args, **kwargs)

        return call


@dataclass
class RecordingJournal:
    """Keeps every call, for tests and for `kuota simulate` summaries."""

    entries: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def record(*args: object, **kwargs: object) -> None:
            self.entries.append((name, {"args": args, **kwargs}))

        return record

    def named(self, name: str) -> list[dict[str, Any]]:
        return [payload for kind, payload in self.entries if kind == name]
