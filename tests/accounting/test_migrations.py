"""The alembic history on both databases: empty → head → base → head, and the models match it exactly."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from accounting import create_engine, migrate
from accounting.models import Base

LEDGER_TABLES = {table.name for table in Base.metadata.sorted_tables}


async def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return set(await connection.run_sync(lambda c: inspect(c).get_table_names()))
    finally:
        await engine.dispose()


async def _differences(url: str, metadata: sa.MetaData) -> list[Any]:
    def compare(connection: Connection) -> list[Any]:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, metadata))

    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(compare)
    finally:
        await engine.dispose()


async def test_upgrade_downgrade_upgrade(empty_url: str) -> None:
    assert await migrate.current_revision(empty_url) is None
    await migrate.upgrade_async(empty_url)
    assert await migrate.current_revision(empty_url) == migrate.head_revision() == "0003"
    assert await _tables(empty_url) >= LEDGER_TABLES
    await migrate.downgrade_async(empty_url, "base")
    assert await migrate.current_revision(empty_url) is None
    assert not LEDGER_TABLES & await _tables(empty_url)
    await migrate.upgrade_async(empty_url)
    assert await _tables(empty_url) >= LEDGER_TABLES


async def test_models_and_migrations_agree(empty_url: str) -> None:
    await migrate.upgrade_async(empty_url)
    assert await _differences(empty_url, Base.metadata) == []
    # ...and the comparison is not blind: a column the migrations lack is seen.
    altered = sa.MetaData(naming_convention=Base.metadata.naming_convention)
    for table in Base.metadata.sorted_tables:
        table.to_metadata(altered)
    sa.Table("workloads", altered, sa.Column("extra", sa.Integer()), extend_existing=True)
    assert [d[0] for d in await _differences(empty_url, altered)] == ["add_column"]


def test_offline_sql_for_both_dialects() -> None:
    postgres_sql = migrate.sql("postgresql://nobody@nowhere/none")
    sqlite_sql = migrate.sql("sqlite+aiosqlite:///never-created.db")
    for text in (postgres_sql, sqlite_sql):
        for table in LEDGER_TABLES:
            assert f"CREATE TABLE {table} " in text
    assert "NUMERIC(38, 6)" in postgres_sql and "BIGSERIAL" in postgres_sql
    assert "milli_seconds VARCHAR(64)" in sqlite_sql


_NOW = "2026-11-30 12:00:00+00:00"


async def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return [tuple(r) for r in (await connection.execute(sa.text(query))).all()]
    finally:
        await engine.dispose()


async def _execute(url: str, *statements: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            for statement in statements:
                await connection.execute(sa.text(statement))
    finally:
        await engine.dispose()


async def test_identities_of_an_older_ledger_become_jobs_and_come_back(empty_url: str) -> None:
    """0002 carries `ns/name` rows over as `Job/ns/name` in every table that keys by workload, with the event keys
    that name them, and its downgrade takes the kind off again; rows that already have a kind are left alone."""
    await migrate.upgrade_async(empty_url, "0001")
    timestamp = f"'{_NOW}'"
    await _execute(
        empty_url,
        "INSERT INTO workloads (id, name, namespace, team, queue, priority, pod_sets, created_at) VALUES "
        f"('nlp/train', 'train', 'nlp', 'nlp', 'nlp/default', 0, '[]', {timestamp})",
        "INSERT INTO admissions (workload_id, attempt, team, admitted_at, pod_sets, usage, borrowed) VALUES "
        f"('nlp/train', 1, 'nlp', {timestamp}, '[]', '[]', '[]')",
        "INSERT INTO usage_intervals (workload_id, attempt, flavor, resource, team, quantity_milli, started_at) "
        f"VALUES ('nlp/train', 1, 'a100', 'nvidia.com/gpu', 'nlp', 8000, {timestamp})",
        "INSERT INTO preemptions (victim, victim_attempt, preemptor, reason, issued_at) VALUES "
        f"('nlp/train', 1, 'vision/big', 'CohortReclamation', {timestamp})",
        "INSERT INTO workload_events (workload_id, event_key, kind, at, payload) VALUES "
        f"('nlp/train', 'WorkloadSeen|nlp/train', 'WorkloadSeen', {timestamp}, '{{}}'), "
        f"('nlp/train', 'Admitted|nlp/train|1', 'Admitted', {timestamp}, '{{}}'), "
        f"('JobSet/nlp/x', 'Admitted|JobSet/nlp/x|1', 'Admitted', {timestamp}, '{{}}')",
    )
    await migrate.upgrade_async(empty_url)
    assert await _rows(empty_url, "SELECT id, kind FROM workloads") == [("Job/nlp/train", "Job")]
    assert await _rows(empty_url, "SELECT workload_id, attempt FROM admissions") == [("Job/nlp/train", 1)]
    assert await _rows(empty_url, "SELECT workload_id, quantity_milli FROM usage_intervals") == [
        ("Job/nlp/train", 8000)
    ]
    assert await _rows(empty_url, "SELECT victim, preemptor FROM preemptions") == [("Job/nlp/train", "Job/vision/big")]
    assert sorted(await _rows(empty_url, "SELECT workload_id, event_key FROM workload_events")) == [
        ("Job/nlp/train", "Admitted|Job/nlp/train|1"),
        ("Job/nlp/train", "WorkloadSeen|Job/nlp/train"),
        ("JobSet/nlp/x", "Admitted|JobSet/nlp/x|1"),
    ]
    await migrate.downgrade_async(empty_url, "0001")
    assert await _rows(empty_url, "SELECT id FROM workloads") == [("nlp/train",)]
    assert await _rows(empty_url, "SELECT workload_id FROM usage_intervals") == [("nlp/train",)]
    assert await _rows(empty_url, "SELECT victim, preemptor FROM preemptions") == [("nlp/train", "vision/big")]
    assert sorted(await _rows(empty_url, "SELECT event_key FROM workload_events")) == [
        ("Admitted|JobSet/nlp/x|1",),
        ("Admitted|nlp/train|1",),
        ("WorkloadSeen|nlp/train",),
    ]


async def test_preemptions_gain_the_failed_node_and_lose_it_again(empty_url: str) -> None:
    """0003 adds `preemptions.node`: rows recorded before have none; a node failure's row keeps its node; the
    downgrade drops the column and keeps the rows."""
    await migrate.upgrade_async(empty_url, "0002")
    timestamp = f"'{_NOW}'"
    await _execute(
        empty_url,
        "INSERT INTO preemptions (victim, victim_attempt, preemptor, reason, issued_at) VALUES "
        f"('Job/nlp/old', 1, 'Job/vision/big', 'CohortReclamation', {timestamp})",
    )
    await migrate.upgrade_async(empty_url)
    assert await _rows(empty_url, "SELECT victim, node FROM preemptions") == [("Job/nlp/old", None)]
    await _execute(
        empty_url,
        "INSERT INTO preemptions (victim, victim_attempt, reason, issued_at, node, lost_gpu_milliseconds) VALUES "
        f"('Job/nlp/new', 1, 'NodeFailure', {timestamp}, 'gpu-node-3', 480000)",
    )
    assert sorted(await _rows(empty_url, "SELECT victim, reason, node FROM preemptions")) == [
        ("Job/nlp/new", "NodeFailure", "gpu-node-3"),
        ("Job/nlp/old", "CohortReclamation", None),
    ]
    await migrate.downgrade_async(empty_url, "0002")
    assert sorted(await _rows(empty_url, "SELECT victim, reason FROM preemptions")) == [
        ("Job/nlp/new", "NodeFailure"),
        ("Job/nlp/old", "CohortReclamation"),
    ]
    assert not any(
        column == "node"
        for (column,) in await _rows(
            empty_url,
            "SELECT name FROM pragma_table_info('preemptions')"
            if empty_url.startswith("sqlite")
            else "SELECT column_name FROM information_schema.columns WHERE table_name = 'preemptions'",
        )
    )
