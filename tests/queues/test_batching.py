"""The loop's adaptive window: none after a quiet spell, a multiple of the last step's cost while busy, bounded."""

from __future__ import annotations

import asyncio
import time

from hypothesis import given
from hypothesis import strategies as st

from queues.batching import IDLE_S, LEAST_S, MOST_S, RATIO, BatchWindow
from queues.loop import ControllerLoop, LoopTimers


def test_the_first_change_after_a_quiet_spell_is_decided_at_once() -> None:
    window = BatchWindow()
    assert window.wait_s(100.0) == 0.0  # never stepped
    window.stepped(100.0, 100.5)  # an expensive step...
    assert window.wait_s(100.5 + IDLE_S) == 0.0  # ...long ago: no wait


def test_while_busy_the_window_follows_the_cost_of_the_last_step() -> None:
    window = BatchWindow()
    window.stepped(10.0, 10.001)  # a cheap step: the least window
    assert window.wait_s(10.002) == LEAST_S
    window.stepped(10.03, 10.045)  # 15 ms: RATIO × 15 ms
    assert abs(window.wait_s(10.05) - RATIO * 0.015) < 1e-9
    window.stepped(10.1, 10.4)  # very expensive: capped
    assert window.wait_s(10.41) == MOST_S


@given(
    start=st.floats(min_value=0, max_value=1e6),
    cost=st.floats(min_value=0, max_value=10),
    later=st.floats(min_value=0, max_value=10),
)
def test_the_window_is_always_within_its_bounds(start: float, cost: float, later: float) -> None:
    window = BatchWindow()
    end, now = start + cost, start + cost + later
    window.stepped(start, end)
    wait = window.wait_s(now)
    assert wait == 0.0 or LEAST_S <= wait <= MOST_S
    # Idle as the clock reads it: `now - end` may round below `later` (both are floats).
    assert (wait == 0.0) == (now - end >= IDLE_S)


class CountingController:
    """Just what the loop drives: records when each cycle ran; there is always one Job to decide per wake-up."""

    def __init__(self) -> None:
        self.dirty = False
        self.paused = False
        self.cycles: list[float] = []
        self.decided = asyncio.Event()

    def tick(self, now: int) -> None:
        return None

    def next_due(self) -> int | None:
        return None

    def schedule(self, now: int) -> object | None:
        if not self.dirty:
            return None
        self.dirty = False
        self.cycles.append(time.monotonic())
        self.decided.set()
        return object()


async def test_a_lone_job_on_an_idle_loop_is_decided_without_the_old_fixed_window() -> None:
    controller = CountingController()
    loop = ControllerLoop(controller, LoopTimers())  # type: ignore[arg-type]
    loop.start()
    try:
        await asyncio.sleep(0.05)
        woken = time.monotonic()
        controller.dirty = True
        loop.wake()
        async with asyncio.timeout(2):
            await controller.decided.wait()
        assert loop.last_wait_s == 0.0  # the fixed window made every change wait 20 ms
        assert controller.cycles[0] >= woken
        # Right after that step the loop counts as busy: the next change waits for the least window. (A change
        # made while the step is still going, between two of its cycles, is decided within it.)
        await asyncio.sleep(0.01)
        controller.decided.clear()
        controller.dirty = True
        loop.wake()
        async with asyncio.timeout(2):
            await controller.decided.wait()
        assert loop.last_wait_s == LEAST_S
    finally:
        await loop.stop()


class ProgressingController(CountingController):
    """Every cycle makes progress (as one that admits does), for `cycles` cycles in a row; each records how far
    another task of the event loop has got by then."""

    def __init__(self, cycles: int, other: list[int]) -> None:
        super().__init__()
        self.left = cycles
        self.other = other
        self.seen: list[int] = []

    def schedule(self, now: int) -> object | None:
        if not self.dirty or not self.left:
            return None
        self.left -= 1
        self.dirty = self.left > 0
        self.seen.append(self.other[0])
        if not self.left:
            self.decided.set()
        return object()


async def test_a_series_of_cycles_lets_the_event_loop_run_between_them() -> None:
    # A review waiting for a whole series of cycles waited for all of them; now it waits for one at most.
    other = [0]
    controller = ProgressingController(5, other)
    loop = ControllerLoop(controller, LoopTimers())  # type: ignore[arg-type]

    async def elsewhere() -> None:
        while True:
            other[0] += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(elsewhere())
    loop.start()
    try:
        controller.dirty = True
        loop.wake()
        async with asyncio.timeout(2):
            await controller.decided.wait()
        assert len(controller.seen) == 5
        assert all(later > earlier for earlier, later in zip(controller.seen, controller.seen[1:], strict=False))
    finally:
        ticker.cancel()
        await loop.stop()


def test_a_step_outside_the_loop_still_runs_its_cycles_to_the_end() -> None:
    other = [0]
    controller = ProgressingController(5, other)
    loop = ControllerLoop(controller, LoopTimers())  # type: ignore[arg-type]
    controller.dirty = True
    assert loop.step() == 5
    assert loop.step(cycles=1) == 0
