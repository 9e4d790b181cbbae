"""The ledger's outbox: never blocks, never drops, never writes twice — with the database up, down or slow."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc

from accounting import Ledger, LedgerClosedError, create_engine
from accounting.events import LedgerEvent
from tests.accounting.builders import expected_rows, stream
from tests.accounting.conftest import PG_PORT, eventually, pg_url, row_counts
from tests.accounting.proxy import TcpProxy

MakeLedger = Callable[..., Awaitable[Ledger]]


async def assert_rows(url: str, events: Sequence[LedgerEvent]) -> None:
    engine = create_engine(url)
    try:
        assert await row_counts(engine) == expected_rows(events)
    finally:
        await engine.dispose()


async def test_records_without_waiting_and_writes_everything_once(ledger_url: str, make_ledger: MakeLedger) -> None:
    events = stream(60)
    ledger = await make_ledger(ledger_url, batch_size=100)
    for event in events + events[:50]:  # with duplicates
        ledger.record(event)
    assert ledger.backlog == len(events) + 50  # record() returned before anything was written
    async with asyncio.timeout(20):
        await ledger.flush()
    assert (ledger.backlog, ledger.healthy, ledger.rejected) == (0, True, [])
    assert ledger.written == len(events) + 50
    await assert_rows(ledger_url, events)


async def test_events_recorded_before_start_are_kept(ledger_url: str) -> None:
    events = stream(3)
    ledger = Ledger(ledger_url)
    for event in events:
        ledger.record(event)
    async with asyncio.timeout(10):
        await ledger.close()  # never started: close() starts it to write what it owes
    with pytest.raises(LedgerClosedError):
        ledger.record(events[0])
    await assert_rows(ledger_url, events)


@dataclass
class Outage:
    """A database that is unreachable until ``restore()``."""

    url: str
    restore: Callable[[], Awaitable[None]]


@pytest.fixture
async def outage(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Outage]:
    if backend == "sqlite":
        # A file in a directory that does not exist yet: SQLite cannot open it.
        path = tmp_path / "not-yet" / "ledger.db"

        async def create_file() -> None:
            path.parent.mkdir()
            shutil.copy(request.getfixturevalue("sqlite_template"), path)

        yield Outage(f"sqlite+aiosqlite:///{path}", create_file)
        return
    database = request.getfixturevalue("postgres_url").rsplit("/", 1)[1]
    proxy = TcpProxy(PG_PORT)  # not started: connections are refused
    yield Outage(pg_url(database, port=proxy.port), proxy.start)
    await proxy.stop()


async def test_unreachable_database_keeps_every_event_until_it_returns(outage: Outage, make_ledger: MakeLedger) -> None:
    events = stream(20)
    ledger = await make_ledger(outage.url, batch_size=50)
    for event in events:
        ledger.record(event)
    await eventually(lambda: ledger.write_failures >= 3)
    assert not ledger.healthy and ledger.last_error is not None
    assert ledger.backlog == len(events)
    more = stream(5, prefix="later")
    for event in more:
        ledger.record(event)
    assert ledger.backlog == len(events) + len(more)
    assert not await ledger.ping()
    await outage.restore()
    async with asyncio.timeout(20):
        await ledger.flush()
    assert ledger.healthy and ledger.backlog == 0
    assert await ledger.ping()
    await assert_rows(outage.url, events + more)


async def test_a_full_outbox_still_takes_every_event(outage: Outage, make_ledger: MakeLedger) -> None:
    events = stream(5)  # 46 events
    ledger = await make_ledger(outage.url, max_backlog=10, low_watermark=4, batch_size=3)
    for i, event in enumerate(events):
        ledger.record(event)
        assert ledger.full == (i + 1 >= 10)
    assert ledger.backlog == len(events)
    await outage.restore()
    async with asyncio.timeout(20):
        await ledger.flush()
    assert not ledger.full and ledger.rejected == []
    await assert_rows(outage.url, events)


class GatedLedger(Ledger):
    """Writes nothing until the test lets one batch through."""

    def __init__(self, **options: object) -> None:
        super().__init__("sqlite+aiosqlite:///unused.db", **options)  # type: ignore[arg-type]
        self.gate = asyncio.Semaphore(0)
        self.batches: list[int] = []

    async def _write_batch(self, batch: Sequence[LedgerEvent]) -> None:
        await self.gate.acquire()
        self.batches.append(len(batch))


async def test_full_stays_on_until_the_backlog_is_below_the_low_watermark() -> None:
    ledger = GatedLedger(max_backlog=10, low_watermark=4, batch_size=1)
    await ledger.start()
    for event in stream(1)[:10]:
        ledger.record(event)
    assert ledger.full
    full_after_each_batch = []
    for written in range(1, 11):
        ledger.gate.release()
        await eventually(partial(_has_written, ledger, written))
        full_after_each_batch.append((ledger.backlog, ledger.full))
    # Still full at 4 left (the low watermark), off below it.
    assert full_after_each_batch[5:7] == [(4, True), (3, False)]
    assert all(full for _, full in full_after_each_batch[:6])
    await ledger.close()


def _has_written(ledger: GatedLedger, batches: int) -> bool:
    return len(ledger.batches) >= batches


class PoisonedLedger(Ledger):
    """The database refuses one event (as a constraint would); everything else goes through."""

    poison_key = ""

    async def _write_batch(self, batch: Sequence[LedgerEvent]) -> None:
        if any(event.key == self.poison_key for event in batch):
            raise sa_exc.IntegrityError("INSERT …", {}, Exception("refused"))
        await super()._write_batch(batch)


async def test_an_event_the_database_refuses_is_set_aside_without_blocking_the_rest(ledger_url: str) -> None:
    events = stream(10)
    poison = events[17]
    ledger = PoisonedLedger(ledger_url, batch_size=16)
    ledger.poison_key = poison.key
    await ledger.start()
    for event in events:
        ledger.record(event)
    async with asyncio.timeout(20):
        await ledger.close()
    assert [r.event for r in ledger.rejected] == [poison]
    assert ledger.healthy and ledger.backlog == 0
    await assert_rows(ledger_url, [e for e in events if e is not poison])


class CountingLedger(Ledger):
    """A ledger that remembers the size of each transaction it wrote."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.batches: list[int] = []

    async def _write_batch(self, batch: Sequence[LedgerEvent]) -> None:
        await super()._write_batch(batch)
        self.batches.append(len(batch))


