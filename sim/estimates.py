"""Wait-time estimates: the live queue simulated from now with the real engine on the simulated cluster.

The simulated cluster starts where the live one is: the running work admitted where it runs (its usage charged
to its team, its minimum runtime counted from its real admission), each piece of it ending at its expected end,
and the pending work in the queues, each eligible when its requeue backoff ends. The queue manager, engine and
controller then decide exactly as in the cluster (priority, fair sharing, borrowing, preemption with checkpoints),
and a pending workload's estimate is when the simulation admits it.

Expected run times come from `sim.runtimes` (declared, or the median of past runs like it). Running work's
expected end is conditioned on what it has already run: the median of the past runs longer than its time so far
(a job 5 h into a class whose median is 1 h is not about to end); work that has outrun every such run is taken as
ending now, and work with no basis at all never ends in the simulation, so what waits for it stays unknown.

Bounded three ways so that it cannot run away with its process: a horizon (7 days of simulated time), a number
of simulated instants, and wall time. The admin API runs it in a worker process of its own (admin.estimates);
`estimate_json` is that process's entry point and reads the ledger's finished runs itself, once per minute.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from accounting.database import create_engine
from accounting.history import window_history
from accounting.records import AdmissionRecord, PreemptionRecord, WorkloadRecord
from admission.workload import Admission, Workload
from clusters.sim.cluster import Kind, SimJob, Simulation
from queues.controller import Eviction
from queues.journal import NullJournal
from queues.wait_estimates import LiveState, SimulatedStarts
from quota.config import QuotaConfig
from quota.loader import ConfigError, load_config_text
from quota.tree import FlavorResource
from sim.history import pod_sets_of, run_time_ms
from sim.runtimes import RunSample, RuntimeBook

HOUR_MS = 3_600_000
HORIZON_MS = 7 * 24 * HOUR_MS
MAX_INSTANTS = 20_000
MAX_WALL_S = 10.0
HISTORY_DAYS = 30
HISTORY_TTL_S = 60.0
STEP = 20
"""Instants between checks of the bounds."""


class _FirstAdmissions(NullJournal):
    """When each workload was first admitted in the simulation."""

    def __init__(self) -> None:
        self.at: dict[str, int] = {}

    def admitted(
        self, workload: Workload, attempt: int, usage: Mapping[FlavorResource, int], borrowed: object, at: int
    ) -> None:
        self.at.setdefault(workload.name, at)


def simulate_starts(
    state: LiveState,
    config: QuotaConfig,
    book: RuntimeBook,
    *,
    horizon_ms: int = HORIZON_MS,
    max_instants: int = MAX_INSTANTS,
    max_wall_s: float = MAX_WALL_S,
) -> SimulatedStarts:
    """Every simulated pending workload's start, on the state's clock. The simulation's own clock starts at 0 at
    `state.now_ms` (its sampling and figures assume times from 0), so every time is shifted by it and back."""
    started = time.perf_counter()
    now = state.now_ms
    runtimes: dict[str, tuple[int, str]] = {}
    ends: dict[str, tuple[int, str]] = {}
    unknown: set[str] = set()
    jobs: list[SimJob] = []
    never = horizon_ms + 1  # a run time that ends after the horizon: "never" to the simulation
    for workload, eligible_at in state.pending:
        guess = book.expected(workload)
        if guess is None:
            unknown.add(workload.name)
        else:
            runtimes[workload.name] = (guess.duration_ms, guess.describe())
        shifted = replace(workload, created_at=workload.created_at - now)
        jobs.append(SimJob(shifted, max(0, eligible_at - now), guess.duration_ms if guess else never, None, 10_000))
    first = _FirstAdmissions()
    simulation = Simulation(config, jobs, first)
    teams = {t.name for t in config.teams}
    for workload in state.running:
        if workload.admission is None or workload.team not in teams:
            continue
        ran = max(0, now - workload.admission.admitted_at)
        remaining = book.remaining(workload, ran)
        if remaining is None:
            unknown.add(workload.name)
            left = never
        else:
            left = remaining.duration_ms
            ends[workload.name] = (now + left, remaining.describe())
        job = _seat(simulation, workload, now, ran, left)
        if left <= horizon_ms:
            simulation.push(left, Kind.FINISH, workload.name, job.generation)
    for workload, gone in state.leaving:
        if workload.admission is None or workload.team not in teams:
            continue
        ran = max(0, now - workload.admission.admitted_at)
        remaining = book.remaining(workload, ran)
        left = remaining.duration_ms if remaining is not None else never
        job = _seat(simulation, workload, now, ran, left)
        job.progress_ms = ran  # what it did is taken as checkpointed: readmitted, it runs the rest
        # Already asked to leave: the simulated controller must not ask again (it would free the quota sooner).
        simulation.controller.tracking[workload.name].eviction = Eviction(None, "Preempted", 0, gone - now)
        simulation.push(gone - now, Kind.SUSPENDED, workload.name, job.generation)
    instants = 0
    stopped = None
    while simulation.step(1):  # one instant at a time: the bounds are looked at between instants
        instants += 1
        if simulation.now > horizon_ms:
            break
        if instants >= max_instants:
            stopped = f"{max_instants} simulated instants"
            break
        if instants % STEP == 0 and time.perf_counter() - started > max_wall_s:
            stopped = f"{max_wall_s:g} s of computing"
            break
    waiting = {w.name for w, _ in state.pending}
    starts = {name: at + now for name, at in first.at.items() if name in waiting and at <= horizon_ms}
    return SimulatedStarts(
        now_ms=now,
        horizon_ms=now + horizon_ms,
        simulated_to_ms=now + min(simulation.now, horizon_ms),
        events=instants,
        stopped=stopped,
        starts=starts,
        runtimes=runtimes,
        ends=ends,
        unknown_runtime=frozenset(unknown),
        history_runs=book.count,
        wall_ms=int((time.perf_counter() - started) * 1000),
    )


def _seat(simulation: Simulation, workload: Workload, now: int, ran: int, left: int) -> SimJob:
    """Put running (or leaving) work on the simulated cluster where it runs, without a cycle: charged to its team
    from instant 0, its admission time kept (minimum runtimes count from it), its pods ready."""
    assert workload.admission is not None
    admission = workload.admission
    shifted = replace(
        workload,
        created_at=workload.created_at - now,
        admission=Admission(admission.flavors, admission.counts, admission.admitted_at - now),
    )
    job = SimJob(shifted, 0, ran + left, None, 10_000)
    job.started_at = -ran
    job.generation = 1
    simulation.jobs[workload.name] = job
    simulation.controller.submit(shifted, 0)
    if not workload.evicting:
        simulation.controller.pods_reported(workload.name, None, 0)  # it runs: gang readiness waits for nothing
    return job


# -- the ledger's finished runs -----------------------------------------------------------------------------------


def samples_from_history(
    workloads: Iterable[WorkloadRecord], admissions: Iterable[AdmissionRecord], preemptions: Iterable[PreemptionRecord]
) -> list[RunSample]:
    """Finished workloads' run times (`sim.history.run_time_ms`), one sample each."""
    by_workload: dict[str, list[AdmissionRecord]] = {}
    for admission in admissions:
        by_workload.setdefault(admission.workload_id, []).append(admission)
    preempted: dict[str, dict[int, PreemptionRecord]] = {}
    for preemption in preemptions:
        preempted.setdefault(preemption.victim, {})[preemption.victim_attempt] = preemption
    out = []
    for workload in workloads:
        ran = run_time_ms(workload, by_workload.get(workload.workload_id, []), preempted.get(workload.workload_id, {}))
        if ran is None:
            continue
        pod_sets = pod_sets_of(workload.pod_sets)
        gpus = sum(ps.count * q for ps in pod_sets for r, q in ps.requests.items() if r.endswith("gpu"))
        out.append(RunSample(workload.team, workload.queue, gpus, ran))
    return out


