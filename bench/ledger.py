"""Ledger write throughput: events per second into PostgreSQL and SQLite, batched through ``Ledger`` and one by
one (one transaction per event), measured in the same run. Results are reported, not asserted.

    .venv/bin/python bench/ledger.py [--events N] [--postgres-url URL] [--repeats R]

PostgreSQL: a fresh database is created on the server of --postgres-url (default: the local test server) and
dropped at the end. SQLite: a file in a temporary directory. Target: ≥ 5,000 events/s into PostgreSQL.

    .venv/bin/python bench/ledger.py --simulated-run [--jobs N]

runs the ``kuota simulate`` replay of the first N jobs (default 1,500) of config/samples/itp-slice.csv on
config/samples/org-quota.yaml without a database, then with SQLite and with PostgreSQL attached through
``LedgerJournal``, and prints each wall time (the final flush included) and its ratio to the run without a
database. Target: ≤ 1.3× with PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import make_url

from accounting import Ledger, create_engine, migrate
from accounting.database import normalize_database_url, write_transaction
from accounting.events import (
    Admitted,
    CheckpointAcked,
    CheckpointRequested,
    CheckpointVia,
    Evicted,
    Finished,
    LedgerEvent,
    PodSetAssignment,
    PreemptionIssued,
    Requeued,
    Suspended,
    WorkloadSeen,
)
from accounting.models import Base
from accounting.writer import write_events
from quota.pod_set import PodSet
from quota.preemption import PreemptionReason

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
GPU = "nvidia.com/gpu"
SAMPLES = Path(__file__).resolve().parents[1] / "config" / "samples"
T0 = datetime(2026, 3, 2, tzinfo=UTC)


def workload_events(index: int, prefix: str) -> Iterator[LedgerEvent]:
    """A workload's life as the queue manager records it: every fourth one is preempted and readmitted."""
    workload_id = f"{prefix}/w{index}"
    team = f"team-{index % 8}"
    start = T0 + timedelta(seconds=index)
    second = timedelta(seconds=1)
    yield WorkloadSeen(
        workload_id=workload_id,
        name=f"w{index}",
        namespace=prefix,
        team=team,
        queue=f"{prefix}/default",
        priority=100,
        priority_class="research",
        pod_sets=(PodSet(name="main", count=2, requests={GPU: 1000, "cpu": 8000, "memory": 64 * 2**30 * 1000}),),
        created_at=start,
    )
    usage = {("h100", GPU): 2000, ("h100", "cpu"): 16000, ("h100", "memory"): 128 * 2**30 * 1000}
    assignment = (PodSetAssignment(name="main", count=2, flavors={GPU: "h100", "cpu": "h100", "memory": "h100"}),)
    yield Admitted(workload_id=workload_id, attempt=1, team=team, at=start + second, pod_sets=assignment, usage=usage)
    attempt = 1
    if index % 4 == 0:
        at = start + 60 * second
        yield PreemptionIssued(
            victim=workload_id,
            victim_attempt=1,
            preemptor=f"{prefix}/x",
            reason=PreemptionReason.COHORT_RECLAMATION,
            at=at,
        )
        yield CheckpointRequested(
            victim=workload_id, victim_attempt=1, at=at, deadline=at + 60 * second, via=CheckpointVia.ANNOTATION
        )
        yield CheckpointAcked(victim=workload_id, victim_attempt=1, at=at + 5 * second, checkpoint_id="ck")
        yield Suspended(victim=workload_id, victim_attempt=1, at=at + 6 * second, lost_gpu_milliseconds=10_000)
        yield Evicted(workload_id=workload_id, attempt=1, at=at + 7 * second, reason="Preempted")
        yield Requeued(workload_id=workload_id, attempt=1, at=at + 8 * second)
        attempt = 2
        yield Admitted(
            workload_id=workload_id, attempt=2, team=team, at=at + 20 * second, pod_sets=assignment, usage=usage
        )
    yield Finished(workload_id=workload_id, at=start + (600 + attempt) * second, succeeded=True)


def event_stream(count: int, prefix: str) -> list[LedgerEvent]:
    events: list[LedgerEvent] = []
    index = 0
    while len(events) < count:
        events.extend(workload_events(index, prefix))
        index += 1
    return events[:count]


# --- databases ----------------------------------------------------------------------------------------------------


