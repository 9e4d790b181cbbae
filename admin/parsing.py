"""Quota files sent to the admin API are parsed in a separate process, one at a time, with a bounded queue.

Validating a proposal is CPU work proportional to what the client sends (a 10,000-team file, or YAML aliases that
expand up to the loader's bound of a million values): a second or more of pure Python. In a thread it would still
hold the interpreter lock against the event loop that also serves health checks, webhook reviews and the
controller; in its own process it costs them nothing. A proposal that takes longer than PARSE_TIMEOUT_S ends its
worker process (the next one starts fresh), and more than MAX_WAITING proposals waiting is answered with 429.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, ClassVar, TypeVar

from aiohttp import web

from admin.problems import ApiProblem
from quota.config import QuotaConfig
from quota.loader import ConfigError, format_path, load_config_text

T = TypeVar("T")

PARSE_TIMEOUT_S = 20.0
MAX_WAITING = 4

Problem = tuple[str, int | None, str]
"""(path, line, message) of one problem: plain values, so they cross the process boundary cheaply."""


def parse_proposal(text: str) -> tuple[QuotaConfig | None, list[Problem]]:
    """In the worker process: the quota file, or its problems."""
    try:
        return load_config_text(text, source="proposal"), []
    except ConfigError as exc:
        return None, [(format_path(p.path), p.line, p.message) for p in exc.problems]


class OffLoopWorker:
    """One worker process (spawned on first use), one job at a time, at most `max_waiting` waiting (429 past that),
    each with a time limit after which the worker is killed and the next job starts a fresh one. A subclass names
    what it runs (`what`), says what a client is told past the limit (`too_long`, given {seconds}) or when the
    worker died (`stopped`), and its defaults."""

    what: ClassVar[str]
    too_long: ClassVar[str]
    stopped: ClassVar[str]
    default_timeout_s: ClassVar[float]
    default_max_waiting: ClassVar[int]

    def __init__(self, *, timeout_s: float | None = None, max_waiting: int | None = None) -> None:
        self.timeout_s = self.default_timeout_s if timeout_s is None else timeout_s
        self.max_waiting = self.default_max_waiting if max_waiting is None else max_waiting
        self._executor: ProcessPoolExecutor | None = None
        self._one = asyncio.Semaphore(1)
        self._waiting = 0

    async def run(self, function: Callable[..., T], *args: object) -> T:
        if self._waiting >= self.max_waiting:
            raise ApiProblem(429, f"too many {self.what} at once; retry in a few seconds")
        self._waiting += 1
        try:
            async with self._one:
                return await self._in_worker(function, *args)
        finally:
            self._waiting -= 1

    async def _in_worker(self, function: Callable[..., T], *args: object) -> T:
        loop = asyncio.get_running_loop()
        executor = self._pool()
        try:
            return await asyncio.wait_for(loop.run_in_executor(executor, function, *args), self.timeout_s)
        except TimeoutError:
            self._restart()
            raise ApiProblem(422, self.too_long.format(seconds=f"{self.timeout_s:.0f}")) from None
        except BrokenProcessPool:
            self._restart()
            raise ApiProblem(503, self.stopped) from None

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            # spawn, not fork: this process runs an event loop and threads that a forked child must not inherit.
            self._executor = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return self._executor

    def _restart(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            for process in list(getattr(executor, "_processes", {}).values()):
                process.kill()  # a worker stuck on a hostile file would otherwise finish it first
            executor.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        self._restart()


class ProposalParser(OffLoopWorker):
    what = "quota files being checked"
    too_long = "the quota file took more than {seconds} s to check"
    stopped = "the quota file checker stopped; retry"
    default_timeout_s = PARSE_TIMEOUT_S
    default_max_waiting = MAX_WAITING

    async def parse(self, text: str) -> tuple[QuotaConfig | None, list[Problem]]:
        return await self.run(parse_proposal, text)


PARSER_KEY = web.AppKey("config-parser", ProposalParser)


WHATIF_TIMEOUT_S = 300.0
"""A what-if replays every workload of its window twice: a month of a busy cluster takes about a minute."""

WhatIf = Callable[[str, str, str, str, str], dict[str, Any]]
"""(ledger URL, proposed quota file, from, to (ISO 8601), the file in force now) → the comparison as JSON values, or
{"error": message, "status": 422 | 503}. Run in a worker process, so a module-level function."""


class WhatIfRunner(OffLoopWorker):
    """What-if replays for the config diff, in a worker process of their own (a replay must not hold up the
    checking of quota files), one at a time."""

    what = "what-if replays"
    too_long = "the what-if replay took more than {seconds} s: ask for a shorter window"
    stopped = "the what-if replay stopped; retry"
    default_timeout_s = WHATIF_TIMEOUT_S
    default_max_waiting = 2

    async def compare(self, function: WhatIf, *args: str) -> dict[str, Any]:
        answer = await self.run(function, *args)
        error = answer.get("error")
        if error is not None:
            raise ApiProblem(int(answer.get("status", 422)), str(error))
        return answer


WHATIF_KEY = web.AppKey("whatif-runner", WhatIfRunner)
