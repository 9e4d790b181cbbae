"""Events are budgeted on their own: a burst of submissions sends at most the budget's worth (the rest are
counted as dropped), and Events never take from the client's request budget that admissions and evictions use."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio import client

from clusters.kube.api import KubeApi, TokenBucket
from clusters.kube.events import EventRecorder


class Core:
    """kube-apiserver's Events endpoint on a loopback port: records every Event created."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.runner: web.AppRunner | None = None

    async def _create(self, request: web.Request) -> web.Response:
        self.created.append(orjson.loads(await request.read()))
        return web.Response(status=201, body=b"{}", content_type="application/json")

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/api/v1/namespaces/{ns}/events", self._create)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    served = Core()
    yield served
    if served.runner is not None:
        await served.runner.cleanup()


async def api_of(core: Core, qps: float, burst: int) -> KubeApi:
    configuration = client.Configuration()
    configuration.host = await core.start()
    return KubeApi(client.ApiClient(configuration), qps=qps, burst=burst)


async def test_a_burst_sends_at_most_the_budget_and_counts_the_rest(core: Core) -> None:
    api = await api_of(core, qps=1000, burst=1000)
    now = [0.0]
    recorder = EventRecorder(api, lambda _key: "uid", budget=TokenBucket(1.0, 5, clock=lambda: now[0]))
    for i in range(20):
        recorder.emit(f"ns/job-{i}", "Queued", "Queued in q at position 1", 1_000)
    await recorder.drain()
    assert len(core.created) == 5
    assert recorder.dropped == 15
    now[0] = 2.0  # two seconds later the budget has two more
    for i in range(20, 25):
        recorder.emit(f"ns/job-{i}", "Queued", "Queued in q at position 1", 3_000)
    await recorder.drain()
    assert len(core.created) == 7
    assert api.bucket.tokens == 1000  # the client's own budget was never touched
    await api.close()
    await api.api_client.close()


async def test_events_do_not_wait_behind_an_exhausted_client_budget(core: Core) -> None:
    api = await api_of(core, qps=0.01, burst=1)
    assert api.bucket.try_take()  # the client's budget is spent: its next request would wait for 100 s
    recorder = EventRecorder(api, lambda _key: "uid")
    recorder.emit("ns/job", "Admitted", "Admitted by team t on flavor f, attempt 1", 1_000)
    await asyncio.wait_for(recorder.drain(), timeout=5)
    assert [e["reason"] for e in core.created] == ["Admitted"]
    await api.close()
    await api.api_client.close()
