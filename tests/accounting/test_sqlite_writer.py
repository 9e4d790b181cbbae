"""The ledger's writes to a SQLite file: one call into the writer's thread per batch, the same rows as the engine's
path, and a refusal by the database still narrowed down to the one event it belongs to."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url

from accounting import Ledger, create_engine
from accounting.sqlite_writer import SqliteWriter, sqlite_file
from tests.accounting.builders import expected_rows, stream
from tests.accounting.conftest import eventually, row_counts, table_contents


@pytest.fixture
def sqlite_path(tmp_path: Path, sqlite_template: Path) -> Path:
    path = tmp_path / "ledger.db"
    shutil.copy(sqlite_template, path)
    return path


def url_of(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


async def contents(url: str) -> dict[str, list[tuple[str, ...]]]:
    engine = create_engine(url)
    try:
        return await table_contents(engine)
    finally:
        await engine.dispose()


async def test_a_batch_is_one_call_into_the_writers_thread_and_no_statement_through_the_engine(
    sqlite_path: Path,
) -> None:
    events = stream(12)
    ledger = Ledger(url_of(sqlite_path), batch_size=10_000, linger_s=5.0)
    await ledger.start()
    through_engine: list[str] = []
    event.listen(ledger.engine.sync_engine, "before_cursor_execute", lambda *a: through_engine.append(a[2]))
    writer = ledger._sqlite
    assert isinstance(writer, SqliteWriter)
    calls: list[int] = []
    original = writer._write

    def counting(steps: Any) -> None:
        calls.append(len(steps))
        original(steps)

    writer._write = counting  # type: ignore[method-assign]
    for item in events:
        ledger.record(item)
    async with asyncio.timeout(20):
        await ledger.close()
    assert len(calls) == 1 and calls[0] >= 5  # one transaction of every step the stream needs, in one call
    assert through_engine == []
    engine = create_engine(url_of(sqlite_path))
    try:
        assert await row_counts(engine) == expected_rows(events)
    finally:
        await engine.dispose()


async def test_the_one_call_path_writes_exactly_what_the_engines_path_writes(
    tmp_path: Path, sqlite_template: Path
) -> None:
    events = stream(30)
    urls = []
    for name, one_call in (("one-call", True), ("engine", False)):
        path = tmp_path / f"{name}.db"
        shutil.copy(sqlite_template, path)
        ledger = Ledger(url_of(path), batch_size=7, linger_s=0.0)  # many batches, cut anywhere in a life
        await ledger.start()
        if not one_call:
            ledger._sqlite = None
        for item in events:
            ledger.record(item)
        async with asyncio.timeout(30):
            await ledger.close()
        urls.append(url_of(path))
    one_call_rows, engine_rows = [await contents(url) for url in urls]
    assert sum(len(rows) for rows in one_call_rows.values()) > 100
    assert one_call_rows == engine_rows


async def test_a_row_the_database_refuses_is_set_aside_and_the_rest_written(sqlite_path: Path) -> None:
    events = stream(10)
    poisoned = "ns/w4"
    with sqlite3.connect(sqlite_path) as connection:  # a constraint of the database's own, as a CHECK would be
        connection.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON admissions "
            f"WHEN NEW.workload_id = '{poisoned}' BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"
        )
    ledger = Ledger(url_of(sqlite_path), batch_size=64)
    await ledger.start()
    assert ledger._sqlite is not None
    for item in events:
        ledger.record(item)
    async with asyncio.timeout(30):
        await ledger.close()
    refused = [r.event for r in ledger.rejected]
    assert refused and all(getattr(e, "workload_id", None) == poisoned for e in refused)
    assert "refused by a trigger" in ledger.rejected[0].error
    assert ledger.healthy and ledger.backlog == 0
    engine = create_engine(url_of(sqlite_path))
    try:
        assert await row_counts(engine) == expected_rows([e for e in events if e not in refused])
    finally:
        await engine.dispose()


async def test_a_file_that_cannot_be_opened_keeps_every_event_for_later(tmp_path: Path, sqlite_template: Path) -> None:
    path = tmp_path / "not-yet" / "ledger.db"
    events = stream(5)
    ledger = Ledger(url_of(path), retry_initial=0.01, retry_max=0.05)
    await ledger.start()
    for item in events:
        ledger.record(item)
    await eventually(lambda: ledger.write_failures >= 2)
    assert ledger.backlog == len(events) and not ledger.rejected
    assert "unable to open database file" in (ledger.last_error or "")
    path.parent.mkdir()
    shutil.copy(sqlite_template, path)
    async with asyncio.timeout(20):
        await ledger.close()
    assert ledger.backlog == 0
    engine = create_engine(url_of(path))
    try:
        assert await row_counts(engine) == expected_rows(events)
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("url", "file"),
    [
        ("sqlite+aiosqlite:///kuota.db", "kuota.db"),
        ("sqlite+aiosqlite:////var/lib/kuota/ledger.db", "/var/lib/kuota/ledger.db"),
        ("sqlite+aiosqlite://", None),
        ("sqlite+aiosqlite:///:memory:", None),
        ("sqlite+aiosqlite:///file:ledger?mode=memory&uri=true", None),
        ("postgresql+asyncpg://postgres@127.0.0.1/test", None),
    ],
)
def test_only_a_sqlite_file_takes_the_one_call_path(url: str, file: str | None) -> None:
    assert sqlite_file(make_url(url)) == file
