"""The Journal that writes the ledger: every controller step becomes an accounting event.

`Ledger.record` only appends to an in-memory outbox, so this adds no I/O to the scheduling path. Times are the
controller's milliseconds: epoch milliseconds in a cluster; in a simulation, virtual milliseconds after
`epoch_ms` (the trace's own start, so reports read as dates).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from accounting import events as ev
from accounting.ledger import Ledger
from admission.workload import Workload
from quota.preemption import PreemptionReason
from quota.tree import FlavorResource


def _reason(reason: PreemptionReason | str) -> PreemptionReason:
    try:
        return PreemptionReason(str(reason))
    except ValueError:
        return PreemptionReason.MANUAL


class LedgerJournal:
    def __init__(self, ledger: Ledger, epoch_ms: int = 0) -> None:
        self.ledger = ledger
        self.epoch_ms = epoch_ms
        self._evicted_reason: dict[str, str] = {}

    def _at(self, ms: int) -> datetime:
        return datetime.fromtimestamp((self.epoch_ms + ms) / 1000, UTC)

    def workload_seen(self, workload: Workload, at: int) -> None:
        # `KIND/NAMESPACE/NAME`, or the older `NAMESPACE/NAME` of a Job (a simulated Job may have a bare name).
        if workload.name.count("/") >= 2:
            _, namespace, name = workload.name.split("/", 2)
        else:
            namespace, _, name = workload.name.rpartition("/")
        self.ledger.record(
            ev.WorkloadSeen(
                workload_id=workload.name,
                name=name or workload.name,
                namespace=namespace or workload.team,
                team=workload.team,
                queue=workload.queue or f"{workload.team}/default",
                priority=workload.priority,
                priority_class=workload.priority_class,
                pod_sets=workload.pod_sets,
                created_at=self._at(workload.created_at),
            )
        )

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
        admission = workload.admission
        assert admission is not None
        self.ledger.record(
            ev.Admitted(
                workload_id=workload.name,
                attempt=attempt,
                team=workload.team,
                at=self._at(at),
                pod_sets=tuple(
                    ev.PodSetAssignment(
                        name=ps.name,
                        count=admission.counts.get(ps.name, ps.count),
                        flavors=dict(admission.flavors.get(ps.name, {})),
                    )
                    for ps in workload.pod_sets
                ),
                usage={fr: v for fr, v in usage.items() if v},
                borrowed={fr: v for fr, v in borrowed.items() if v},
            )
        )

    def finished(self, workload: Workload, attempt: int, succeeded: bool, at: int) -> None:
        self.ledger.record(ev.Finished(workload_id=workload.name, at=self._at(at), succeeded=succeeded))

    def preemption_issued(
        self, victim: Workload, attempt: int, preemptor: str | None, reason: PreemptionReason | str, at: int
    ) -> None:
        self._evicted_reason[victim.name] = f"Preempted: {reason}"
        self.ledger.record(
            ev.PreemptionIssued(
                victim=victim.name, victim_attempt=attempt, preemptor=preemptor, reason=_reason(reason), at=self._at(at)
            )
        )

    def checkpoint_requested(self, victim: Workload, attempt: int, deadline: int, via: str, at: int) -> None:
        self.ledger.record(
            ev.CheckpointRequested(
                victim=victim.name,
                victim_attempt=attempt,
                at=self._at(at),
                deadline=self._at(deadline),
                via=ev.CheckpointVia(via),
            )
        )

    def checkpoint_acked(self, victim: Workload, attempt: int, checkpoint_id: str | None, at: int) -> None:
        self.ledger.record(
            ev.CheckpointAcked(victim=victim.name, victim_attempt=attempt, at=self._at(at), checkpoint_id=checkpoint_id)
        )

    def checkpoint_timed_out(self, victim: Workload, attempt: int, at: int) -> None:
        self.ledger.record(ev.CheckpointTimedOut(victim=victim.name, victim_attempt=attempt, at=self._at(at)))

    def suspended(self, victim: Workload, attempt: int, lost_gpu_milliseconds: int, at: int) -> None:
        self.ledger.record(
            ev.Suspended(
                victim=victim.name,
                victim_attempt=attempt,
                at=self._at(at),
                lost_gpu_milliseconds=lost_gpu_milliseconds,
            )
        )

    def requeued(self, workload: Workload, attempt: int, eligible_at: int, at: int) -> None:
        reason = self._evicted_reason.pop(workload.name, "Evicted")
        self.ledger.record(ev.Evicted(workload_id=workload.name, attempt=attempt, at=self._at(at), reason=reason))
        self.ledger.record(ev.Requeued(workload_id=workload.name, attempt=attempt, at=self._at(at)))

    def deactivated(self, workload: Workload, attempt: int, message: str, at: int) -> None:
        reason = self._evicted_reason.pop(workload.name, "Evicted")
        self.ledger.record(ev.Evicted(workload_id=workload.name, attempt=attempt, at=self._at(at), reason=reason))

    def node_failed(self, victim: Workload, attempt: int, node: str, since: int, at: int) -> None:
        self.ledger.record(
            ev.NodeFailed(victim=victim.name, victim_attempt=attempt, node=node, since=self._at(since), at=self._at(at))
        )

    def held(self, workload: Workload, actor: str, at: int) -> None:
        self.ledger.record(ev.Held(workload_id=workload.name, at=self._at(at), actor=actor))

    def released(self, workload: Workload, actor: str, at: int) -> None:
        self.ledger.record(ev.Released(workload_id=workload.name, at=self._at(at), actor=actor))

    def config_applied(self, text: str, source: str, at: int) -> None:
        self.ledger.record(ev.ConfigApplied.of(text, at=self._at(at), source=source))

    def cycle(self, heads: int, admitted: int, preempting: int, duration_s: float, at: int) -> None:
        return None

    def decision_failed(self, workload: Workload, message: str, at: int) -> None:
        return None  # nothing happened to the workload; the log, the metric and an Event say what failed
