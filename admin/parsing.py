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
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from aiohttp import web

from admin.problems import ApiProblem
from quota.config import QuotaConfig
from quota.loader import ConfigError, format_path, load_config_text

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


class ProposalParser:
    def __init__(self, *, timeout_s: float = PARSE_TIMEOUT_S, max_waiting: int = MAX_WAITING) -> None:
        self.timeout_s = timeout_s
        self.max_waiting = max_waiting
        self._executor: ProcessPoolExecutor | None = None
        self._one = asyncio.Semaphore(1)
        self._waiting = 0

    async def parse(self, text: str) -> tuple[QuotaConfig | None, list[Problem]]:
        if self._waiting >= self.max_waiting:
            raise ApiProblem(429, "too many quota files being checked at once; retry in a few seconds")
        self._waiting += 1
        try:
            async with self._one:
                return await self._in_worker(text)
        finally:
            self._waiting -= 1

    async def _in_worker(self, text: str) -> tuple[QuotaConfig | None, list[Problem]]:
        loop = asyncio.get_running_loop()
        executor = self._pool()
        try:
            return await asyncio.wait_for(loop.run_in_executor(executor, parse_proposal, text), self.timeout_s)
        except TimeoutError:
            self._restart()
            raise ApiProblem(422, f"the quota file took more than {self.timeout_s:.0f} s to check") from None
        except BrokenProcessPool:
            self._restart()
            raise ApiProblem(503, "the quota file checker stopped; retry") from None

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


PARSER_KEY = web.AppKey("config-parser", ProposalParser)