class BenchDatabase:
    """A database of the benchmark's own, emptied between measurements."""

    url: str

    async def setup(self) -> None: ...

    async def reset(self) -> None: ...

    async def teardown(self) -> None: ...


class SQLiteBench(BenchDatabase):
    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="kuota-ledger-bench-"))
        self._template = self._dir / "template.db"
        self._path = self._dir / "ledger.db"
        self.url = f"sqlite+aiosqlite:///{self._path}"

    async def setup(self) -> None:
        await migrate.upgrade_async(f"sqlite+aiosqlite:///{self._template}")

    async def reset(self) -> None:
        await asyncio.to_thread(self._replace_file)

    def _replace_file(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self._path}{suffix}").unlink(missing_ok=True)
        shutil.copy(self._template, self._path)

    async def teardown(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


class PostgresBench(BenchDatabase):
    def __init__(self, server_url: str) -> None:
        parsed = make_url(normalize_database_url(server_url))
        self._server = parsed
        self._name = f"kuota_ledger_bench_{uuid.uuid4().hex[:12]}"
        self.url = parsed.set(database=self._name).render_as_string(hide_password=False)

    async def _admin(self, statement: str, database: str | None = None) -> None:
        connection = await asyncpg.connect(
            host=self._server.host or "127.0.0.1",
            port=self._server.port or 5432,
            user=self._server.username,
            password=self._server.password,
            database=database or self._server.database,
            timeout=10,
        )
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    async def setup(self) -> None:
        await self._admin(f'CREATE DATABASE "{self._name}"')
        await migrate.upgrade_async(self.url)

    async def reset(self) -> None:
        tables = ", ".join(table.name for table in Base.metadata.sorted_tables)
        await self._admin(f"TRUNCATE {tables} RESTART IDENTITY", database=self._name)

    async def teardown(self) -> None:
        await self._admin(f'DROP DATABASE IF EXISTS "{self._name}" WITH (FORCE)')


# --- measurements -------------------------------------------------------------------------------------------------


async def batched(url: str, events: list[LedgerEvent]) -> tuple[float, float, float]:
    """(events/s from the first record to the last commit, µs per record() call, this process's CPU µs per
    event — which, unlike wall time, hardly depends on what else the machine is running)."""
    ledger = Ledger(url, max_backlog=len(events) + 1)
    await ledger.start()
    try:
        cpu = time.process_time()
        started = time.perf_counter()
        for event in events:
            ledger.record(event)
        recorded = time.perf_counter()
        await ledger.flush()
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu
    finally:
        await ledger.close()
    assert ledger.rejected == [] and ledger.backlog == 0
    return len(events) / elapsed, (recorded - started) / len(events) * 1e6, cpu / len(events) * 1e6


async def one_by_one(url: str, events: list[LedgerEvent]) -> float:
    """Events/s with one transaction per event, the way a naive writer would."""
    engine = create_engine(url)
    try:
        started = time.perf_counter()
        for event in events:
            async with write_transaction(engine) as connection:
                await write_events(connection, [event])
        return len(events) / (time.perf_counter() - started)
    finally:
        await engine.dispose()


@dataclass
class Result:
    backend: str
    events: int
    batched: list[float]
    record_micros: list[float]
    cpu_micros: list[float]
    single_events: int
    single: list[float]

    @property
    def ratio(self) -> float:
        return statistics.median(self.batched) / statistics.median(self.single)


async def measure(name: str, database: BenchDatabase, events: int, single_events: int, repeats: int) -> Result:
    await database.setup()
    try:
        result = Result(name, events, [], [], [], single_events, [])
        for repeat in range(repeats):
            await database.reset()
            rate, micros, cpu = await batched(database.url, event_stream(events, f"b{repeat}"))
            result.batched.append(rate)
            result.record_micros.append(micros)
            result.cpu_micros.append(cpu)
            await database.reset()
            result.single.append(await one_by_one(database.url, event_stream(single_events, f"s{repeat}")))
        return result
    finally:
        await database.teardown()


async def simulated_run_overhead(
    run_simulation: Callable[[Ledger | None], Awaitable[object]], url: str, repeats: int = 3
) -> dict[str, float]:
    """Median wall time of a simulated run without a ledger and with one (flushed before the clock stops).

    ``run_simulation(ledger)`` runs the simulation, recording into ``ledger`` when it is not None. The database
    at ``url`` must be migrated. Returns seconds without, with, and the relative overhead.
    """
    without: list[float] = []
    with_ledger: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        await run_simulation(None)
        without.append(time.perf_counter() - started)
        ledger = Ledger(url)
        await ledger.start()
        started = time.perf_counter()
        await run_simulation(ledger)
        await ledger.flush()
        with_ledger.append(time.perf_counter() - started)
        await ledger.close()
    base, loaded = statistics.median(without), statistics.median(with_ledger)
    return {"without_seconds": base, "with_seconds": loaded, "overhead": loaded / base - 1}


async def simulated_runs(postgres_url: str, jobs: int, repeats: int) -> None:
    from queues.ledger_journal import LedgerJournal
    from quota.loader import load_config_file
    from sim.replay import replay
    from sim.traces import default_mapping, read_trace

    config = load_config_file(SAMPLES / "org-quota.yaml")
    trace = read_trace(SAMPLES / "itp-slice.csv", "csv", default_mapping("csv", config), config, limit=jobs)
    epoch_ms = int(datetime(2021, 3, 4, tzinfo=UTC).timestamp() * 1000)

    async def run(ledger: Ledger | None) -> object:
        return replay(config, trace, journal=LedgerJournal(ledger, epoch_ms) if ledger is not None else None)

    title = f"kuota simulate, {len(trace):,} jobs: wall seconds (median of {repeats}), final flush included"
    table = Table(title=title)
    for column in ("database", "without", "with", "ratio"):
        table.add_column(column, justify="right" if column != "database" else "left")
    for name, database in (("sqlite", SQLiteBench()), ("postgresql", PostgresBench(postgres_url))):
        try:
            await database.setup()
            await database.reset()  # SQLite: setup only migrates the template the file is copied from
        except (OSError, asyncpg.PostgresError) as exc:
            print(f"{name} skipped: {exc}", file=sys.stderr)
            continue
        try:
            figures = await simulated_run_overhead(run, database.url, repeats)
        finally:
            await database.teardown()
        ratio = figures["with_seconds"] / figures["without_seconds"]
        table.add_row(name, f"{figures['without_seconds']:.2f}", f"{figures['with_seconds']:.2f}", f"{ratio:.2f}×")
        if name == "postgresql":
            print(f"PostgreSQL: {ratio:.2f}× the run without a database — {'meets' if ratio <= 1.3 else 'misses'} 1.3×")
    Console().print(table)


def report(results: list[Result], repeats: int) -> None:
    table = Table(title=f"Ledger writes, events/s (median of {repeats}); ratio = batched / one by one")
    columns = ("database", "batched (Ledger)", "kuota CPU µs/event", "record() µs/call", "one by one", "ratio")
    for column in columns:
        table.add_column(column, justify="right" if column != "database" else "left")
    for r in results:
        table.add_row(
            r.backend,
            f"{statistics.median(r.batched):,.0f}  ({r.events:,} events)",
            f"{statistics.median(r.cpu_micros):.0f}",
            f"{statistics.median(r.record_micros):.2f}",
            f"{statistics.median(r.single):,.0f}  ({r.single_events:,} events)",
            f"{r.ratio:.1f}×",
        )
    Console().print(table)
    for r in results:
        if r.backend == "postgresql":
            verdict = "meets" if statistics.median(r.batched) >= 5000 else "misses"
            print(f"PostgreSQL batched: {statistics.median(r.batched):,.0f} events/s — {verdict} the 5,000/s target")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000, help="events per batched measurement")
    parser.add_argument(
        "--single-events", type=int, default=2_000, help="events per one-by-one measurement (it is slow)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL, help="a database on the server to use")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--simulated-run", action="store_true", help="measure a simulated run instead")
    parser.add_argument("--jobs", type=int, default=1_500, help="trace jobs of the simulated run")
    args = parser.parse_args()
    if args.simulated_run:
        await simulated_runs(args.postgres_url, args.jobs, args.repeats)
        return 0
    if min(args.events, args.single_events, args.repeats) < 1:
        parser.error("--events, --single-events and --repeats must be positive")
    single = min(args.single_events, args.events)
    results = []
    if not args.skip_sqlite:
        results.append(await measure("sqlite", SQLiteBench(), args.events, single, args.repeats))
    if not args.skip_postgres:
        try:
            database = PostgresBench(args.postgres_url)
            results.append(await measure("postgresql", database, args.events, single, args.repeats))
        except (OSError, asyncpg.PostgresError) as exc:
            print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
    report(results, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
