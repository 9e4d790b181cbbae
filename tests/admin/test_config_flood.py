"""Hostile quota files sent to the admin API's config endpoints (a viewer's token is enough for validate and diff)
are parsed in a worker thread: an alias bomb gets its clean problem, and health checks on the same event loop keep
answering meanwhile (the first is held in the worker until a probe is answered: no clock decides the test)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from admin.auth import TokenStore, add_token
from admin.parsing import ProposalParser
from tests.admin.stall import serve
from tests.held import hold_workers

BOMB = "\n".join(
    ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
)


async def test_alias_bombs_to_validate_and_diff_do_not_stall_health_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = add_token(tmp_path / "tokens.yaml", "viewer", "viewer")
    runner, url = await serve(TokenStore.from_file(tmp_path / "tokens.yaml"))
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:

            async def hostile(path: str) -> dict[str, object]:
                async with http.post(f"{url}/api/v1/config/{path}", json={"text": BOMB}) as response:
                    assert response.status == 200, await response.text()
                    return await response.json()  # type: ignore[no-any-return]

            async def all_four() -> list[dict[str, object]]:
                return await asyncio.gather(*(hostile(p) for p in ("validate", "diff", "validate", "diff")))

            # The first bomb is held in the worker process until the probe has its answer.
            with hold_workers(monkeypatch, tmp_path / "gate", ProposalParser) as held:
                flood = asyncio.create_task(all_four())
                await held.started()
                async with http.get(f"{url}/healthz") as response:
                    assert response.status == 200
                assert not flood.done()
                held.go()
                answers = await flood
    finally:
        await runner.cleanup()
    held.assert_held_off_the_loop()
    for answer in answers:
        assert answer["valid"] is False
        assert "more than 1,000,000 values" in str(answer["problems"])
