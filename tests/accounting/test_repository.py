"""Round trips through the writer and the reads, on both databases; replays change nothing."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from accounting import repository
from accounting.database import write_transaction
from accounting.events import AuditEntry, ConfigApplied, Finished, LedgerEvent
from accounting.writer import write_events
from tests.accounting.builders import GPU, T0, admitted, at, expected_rows, life, preemption, seen, stream
from tests.accounting.conftest import row_counts, table_contents


async def write(engine: AsyncEngine, events: Sequence[LedgerEvent]) -> None:
    async with write_transaction(engine) as connection:
        await write_events(connection, events)


async def test_workload_detail_round_trip(engine: AsyncEngine) -> None:
    await write(engine, life("nlp/train", preempted=True))
    detail = await repository.workload_detail(engine, "nlp/train")
    assert detail is not None and detail.workload is not None
    assert detail.workload.team == "nlp" and detail.workload.created_at == T0
    assert detail.workload.pod_sets == [
        {"name": "main", "count": 1, "requests": {GPU: 1000, "cpu": 4000}, "min_count": None}
    ]
    assert detail.workload.finished_at == at(minutes=32) and detail.workload.succeeded is True
    assert [(a.attempt, a.usage, a.end_reason) for a in detail.admissions] == [
        (1, {("h100", GPU): 1000}, "Preempted"),
        (2, {("a100", GPU): 1000}, "Finished"),
    ]
    [p] = detail.preemptions
    assert (p.victim_team, p.reason, p.checkpoint_id, p.lost_gpu_milliseconds) == (
        "nlp",
        "CohortReclamation",
        "ck-1",
        90_500,
    )
    assert p.checkpoint_requested_at == p.issued_at == at(minutes=10)
    assert p.checkpoint_acked_at == at(minutes=10, seconds=10) and p.requeued_at == at(minutes=10, seconds=40)
    assert [e.kind for e in detail.history] == [
        "WorkloadSeen",
        "Admitted",
        "PreemptionIssued",
        "CheckpointRequested",
        "CheckpointAcked",
        "Suspended",
        "Evicted",
        "Requeued",
        "Admitted",
        "Finished",
    ]
    assert detail.history[1].data["usage"] == [{"flavor": "h100", "resource": GPU, "milli": 1000}]
    assert await repository.workload_detail(engine, "nlp/unknown") is None


async def test_replaying_events_writes_nothing_twice(engine: AsyncEngine) -> None:
    events = stream(30)
    await write(engine, events)
    once = await table_contents(engine)
    assert await row_counts(engine) == expected_rows(events)
    await write(engine, events)  # the same batch again
    await write(engine, events[::-1])  # and in reverse, one transaction
    for event in events[:40]:  # and one by one
        await write(engine, [event])
    assert await table_contents(engine) == once


async def test_a_late_replay_never_closes_a_later_admission(engine: AsyncEngine) -> None:
    first_life = [seen("a/b"), admitted("a/b", at=at(hours=1)), *preemption("a/b", attempt=1, start=at(hours=2))]
    await write(engine, first_life)
    await write(engine, [admitted("a/b", attempt=2, at=at(hours=3))])
    await write(engine, first_life)  # replayed after the second admission
    [running] = await repository.admitted_workloads(engine)
    assert running.attempt == 2
    [still_open] = await repository.open_intervals(engine)
    assert (still_open.attempt, still_open.started_at, still_open.ended_at) == (2, at(hours=3), None)


async def test_a_step_recorded_twice_keeps_its_first_time(engine: AsyncEngine) -> None:
    events = preemption("a/b", attempt=1, start=at(hours=2))
    await write(engine, [seen("a/b"), admitted("a/b"), *events])
    await write(engine, [Finished(workload_id="a/b", at=at(hours=5), succeeded=False)])
    await write(engine, [Finished(workload_id="a/b", at=at(hours=6), succeeded=True)])  # same key: ignored
    detail = await repository.workload_detail(engine, "a/b")
    assert detail is not None and detail.workload is not None
    assert (detail.workload.finished_at, detail.workload.succeeded) == (at(hours=5), False)


async def test_intervals_never_end_before_they_start(engine: AsyncEngine) -> None:
    await write(engine, [seen("a/b"), admitted("a/b", at=at(hours=2))])
    await write(engine, [Finished(workload_id="a/b", at=at(hours=1), succeeded=True)])  # a skewed clock
    [interval] = await repository.team_usage_intervals(engine, T0)
    assert interval.ended_at == interval.started_at == at(hours=2)


async def test_reads_for_recovery_and_credits(engine: AsyncEngine) -> None:
    await write(engine, life("a/done", start=at(hours=-10)))
    await write(
        engine,
        [seen("a/run"), admitted("a/run", attempt=1, at=at(hours=1), usage={("h100", GPU): 2000, ("h100", "cpu"): 0})],
    )
    await write(
        engine,
        [
            seen("b/twice"),
            *preemption("b/twice", attempt=1, start=at(hours=1)),
            admitted("b/twice", attempt=2, at=at(hours=2), team="vision"),
        ],
    )
    running = await repository.admitted_workloads(engine)
    assert [(a.workload_id, a.attempt) for a in running] == [("a/run", 1), ("b/twice", 2)]
    assert await repository.last_admission_attempts(engine) == {"a/done": 1, "a/run": 1, "b/twice": 2}
    assert [(i.workload_id, i.quantity_milli) for i in await repository.open_intervals(engine)] == [
        ("a/run", 2000),
        ("b/twice", 1000),
    ]  # a zero quantity opens no interval
    since_t0 = await repository.team_usage_intervals(engine, T0)
    assert {i.workload_id for i in since_t0} == {"a/run", "b/twice"}  # a/done ended before T0
    assert {i.team for i in since_t0 if i.workload_id == "b/twice"} == {"vision"}  # charged at admission
    assert len(await repository.team_usage_intervals(engine, at(hours=-20))) == 3
    assert len(await repository.team_usage_intervals(engine, at(hours=-20), until=at(hours=1))) == 1


async def test_preemptions_config_and_audit(engine: AsyncEngine) -> None:
    await write(engine, [seen("a/b"), admitted("a/b"), *preemption("a/b", attempt=1, start=at(hours=1))])
    await write(
        engine,
        [
            seen("c/d", team="vision"),
            admitted("c/d", team="vision"),
            *preemption("c/d", attempt=1, start=at(hours=2), acked=False),
        ],
    )
    assert [p.victim for p in await repository.list_preemptions(engine)] == ["c/d", "a/b"]
    [timed_out] = await repository.list_preemptions(engine, team="vision")
    assert timed_out.checkpoint_timed_out_at == at(hours=2, seconds=10) and timed_out.checkpoint_acked_at is None
    assert [p.victim for p in await repository.list_preemptions(engine, since=at(hours=1), until=at(hours=2))] == [
        "a/b"
    ]
    first, second = (
        ConfigApplied.of("a: 1\n", at=T0, source="file"),
        ConfigApplied.of("a: 2\n", at=at(hours=1), source="admin"),
    )
    again = ConfigApplied.of("a: 1\n", at=at(hours=2), source="file")  # re-applied: a new version
    entry = AuditEntry(
        actor="ops", action="config.apply", target="quota", before={"a": 1}, after={"a": 2}, at=at(hours=1)
    )
    await write(engine, [first, second, again, entry, entry])
    assert [(v.text, v.source) for v in await repository.config_versions(engine)] == [
        ("a: 1\n", "file"),
        ("a: 2\n", "admin"),
        ("a: 1\n", "file"),
    ]
    [audit] = await repository.audit_log(engine, actor="ops")
    assert (audit.before, audit.after, audit.at) == ({"a": 1}, {"a": 2}, at(hours=1))
    assert await repository.audit_log(engine, since=at(hours=1) + timedelta(seconds=1)) == []
    assert [w.workload_id for w in await repository.list_workloads(engine)] == ["a/b", "c/d"]
    assert [w.workload_id for w in await repository.list_workloads(engine, team="vision")] == ["c/d"]


async def test_a_node_failure_records_its_node_and_the_gpu_time_lost(engine: AsyncEngine) -> None:
    """PreemptionIssued (NodeFailure) → NodeFailed → Suspended: the preemption row names the node and the GPU time
    lost, no checkpoint was asked for, and the history shows the step; replayed, nothing changes."""
    from accounting.events import Evicted, NodeFailed, PreemptionIssued, Requeued, Suspended
    from quota.preemption import PreemptionReason

    start = at(hours=1)
    events: list[LedgerEvent] = [
        seen("Job/nlp/train"),
        admitted("Job/nlp/train", at=start),
        PreemptionIssued(
            victim="Job/nlp/train",
            victim_attempt=1,
            preemptor=None,
            reason=PreemptionReason.NODE_FAILURE,
            at=at(hours=2),
        ),
        NodeFailed(
            victim="Job/nlp/train", victim_attempt=1, node="gpu-7", since=at(hours=1, minutes=55), at=at(hours=2)
        ),
        Suspended(victim="Job/nlp/train", victim_attempt=1, at=at(hours=2), lost_gpu_milliseconds=3_600_000),
        Evicted(workload_id="Job/nlp/train", attempt=1, at=at(hours=2), reason="Preempted: NodeFailure"),
        Requeued(workload_id="Job/nlp/train", attempt=1, at=at(hours=2)),
    ]
    await write(engine, events)
    await write(engine, events[::-1])
    detail = await repository.workload_detail(engine, "Job/nlp/train")
    assert detail is not None
    [p] = detail.preemptions
    assert (p.reason, p.node, p.lost_gpu_milliseconds, p.preemptor) == ("NodeFailure", "gpu-7", 3_600_000, None)
    assert p.checkpoint_requested_at is None and p.checkpoint_id is None
    assert "NodeFailed" in [e.kind for e in detail.history]
    [failed] = [e for e in detail.history if e.kind == "NodeFailed"]
    assert failed.data["node"] == "gpu-7"
