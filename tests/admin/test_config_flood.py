"""Hostile quota files sent to the admin API's config endpoints (a viewer's token is enough for validate and diff)
are parsed in a worker thread: an alias bomb gets its clean problem, and health checks on the same event loop keep
answering meanwhile."""

from __future__ import annotations

import asyncio
from pathlib import Path
from statistics import median

import aiohttp

from admin.auth import TokenStore, add_token
from tests.admin.stall import health_timed, serve

BOMB = "\n".join(
    ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
)


async def test_alias_bombs_to_validate_and_diff_do_not_stall_health_checks(tmp_path: Path) -> None:
    token = add_token(tmp_path / "tokens.yaml", "viewer", "viewer")
    runner, url = await serve(TokenStore.from_file(tmp_path / "tokens.yaml"))
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:

            async def hostile(path: str) -> dict[str, object]:
                async with http.post(f"{url}/api/v1/config/{path}", json={"text": BOMB}) as response:
                    assert response.status == 200, await response.text()
                    return await response.json()  # type: ignore[no-any-return]

            async with health_timed(http, url) as health:
                answers = await asyncio.gather(*(hostile(p) for p in ("validate", "diff", "validate", "diff")))
    finally:
        await runner.cleanup()
    for answer in answers:
        assert answer["valid"] is False
        assert "more than 1,000,000 values" in str(answer["problems"])
    print(f"\n/healthz during the flood: median {median(health) * 1e3:.1f} ms, max {max(health) * 1e3:.1f} ms")
    # The goal is under 50 ms; the maximum gets room for a loaded CI machine, far below the seconds the same
    # flood held the loop for when the work ran on it.
    assert health and median(health) < 0.05, f"/healthz took up to {max(health) * 1000:.0f} ms"
    assert max(health) < 1.0, f"/healthz took up to {max(health) * 1000:.0f} ms"