async def _read_samples(url: str, now: datetime) -> list[RunSample]:
    engine = create_engine(url)
    try:
        history = await window_history(engine, now - timedelta(days=HISTORY_DAYS), now + timedelta(seconds=1))
    finally:
        await engine.dispose()
    return samples_from_history(history.workloads, history.admissions, history.preemptions)


_books: dict[str, tuple[float, RuntimeBook]] = {}
_configs: dict[str, QuotaConfig] = {}


def book_from_ledger(url: str | None, now_ms: int) -> RuntimeBook:
    """The last HISTORY_DAYS of finished runs in the ledger at `url`, read at most once per HISTORY_TTL_S."""
    if url is None:
        return RuntimeBook(())
    cached = _books.get(url)
    if cached is not None and time.monotonic() - cached[0] < HISTORY_TTL_S:
        return cached[1]
    samples = asyncio.run(_read_samples(url, datetime.fromtimestamp(now_ms / 1000, UTC)))
    book = RuntimeBook(samples)
    _books.clear()
    _books[url] = (time.monotonic(), book)
    return book


def estimate_json(url: str | None, state: LiveState) -> SimulatedStarts | dict[str, Any]:
    """The admin API's worker entry point: the simulation's answer, or {"error": message} (a ledger that cannot be
    read, a quota file that no longer loads), never an exception to unpickle."""
    try:
        config = _configs.get(state.config_text)
        if config is None:
            config = load_config_text(state.config_text, source="the quota file in force")
            _configs.clear()
            _configs[state.config_text] = config
        book = book_from_ledger(url, state.now_ms)
    except ConfigError as exc:
        return {"error": exc.render()}
    except (SQLAlchemyError, OSError) as exc:
        return {"error": f"cannot read the ledger's history: {getattr(exc, 'orig', None) or exc}"}
    return simulate_starts(state, config, book)
