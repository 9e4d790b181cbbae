"""kuota as an OS process writing a ledger, for the kill -9 recovery test.

python -m tests.accounting.kill9_process run URL WORKDIR LIMIT
    Replay the first LIMIT jobs of the sample trace in real asyncio, one virtual step at a time, recording into
    the ledger and flushing after every step. The simulated cluster's own truth (each admission with the time its
    run will end, finishes, suspensions) goes to WORKDIR/cluster.jsonl synchronously, ahead of the ledger, the way
    Kubernetes keeps the Jobs whatever happens to kuota. The events of every flushed step are appended to
    WORKDIR/events-run.pickle. Runs until killed (or the trace ends).

python -m tests.accounting.kill9_process resume URL WORKDIR LIMIT
    The next leader, after recovery: read WORKDIR/restart.json (restart time, the jobs still running with their
    admission, the jobs that ended), continue attempts from the ledger, take the running jobs with their admission,
    queue the rest and replay to the end. Its events go to WORKDIR/events-resume.pickle. Prints a JSON summary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pickle
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from accounting import Ledger, repository
from accounting.events import LedgerEvent
from admission.workload import Admission, Workload
from clusters.sim.cluster import Kind, SimJob, Simulation
from queues.controller import Tracking
from queues.journal import Journals
from queues.ledger_journal import LedgerJournal
from quota.loader import load_config_file
from sim.replay import sim_jobs
from sim.traces import default_mapping, read_trace

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config" / "samples" / "org-quota.yaml"
TRACE = ROOT / "config" / "samples" / "itp-slice.csv"
EPOCH_MS = int(datetime(2021, 3, 4, tzinfo=UTC).timestamp() * 1000)
STEP_MS = 20 * 60_000
"""Virtual time replayed between two flushes."""


def load_jobs(limit: int) -> tuple[Any, list[SimJob]]:
    config = load_config_file(CONFIG)
    trace = read_trace(TRACE, "csv", default_mapping("csv", config), config, limit=limit)
    return config, sim_jobs(config, trace)


class Recorder:
    """Stands in for the ledger behind LedgerJournal: forwards every event and keeps it for the pickle file."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.pending: list[LedgerEvent] = []

    def record(self, event: LedgerEvent) -> None:
        self.ledger.record(event)
        self.pending.append(event)

    def dump(self, path: Path) -> None:
        with path.open("ab") as out:
            for event in self.pending:
                pickle.dump(event, out)
        self.pending.clear()


class ClusterLog:
    """The simulated cluster's truth, written before the ledger hears of it."""

    def __init__(self, path: Path) -> None:
        self.out = path.open("a", encoding="utf-8")
        self.sim: Simulation | None = None

    def _write(self, **entry: object) -> None:
        self.out.write(json.dumps(entry) + "\n")
        self.out.flush()  # in the kernel's page cache: survives SIGKILL of this process

    def admitted(self, workload: Workload, attempt: int, usage: object, borrowed: object, at: int) -> None:
        assert self.sim is not None and workload.admission is not None
        job = self.sim.jobs[workload.name]
        admission = workload.admission
        self._write(
            e="admitted",
            w=workload.name,
            attempt=attempt,
            at=at,
            ends=at + max(0, job.duration_ms - job.progress_ms),
            flavors={k: dict(v) for k, v in admission.flavors.items()},
            counts=dict(admission.counts),
        )

    def finished(self, workload: Workload, attempt: int, succeeded: bool, at: int) -> None:
        self._write(e="finished", w=workload.name, at=at)

    def suspended(self, victim: Workload, attempt: int, lost_gpu_milliseconds: int, at: int) -> None:
        self._write(e="stopped", w=victim.name, at=at)

    def clock(self, at: int) -> None:
        self._write(e="clock", at=at)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


async def step_through(sim: Simulation, ledger: Ledger, recorder: Recorder, events: Path, log: ClusterLog | None):
    at = min((job.submit_ms for job in sim.jobs.values()), default=0)
    while sim._heap:  # the simulation has no public "anything left?"
        at += STEP_MS
        sim.run(until_ms=at)
        await ledger.flush()
        recorder.dump(events)
        if log is not None:
            log.clock(at)
            await asyncio.sleep(0.002)


async def run(url: str, workdir: Path, limit: int) -> None:
    config, jobs = load_jobs(limit)
    ledger = Ledger(url, batch_size=200)
    await ledger.start()
    recorder = Recorder(ledger)
    log = ClusterLog(workdir / "cluster.jsonl")
    sim = Simulation(config, jobs, Journals(LedgerJournal(recorder, EPOCH_MS), log))  # type: ignore[arg-type]
    log.sim = sim
    await step_through(sim, ledger, recorder, workdir / "events-run.pickle", log)
    await ledger.close()


async def resume(url: str, workdir: Path, limit: int) -> None:
    state = json.loads((workdir / "restart.json").read_text())
    restart: int = state["restart_ms"]
    running: dict[str, dict[str, Any]] = state["running"]
    ended = set(state["ended"])
    config, all_jobs = load_jobs(limit)
    ledger = Ledger(url, batch_size=200)
    await ledger.start()
    attempts = await repository.last_admission_attempts(ledger.engine)
    jobs: list[SimJob] = []
    for job in all_jobs:
        name = job.workload.name
        if name in ended:
            continue
        job.submit_ms = max(job.submit_ms, restart)
        if name in running:
            entry = running[name]
            job.workload = dataclasses.replace(
                job.workload, admission=Admission(entry["flavors"], entry["counts"], admitted_at=entry["at"])
            )
            job.submit_ms = restart
        jobs.append(job)
    recorder = Recorder(ledger)
    sim = Simulation(config, jobs, LedgerJournal(recorder, EPOCH_MS))  # type: ignore[arg-type]
    for name, attempt in attempts.items():
        sim.controller.tracking[name] = Tracking(attempt=attempt)
    for name, entry in running.items():
        job = sim.jobs[name]
        job.started_at, job.generation = entry["at"], 1
        sim.push(entry["ends"], Kind.FINISH, name, 1)  # the run that started before the restart
    await step_through(sim, ledger, recorder, workdir / "events-resume.pickle", None)
    await ledger.close()
    print(json.dumps({"written": ledger.written, "rejected": len(ledger.rejected), "jobs": len(jobs)}))


if __name__ == "__main__":
    mode, url, workdir, limit = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    asyncio.run((run if mode == "run" else resume)(url, workdir, limit))
