"""Kubernetes Events on Jobs for every decision a user cares about, as a Journal.

`kubectl describe job` is where people look first, so queueing, admission, preemption (and by whom), the
checkpoint handshake and requeues show up there. Events are best effort: each one is a scheduled task, a token
bucket per Job stops a Job that flaps from flooding the API server, a budget for all of them keeps a burst of
thousands of submissions from sending thousands of Events a second (the rest are counted and dropped, as
client-go's recorder drops what its queue cannot hold), and a failure is logged and dropped. Events do not
take from the client's request budget: admissions and evictions never wait behind them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

import structlog

from admission.workload import Workload
from clusters.kube.api import KubeApi, TokenBucket
from queues.tasks import BackgroundTasks
from quota.budgets import BudgetStatus
from quota.preemption import PreemptionReason
from quota.tree import FlavorResource
from workloads.reading import split_key
from workloads.registry import REGISTRY

log = structlog.get_logger("kuota.kube.events")

COMPONENT = "kuota"
PER_JOB_BURST = 10
PER_JOB_RATE = 0.2
"""One Event every five seconds per Job once its burst is spent."""
EVENTS_BURST = 200
EVENTS_RATE = 50.0
BUDGET_EVENTS = 50
"""Pending workloads that get an Event when a budget crosses a threshold (the oldest first in queue order)."""
"""Events a second for all Jobs together once the burst is spent."""


def rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventRecorder:
    def __init__(
        self,
        api: KubeApi,
        uid_of: Callable[[str], str | None],
        *,
        instance: str = "kuota",
        burst: int = PER_JOB_BURST,
        rate: float = PER_JOB_RATE,
        budget: TokenBucket | None = None,
        involved_of: Callable[[str], Mapping[str, str | None] | None] | None = None,
    ) -> None:
        self.api = api
        self.involved_of = involved_of
        """The object a workload's Events go on when its key names none (a LeaderWorkerSet group, a pod group)."""
        self.budget = budget if budget is not None else TokenBucket(EVENTS_RATE, EVENTS_BURST)
        self.uid_of = uid_of
        self.instance = instance
        self.burst = burst
        self.rate = rate
        self._buckets: dict[str, TokenBucket] = {}
        self._sends = BackgroundTasks("kube events")
        self.sent = 0
        self.dropped = 0

    def emit(
        self, workload: str, reason: str, message: str, at: int, *, warning: bool = False, essential: bool = False
    ) -> None:
        """An Event on the workload's object (`KIND/NAMESPACE/NAME`); returns at once. An `essential` one (the last
        word on a workload that leaves the queue) is not held to the workload's own budget, only to the global one."""
        bucket = self._buckets.get(workload)
        if bucket is None:
            bucket = self._buckets[workload] = TokenBucket(self.rate, self.burst)
        if (not bucket.try_take() and not essential) or not self.budget.try_take():
            self.dropped += 1
            return
        involved = self.involved_of(workload) if self.involved_of is not None else None
        if involved is not None:
            self.emit_on(involved, reason, message, at, warning=warning)
            return
        kind, namespace, name = split_key(workload)
        found = REGISTRY.get(kind)
        self.emit_on(
            {
                "apiVersion": found.api_version if found is not None else None,
                "kind": kind,
                "namespace": namespace,
                "name": name,
                "uid": self.uid_of(workload),
            },
            reason,
            message,
            at,
            warning=warning,
        )

    def emit_on(
        self, involved: Mapping[str, str | None], reason: str, message: str, at: int, *, warning: bool = False
    ) -> None:
        namespace = involved.get("namespace") or "default"
        stamp = rfc3339(at)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{involved.get('name')}.", "namespace": namespace},
            "involvedObject": {k: v for k, v in involved.items() if v},
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance,
            "action": reason,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": micro_time(at),
            "count": 1,
        }
        self._sends.start(self._send(namespace, body), f"event {reason} {namespace}/{involved.get('name')}")

    def forget(self, workload: str) -> None:
        self._buckets.pop(workload, None)

    async def _send(self, namespace: str, body: dict[str, object]) -> None:
        try:
            await self.api.create_event(namespace, body)
            self.sent += 1
        except Exception as exc:
            log.info("event_dropped", reason=body.get("reason"), error=str(exc)[:200])

    async def drain(self, timeout_s: float = 2.0) -> None:
        await self._sends.wait(timeout_s)


