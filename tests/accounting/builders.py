"""Ledger events for tests: one workload's life in a few calls, and streams of many."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from accounting.events import (
    GPU_RESOURCE,
    Admitted,
    AuditEntry,
    CheckpointAcked,
    CheckpointRequested,
    CheckpointTimedOut,
    CheckpointVia,
    ConfigApplied,
    Evicted,
    Finished,
    Held,
    LedgerEvent,
    PodSetAssignment,
    PreemptionIssued,
    Released,
    Requeued,
    Suspended,
    WorkloadSeen,
)
from quota.pod_set import PodSet
from quota.preemption import PreemptionReason
from quota.tree import FlavorResource

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
GPU = GPU_RESOURCE


def at(hours: float = 0, minutes: float = 0, seconds: float = 0) -> datetime:
    return T0 + timedelta(hours=hours, minutes=minutes, seconds=seconds)


def seen(
    workload_id: str, *, team: str = "nlp", created_at: datetime = T0, gpus: int = 1, pods: int = 1
) -> WorkloadSeen:
    namespace, _, name = workload_id.partition("/")
    return WorkloadSeen(
        workload_id=workload_id,
        name=name or namespace,
        namespace=namespace,
        team=team,
        queue=f"{namespace}/default",
        priority=100,
        priority_class="research",
        pod_sets=(PodSet(name="main", count=pods, requests={GPU: gpus * 1000, "cpu": 4000}),),
        created_at=created_at,
    )


def admitted(
    workload_id: str,
    *,
    attempt: int = 1,
    team: str = "nlp",
    at: datetime = T0,
    usage: dict[FlavorResource, int] | None = None,
    flavor: str = "h100",
) -> Admitted:
    usage = {(flavor, GPU): 1000} if usage is None else usage
    return Admitted(
        workload_id=workload_id,
        attempt=attempt,
        team=team,
        at=at,
        pod_sets=(PodSetAssignment(name="main", count=1, flavors={r: f for f, r in usage}),),
        usage=usage,
    )


def preemption(workload_id: str, *, attempt: int, start: datetime, acked: bool = True) -> list[LedgerEvent]:
    """The whole checkpoint-hooked preemption of admission ``attempt``, starting at ``start``."""
    step = timedelta(seconds=10)
    answer: LedgerEvent = (
        CheckpointAcked(victim=workload_id, victim_attempt=attempt, at=start + step, checkpoint_id=f"ck-{attempt}")
        if acked
        else CheckpointTimedOut(victim=workload_id, victim_attempt=attempt, at=start + step)
    )
    return [
        PreemptionIssued(
            victim=workload_id,
            victim_attempt=attempt,
            preemptor="other/x",
            reason=PreemptionReason.COHORT_RECLAMATION,
            at=start,
        ),
        CheckpointRequested(
            victim=workload_id,
            victim_attempt=attempt,
            at=start,
            deadline=start + 6 * step,
            via=CheckpointVia.ANNOTATION,
        ),
        answer,
        Suspended(victim=workload_id, victim_attempt=attempt, at=start + 2 * step, lost_gpu_milliseconds=90_500),
        Evicted(workload_id=workload_id, attempt=attempt, at=start + 3 * step, reason="Preempted"),
        Requeued(workload_id=workload_id, attempt=attempt, at=start + 4 * step),
    ]


def life(workload_id: str, *, team: str = "nlp", start: datetime = T0, preempted: bool = False) -> list[LedgerEvent]:
    """Seen, admitted, (preempted and readmitted,) finished: a workload's complete history."""
    events: list[LedgerEvent] = [seen(workload_id, team=team, created_at=start)]
    events.append(admitted(workload_id, team=team, at=start + timedelta(minutes=1)))
    attempt = 1
    if preempted:
        events += preemption(workload_id, attempt=1, start=start + timedelta(minutes=10))
        attempt = 2
        events.append(admitted(workload_id, attempt=2, team=team, at=start + timedelta(minutes=20), flavor="a100"))
    events.append(Finished(workload_id=workload_id, at=start + timedelta(minutes=30 + attempt), succeeded=True))
    return events


def stream(count: int, *, prefix: str = "ns", start: datetime = T0) -> list[LedgerEvent]:
    """``count`` workloads' lives (every third one preempted), plus operator actions, config and audit."""
    events: list[LedgerEvent] = []
    for i in range(count):
        workload_id = f"{prefix}/w{i}"
        begin = start + timedelta(seconds=i)
        events += life(workload_id, team=f"team-{i % 3}", start=begin, preempted=i % 3 == 0)
        if i % 10 == 0:
            events.append(Held(workload_id=workload_id, at=begin, actor="alice"))
            events.append(Released(workload_id=workload_id, at=begin + timedelta(seconds=5), actor="alice"))
            events.append(ConfigApplied.of(f"# {prefix} {i}\n", at=begin, source="file"))
            events.append(
                AuditEntry(
                    actor="alice", action="hold", target=workload_id, before=None, after={"held": True}, at=begin
                )
            )
    return events


def expected_rows(events: Iterable[LedgerEvent]) -> Counter[str]:
    """How many rows each table must hold after writing ``events`` (duplicates included) once or many times."""
    distinct = {event.key: event for event in events}.values()
    counts: Counter[str] = Counter()
    for event in distinct:
        if isinstance(event, ConfigApplied):
            counts["config_versions"] += 1
            continue
        if isinstance(event, AuditEntry):
            counts["audit_log"] += 1
            continue
        counts["workload_events"] += 1
        if isinstance(event, WorkloadSeen):
            counts["workloads"] += 1
        elif isinstance(event, Admitted):
            counts["admissions"] += 1
            counts["usage_intervals"] += sum(1 for milli in event.usage.values() if milli > 0)
        elif isinstance(event, PreemptionIssued):
            counts["preemptions"] += 1
    return counts


def interleave(*sequences: Sequence[LedgerEvent]) -> list[LedgerEvent]:
    out: list[LedgerEvent] = []
    for i in range(max(len(s) for s in sequences)):
        out += [s[i] for s in sequences if i < len(s)]
    return out
