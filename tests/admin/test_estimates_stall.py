"""A huge pending queue does not stall the event loop when estimates are asked for: the state is copied bounded
(the first 2,000 pending, from every team's front), the simulation runs in a worker process with bounds on its
horizon, instants and wall time, and /healthz on the same loop keeps answering throughout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from admin.app import build_app
from admin.auth import TokenStore, add_token
from admission.workload import Workload
from kuota.runtime import Runtime
from queues.controller import Controller
from queues.journal import NullJournal
from queues.loop import LoopTimers, wall_clock_ms
from queues.wait_estimates import MAX_PENDING
from quota.loader import load_config_text
from quota.pod_set import PodSet
from sim.estimates import MAX_INSTANTS, MAX_WALL_S
from tests.admin.conftest import CONFIG, StubCluster
from tests.admin.stall import health_timed

PENDING = 60_000
MIN = 60_000


def one_gpu(name: str, team: str, at: int) -> Workload:
    return Workload(
        name=name,
        team=team,
        priority=100,
        pod_sets=(PodSet("main", 1, {"nvidia.com/gpu": 1000}),),
        created_at=at,
        queue=f"{team}/default",
        priority_class="research",
        expected_runtime_ms=30 * MIN,  # every run has a basis: the simulation has all the work it can do
    )


async def test_estimates_of_a_huge_queue_do_not_stall_health_checks(tmp_path: Path) -> None:
    config = load_config_text(CONFIG)
    controller = Controller(config, StubCluster(), LoopTimers(), NullJournal())  # type: ignore[arg-type]
    now = wall_clock_ms()
    for i in range(PENDING):
        team = "nlp" if i % 3 else "vision"
        controller.submit(one_gpu(f"{team}/job-{i:05d}", team, now - PENDING + i), now)
    controller.schedule(now)  # 8 run (nlp 4, vision 4), the rest wait
    token = add_token(tmp_path / "tokens.yaml", "viewer", "viewer")
    runtime = Runtime(config, CONFIG, controller=controller, leader=True)
    runner = web.AppRunner(build_app(runtime, TokenStore.from_file(tmp_path / "tokens.yaml")), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    pending = [n for n, s in controller.manager.state.items() if s == "pending"]
    head, tail = pending[0], pending[-1]
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:

            async def estimate(name: str) -> dict[str, Any]:
                async with http.get(f"{url}/api/v1/workloads/{name}?estimate=true") as response:
                    assert response.status == 200, await response.text()
                    return (await response.json())["estimate"]  # type: ignore[no-any-return]

            async with http.get(f"{url}/api/v1/workloads/{head}") as response:  # the server's first answer
                assert response.status == 200
            started = time.perf_counter()
            async with health_timed(http, url) as health:
                first, last, again = await asyncio.gather(estimate(head), estimate(tail), estimate(head))
            took = time.perf_counter() - started
    finally:
        await runner.cleanup()
    assert first["start_at"] is not None and first["start_at"] > now
    assert first["simulation"]["events"] <= MAX_INSTANTS
    # Its bound on computing is checked every few instants; a loaded machine stretches the last few.
    assert first["simulation"]["wall_ms"] <= 2 * MAX_WALL_S * 1000
    assert last["start_at"] is None
    assert last["unknown"].startswith(f"too far back in its queue: the estimate simulates the first {MAX_PENDING}")
    assert last["position_in_team"] > 30_000
    assert again["start_at"] == first["start_at"], "one simulation per state, whichever workload asks"
    assert took < 60, f"the three answers took {took:.1f} s"
    # Milliseconds on a quiet machine; the bound leaves room for a loaded one, far below the simulation's seconds.
    assert health and max(health) < 1.0, f"/healthz took up to {max(health) * 1000:.0f} ms"
