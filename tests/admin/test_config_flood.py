"""Hostile quota files sent to the admin API's config endpoints (a viewer's token is enough for validate and diff)
are parsed in a worker thread: an alias bomb gets its clean problem, and health checks on the same event loop keep
answering meanwhile."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from admin.app import build_app
from admin.auth import TokenStore, add_token
from kuota.runtime import Runtime
from quota.config import QuotaConfig

BOMB = "\n".join(
    ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
)


async def test_alias_bombs_to_validate_and_diff_do_not_stall_health_checks(tmp_path: Path) -> None:
    token = add_token(tmp_path / "tokens.yaml", "viewer", "viewer")
    runner = web.AppRunner(build_app(Runtime(QuotaConfig(), ""), TokenStore.from_file(tmp_path / "tokens.yaml")))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    health: list[float] = []
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:

            async def hostile(path: str) -> dict[str, object]:
                async with http.post(f"{url}/api/v1/config/{path}", json={"text": BOMB}) as response:
                    assert response.status == 200, await response.text()
                    return await response.json()  # type: ignore[no-any-return]

            async def probe() -> None:
                while True:
                    started = time.perf_counter()
                    async with http.get(f"{url}/healthz") as response:
                        assert response.status == 200
                    health.append(time.perf_counter() - started)
                    await asyncio.sleep(0.01)

            prober = asyncio.create_task(probe())
            answers = await asyncio.gather(*(hostile(p) for p in ("validate", "diff", "validate", "diff")))
            prober.cancel()
    finally:
        await runner.cleanup()
    for answer in answers:
        assert answer["valid"] is False
        assert "more than 1,000,000 values" in str(answer["problems"])
    assert health and max(health) < 0.5, f"/healthz took up to {max(health) * 1000:.0f} ms"
