"""The ledger's writes to a SQLite file: each batch's whole transaction in one call to a thread of its own.

Through SQLAlchemy and aiosqlite every driver call of a transaction (BEGIN, a cursor and an executemany per
step, COMMIT, the pool's reset) is a hand-off to the driver's thread and back to the event loop: about 26 for a
batch of four events, and under bench/e2e.py's load the ledger's batches are that small. Here the statements and
their parameters are prepared on the event loop exactly as SQLAlchemy's driver path prepares them
(accounting/writer.py's `sqlite_steps`), and one call into a single-thread executor runs BEGIN IMMEDIATE, every
executemany and COMMIT on a connection the ledger keeps for writing, set up like the engine's (the same pragmas).

Errors come back as SQLAlchemy's exception classes (`DBAPIError.instance`), so the ledger tells a bad event from
an unavailable database the same way on either path. Only files: an in-memory database lives in one connection,
so it keeps going through the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL

from accounting.database import SQLITE_BUSY_TIMEOUT_MS, SQLITE_PRAGMAS
from accounting.writer import DriverStep


def sqlite_file(url: URL) -> str | None:
    """The file a SQLite URL names, or None for an in-memory database (or another backend)."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:") or url.query.get("mode") == "memory":
        return None
    return database


class SqliteWriter:
    def __init__(self, path: str) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kuota-ledger-sqlite")
        self._connection: sqlite3.Connection | None = None

    async def write(self, steps: Sequence[DriverStep]) -> None:
        """Run `steps` in one transaction: all of them are written, or none."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._write, steps)

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=True)

    # -- in the writer's thread -----------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            # isolation_level None: BEGIN and COMMIT are ours, as on the engine's connections.
            connection = sqlite3.connect(
                self.path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            try:
                for pragma in SQLITE_PRAGMAS:
                    connection.execute(pragma)
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return self._connection

    def _write(self, steps: Sequence[DriverStep]) -> None:
        sql = "BEGIN IMMEDIATE"
        params: Any = ()
        try:
            connection = self._connect()
            connection.execute(sql)
            try:
                for sql, params in steps:
                    connection.executemany(sql, params)
                sql, params = "COMMIT", ()
                connection.execute(sql)
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            if isinstance(exc, sqlite3.OperationalError):
                self._drop()  # the file, not an event: a connection in doubt is opened again for the next batch
            raise sa_exc.DBAPIError.instance(sql, params, exc, sqlite3.Error) from exc

    def _drop(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(sqlite3.Error):
                self._connection.close()
            self._connection = None

    def _close(self) -> None:
        self._drop()
