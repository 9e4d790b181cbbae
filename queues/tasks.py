"""One owner for background tasks: each started with a name and kept referenced, a crash logged when it happens,
and all of them cancelled and awaited on close.

asyncio keeps only a weak reference to a running task, so one that nobody holds may be collected mid-flight; and
an exception in a task is silent until someone awaits it, which for a background task is at shutdown or never,
far from its cause. Every component above this layer that runs something in the background (the scheduling
loop, the watches and API calls of the Kubernetes adapter, Events, the Lease, serve's components, the webhook's
reload poller) does it through a BackgroundTasks. The ledger's writer cannot: accounting sits below queues.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

log = structlog.get_logger("kuota.tasks")


class BackgroundTasks:
    def __init__(self, owner: str) -> None:
        self.owner = owner
        """Who runs these tasks, for the logs."""
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        """Tasks started and not finished yet."""
        return len(self._tasks)

    def start(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run `coro` as a task named `name` on the running loop, until it ends or `close()`."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        log.debug("background_task_started", owner=self.owner, task=name)
        return task

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error(
                "background_task_crashed",
                owner=self.owner,
                task=task.get_name(),
                error=f"{type(error).__name__}: {error}"[:500],
                exc_info=error,
            )

    async def wait(self, timeout_s: float | None = None) -> None:
        """Let the tasks running now finish on their own, for at most `timeout_s` seconds; cancels nothing."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)

    async def close(self) -> None:
        """Cancel every task and wait until each has ended (one started meanwhile, by a task ending, too)."""
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks.difference_update(tasks)