@pytest.mark.parametrize("linger_s", [5.0, 0.0])
async def test_a_burst_recorded_over_a_few_milliseconds_is_one_transaction(ledger_url: str, linger_s: float) -> None:
    events = stream(10)
    ledger = CountingLedger(ledger_url, linger_s=linger_s)
    await ledger.start()
    try:
        for event in events:  # as a controller records them: a few at a time, between other work
            ledger.record(event)
            await asyncio.sleep(0.001)
        async with asyncio.timeout(20):
            await ledger.flush()
    finally:
        await ledger.close()
    assert sum(ledger.batches) == len(events)
    if linger_s:
        assert ledger.batches == [len(events)]
    else:  # without lingering the writer starts on the first event: more, smaller transactions
        assert len(ledger.batches) > 1
    await assert_rows(ledger_url, events)


async def test_a_flush_does_not_wait_for_the_linger(ledger_url: str) -> None:
    events = stream(2)
    ledger = CountingLedger(ledger_url, linger_s=30.0)
    await ledger.start()
    try:
        for event in events:
            ledger.record(event)
        async with asyncio.timeout(10):  # far less than the linger: a waiting flush ends it
            await ledger.flush()
        assert ledger.batches == [len(events)]
        ledger.record(events[0])  # lingering again once drained; close() does not wait for it either
    finally:
        async with asyncio.timeout(10):
            await ledger.close()
    assert ledger.batches == [len(events), 1]
