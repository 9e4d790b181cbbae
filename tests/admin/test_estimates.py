"""Wait-time estimates through the admin API and `kuota why`, on a live server whose real SQLite ledger holds the
history the run times come from: the estimate is the simulated start with its basis, it is computed once per
state, and a workload with no basis says unknown and why."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from aiohttp import web
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from accounting.ledger import Ledger
from accounting.migrate import upgrade_async
from admin.app import build_app
from admin.auth import TokenStore, add_token
from kuota.cli import _register_commands, app
from kuota.runtime import Runtime
from queues.controller import Controller
from queues.ledger_journal import LedgerJournal
from queues.loop import LoopTimers, wall_clock_ms
from quota.loader import load_config_text
from tests.admin.conftest import CONFIG, StubCluster, workload

MIN = 60_000
_register_commands(["kuota"])


class Live:
    def __init__(self, url: str, token: str, t: int) -> None:
        self.url, self.token, self.t = url, token, t

    def get(self, path: str) -> Any:
        response = requests.get(self.url + path, headers={"Authorization": f"Bearer {self.token}"}, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()


async def _setup(tmp: Path, t: int) -> tuple[Runtime, web.AppRunner, int]:
    url = f"sqlite+aiosqlite:///{tmp / 'ledger.db'}"
    await upgrade_async(url)
    ledger = Ledger(url)
    await ledger.start()
    config = load_config_text(CONFIG)
    controller = Controller(config, StubCluster(), LoopTimers(), LedgerJournal(ledger))  # type: ignore[arg-type]

    def run(name: str, team: str, gpus: int, at: int, minutes: int | None) -> None:
        controller.submit(workload(name, team, gpus, at), at)
        controller.schedule(at)
        if minutes is not None:
            controller.job_finished(name, at + minutes * MIN)

    # History, hours ago: nlp's 2-GPU runs took 60, 90 and 120 min, vision's 30 min each.
    for i, minutes in enumerate((60, 90, 120)):
        run(f"nlp/past-{i}", "nlp", 2, t - (10 - 3 * i) * 60 * MIN, minutes)
    for i in range(3):
        run(f"vision/past-{i}", "vision", 2, t - (10 - i) * 60 * MIN, 30)
    # Now: nlp's 4 GPUs are taken by two runs; vision's 4 by one run of 10 min so far; nlp/later waits.
    run("nlp/train-a", "nlp", 2, t - 30 * MIN, None)
    run("nlp/train-b", "nlp", 2, t - 20 * MIN, None)
    run("vision/big", "vision", 4, t - 10 * MIN, None)
    run("nlp/later", "nlp", 2, t - 5 * MIN, None)
    run("vision/new", "vision", 1, t - 4 * MIN, None)  # a 1-GPU run: nothing of its size in the history
    run("vision/wide", "vision", 8, t - 3 * MIN, None)  # the whole cohort: it needs vision/new gone too
    await ledger.flush()
    runtime = Runtime(config, CONFIG, ledger=ledger, controller=controller, leader=True)
    runner = web.AppRunner(build_app(runtime, TokenStore.from_file(tmp / "tokens.yaml"), CollectorRegistry()))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runtime, runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("estimates")
    token = add_token(tmp / "tokens.yaml", "viewer", "viewer")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    t = wall_clock_ms()
    runtime, runner, port = asyncio.run_coroutine_threadsafe(_setup(tmp, t), loop).result(60)
    yield Live(f"http://127.0.0.1:{port}", token, t)

    async def teardown() -> None:
        await runner.cleanup()
        assert runtime.ledger is not None
        await runtime.ledger.close()

    asyncio.run_coroutine_threadsafe(teardown(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def test_the_workload_view_estimates_the_start_with_its_basis(live: Live) -> None:
    assert live.get("/api/v1/workloads/nlp/later")["estimate"] is None, "only when asked: it runs a simulation"
    estimate = live.get("/api/v1/workloads/nlp/later?estimate=true")["estimate"]
    # vision/big (4 GPUs, class 2-8) has run 10 min and vision's runs of its class took 30: it ends 20 min from
    # now, and nlp/later borrows the GPUs it frees (nlp's own stay busy: train-a is expected to end at 90 min).
    assert estimate["start_at"] == live.t - 10 * MIN + 30 * MIN
    assert estimate["unknown"] is None
    assert (estimate["position_in_team"], estimate["position_in_queue"], estimate["ahead"]) == (1, 1, 0)
    assert estimate["runtime"] == "median of 3 finished (team+queue+size)" and estimate["runtime_s"] == 90 * 60
    assert estimate["cohort"] == "org"
    assert [h["workload"] for h in estimate["cohort_heads"]] == ["vision/new"]
    assert estimate["running"] == 3 and estimate["running_without_end"] == 0
    assert estimate["ahead_gpu_hours"] == "0.00"
    first = estimate["next_ends"][0]
    assert first["workload"] == "vision/big" and first["ends_at"] == live.t + 20 * MIN
    assert first["basis"] == "median of 3 finished (team+queue+size, of those longer)"
    ends = {e["workload"]: e["ends_at"] for e in estimate["next_ends"]}
    assert ends["nlp/train-a"] == live.t - 30 * MIN + 90 * MIN, "runs longer than its 30 min so far: 90, 120"
    simulation = estimate["simulation"]
    assert simulation["history_runs"] == 6 and simulation["stopped"] is None and simulation["cached"] is False
    again = live.get("/api/v1/workloads/nlp/later?estimate=true")["estimate"]
    assert again["simulation"]["cached"] is True and again["start_at"] == estimate["start_at"]


def test_no_basis_is_unknown_with_the_reason(live: Live) -> None:
    # vision/new's own run time has no basis (nothing of its size ran before), which does not stop its start:
    # it takes a GPU vision/big frees, beside nlp/later.
    estimate = live.get("/api/v1/workloads/vision/new?estimate=true")["estimate"]
    assert estimate["runtime"] is None and estimate["runtime_s"] is None
    assert estimate["start_at"] == live.t + 20 * MIN
    # vision/wide needs the whole cohort, vision/new's GPU included, and the simulation never ends vision/new.
    estimate = live.get("/api/v1/workloads/vision/wide?estimate=true")["estimate"]
    assert estimate["start_at"] is None
    assert estimate["ahead"] == 1 and estimate["ahead_without_runtime"] == 1
    assert estimate["unknown"].startswith("it does not start within the 168 h the simulation looks ahead; ")
    assert "1 workload(s) have no expected run time" in estimate["unknown"]


def test_kuota_why_prints_the_estimate_and_its_basis(live: Live) -> None:
    result = CliRunner().invoke(
        app, ["why", "nlp/later"], env={"KUOTA_SERVER": live.url, "KUOTA_TOKEN": live.token, "COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("estimated start: ") and "(in 1" in line for line in lines), result.output
    assert "  ahead in its team: 0 workload(s), 0.00 GPU-hours expected" in lines
    assert "  its run time: 1 h 30 min, median of 3 finished (team+queue+size)" in lines
    assert "  cohort org: other teams' heads: vision/new (vision, 1 GPU)" in lines
    assert "  running in the cohort: 3 (0 with no expected end); first to end:" in lines
    end = lines.index("  running in the cohort: 3 (0 with no expected end); first to end:") + 1
    assert lines[end].startswith("    vision/big (4 GPU) at ")
    assert lines[end].endswith(": median of 3 finished (team+queue+size, of those longer)")
    assert any(line.startswith("  simulated with the engine to ") for line in lines)
    result = CliRunner().invoke(
        app, ["why", "nlp/later", "-o", "json"], env={"KUOTA_SERVER": live.url, "KUOTA_TOKEN": live.token}
    )
    assert result.exit_code == 0 and '"start_at"' in result.output
