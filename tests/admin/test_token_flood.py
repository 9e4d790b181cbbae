"""A flood of made-up bearer tokens cannot stall the process: scrypt entries are checked in worker threads, a few
at a time, a wrong token sent again costs nothing, and past the queue's bound the answer is 429 at once.

Before, every unknown token was hashed with scrypt on the event loop (tens of milliseconds each), so a flood
took /healthz from under a millisecond to most of a second and held up everything sharing the process. Here the
scrypt checks are held where they run until the test has its probe answered: no clock decides the test."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from admin.auth import HASHING_AT_ONCE, HASHING_WAITING, TokenEntry, TokenStore, add_token, read_token_file
from tests.admin.stall import serve
from tests.held import hold

FLOOD = 60


async def everyone(attempt: Callable[[], Awaitable[int]]) -> list[int]:
    return await asyncio.gather(*(attempt() for _ in range(FLOOD)))


async def test_a_flood_of_unknown_tokens_neither_stalls_health_checks_nor_queues_without_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.yaml"
    for name in ("ops", "sre"):
        add_token(path, name, "admin", scheme="scrypt")
    good = add_token(path, "viewer", "viewer")
    store = TokenStore.from_file(path)
    assert sum(e.hash.startswith("scrypt:") for e in read_token_file(path)) == 2
    runner, url = await serve(store)
    try:
        async with aiohttp.ClientSession() as http:

            async def attempt() -> int:
                headers = {"Authorization": f"Bearer {secrets.token_urlsafe(24)}"}
                async with http.get(f"{url}/api/v1/tree", headers=headers) as response:
                    return response.status

            # Every scrypt check waits until let go: meanwhile the loop must answer probes and known tokens.
            with hold(monkeypatch, TokenEntry, "matches") as held:
                flood = asyncio.create_task(everyone(attempt))
                await held.started()
                async with http.get(f"{url}/healthz") as response:
                    assert response.status == 200
                # A token of a sha256 entry answers at once during the flood.
                async with http.get(f"{url}/api/v1/config", headers={"Authorization": f"Bearer {good}"}) as response:
                    assert response.status != 401
                assert not flood.done()
                held.go()
                statuses = await flood
    finally:
        await runner.cleanup()
    held.assert_held_off_the_loop()
    assert set(statuses) <= {401, 429}
    # Only the bounded queue's worth was hashed; the rest were refused at once, not queued.
    assert statuses.count(401) <= HASHING_AT_ONCE + HASHING_WAITING
    assert statuses.count(429) >= FLOOD - HASHING_AT_ONCE - HASHING_WAITING


async def test_the_same_wrong_token_is_hashed_once(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    add_token(path, "ops", "admin", scheme="scrypt")
    store = TokenStore.from_file(path)
    started = time.perf_counter()
    assert await store.authenticate_async("not-a-token") is None
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(20):
        assert await store.authenticate_async("not-a-token") is None
    again = time.perf_counter() - started
    assert again < first, (first, again)  # twenty lookups cost less than one scrypt


async def test_a_scrypt_token_still_authenticates_and_a_new_file_forgets_unknown_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    token = add_token(path, "ops", "admin", scheme="scrypt")
    store = TokenStore.from_file(path)
    principal = await store.authenticate_async(token)
    assert principal is not None and principal.name == "ops"
    other = tmp_path / "other.yaml"
    late = add_token(other, "late", "viewer", scheme="scrypt")
    assert await store.authenticate_async(late) is None  # remembered as unknown...
    path.write_text(path.read_text() + other.read_text().split("tokens:\n", 1)[1])
    store._stamp = None  # the test rewrote the file within the same second
    found = await store.authenticate_async(late)
    assert found is not None and found.name == "late"  # ...until the file changes
