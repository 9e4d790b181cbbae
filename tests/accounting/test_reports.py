"""Reports against hand-computed values; rollups; recovery of usage left open while kuota was down."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from accounting import reports, repository
from accounting.events import Evicted, Finished
from accounting.models import Workload
from accounting.recovery import close_orphaned_intervals, last_activity
from tests.accounting.builders import GPU, T0, admitted, at, preemption, seen
from tests.accounting.conftest import table_contents
from tests.accounting.test_repository import write


async def _fixture_usage(engine: AsyncEngine) -> None:
    """GPU usage around the period [10:00, 12:00) (T0 is 08:00):
    nlp/w1     2 GPU h100 09:30-10:30, and 16 CPUs          → 1 GPU-hour and 8 CPU-hours inside
    nlp/w2     1 GPU a100 10:15-11:00 (evicted)              → 0.75
    vision/w3  4 GPU h100 from 11:00, still running          → up to the end of the period or now
    vision/w4  8 GPU h100 12:00-13:00                        → after the period
    vision/w5  1 GPU h100 08:00-10:00                        → before it
    """
    await write(
        engine,
        [
            seen("nlp/w1", created_at=at(hours=1)),
            admitted("nlp/w1", at=at(hours=1.5), usage={("h100", GPU): 2000, ("h100", "cpu"): 16_000}),
            Finished(workload_id="nlp/w1", at=at(hours=2.5), succeeded=True),
            seen("nlp/w2", created_at=at(hours=2)),
            admitted("nlp/w2", at=at(hours=2.25), flavor="a100"),
            *preemption("nlp/w2", attempt=1, start=at(hours=3) - timedelta(seconds=30)),
            seen("vision/w3", team="vision"),
            admitted("vision/w3", team="vision", at=at(hours=3), usage={("h100", GPU): 4000}),
            seen("vision/w4", team="vision"),
            admitted("vision/w4", team="vision", at=at(hours=4), usage={("h100", GPU): 8000}),
            Finished(workload_id="vision/w4", at=at(hours=5), succeeded=True),
            seen("vision/w5", team="vision"),
            admitted("vision/w5", team="vision", at=at(hours=0)),
            Evicted(workload_id="vision/w5", attempt=1, at=at(hours=2), reason="Deleted"),
        ],
    )


def _hours(rows: list[reports.UsageRow]) -> list[tuple[str, str, Decimal]]:
    return [(row.key, row.resource, row.hours) for row in rows]


async def test_usage_report_by_team_and_flavor(engine: AsyncEngine) -> None:
    await _fixture_usage(engine)
    start, end = at(hours=2), at(hours=4)
    assert _hours(await reports.usage_report(engine, start, end, by="team", now=at(hours=24))) == [
        ("nlp", "cpu", Decimal(8)),
        ("nlp", GPU, Decimal("1.75")),
        ("vision", GPU, Decimal(4)),
    ]
    assert _hours(await reports.usage_report(engine, start, end, by="flavor", resource=GPU, now=at(hours=24))) == [
        ("a100", GPU, Decimal("0.75")),
        ("h100", GPU, Decimal(5)),
    ]
    # Still running at 11:30: counted up to then, not to the end of the period.
    assert _hours(await reports.usage_report(engine, start, end, resource=GPU, now=at(hours=3.5))) == [
        ("nlp", GPU, Decimal("1.75")),
        ("vision", GPU, Decimal(2)),
    ]


async def test_usage_report_by_day_splits_at_midnight(engine: AsyncEngine) -> None:
    await write(
        engine,
        [
            seen("nlp/night"),
            admitted("nlp/night", at=at(hours=15), usage={("h100", GPU): 3000}),
            Finished(workload_id="nlp/night", at=at(hours=17.5), succeeded=True),
        ],
    )  # 23:00 → 01:30
    rows = await reports.usage_report(engine, at(hours=-8), at(hours=40), by="day", resource=GPU)
    assert _hours(rows) == [("2026-03-02", GPU, Decimal(3)), ("2026-03-03", GPU, Decimal("4.5"))]
    assert rows[0].milli_seconds == Decimal(3000 * 3600)


async def test_usage_report_by_kind_reads_the_ledgers_kinds(engine: AsyncEngine) -> None:
    """JobSet/nlp/gang 2 pods × 4 GPUs 10:00-11:00; nlp/job (a Job's older identity) 1 GPU 10:00-12:00; the
    PyTorchJob's usage was recorded without its workload (kind from the identity); nlp/old is a Job whose ledger row
    says PyTorchJob (the kind column is what counts)."""
    await write(
        engine,
        [
            seen("JobSet/nlp/gang", gpus=4, pods=2),
            admitted("JobSet/nlp/gang", at=at(hours=2), usage={("h100", GPU): 8000, ("h100", "cpu"): 8000}),
            Finished(workload_id="JobSet/nlp/gang", at=at(hours=3), succeeded=True),
            seen("nlp/job"),
            admitted("nlp/job", at=at(hours=2)),
            Finished(workload_id="nlp/job", at=at(hours=4), succeeded=True),
            admitted("PyTorchJob/vision/ft", team="vision", at=at(hours=3), usage={("a100", GPU): 2000}),
            seen("nlp/old"),
            admitted("nlp/old", at=at(hours=3)),
        ],
    )
    async with engine.begin() as connection:
        await connection.execute(update(Workload).where(Workload.id == "nlp/old").values(kind="PyTorchJob"))
    rows = await reports.usage_report(engine, at(hours=2), at(hours=4), by="kind", now=at(hours=4))
    assert _hours(rows) == [
        ("Job", GPU, Decimal(2)),
        ("JobSet", "cpu", Decimal(8)),
        ("JobSet", GPU, Decimal(8)),
        ("PyTorchJob", GPU, Decimal(3)),  # 2 GPUs and 1 GPU for the hour from 11:00
    ]
    assert _hours(await reports.usage_report(engine, at(hours=2), at(hours=4), by="kind", resource="cpu")) == [
        ("JobSet", "cpu", Decimal(8))
    ]


async def test_wait_and_preemption_reports(engine: AsyncEngine) -> None:
    await _fixture_usage(engine)
    waits = await reports.wait_report(engine, at(hours=1), at(hours=3))
    assert [(w.team, w.admitted, w.mean_seconds, w.p95_seconds) for w in waits] == [
        ("nlp", 2, Decimal(1350), Decimal(1800)),  # waits of 30 and 15 minutes
    ]
    [summary] = await reports.preemption_report(engine, T0, at(hours=24))
    assert (summary.team, summary.preemptions, summary.lost_gpu_seconds) == ("nlp", 1, Decimal("90.5"))
    assert summary.by_reason == {"CohortReclamation": 1}


async def test_rollups_are_idempotent_and_agree_with_the_report(engine: AsyncEngine) -> None:
    await _fixture_usage(engine)
    now = at(hours=6)
    written = await reports.rollup(engine, "hour", up_to=now, now=now)
    contents = await table_contents(engine)
    assert await reports.rollup(engine, "hour", up_to=now, now=now) == written
    assert await table_contents(engine) == contents
    hourly = await reports.rollups(engine, "hour", at(hours=2), at(hours=4))
    report = await reports.usage_report(engine, at(hours=2), at(hours=4), by="team", now=now)
    for team in ("nlp", "vision"):
        assert sum(r.milli_seconds for r in hourly if r.team == team and r.resource == GPU) == next(
            r.milli_seconds for r in report if r.key == team and r.resource == GPU
        )
    # A day not over yet is not rolled up; once it is, the daily total is the hourly total.
    assert await reports.rollup(engine, "day", up_to=now, now=now) == 0
    await reports.rollup(engine, "day", up_to=at(hours=24), now=at(hours=24))
    daily = await reports.rollups(engine, "day", T0 - timedelta(hours=8), at(hours=16))
    all_hours = await reports.rollup(engine, "hour", up_to=at(hours=24), now=at(hours=24))
    assert all_hours > written
    hourly = await reports.rollups(engine, "hour", T0 - timedelta(hours=8), at(hours=16))
    assert sum(r.milli_seconds for r in daily) == sum(r.milli_seconds for r in hourly)


async def test_close_orphaned_intervals(engine: AsyncEngine) -> None:
    await write(
        engine,
        [
            seen("a/running"),
            admitted("a/running", at=at(hours=1)),
            seen("a/finished"),
            admitted("a/finished", at=at(hours=1)),
            seen("a/unknown"),
            admitted("a/unknown", at=at(hours=2)),
            seen("a/early"),
            admitted("a/early", at=at(hours=3)),
        ],
    )
    result = await close_orphaned_intervals(engine, {"a/running"}, {"a/finished": at(hours=4), "a/early": at(hours=2)})
    assert result.closed == {"a/finished": at(hours=4), "a/early": at(hours=2)}
    assert result.unresolved == {"a/unknown"}
    assert {a.workload_id for a in await repository.admitted_workloads(engine)} == {"a/running", "a/unknown"}
    ended = {i.workload_id: i.ended_at for i in await repository.team_usage_intervals(engine, T0)}
    assert ended == {
        "a/running": None,
        "a/unknown": None,
        "a/finished": at(hours=4),
        "a/early": at(hours=3),
    }  # an end before the start is clamped to the start
    detail = await repository.workload_detail(engine, "a/finished")
    assert detail is not None and detail.history[-1].kind == "IntervalsClosedOnRecovery"
    assert detail.admissions[0].end_reason == "Recovered"

    default_end = await last_activity(engine)
    assert default_end == at(hours=4)  # the latest event: a/finished's recovery
    again = await close_orphaned_intervals(engine, {"a/running"}, {}, default_end=default_end)
    assert (again.closed, again.unresolved) == ({"a/unknown": at(hours=4)}, frozenset())
    assert (await close_orphaned_intervals(engine, {"a/running"}, {}, default_end=at(hours=9))).closed == {}
