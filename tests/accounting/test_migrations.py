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
    assert await migrate.current_revision(empty_url) == migrate.head_revision() == "0001"
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
