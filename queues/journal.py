"""What the controller tells the rest of the world about each step: the ledger, metrics, Kubernetes Events.

The controller calls one Journal; `Journals` fans out to several. Every method is synchronous and must not block:
the ledger queues into its outbox, metrics bump counters, the Kubernetes adapter schedules a task. Every
implementation spells every method out (none answers through `__getattr__`), so that mypy holds each call and each
implementation to the Protocol.
Times are integer milliseconds on the controller's clock (epoch ms in a cluster, virtual ms in a simulation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from typing_extensions import override

from admission.workload import Workload
from quota.preemption import PreemptionReason
from quota.tree import FlavorResource

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

    def deactivated(self, workload: Workload, attempt: int, message: str, at: int) -> None:
        """Evicted and kept out of the queue (its gang was not ready in time too often)."""

    def node_failed(self, victim: Workload, attempt: int, node: str, since: int, at: int) -> None:
        """Evicted (reason NodeFailure, after `preemption_issued`) because `node`, where it had pods, has been
        NotReady or gone since `since`; `suspended` follows with the work lost."""

    def held(self, workload: Workload, actor: str, at: int) -> None: ...

    def released(self, workload: Workload, actor: str, at: int) -> None: ...

    def config_applied(self, text: str, source: str, at: int) -> None: ...

    def cycle(self, heads: int, admitted: int, preempting: int, duration_s: float, at: int) -> None: ...

    def decision_failed(self, workload: Workload, message: str, at: int) -> None: ...


class NullJournal:
    """Listens to nothing (scenario runs, benchmarks without a ledger)."""

    def workload_seen(self, workload: Workload, at: int) -> None:
        return None

    def queued(self, workload: Workload, position: int, at: int) -> None:
        return None

    def admitted(
        self,
        workload: Workload,
        attempt: int,
        usage: Mapping[FlavorResource, int],
        borrowed: Mapping[FlavorResource, int],
        at: int,
    ) -> None:
        return None

    def finished(self, workload: Workload, attempt: int, succeeded: bool, at: int) -> None:
        return None

    def preemption_issued(
        self, victim: Workload, attempt: int, preemptor: str | None, reason: PreemptionReason | str, at: int
    ) -> None:
        return None

    def checkpoint_requested(self, victim: Workload, attempt: int, deadline: int, via: str, at: int) -> None:
        return None

    def checkpoint_acked(self, victim: Workload, attempt: int, checkpoint_id: str | None, at: int) -> None:
        return None

    def checkpoint_timed_out(self, victim: Workload, attempt: int, at: int) -> None:
        return None

    def suspended(self, victim: Workload, attempt: int, lost_gpu_milliseconds: int, at: int) -> None:
        return None

    def requeued(self, workload: Workload, attempt: int, eligible_at: int, at: int) -> None:
        return None

    def deactivated(self, workload: Workload, attempt: int, message: str, at: int) -> None:
        return None

    def node_failed(self, victim: Workload, attempt: int, node: str, since: int, at: int) -> None:
        return None

    def held(self, workload: Workload, actor: str, at: int) -> None:
        return None

    def released(self, workload: Workload, actor: str, at: int) -> None:
        return None

    def config_applied(self, text: str, source: str, at: int) -> None:
        return None

    def cycle(self, heads: int, admitted: int, preempting: int, duration_s: float, at: int) -> None:
        return None

    def decision_failed(self, workload: Workload, message: str, at: int) -> None:
        return None


class LogJournal(NullJournal):
    """The log lines an operator needs beside the ledger and the Events: failed decisions, with their error."""

    @override  # a misspelt name would silently add a method nobody calls; mypy refuses it as an override
    def decision_failed(self, workload: Workload, message: str, at: int) -> None:
        log.error("decision_failed", workload=workload.name, team=workload.team, error=message)


class Journals:
    """Fan-out to several journals, in order."""

    def __init__(self, *journals: Journal) -> None:
        self.journals = list(journals)

    def workload_seen(self, workload: Workload, at: int) -> None:
        for journal in self.journals:
            journal.workload_seen(workload, at)

    def queued(self, workload: Workload, position: int, at: int) -> None:
        for journal in self.journals:
            journal.queued(workload, position, at)

    def admitted(
        self,
        workload: Workload,
        attempt: int,
        usage: Mapping[FlavorResource, int],
        borrowed: Mapping[FlavorResource, int],
        at: int,
    ) -> None:
        for journal in self.journals:
            journal.admitted(workload, attempt, usage, borrowed, at)

    def finished(self, workload: Workload, attempt: int, succeeded: bool, at: int) -> None:
        for journal in self.journals:
            journal.finished(workload, attempt, succeeded, at)

    def preemption_issued(
        self, victim: Workload, attempt: int, preemptor: str | None, reason: PreemptionReason | str, at: int
    ) -> None:
        for journal in self.journals:
            journal.preemption_issued(victim, attempt, preemptor, reason, at)

    def checkpoint_requested(self, victim: Workload, attempt: int, deadline: int, via: str, at: int) -> None:
        for journal in self.journals:
            journal.checkpoint_requested(victim, attempt, deadline, via, at)

    def checkpoint_acked(self, victim: Workload, attempt: int, checkpoint_id: str | None, at: int) -> None:
        for journal in self.journals:
            journal.checkpoint_acked(victim, attempt, checkpoint_id, at)

    def checkpoint_timed_out(self, victim: Workload, attempt: int, at: int) -> None:
        for journal in self.journals:
            journal.checkpoint_timed_out(victim, attempt, at)

    def suspended(self, victim: Workload, attempt: int, lost_gpu_milliseconds: int, at: int) -> None:
        for journal in self.journals:
            journal.suspended(victim, attempt, lost_gpu_milliseconds, at)

    def requeued(self, workload: Workload, attempt: int, eligible_at: int, at: int) -> None:
        for journal in self.journals:
            journal.requeued(workload, attempt, eligible_at, at)

    def deactivated(self, workload: Workload, attempt: int, message: str, at: int) -> None:
        for journal in self.journals:
            journal.deactivated(workload, attempt, message, at)

    def node_failed(self, victim: Workload, attempt: int, node: str, since: int, at: int) -> None:
        for journal in self.journals:
            journal.node_failed(victim, attempt, node, since, at)

    def held(self, workload: Workload, actor: str, at: int) -> None:
        for journal in self.journals:
            journal.held(workload, actor, at)

    def released(self, workload: Workload, actor: str, at: int) -> None:
        for journal in self.journals:
            journal.released(workload, actor, at)

    def config_applied(self, text: str, source: str, at: int) -> None:
        for journal in self.journals:
            journal.config_applied(text, source, at)

    def cycle(self, heads: int, admitted: int, preempting: int, duration_s: float, at: int) -> None:
        for journal in self.journals:
            journal.cycle(heads, admitted, preempting, duration_s, at)

    def decision_failed(self, workload: Workload, message: str, at: int) -> None:
        for journal in self.journals:
            journal.decision_failed(workload, message, at)


@dataclass
class RecordingJournal:
    """Keeps every call, for tests: per call, the method's name and `{"args": (the arguments in order)}`."""

    entries: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [payload for kind, payload in self.entries if kind == name]

    def _record(self, name: str, *args: object) -> None:
        self.entries.append((name, {"args": args}))

    def workload_seen(self, workload: Workload, at: int) -> None:
        self._record("workload_seen", workload, at)

    def queued(self, workload: Workload, position: int, at: int) -> None:
        self._record("queued", workload, position, at)

    def admitted(
        self,
        workload: Workload,
        attempt: int,
        usage: Mapping[FlavorResource, int],
        borrowed: Mapping[FlavorResource, int],
        at: int,
    ) -> None:
        self._record("admitted", workload, attempt, usage, borrowed, at)

    def finished(self, workload: Workload, attempt: int, succeeded: bool, at: int) -> None:
        self._record("finished", workload, attempt, succeeded, at)

    def preemption_issued(
        self, victim: Workload, attempt: int, preemptor: str | None, reason: PreemptionReason | str, at: int
    ) -> None:
        self._record("preemption_issued", victim, attempt, preemptor, reason, at)

    def checkpoint_requested(self, victim: Workload, attempt: int, deadline: int, via: str, at: int) -> None:
        self._record("checkpoint_requested", victim, attempt, deadline, via, at)

    def checkpoint_acked(self, victim: Workload, attempt: int, checkpoint_id: str | None, at: int) -> None:
        self._record("checkpoint_acked", victim, attempt, checkpoint_id, at)

    def checkpoint_timed_out(self, victim: Workload, attempt: int, at: int) -> None:
        self._record("checkpoint_timed_out", victim, attempt, at)

    def suspended(self, victim: Workload, attempt: int, lost_gpu_milliseconds: int, at: int) -> None:
        self._record("suspended", victim, attempt, lost_gpu_milliseconds, at)

    def requeued(self, workload: Workload, attempt: int, eligible_at: int, at: int) -> None:
        self._record("requeued", workload, attempt, eligible_at, at)

    def deactivated(self, workload: Workload, attempt: int, message: str, at: int) -> None:
        self._record("deactivated", workload, attempt, message, at)

    def node_failed(self, victim: Workload, attempt: int, node: str, since: int, at: int) -> None:
        self._record("node_failed", victim, attempt, node, since, at)

    def held(self, workload: Workload, actor: str, at: int) -> None:
        self._record("held", workload, actor, at)

    def released(self, workload: Workload, actor: str, at: int) -> None:
        self._record("released", workload, actor, at)

    def config_applied(self, text: str, source: str, at: int) -> None:
        self._record("config_applied", text, source, at)

    def cycle(self, heads: int, admitted: int, preempting: int, duration_s: float, at: int) -> None:
        self._record("cycle", heads, admitted, preempting, duration_s, at)

    def decision_failed(self, workload: Workload, message: str, at: int) -> None:
        self._record("decision_failed", workload, message, at)