def _flavors(workload: Workload) -> str:
    admission = workload.admission
    if admission is None:
        return "-"
    names = sorted({f for per_pod_set in admission.flavors.values() for f in per_pod_set.values()})
    return ", ".join(names) or "-"


class EventJournal:
    """The Journal that turns controller steps into Events on the Jobs.

    Every Event is a request to kube-apiserver, so steps that happen together are told together: a Job admitted in
    the first cycle that sees it gets `Admitted` alone (`Queued` is only news for a Job that waits, and is then
    sent, with the time it was queued, once a cycle has passed it over); an eviction is one `Preempted` (or
    `Evicted`) Event that says how the checkpoint was asked for and by when, and one `Suspended` Event that says how
    the handshake ended (`CheckpointTimedOut`, a warning, when it did not). Three Events a preemption (with
    `Requeued`), where each step alone made five; the ledger and the metrics still keep every step."""

    def __init__(self, recorder: EventRecorder) -> None:
        self.recorder = recorder
        self._queued: dict[str, tuple[str, int]] = {}
        """Workloads queued since the last cycle: their `Queued` Event waits to see whether they are admitted."""
        self._evicting: dict[str, tuple[str, str]] = {}
        """Victims whose eviction was issued: (reason, message), told with the checkpoint request that follows."""
        self._handshake: dict[str, str] = {}
        """Victims whose checkpoint handshake ended (acked or timed out): told with their suspension."""

    def workload_seen(self, workload: Workload, at: int) -> None:
        return None

    def queued(self, workload: Workload, position: int, at: int) -> None:
        message = f"Queued in {workload.queue or workload.team} (team {workload.team}) at position {position}"
        self._queued[workload.name] = (message, at)

    def admitted(
        self,
        workload: Workload,
        attempt: int,
        usage: Mapping[FlavorResource, int],
        borrowed: Mapping[FlavorResource, int],
        at: int,
    ) -> None:
        self._queued.pop(workload.name, None)  # admitted at once: nothing to say about waiting
        lent = " (borrowing from the cohort)" if any(borrowed.values()) else ""
        self.recorder.emit(
            workload.name,
            "Admitted",
            f"Admitted by team {workload.team} on flavor {_flavors(workload)}{lent}, attempt {attempt}",
            at,
        )

    def finished(self, workload: Workload, attempt: int, succeeded: bool, at: int) -> None:
        self._queued.pop(workload.name, None)
        self.recorder.forget(workload.name)

    def preemption_issued(
        self, victim: Workload, attempt: int, preemptor: str | None, reason: PreemptionReason | str, at: int
    ) -> None:
        if reason == PreemptionReason.NODE_FAILURE:
            return  # node_failed says it, naming the node
        if reason == PreemptionReason.PODS_READY_TIMEOUT:
            told = ("Evicted", "Evicted (PodsReadyTimeout): its pods were not all ready in time")
        else:
            by = f"by {preemptor}" if preemptor else "by hand"
            told = ("Preempted", f"Preempted {by} ({reason})")
        # The controller asks for the checkpoint right after; both go in one Event.
        self._evicting[victim.name] = told

    def checkpoint_requested(self, victim: Workload, attempt: int, deadline: int, via: str, at: int) -> None:
        reason, message = self._evicting.pop(victim.name, ("CheckpointRequested", "Asked to stop"))
        self.recorder.emit(
            victim.name,
            reason,
            f"{message}; checkpoint requested via {via}, suspended at {rfc3339(deadline)} at the latest",
            at,
            warning=reason != "CheckpointRequested",
        )

    def checkpoint_acked(self, victim: Workload, attempt: int, checkpoint_id: str | None, at: int) -> None:
        ident = f" {checkpoint_id}" if checkpoint_id else ""
        self._handshake[victim.name] = f"checkpoint{ident} done"

    def checkpoint_timed_out(self, victim: Workload, attempt: int, at: int) -> None:
        self._handshake[victim.name] = ""

    def suspended(self, victim: Workload, attempt: int, lost_gpu_milliseconds: int, at: int) -> None:
        lost = (
            f"; {lost_gpu_milliseconds / 1000:.0f} GPU-seconds since the last checkpoint"
            if lost_gpu_milliseconds
            else ""
        )
        handshake = self._handshake.pop(victim.name, None)
        if handshake == "":
            self.recorder.emit(
                victim.name,
                "CheckpointTimedOut",
                f"No checkpoint before the deadline; suspended anyway to free its quota{lost}",
                at,
                warning=True,
            )
            return
        after = f" ({handshake})" if handshake else ""
        self.recorder.emit(victim.name, "Suspended", f"Suspended to free its quota{after}{lost}", at)

    def requeued(self, workload: Workload, attempt: int, eligible_at: int, at: int) -> None:
        wait = max(0, eligible_at - at) // 1000
        self.recorder.emit(workload.name, "Requeued", f"Requeued keeping its place; eligible again in {wait}s", at)

    def deactivated(self, workload: Workload, attempt: int, message: str, at: int) -> None:
        message = message[0].upper() + message[1:]
        self.recorder.emit(workload.name, "Deactivated", message, at, warning=True, essential=True)

    def node_failed(self, victim: Workload, attempt: int, node: str, since: int, at: int) -> None:
        message = (
            f"Evicted (NodeFailure): node {node} has not been Ready since {rfc3339(since)}; no checkpoint could be "
            "asked for, so it is requeued at the front of its queue to resume from its last checkpoint"
        )
        self.recorder.emit(victim.name, "Evicted", message, at, warning=True, essential=True)

    def held(self, workload: Workload, actor: str, at: int) -> None:
        self.recorder.emit(workload.name, "Held", f"Held by {actor}", at)

    def released(self, workload: Workload, actor: str, at: int) -> None:
        self.recorder.emit(workload.name, "Released", f"Released by {actor}", at)

    def config_applied(self, text: str, source: str, at: int) -> None:
        return None

    def cycle(self, heads: int, admitted: int, preempting: int, duration_s: float, at: int) -> None:
        # The cycle passed over the workloads queued before it without admitting them: now they wait.
        queued, self._queued = self._queued, {}
        for name, (message, queued_at) in queued.items():
            self.recorder.emit(name, "Queued", message, queued_at)

    def decision_failed(self, workload: Workload, message: str, at: int) -> None:
        self.recorder.emit(
            workload.name, "DecisionFailed", f"{message}; it waits until something changes", at, warning=True
        )

    def budget_reached(self, status: BudgetStatus, percent: int, pending: Sequence[Workload], at: int) -> None:
        # On the pending workloads the budget holds back (the ones whose users ask why they wait), at most
        # BUDGET_EVENTS of them: a queue of thousands must not turn one crossing into thousands of Events.
        reason = "BudgetExhausted" if percent >= 100 else "BudgetWarning"
        message = (
            status.message()
            if percent >= 100
            else f"{status.owner_text} has spent {percent} % of its {status.window} budget of "
            f"{status.hours(status.limit)} {status.resource}-hours ({status.hours(status.spent)} spent); at 100 %: "
            f"{status.effect()}"
        )
        for workload in pending[:BUDGET_EVENTS]:
            self.recorder.emit(workload.name, reason, message, at, warning=percent >= 100)
