"""POST /api/v1/config/diff with {"whatif": {"from", "to"}}: the ledger's workloads of the window replayed under the
file in force then and under the proposal, in the what-if worker process (health checks keep answering), with a
time limit; without a ledger, or with an empty window, a clear problem."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from accounting.ledger import Ledger
from admin.app import build_app
from admin.auth import TokenStore, add_token
from admin.parsing import WHATIF_KEY, WhatIfRunner
from kuota.runtime import Runtime
from quota.loader import load_config_file
from sim.whatif import FIGURES
from tests.accounting.test_whatif import CONFIG, END, START, doubled, simulate
from tests.held import hold_workers

JOBS = 300


async def serve(runtime: Runtime, tokens: TokenStore) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(build_app(runtime, tokens), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def test_diff_with_whatif_compares_per_team_off_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    simulated = simulate(url, limit=JOBS)
    token = add_token(tmp_path / "tokens.yaml", "viewer", "viewer")
    tokens = TokenStore.from_file(tmp_path / "tokens.yaml")
    runtime = Runtime(load_config_file(CONFIG), CONFIG.read_text(), ledger=Ledger(url))
    proposal = doubled("infra", tmp_path / "bigger.yaml").read_text()
    runner, base = await serve(runtime, tokens)
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:

            async def diff(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
                async with http.post(f"{base}/api/v1/config/diff", json=body) as response:
                    return response.status, await response.json(content_type=None)

            # The replay is held in the what-if worker until a probe on the same loop has its answer.
            with hold_workers(monkeypatch, tmp_path / "gate", WhatIfRunner) as held:
                replay = asyncio.create_task(diff({"text": proposal, "whatif": {"from": START, "to": END}}))
                await held.started()
                async with http.get(f"{base}/healthz") as response:
                    assert response.status == 200
                assert not replay.done()
                held.go()
                status, answer = await replay
            assert status == 200, answer
            plain_status, plain = await diff({"text": proposal})
            bad_status, bad = await diff({"text": proposal, "whatif": {"from": END, "to": START}})
            empty_status, empty = await diff({"text": proposal, "whatif": {"from": "2020-01-01", "to": "2020-01-02"}})
            runner.app[WHATIF_KEY].timeout_s = 0.001
            slow_status, slow = await diff({"text": proposal, "whatif": {"from": START, "to": END}})
    finally:
        await runner.cleanup()

    held.assert_held_off_the_loop()
    assert answer["valid"] is True and answer["changes"]  # the ordinary diff is still there
    whatif = answer["whatif"]
    assert whatif["replayed"] == whatif["workloads"] == JOBS
    assert "kuota simulate" in whatif["baseline"]["source"]
    assert whatif["baseline"]["jain_fairness"] == simulated["jain_fairness"]
    teams = {row["team"]: row for row in whatif["teams"]}
    assert set(teams) == set(simulated["teams"])
    for team, row in teams.items():
        assert row["baseline"] == {key: simulated["teams"][team][key] for key in FIGURES}, team
    assert teams["infra"]["proposal"]["mean_wait_s"] <= teams["infra"]["baseline"]["mean_wait_s"]

    assert plain_status == 200 and plain["whatif"] is None
    assert bad_status == 422 and "must be before" in bad["detail"]
    assert empty_status == 422 and "no workload created" in empty["detail"]
    assert slow_status == 422 and "took more than" in slow["detail"]


async def test_diff_with_whatif_needs_a_ledger(tmp_path: Path) -> None:
    token = add_token(tmp_path / "tokens.yaml", "viewer", "viewer")
    runtime = Runtime(load_config_file(CONFIG), CONFIG.read_text())
    runner, base = await serve(runtime, TokenStore.from_file(tmp_path / "tokens.yaml"))
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
            body = {"text": CONFIG.read_text(), "whatif": {"from": START, "to": END}}
            async with http.post(f"{base}/api/v1/config/diff", json=body) as response:
                assert response.status == 409
                assert "--database-url" in (await response.json(content_type=None))["detail"]
    finally:
        await runner.cleanup()
