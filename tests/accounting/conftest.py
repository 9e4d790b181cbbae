"""Databases for the ledger tests: a fresh SQLite file per test, and PostgreSQL.

PostgreSQL is the server at 127.0.0.1:5432 (user postgres, trust auth). Each test run creates its own uniquely
named database, migrates it once, empties its tables before every test and drops it at the end, so parallel CI
runs never see each other; the migration tests get empty databases of their own. Tests marked ``postgres`` are
skipped only when the server cannot be reached at all.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from accounting import Ledger, create_engine, migrate
from accounting.models import Base

PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_USER = "postgres"
PG_MAINTENANCE_DB = "test"

T = TypeVar("T")


def run_in_thread(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on its own loop, away from the test's loop (for sync fixtures)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def pg_url(database: str, port: int = PG_PORT) -> str:
    return f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{port}/{database}"


async def pg_admin(*statements: str) -> None:
    connection = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=PG_MAINTENANCE_DB, timeout=5)
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


@pytest.fixture(scope="session")
def postgres_reachable() -> None:
    try:
        run_in_thread(pg_admin("SELECT 1"))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        pytest.skip(f"PostgreSQL at {PG_HOST}:{PG_PORT} is unreachable: {exc}")


@pytest.fixture(scope="session")
def postgres_database(postgres_reachable: None) -> Iterator[str]:
    """This run's own migrated database (emptied before each test that uses it), dropped at the end."""
    name = _unique("kuota_ledger_test")
    run_in_thread(pg_admin(f'CREATE DATABASE "{name}"'))
    try:
        run_in_thread(migrate.upgrade_async(pg_url(name)))
        yield name
    finally:
        run_in_thread(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _empty_tables(database: str) -> None:
    connection = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=database, timeout=5)
    try:
        tables = ", ".join(table.name for table in Base.metadata.sorted_tables)
        await connection.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    finally:
        await connection.close()


@pytest.fixture
def postgres_url(postgres_database: str) -> str:
    """The run's migrated PostgreSQL database, with empty tables."""
    run_in_thread(_empty_tables(postgres_database))
    return pg_url(postgres_database)


@pytest.fixture
def empty_postgres(postgres_reachable: None) -> Iterator[str]:
    """A database of its own with no tables at all, for the migrations; dropped afterwards."""
    name = _unique("kuota_ledger_empty")
    run_in_thread(pg_admin(f'CREATE DATABASE "{name}"'))
    yield pg_url(name)
    run_in_thread(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ledger-template") / "ledger.db"
    run_in_thread(migrate.upgrade_async(f"sqlite+aiosqlite:///{path}"))
    return path


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def empty_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A database with no tables yet."""
    if backend == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("empty_postgres"))


@pytest.fixture
def ledger_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A database migrated to head, with empty tables."""
    if backend == "sqlite":
        path = tmp_path / "ledger.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite+aiosqlite:///{path}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
async def engine(ledger_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(ledger_url)
    yield engine
    await engine.dispose()


@pytest.fixture
async def make_ledger() -> AsyncIterator[Callable[..., Awaitable[Ledger]]]:
    """Starts ledgers with quick retries; closes whatever the test left open."""
    ledgers: list[Ledger] = []

    async def make(url: str, **options: Any) -> Ledger:
        options.setdefault("retry_initial", 0.01)
        options.setdefault("retry_max", 0.2)
        ledger = Ledger(url, **options)
        await ledger.start()
        ledgers.append(ledger)
        return ledger

    yield make
    for ledger in ledgers:
        try:
            async with asyncio.timeout(10):
                await ledger.close()
        except TimeoutError:
            pass


async def eventually(condition: Callable[[], bool], seconds: float = 10) -> None:
    """Poll ``condition`` (state of a ledger, usually) until it holds; fail after ``seconds``."""
    step = 0.005
    for _ in range(int(seconds / step)):
        if condition():
            return
        await asyncio.sleep(step)
    raise AssertionError(f"still false after {seconds}s")


async def row_counts(engine: AsyncEngine) -> Counter[str]:
    counts: Counter[str] = Counter()
    async with engine.connect() as connection:
        for table in Base.metadata.sorted_tables:
            counts[table.name] = await connection.scalar(select(func.count()).select_from(table)) or 0
    return +counts  # drop the zeros, like expected_rows


async def table_contents(engine: AsyncEngine) -> dict[str, list[tuple[str, ...]]]:
    """Every row of every table without surrogate ids, sorted: equal before and after a replay."""
    contents: dict[str, list[tuple[str, ...]]] = {}
    async with engine.connect() as connection:
        for table in Base.metadata.sorted_tables:
            columns = [c for c in table.columns if c.name != "id"]
            rows = await connection.execute(select(*columns))
            contents[table.name] = sorted(tuple(repr(value) for value in row) for row in rows)
    return contents
