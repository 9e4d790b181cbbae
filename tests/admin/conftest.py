"""A live admin server on 127.0.0.1 around a real Controller, a real SQLite ledger and real tokens.

The server runs on its own event loop in a background thread (so schemathesis, requests and the CLI can talk
to it synchronously); the controller is set up on that loop before the server starts listening.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from aiohttp import web
from prometheus_client import CollectorRegistry

from accounting.ledger import Ledger
from accounting.migrate import upgrade_async
from admin.app import build_app
from admin.auth import TokenStore, add_token
from admin.metrics import metrics_journal
from admission.workload import Workload
from kuota.runtime import Runtime
from queues.controller import Controller
from queues.journal import Journals
from queues.ledger_journal import LedgerJournal
from queues.loop import LoopTimers, wall_clock_ms
from quota.loader import load_config_text
from quota.pod_set import PodSet

CONFIG = """
flavors: [{name: a100}]
priorityClasses:
  - {name: production, value: 1000, checkpointTimeout: 30s}
  - {name: research, value: 100, default: true, checkpointTimeout: 20s}
cohorts: [{name: org}]
teams:
  - name: nlp
    parent: org
    queues: [nlp/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4}, memory: {nominal: 64Gi}}}]
    preemption: {withinTeam: LowerPriority, reclaimWithinCohort: Any}
  - name: vision
    parent: org
    queues: [vision/default, vision/batch]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4}, memory: {nominal: 64Gi}}}]
"""

ROLES = {"root": "admin", "watcher": "viewer", "nlp-lead": "team:nlp", "vision-lead": "team:vision"}


class StubCluster:
    """Records what the controller asks; the test answers (acks, suspensions) through the controller."""

    def __init__(self) -> None:
        self.admitted: list[str] = []
        self.checkpoints: list[str] = []
        self.deactivated: dict[str, str | None] = {}

    def admit(
        self,
        workload: Workload,
        flavors: Mapping[str, Mapping[str, str]],
        counts: Mapping[str, int],
        resume_from: str | None,
    ) -> None:
        self.admitted.append(workload.name)

    def request_checkpoint(self, workload: Workload, deadline: int, reason: str, preemptor: str | None) -> str:
        self.checkpoints.append(workload.name)
        return "annotation"

    def suspend(self, workload: Workload) -> None:
        return None

    def mark_deactivated(self, workload: Workload, message: str | None) -> None:
        self.deactivated[workload.name] = message

    def last_checkpoint_at(self, workload: Workload) -> int | None:
        return None


def workload(name: str, team: str, gpus: int, at: int, priority: int = 100, queue: str | None = None) -> Workload:
    return Workload(
        name=name,
        team=team,
        priority=priority,
        pod_sets=(PodSet("main", 1, {"nvidia.com/gpu": gpus * 1000, "memory": 8 * 2**30 * 1000}),),
        created_at=at,
        queue=queue or f"{team}/default",
        priority_class="research",
    )


@dataclass
class Server:
    url: str
    tokens: dict[str, str]
    runtime: Runtime
    loop: asyncio.AbstractEventLoop
    token_file: Path
    config_text: str

    def headers(self, who: str = "root") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def get(self, path: str, who: str = "root", **kw: Any) -> requests.Response:
        return requests.get(self.url + path, headers=self.headers(who), timeout=10, **kw)

    def post(self, path: str, who: str = "root", json: Any = None, **kw: Any) -> requests.Response:
        return requests.post(
            self.url + path, headers=self.headers(who), json=json if json is not None else {}, timeout=10, **kw
        )

    def call(self, fn: Any) -> Any:
        """Run `fn()` on the server's loop (the controller is not thread-safe)."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def flush(self) -> None:
        ledger = self.runtime.ledger
        assert ledger is not None
        asyncio.run_coroutine_threadsafe(ledger.flush(), self.loop).result(10)


async def _setup(tmp: Path, tokens: dict[str, str], text: str = CONFIG) -> tuple[Runtime, web.AppRunner, int]:
    url = f"sqlite+aiosqlite:///{tmp / 'ledger.db'}"
    await upgrade_async(url)
    ledger = Ledger(url)
    await ledger.start()
    registry = CollectorRegistry()
    config = load_config_text(text)
    cluster = StubCluster()
    journal = Journals(LedgerJournal(ledger), metrics_journal(registry))
    controller = Controller(config, cluster, LoopTimers(), journal)  # type: ignore[arg-type]
    runtime = Runtime(config, text, ledger=ledger, controller=controller, leader=True)
    now = wall_clock_ms()
    # nlp runs 2+2 GPUs; vision runs 4 and borrows 2 more from idle nlp? No: nlp is full, so vision's 6 waits.
    for w in (
        workload("nlp/train-a", "nlp", 2, now - 60_000),
        workload("nlp/train-b", "nlp", 2, now - 50_000),
        workload("vision/big", "vision", 4, now - 40_000),
        workload("vision/huge", "vision", 16, now - 30_000),
        workload("vision/next", "vision", 2, now - 20_000, queue="vision/batch"),
        workload("nlp/later", "nlp", 1, now - 10_000),
    ):
        controller.submit(w, now)
    for _ in range(10):
        if controller.schedule(wall_clock_ms()) is None:
            break
    await ledger.flush()
    app = build_app(runtime, TokenStore.from_file(tmp / "tokens.yaml"), registry)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runtime, runner, port


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve(tmp_path_factory, CONFIG)


def serve(tmp_path_factory: pytest.TempPathFactory, text: str) -> Iterator[Server]:
    """The server around a controller of quota file `text`, until the generator is closed."""
    tmp = tmp_path_factory.mktemp("admin")
    tokens = {name: add_token(tmp / "tokens.yaml", name, role) for name, role in ROLES.items()}
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runtime, runner, port = asyncio.run_coroutine_threadsafe(_setup(tmp, tokens, text), loop).result(60)
    yield Server(f"http://127.0.0.1:{port}", tokens, runtime, loop, tmp / "tokens.yaml", text)

    async def teardown() -> None:
        await runner.cleanup()
        if runtime.ledger is not None:
            await runtime.ledger.close()

    asyncio.run_coroutine_threadsafe(teardown(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
