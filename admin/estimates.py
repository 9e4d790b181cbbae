"""Wait-time estimates for the workload view: the live queue simulated in a worker process, once per state.

The simulation (sim.estimates, given by the process as `RuntimePort.estimator`) is CPU work for up to its
own bound of seconds: on the event loop that also serves webhooks, health checks and the controller it would stall
them all, so it runs in a worker process of its own, one at a time, with a time limit. The event loop only copies
the state (bounded: queues.wait_estimates.live_state) and builds the view. One answer serves every workload of the
state it was made for: asking again, for any workload, before anything changed costs nothing, and concurrent
asks for one state share one simulation.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from admin.models import EstimateEnd, EstimateHead, EstimateSimulation, EstimateView, Quantity
from admin.parsing import OffLoopWorker
from admin.problems import ApiProblem
from queues.read_model import ControllerReader
from queues.wait_estimates import Estimator, LiveState, SimulatedStarts, WaitEstimate, explain, live_state

ESTIMATE_TIMEOUT_S = 30.0
"""The simulation stops itself after 10 s of computing; reading the ledger's month of finished runs comes first."""

GPU = "nvidia.com/gpu"


class EstimateRunner(OffLoopWorker):
    what = "wait-time estimates"
    too_long = "the wait-time simulation took more than {seconds} s"
    stopped = "the wait-time simulation stopped"
    default_timeout_s = ESTIMATE_TIMEOUT_S
    default_max_waiting = 4

    def __init__(self, *, timeout_s: float | None = None, max_waiting: int | None = None) -> None:
        super().__init__(timeout_s=timeout_s, max_waiting=max_waiting)
        self._last: tuple[tuple[int, ...], SimulatedStarts] | None = None
        self._running: dict[tuple[int, ...], asyncio.Future[SimulatedStarts | dict[str, Any]]] = {}

    async def starts(self, estimator: Estimator, url: str | None, state: LiveState) -> tuple[SimulatedStarts, bool]:
        """The simulation of `state` (and whether it was already there); ApiProblem when it cannot be had."""
        version = state.version
        if self._last is not None and self._last[0] == version:
            return self._last[1], True
        future = self._running.get(version)
        if future is None:
            future = asyncio.ensure_future(self.run(estimator, url, state))
            self._running[version] = future
            future.add_done_callback(lambda _: self._running.pop(version, None))
        answer = await asyncio.shield(future)
        if isinstance(answer, dict):
            raise ApiProblem(503, str(answer.get("error")))
        self._last = (version, answer)
        return answer, False


ESTIMATES_KEY = web.AppKey("estimate-runner", EstimateRunner)


async def estimate_view(
    runner: EstimateRunner,
    estimator: Estimator | None,
    controller: ControllerReader,
    name: str,
    *,
    config_text: str,
    now_ms: int,
    ledger_url: str | None,
) -> EstimateView:
    starts: SimulatedStarts | None = None
    cached = False
    unavailable = None
    state = live_state(controller, config_text, now_ms)
    if estimator is None:
        unavailable = "this process offers no wait-time simulation"
    else:
        try:
            starts, cached = await runner.starts(estimator, ledger_url, state)
        except ApiProblem as problem:
            unavailable = problem.detail
    return to_view(explain(controller, state, name, starts, unavailable), now_ms, cached)


def to_view(estimate: WaitEstimate, now_ms: int, cached: bool) -> EstimateView:
    sim = estimate.simulation
    own = sim.runtimes.get(estimate.workload) if sim is not None else None
    return EstimateView(
        start_at=estimate.start_at,
        start_in_s=None if estimate.start_at is None else max(0, estimate.start_at - now_ms) // 1000,
        unknown=estimate.unknown,
        position_in_team=estimate.position_in_team,
        position_in_queue=estimate.position_in_queue,
        ahead=estimate.ahead.workloads,
        # GPU-hours for people (milli-GPU-ms over 1000 × 3,600,000), two decimals, from integers.
        ahead_gpu_hours=_hours(estimate.ahead.gpu_ms),
        ahead_without_runtime=estimate.ahead.without_runtime,
        runtime=estimate.own_runtime,
        runtime_s=own[0] // 1000 if own is not None else None,
        cohort=estimate.cohort,
        cohort_heads=[
            EstimateHead(workload=h.name, team=h.team, gpus=Quantity.of(GPU, h.gpu_milli))
            for h in estimate.cohort_heads
        ],
        running=estimate.running,
        running_without_end=estimate.running_unknown_end,
        next_ends=[
            EstimateEnd(
                workload=e.name, team=e.team, gpus=Quantity.of(GPU, e.gpu_milli), ends_at=e.ends_at, basis=e.basis
            )
            for e in estimate.next_ends
        ],
        simulation=None
        if sim is None
        else EstimateSimulation(
            simulated_to=sim.simulated_to_ms,
            horizon=sim.horizon_ms,
            events=sim.events,
            stopped=sim.stopped,
            history_runs=sim.history_runs,
            wall_ms=sim.wall_ms,
            cached=cached,
        ),
    )


def _hours(milli_gpu_ms: int) -> str:
    hundredths = (milli_gpu_ms * 100 + 1_800_000_000) // 3_600_000_000
    return f"{hundredths // 100}.{hundredths % 100:02d}"
