"""The scheduling loop in real time: event-driven, coalescing bursts, never busy-waiting.

Whatever changes the controller's world (a Job added or finished by the watch, a checkpoint answer, an operator
action) calls `wake()`; the loop lets changes gather for a window that follows the load (none after a quiet spell,
longer while cycles are expensive: queues/batching.py) so a burst of changes costs one cycle, then
ticks the controller (deadlines, backoffs) and runs cycles while they make progress, yielding to the event loop
between two of them (the webhook and the watches run there). Timers the controller asks
for (`call_at`) wake it too. While the ledger cannot take more events, admissions pause instead of losing them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from queues.batching import BatchWindow
from queues.controller import Controller
from queues.tasks import BackgroundTasks

log = structlog.get_logger("kuota.loop")

MAX_CYCLES_PER_WAKE = 1_000
#: After a cycle raises, the loop tries again after this long, doubling up to RETRY_MAX_MS while it keeps failing.
RETRY_BASE_MS = 1_000
RETRY_MAX_MS = 30_000
#: Consecutive failed wake-ups after which the loop counts as unhealthy (readiness says so).
UNHEALTHY_AFTER = 3
#: Consecutive failed wake-ups after which the loop gives up (about three minutes of retrying): the process then
#: releases its Lease and exits, so that another replica, or a restart, takes over.
GIVE_UP_AFTER = 10


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class LoopTimers:
    """`Timers` for real time: remembers the earliest due time and wakes the loop then."""

    def __init__(self) -> None:
        self.loop: ControllerLoop | None = None
        self.next_at: int | None = None

    def call_at(self, at: int) -> None:
        if self.next_at is None or at < self.next_at:
            self.next_at = at
            if self.loop is not None:
                self.loop.wake()


class ControllerLoop:
    def __init__(
        self,
        controller: Controller,
        timers: LoopTimers,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        coalesce_s: float | None = None,
        backpressure: Callable[[], bool] | None = None,
        on_give_up: Callable[[str], None] | None = None,
    ) -> None:
        self.controller = controller
        self.timers = timers
        timers.loop = self
        self.clock = clock
        self.window = BatchWindow() if coalesce_s is None else None
        """How long changes gather before a step (queues/batching.py); a fixed `coalesce_s` instead when given."""
        self.coalesce_s = coalesce_s or 0.0
        self.last_wait_s = 0.0
        """The window before the latest step."""
        self.backpressure = backpressure
        self._wake = asyncio.Event()
        self._stopped = False
        self._tasks = BackgroundTasks("scheduling loop")
        self.cycles = 0
        self.active = True
        """False while another replica leads: the loop keeps state current but decides nothing."""
        self.failures = 0
        """Wake-ups in a row whose tick or cycle raised; 0 once one goes through."""
        self.last_error: str | None = None
        self._retry_at = 0
        self.gave_up = False
        self.on_give_up = on_give_up
        """Called once when the loop gives up, with the last error: the owner releases the Lease and exits."""

    @property
    def healthy(self) -> bool:
        return self.failures < UNHEALTHY_AFTER

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._tasks.start(self.run(), "kuota-scheduling-loop")

    async def stop(self) -> None:
        """Let the loop finish the step it is in, and end."""
        self._stopped = True
        self._wake.set()
        await self._tasks.wait()

    async def run(self) -> None:
        while not self._stopped:
            await self._sleep_until_needed()
            if self._stopped:
                return
            wait_s = self.window.wait_s(time.monotonic()) if self.window is not None else self.coalesce_s
            self.last_wait_s = wait_s
            await asyncio.sleep(wait_s)  # let the rest of a burst arrive (a yield at least)
            cost_s = 0.0
            for _ in range(MAX_CYCLES_PER_WAKE):
                started = time.monotonic()
                ran = self.step(cycles=1)
                cost_s += time.monotonic() - started
                if not ran or self._stopped:
                    break
                # Between two cycles the webhook answers and the watches deliver. Run back to back, a series of
                # cycles (one admission per team each) held every review that arrived meanwhile for all of them,
                # and a review kube-apiserver waits on longer than its timeoutSeconds fails the user's request.
                await asyncio.sleep(0)
            if self.window is not None:
                ended = time.monotonic()
                self.window.stepped(ended - cost_s, ended)

    def step(self, cycles: int = MAX_CYCLES_PER_WAKE) -> int:
        """Tick and schedule, up to `cycles` cycles while they make progress; returns how many ran. An exception
        here (a bug, or a value nothing bounded) is logged with its traceback and the loop tries again after a
        backoff: the process keeps its Lease, so a loop that stopped for good would hold every admission in the
        cluster."""
        now = self.clock()
        try:
            ran = self._step(now, cycles)
        except Exception as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"[:500]
            retry_in = min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** min(self.failures - 1, 10))
            log.exception("scheduling_failed", failures=self.failures, retry_in_ms=retry_in, error=self.last_error)
            self.controller.dirty = True
            self._retry_at = now + retry_in
            if self.failures >= GIVE_UP_AFTER and not self.gave_up:
                self.gave_up = self._stopped = True
                log.error("scheduling_gave_up", failures=self.failures, error=self.last_error)
                if self.on_give_up is not None:
                    self.on_give_up(self.last_error)
            return 0
        self.failures = 0
        return ran

    def _step(self, now: int, cycles: int) -> int:
        if self.timers.next_at is not None and self.timers.next_at <= now:
            self.timers.next_at = None
        self.controller.tick(now)
        # The timers keep only the earliest wake-up: once it has fired, arm the next deadline or backoff end.
        due = self.controller.next_due()
        if due is not None:
            self.timers.call_at(due)
        self.controller.paused = bool(self.backpressure and self.backpressure())
        ran = 0
        if not self.active:
            return ran
        for _ in range(cycles):
            if self.controller.schedule(now) is None:
                break
            ran += 1
        self.cycles += ran
        if self.controller.paused and self.controller.dirty:
            self.timers.call_at(now + 1_000)  # look again once the ledger had time to drain
        return ran

    async def _sleep_until_needed(self) -> None:
        while self.failures and not self._stopped:  # backing off after a failure: other wake-ups wait too
            remaining_ms = self._retry_at - self.clock()
            if remaining_ms <= 0:
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), remaining_ms / 1000)
        self._wake.clear()
        if self.controller.dirty and not self.controller.paused and self.active:
            return
        timeout = None
        if self.timers.next_at is not None:
            timeout = max(0.0, (self.timers.next_at - self.clock()) / 1000)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
