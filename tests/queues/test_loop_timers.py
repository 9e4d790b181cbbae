"""The real-time loop keeps every deadline: its timers hold only the earliest wake-up, so after each tick the
next one the controller waits for (a checkpoint deadline, the end of a requeue backoff) must be armed again."""

from __future__ import annotations

import heapq
from typing import Any

from queues.loop import ControllerLoop, LoopTimers


class DueController:
    """Just what the loop drives: `tick` acts on due times, `schedule` has nothing to do."""

    def __init__(self, timers: LoopTimers, due: list[int]) -> None:
        self.timers = timers
        self.due = list(due)
        heapq.heapify(self.due)
        for at in due:
            timers.call_at(at)  # as the controller does when it sets a deadline or a backoff
        self.acted: list[tuple[int, int]] = []
        self.dirty = False
        self.paused = False

    def tick(self, now: int) -> None:
        while self.due and self.due[0] <= now:
            self.acted.append((heapq.heappop(self.due), now))

    def next_due(self) -> int | None:
        return self.due[0] if self.due else None

    def schedule(self, now: int) -> Any:
        return None


def test_a_later_deadline_is_armed_once_the_earlier_one_has_fired() -> None:
    now = 0
    timers = LoopTimers()
    controller = DueController(timers, [1_000, 5_000, 9_000])
    loop = ControllerLoop(controller, timers, clock=lambda: now)  # type: ignore[arg-type]
    assert timers.next_at == 1_000
    for expected_next, at in ((5_000, 1_000), (9_000, 5_000), (None, 9_000)):
        now = at
        loop.step()
        assert timers.next_at == expected_next
    assert controller.acted == [(1_000, 1_000), (5_000, 5_000), (9_000, 9_000)]
