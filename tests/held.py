"""Holding slow work where it runs, so a test can show what else gets answered meanwhile without timing anything.

A test that says "the loop keeps answering while a big review is parsed" by asserting that probes stay under some
number of milliseconds fails on a loaded machine and passes on a fast one whether or not the work left the loop.
Instead, the slow function is made to wait, in whatever thread calls it, until the test lets it go: if it runs off
the event loop, the probes are answered while it waits; if it runs on the loop, nothing is answered until the wait
gives up, and the hold records that it was never let go. Work sent to a worker process is held the same way at a
gate of files.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from admin.parsing import OffLoopWorker

#: How long held work waits to be let go before it gives up (and the test fails): long enough for any probe.
GIVE_UP_S = 10.0


@dataclass
class Hold:
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    threads: list[str] = field(default_factory=list)
    let_go: list[bool] = field(default_factory=list)

    async def started(self) -> None:
        """Returns once the held work is waiting (asked from a thread: the loop itself may be the one held)."""
        assert await asyncio.to_thread(self.entered.wait, GIVE_UP_S), "the held work never started"

    def go(self) -> None:
        self.release.set()

    def assert_held_off_the_loop(self) -> None:
        assert self.threads, "nothing was held"
        assert threading.main_thread().name not in self.threads, self.threads
        assert all(self.let_go), "held work gave up waiting: what the test sent meanwhile was not answered"


@contextmanager
def hold(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, when: Callable[..., bool] = lambda *_, **__: True
) -> Iterator[Hold]:
    """`owner.name` waits for `Hold.go` before it runs, each time `when(*args)` says so."""
    real = getattr(owner, name)
    held = Hold()

    def waiting(*args: Any, **kwargs: Any) -> Any:
        if when(*args, **kwargs):
            held.threads.append(threading.current_thread().name)
            held.entered.set()
            # Once one gave up, the rest do not wait: the test has failed, and should say so soon.
            held.let_go.append(held.release.wait(0 if False in held.let_go else GIVE_UP_S))
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, waiting)
    try:
        yield held
    finally:
        held.release.set()


def run_when_let_go(gate: str, function: Callable[..., Any], *args: Any) -> Any:
    """In a worker process: says where it runs, waits for the gate's `go` file (or gives up), then runs."""
    folder = Path(gate)
    (folder / "entered.tmp").write_text(str(os.getpid()))
    (folder / "entered.tmp").replace(folder / "entered")
    deadline = time.monotonic() + GIVE_UP_S
    while not (folder / "go").exists():
        if time.monotonic() > deadline or (folder / "gave-up").exists():
            (folder / "gave-up").touch()
            break
        time.sleep(0.01)
    return function(*args)


@dataclass
class WorkerHold:
    """Work of admin/parsing.py's worker processes, held at a gate of files (an event cannot cross processes)."""

    gate: Path

    async def started(self) -> None:
        deadline = time.monotonic() + GIVE_UP_S
        while not (self.gate / "entered").exists():
            assert time.monotonic() < deadline, "the held work never started"
            await asyncio.sleep(0.01)

    def go(self) -> None:
        (self.gate / "go").touch()

    def assert_held_off_the_loop(self) -> None:
        assert (self.gate / "entered").exists(), "nothing was held"
        assert int((self.gate / "entered").read_text()) != os.getpid(), "the held work ran in this process"
        assert not (self.gate / "gave-up").exists(), "held work gave up waiting: what was sent meanwhile waited too"


@contextmanager
def hold_workers(monkeypatch: pytest.MonkeyPatch, gate: Path, worker: type[OffLoopWorker]) -> Iterator[WorkerHold]:
    """Every job of a `worker` (an admin/parsing.py `OffLoopWorker`) waits at `gate` until `WorkerHold.go`; later
    ones pass straight through."""
    real = worker._in_worker
    gate.mkdir(parents=True, exist_ok=True)

    async def gated(self: OffLoopWorker, function: Callable[..., Any], *args: object) -> Any:
        return await real(self, run_when_let_go, str(gate), function, *args)

    monkeypatch.setattr(worker, "_in_worker", gated)
    held = WorkerHold(gate)
    try:
        yield held
    finally:
        held.go()
