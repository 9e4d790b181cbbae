"""PostgreSQL going away in the middle of a stream of events: connections killed, the server restarted."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from accounting.events import LedgerEvent
from tests.accounting.builders import stream
from tests.accounting.conftest import PG_HOST, PG_PORT, PG_USER, eventually, pg_url
from tests.accounting.proxy import TcpProxy
from tests.accounting.test_ledger import MakeLedger, assert_rows

pytestmark = pytest.mark.postgres


async def _produce(ledger_record: object, events: list[LedgerEvent], per_tick: int = 20) -> None:
    for i, event in enumerate(events):
        ledger_record(event)  # type: ignore[operator]
        if i % per_tick == 0:
            await asyncio.sleep(0.002)


async def test_killed_connections_mid_stream_lose_nothing(postgres_url: str, make_ledger: MakeLedger) -> None:
    database = postgres_url.rsplit("/", 1)[1]
    events = stream(150)  # about 1,500 events
    ledger = await make_ledger(postgres_url, batch_size=40)
    killer = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=database)
    killed = 0

    async def kill_backends() -> None:
        nonlocal killed
        while True:
            await asyncio.sleep(0.03)
            killed += len(
                await killer.fetch(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )

    killing = asyncio.create_task(kill_backends())
    try:
        await _produce(ledger.record, events)
        # Make sure writes were really cut, not only idle connections.
        await eventually(lambda: ledger.write_failures >= 2, seconds=5)
    finally:
        killing.cancel()
        await asyncio.gather(killing, return_exceptions=True)
        await killer.close()
    async with asyncio.timeout(30):
        await ledger.flush()
    assert killed > 0 and ledger.rejected == []
    await assert_rows(postgres_url, events)


async def test_server_restart_mid_stream_loses_nothing(postgres_url: str, make_ledger: MakeLedger) -> None:
    proxy = TcpProxy(PG_PORT)
    await proxy.start()
    url = pg_url(postgres_url.rsplit("/", 1)[1], port=proxy.port)
    events = stream(90)
    ledger = await make_ledger(url, batch_size=30)
    try:
        third = len(events) // 3
        await _produce(ledger.record, events[:third])
        await proxy.stop()  # the server goes down, cutting whatever was in flight
        await _produce(ledger.record, events[third : 2 * third])
        await eventually(lambda: not ledger.healthy, seconds=5)
        await proxy.start()  # and comes back
        await _produce(ledger.record, events[2 * third :])
        async with asyncio.timeout(30):
            await ledger.flush()
    finally:
        await proxy.stop()
    assert ledger.healthy and ledger.rejected == []
    await assert_rows(postgres_url, events)
