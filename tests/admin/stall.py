"""What the no-stall tests share: an admin app of its own on a free port, and a prober that times /healthz."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web

from admin.app import build_app
from admin.auth import TokenStore
from kuota.runtime import Runtime
from quota.config import QuotaConfig


async def serve(tokens: TokenStore) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(build_app(Runtime(QuotaConfig(), ""), tokens), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


@asynccontextmanager
async def health_timed(http: aiohttp.ClientSession, url: str) -> AsyncIterator[list[float]]:
    """Times /healthz every 10 ms while the block runs; the list holds each answer's seconds."""
    seconds: list[float] = []

    async def probe() -> None:
        while True:
            started = time.perf_counter()
            async with http.get(f"{url}/healthz") as response:
                assert response.status == 200
            seconds.append(time.perf_counter() - started)
            await asyncio.sleep(0.01)

    prober = asyncio.create_task(probe())
    try:
        yield seconds
    finally:
        prober.cancel()
