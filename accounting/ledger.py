"""The ledger: a non-blocking outbox in front of the database.

The scheduling hot path calls ``record(event)``, which only appends to memory. A background task writes the
outbox in batches, one transaction per batch, and removes events only after their transaction committed. When
the database is away (refused, dropped connection, restart) the batch is retried with backoff until it comes
back; a commit whose outcome was lost with the connection is simply written again, which the idempotent
writes turn into a no-op. So: nothing lost, nothing counted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from types import TracebackType

from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from accounting.database import create_engine, resolve_database_url, write_transaction
from accounting.events import LedgerEvent
from accounting.rows import plan_writes
from accounting.sqlite_writer import SqliteWriter, sqlite_file
from accounting.writer import apply_plan, sqlite_steps

log = logging.getLogger(__name__)


class LedgerClosedError(RuntimeError):
    """``record`` after ``close``: the event would be lost, so it is refused loudly."""


@dataclass(frozen=True, slots=True)
class RejectedEvent:
    """An event the database refuses on its own (a constraint or value it can never satisfy). Kept here and
    logged, instead of blocking every event behind it forever."""

    event: LedgerEvent
    error: str


class Ledger:
    """Record ledger events without waiting for the database.

    ``Ledger(url)`` — ``url`` defaults to ``KUOTA_DATABASE_URL``, else ``sqlite+aiosqlite:///kuota.db``. The schema
    must exist (``accounting.migrate.upgrade``). ``max_backlog`` is where ``full`` turns on; it turns off again
    below ``low_watermark`` (default: half of ``max_backlog``).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        engine: AsyncEngine | None = None,
        max_backlog: int = 100_000,
        low_watermark: int | None = None,
        batch_size: int = 1_000,
        retry_initial: float = 0.05,
        retry_max: float = 5.0,
        linger_s: float = 0.05,
    ) -> None:
        if max_backlog < 1 or batch_size < 1:
            raise ValueError("max_backlog and batch_size must be positive")
        self._url = resolve_database_url(url) if engine is None else engine.url.render_as_string(False)
        self._engine = engine
        self._owns_engine = engine is None
        self._max_backlog = max_backlog
        self._low_watermark = max_backlog // 2 if low_watermark is None else low_watermark
        if not 0 <= self._low_watermark < max_backlog:
            raise ValueError("low_watermark must be in [0, max_backlog)")
        self._batch_size = batch_size
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._linger_s = linger_s
        """How long the writer lets a burst gather after its first event, so one transaction carries it."""
        self._outbox: deque[LedgerEvent] = deque()
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._hurry = asyncio.Event()
        """Set while someone waits for the outbox to drain (flush, close): no lingering until it has."""
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self._healthy = True
        self._full = False
        self._last_error: str | None = None
        self._rejected: list[RejectedEvent] = []
        self._written = 0
        self._write_failures = 0
        self._sqlite: SqliteWriter | None = None
        """A SQLite file's writes, each batch in one call to the writer's thread (accounting/sqlite_writer.py)."""

    # --- state the queue manager, /readyz and /metrics read --------------------------------------------------

    @property
    def url(self) -> str:
        return self._url

    @property
    def engine(self) -> AsyncEngine:
        """The engine the ledger writes through; readers (repository, reports) may share it."""
        if self._engine is None:
            raise RuntimeError("the ledger is not started")
        return self._engine

    @property
    def backlog(self) -> int:
        """Events recorded and not yet committed."""
        return len(self._outbox)

    @property
    def healthy(self) -> bool:
        """False from a failed write until the next successful one."""
        return self._healthy

    @property
    def full(self) -> bool:
        """True once the backlog reached ``max_backlog``, until it drains below ``low_watermark``. Admissions
        should pause meanwhile; ``record`` still accepts everything."""
        return self._full

    @property
    def last_error(self) -> str | None:
        return self._last_error

    @property
    def rejected(self) -> list[RejectedEvent]:
        return list(self._rejected)

    @property
    def written(self) -> int:
        """Events committed (or found already there) since start."""
        return self._written

    @property
    def write_failures(self) -> int:
        """Batch writes that failed and were retried, since start."""
        return self._write_failures

    # --- lifecycle -----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the background writer. Does not touch the database: an unreachable one only delays writes."""
        if self._task is not None:
            raise RuntimeError("the ledger is already started")
        if self._engine is None:
            self._engine = create_engine(self._url)
        path = sqlite_file(self._engine.url)
        if path is not None:
            self._sqlite = SqliteWriter(path)
        self._task = asyncio.create_task(self._run(), name="kuota-ledger-writer")

    def record(self, event: LedgerEvent) -> None:
        """Queue ``event`` for writing. Never blocks, never drops; call it from the event loop's thread."""
        if self._closing:
            raise LedgerClosedError("the ledger is closed")
        self._outbox.append(event)
        if len(self._outbox) >= self._max_backlog:
            self._full = True
        self._drained.clear()
        self._wake.set()

    async def flush(self) -> None:
        """Wait until every event recorded so far is committed. While the database is away this waits for
        it: bound it with ``asyncio.timeout`` where that matters."""
        if self._task is None and self._outbox:
            raise RuntimeError("the ledger is not started: nothing would flush the outbox")
        self._hurry.set()  # someone waits: the writer stops lingering until the outbox is empty
        await self._drained.wait()

    async def close(self) -> None:
        """Flush, stop the writer, release the engine. Under ``asyncio.timeout`` the writer is stopped all the
        same when time runs out; ``backlog`` then tells how many events were not written."""
        if self._closed:
            return
        if self._task is None and self._outbox:
            await self.start()  # events recorded before start() are still owed to the database
        self._closing = True
        try:
            if self._task is not None:
                await self.flush()
        finally:
            self._closed = True
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            if self._sqlite is not None:
                await self._sqlite.close()
            if self._engine is not None and self._owns_engine:
                await self._engine.dispose()

    async def ping(self) -> bool:
        """Ask the database now (for /readyz: ``healthy`` only changes when there is something to write).
        Bound it with ``asyncio.timeout``; an unreachable server fails within the connect timeout anyway."""
        try:
            async with self.engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
        except Exception as exc:  # whatever the driver raises, the answer is "not reachable"
            self._healthy = False
            self._last_error = f"{type(exc).__name__}: {exc}"
            return False
        if not self._outbox:
            self._healthy = True
        return True

    async def __aenter__(self) -> Ledger:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # --- the writer ----------------------------------------------------------------------------------------------

    async def _write_batch(self, batch: Sequence[LedgerEvent]) -> None:
        plan = plan_writes(batch)  # before BEGIN: no lock held (SQLite) nor transaction open while computing
        if self._sqlite is not None:
            steps = sqlite_steps(self.engine.dialect, plan)
            if steps is not None:
                await self._sqlite.write(steps)
                return
        async with write_transaction(self.engine) as connection:
            await apply_plan(connection, plan)

    async def _run(self) -> None:
        delay = self._retry_initial
        while True:
            if not self._outbox:
                self._drained.set()
                self._hurry.clear()
                self._wake.clear()
                await self._wake.wait()
                continue
            if self._linger_s > 0 and len(self._outbox) < self._batch_size and not self._hurry.is_set():
                # A controller records a few events per decision, a few milliseconds apart: written as they came,
                # each batch was a handful of events and its transaction cost more than its rows (0.22 ms per
                # event under bench/e2e.py's load, 0.1 ms in bench/ledger.py's large batches). A short wait lets
                # a burst gather into one transaction; a full batch, or a flush() waiting, ends it at once.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), self._linger_s)
            batch = list(islice(self._outbox, self._batch_size))
            try:
                consumed = await self._write_isolating_bad_events(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is away: keep everything, retry later
                self._healthy = False
                self._write_failures += 1
                self._last_error = f"{type(exc).__name__}: {exc}"
                log.warning("ledger write failed, %d events kept for retry: %s", len(self._outbox), exc)
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, self._retry_max)
                continue
            for _ in range(consumed):
                self._outbox.popleft()
            self._written += consumed
            self._healthy = True
            delay = self._retry_initial
            if self._full and len(self._outbox) < self._low_watermark:
                self._full = False

    async def _write_isolating_bad_events(self, batch: list[LedgerEvent]) -> int:
        """Write a prefix of ``batch``; return how many events it consumed. An error that belongs to one event
        (not to the connection) is narrowed down by halving until that event is found and set aside."""
        try:
            await self._write_batch(batch)
            return len(batch)
        except Exception as exc:
            if not _caused_by_an_event(exc):
                raise
            if len(batch) == 1:
                self._rejected.append(RejectedEvent(batch[0], f"{type(exc).__name__}: {exc}"))
                log.error("ledger rejected %s %s: %s", batch[0].kind, batch[0].key, exc)
                return 1
            return await self._write_isolating_bad_events(batch[: len(batch) // 2])


def _caused_by_an_event(exc: BaseException) -> bool:
    """Errors that come from the data of some event, not from the database being away."""
    if isinstance(exc, sa_exc.IntegrityError | sa_exc.DataError):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        # SQLSTATE class 22: data exception; 23: integrity constraint violation. asyncpg maps most of them
        # to the generic DBAPIError, so look at the code.
        sqlstate = getattr(exc.orig, "sqlstate", None) or ""
        if sqlstate[:2] in ("22", "23"):
            return True
        # asyncpg refuses to encode a value on the client side: an InterfaceError caused by a ValueError.
        return _has_value_error_cause(exc.orig)
    # A value that cannot even be bound (an int beyond 64 bits on SQLite, for instance).
    return isinstance(exc, sa_exc.StatementError | OverflowError)


def _has_value_error_cause(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, ValueError | OverflowError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False
