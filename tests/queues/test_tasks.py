"""BackgroundTasks: tasks run named and referenced until they end, a crash is logged when it happens (not at
shutdown), waiting cancels nothing, and closing cancels and awaits every task, even one started while closing."""

from __future__ import annotations

import asyncio

import structlog

from queues.tasks import BackgroundTasks


async def test_a_task_runs_named_and_is_held_until_it_ends() -> None:
    tasks = BackgroundTasks("test")
    release = asyncio.Event()

    async def work() -> None:
        await release.wait()

    task = tasks.start(work(), "kuota-work")
    assert task.get_name() == "kuota-work"
    assert len(tasks) == 1
    release.set()
    await task
    await asyncio.sleep(0)
    assert len(tasks) == 0


async def test_a_crash_is_logged_when_it_happens_and_close_does_not_raise() -> None:
    tasks = BackgroundTasks("test owner")

    async def crash() -> None:
        raise RuntimeError("boom")

    with structlog.testing.capture_logs() as logs:
        task = tasks.start(crash(), "kuota-crash")
        await asyncio.wait([task])
        await asyncio.sleep(0)
        crashes = [entry for entry in logs if entry["event"] == "background_task_crashed"]
    assert len(crashes) == 1
    assert crashes[0]["owner"] == "test owner"
    assert crashes[0]["task"] == "kuota-crash"
    assert crashes[0]["error"] == "RuntimeError: boom"
    assert crashes[0]["log_level"] == "error"
    assert len(tasks) == 0
    await tasks.close()


async def test_wait_lets_tasks_finish_and_cancels_nothing() -> None:
    tasks = BackgroundTasks("test")
    finished: list[str] = []

    async def work(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        finished.append(name)

    quick = tasks.start(work("quick", 0.01), "quick")
    slow = tasks.start(work("slow", 10), "slow")
    await tasks.wait(timeout_s=0.2)
    assert finished == ["quick"] and quick.done()
    assert not slow.done() and len(tasks) == 1
    await tasks.close()
    assert slow.cancelled()


async def test_close_cancels_and_awaits_every_task_even_one_started_while_closing() -> None:
    tasks = BackgroundTasks("test")
    cleaned: list[str] = []
    started: list[asyncio.Task[None]] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(name)

    async def hands_over() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            started.append(tasks.start(forever("successor"), "successor"))

    started += [tasks.start(forever("a"), "a"), tasks.start(forever("b"), "b"), tasks.start(hands_over(), "c")]
    await asyncio.sleep(0)
    await tasks.close()
    assert len(started) == 4 and all(task.done() for task in started)
    assert {"a", "b"} <= set(cleaned)
    assert started[-1].get_name() == "successor" and started[-1].cancelled()
    assert len(tasks) == 0


async def test_close_with_nothing_running_returns() -> None:
    tasks = BackgroundTasks("test")
    await tasks.close()
    await tasks.wait()
    assert len(tasks) == 0
