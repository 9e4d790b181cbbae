"""Recovery after ``kill -9`` of a kuota process writing the ledger.

A real OS process (``tests.accounting.kill9_process``) replays the sample trace through the controller in real
asyncio, recording into the ledger and flushing after every step, while the simulated cluster's truth goes to a
log ahead of the ledger. It is SIGKILLed once work was admitted, finished and preempted. Then, as a new leader
does: close the usage of whatever ended meanwhile (``close_orphaned_intervals``), and let a second process
continue from the ledger (``last_admission_attempts``) to the end of the trace. Checked: no usage counted twice,
nothing admitted twice, attempts continue, and replaying every event again writes nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from accounting import Ledger, repository
from accounting.events import LedgerEvent
from accounting.models import Admission
from accounting.recovery import close_orphaned_intervals, last_activity
from tests.accounting.conftest import table_contents
from tests.accounting.kill9_process import EPOCH_MS

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 800
DOWNTIME_MS = 2 * 3_600_000
"""Virtual time the cluster runs on while nobody leads: runs that end meanwhile end without kuota."""


def at(ms: int) -> datetime:
    return datetime.fromtimestamp((EPOCH_MS + ms) / 1000, UTC)


def worker(mode: str, url: str, workdir: Path, **options: Any) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "tests.accounting.kill9_process", mode, url, str(workdir), str(LIMIT)]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options)


def cluster_log(workdir: Path) -> list[dict[str, Any]]:
    path = workdir / "cluster.jsonl"
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:  # the line being written when the process died
            break
    return entries


def killed_mid_run(log: list[dict[str, Any]]) -> bool:
    """Some runs finished, some were preempted and admitted again, and the replay went on a while after that."""
    readmitted = [i for i, e in enumerate(log) if e["e"] == "admitted" and e["attempt"] > 1]
    finished = sum(e["e"] == "finished" for e in log)
    return bool(readmitted) and finished >= 50 and sum(e["e"] == "clock" for e in log[readmitted[0] :]) >= 3


def load_events(path: Path) -> list[LedgerEvent]:
    events = []
    with path.open("rb") as source:
        while True:
            try:
                events.append(pickle.load(source))
            except (EOFError, pickle.UnpicklingError):  # the end, or the record cut by SIGKILL
                return events


async def admissions(engine: AsyncEngine) -> list[tuple[str, int, datetime, datetime | None]]:
    query = select(Admission.workload_id, Admission.attempt, Admission.admitted_at, Admission.ended_at)
    async with engine.connect() as connection:
        return [tuple(row) for row in await connection.execute(query)]  # type: ignore[misc]


def utc(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


@pytest.mark.timeout(60)
async def test_kill9_then_recovery_counts_nothing_twice(engine: AsyncEngine, ledger_url: str, tmp_path: Path) -> None:
    # --- a kuota process writes the ledger and is killed mid-run -------------------------------------------
    process = worker("run", ledger_url, tmp_path)
    deadline = time.monotonic() + 20
    while not killed_mid_run(cluster_log(tmp_path)):
        assert process.poll() is None, f"the writer ended before it was killed: {process.communicate()}"
        assert time.monotonic() < deadline, "the writer made too little progress to be killed mid-run"
        await asyncio.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait(10) == -signal.SIGKILL
    process.communicate()

    # --- what the cluster knows when the next leader starts ----------------------------------------------------
    log = cluster_log(tmp_path)
    killed_at = max(e["at"] for e in log)
    restart = killed_at + DOWNTIME_MS
    last: dict[str, dict[str, Any]] = {}
    for entry in log:
        if entry["e"] != "clock":
            last[entry["w"]] = entry
    running = {w: e for w, e in last.items() if e["e"] == "admitted" and e["ends"] > restart}
    ended_while_down = {w: e["ends"] for w, e in last.items() if e["e"] == "admitted" and e["ends"] <= restart}
    stopped = {w: e["at"] for w, e in last.items() if e["e"] != "admitted"}  # finished, or suspended and pending
    ended = {w: at(ms) for w, ms in {**stopped, **ended_while_down}.items()}
    assert ended_while_down, "no run ended while nobody led: the downtime is too short to test anything"

    # --- recovery, as the leader's start-up does it --------------------------------------------------------------
    open_before = await repository.open_intervals(engine)
    attempts_before = await repository.last_admission_attempts(engine)
    assert any(a > 1 for a in attempts_before.values()), "the ledger has no readmission from before the kill"
    recovery = await close_orphaned_intervals(engine, set(running), ended, default_end=await last_activity(engine))
    assert recovery.unresolved == frozenset()
    open_after = await repository.open_intervals(engine)
    by_workload: dict[str, set[int]] = defaultdict(set)
    for interval in open_after:
        by_workload[interval.workload_id].add(interval.attempt)
        assert interval.workload_id in running, f"{interval.workload_id} is not running but its usage is open"
    assert all(len(attempts) == 1 for attempts in by_workload.values()), by_workload
    for interval in open_before:
        if interval.workload_id in ended_while_down:
            closed = recovery.closed[interval.workload_id]
            assert closed == at(ended_while_down[interval.workload_id]), "closed at recovery time, not at the end"
    closed_intervals = {
        (i.workload_id, i.attempt, i.flavor, i.resource): utc(i.ended_at)
        for i in await repository.team_usage_intervals(engine, at(0) - timedelta(days=1))
    }
    for interval in open_before:
        if interval.workload_id in ended:
            key = (interval.workload_id, interval.attempt, interval.flavor, interval.resource)
            assert closed_intervals[key] == ended[interval.workload_id]
    again = await close_orphaned_intervals(engine, set(running), ended, default_end=await last_activity(engine))
    assert again.closed == {} and again.unresolved == frozenset()

    # --- the next leader continues from the ledger, to the end of the trace -----------------------------------------
    state = {"restart_ms": restart, "running": running, "ended": sorted(ended)}
    (tmp_path / "restart.json").write_text(json.dumps(state))
    second = worker("resume", ledger_url, tmp_path)
    out, err = second.communicate(timeout=40)
    assert second.returncode == 0, err
    assert json.loads(out)["rejected"] == 0

    # --- nothing counted twice, nothing admitted twice ---------------------------------------------------------------
    assert await repository.open_intervals(engine) == []
    rows = await admissions(engine)
    assert len(rows) == len({(w, a) for w, a, _, _ in rows})
    attempts: dict[str, list[int]] = defaultdict(list)
    for workload_id, attempt, admitted_at, _ in rows:
        attempts[workload_id].append(attempt)
        if attempt > attempts_before.get(workload_id, 0):
            assert utc(admitted_at) >= at(restart), f"{workload_id} attempt {attempt}: a new attempt before restart"
    for workload_id, numbers in attempts.items():
        assert sorted(numbers) == list(range(1, len(numbers) + 1)), f"{workload_id}: attempts {sorted(numbers)}"
    waiting = {w for w, e in last.items() if e["e"] == "stopped"}  # preempted before the kill, not yet readmitted
    assert all(max(attempts[w]) > attempts_before[w] for w in waiting), "a preempted workload kept its attempt"
    for workload_id, attempt, admitted_at, _ in rows:  # running at restart: taken with its admission, not readmitted
        if workload_id in running and attempt > attempts_before.get(workload_id, 0):
            assert utc(admitted_at) > at(restart), f"{workload_id} was running at restart and was admitted again"
    spans: dict[tuple[str, str, str], list[tuple[datetime, datetime]]] = defaultdict(list)
    for i in await repository.team_usage_intervals(engine, at(0) - timedelta(days=1)):
        assert i.ended_at is not None and utc(i.ended_at) >= utc(i.started_at)  # type: ignore[operator]
        spans[(i.workload_id, i.flavor, i.resource)].append((utc(i.started_at), utc(i.ended_at)))  # type: ignore[arg-type]
    for key, intervals in spans.items():
        intervals.sort()
        for (_, end), (start, _) in pairwise(intervals):
            assert end <= start, f"{key}: usage counted twice, {intervals}"

    # --- replaying every event of both processes writes nothing new ------------------------------------------------
    contents = await table_contents(engine)
    events = load_events(tmp_path / "events-run.pickle") + load_events(tmp_path / "events-resume.pickle")
    assert len(events) > 1000
    async with Ledger(ledger_url, max_backlog=len(events) + 1) as ledger:
        for event in events:
            ledger.record(event)
    assert ledger.rejected == []
    assert await table_contents(engine) == contents
