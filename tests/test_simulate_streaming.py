"""`kuota simulate --database-url` writes the ledger while it runs, not only at the end: the replay pauses between
instants until the writer has caught up, so a run stopped midway leaves everything up to its last pause. Pausing
changes no decision: a stepped replay decides exactly what one run decides. And the summary fits 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from accounting.ledger import Ledger
from accounting.migrate import upgrade_async
from queues.journal import NullJournal
from queues.ledger_journal import LedgerJournal
from quota.loader import load_config_file
from sim.replay import replay, replay_streaming
from sim.traces import TraceJob, default_mapping, read_trace

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config" / "samples" / "org-quota.yaml"
TRACE = REPO / "config" / "samples" / "itp-slice.csv"


def jobs(limit: int) -> list[TraceJob]:
    config = load_config_file(CONFIG)
    return read_trace(TRACE, "csv", default_mapping("csv", config), config, limit=limit)


async def test_the_ledger_fills_while_the_replay_runs(tmp_path: Path) -> None:
    config = load_config_file(CONFIG)
    trace = jobs(400)
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    await upgrade_async(url)
    ledger = Ledger(url)
    await ledger.start()
    engine = create_async_engine(url)
    seen: list[tuple[int, int]] = []  # (admissions in the database, jobs the replay had finished) at each pause

    async def flush() -> None:
        await ledger.flush()
        async with engine.connect() as connection:
            admitted = (await connection.execute(text("SELECT count(*) FROM admissions"))).scalar_one()
        seen.append((admitted, finished[0]))

    finished = [0]

    def progress(done: int, total: int) -> None:
        finished[0] = done

    try:
        result = await replay_streaming(
            config, trace, journal=LedgerJournal(ledger), flush=flush, on_progress=progress, instants=50
        )
    finally:
        await ledger.close()
        await engine.dispose()
    assert len(seen) > 3
    midway = [admitted for admitted, done in seen if 0 < done < len(trace)]
    assert midway and midway[0] > 0, seen  # rows were in the database while jobs were still running
    assert [a for a, _ in seen] == sorted(a for a, _ in seen)
    assert result.summary()["finished"] == len(trace)


async def test_pausing_decides_nothing_differently() -> None:
    config = load_config_file(CONFIG)
    trace = jobs(600)

    async def nothing() -> None:
        return None

    once = replay(config, trace).summary()
    stepped = (await replay_streaming(config, trace, journal=NullJournal(), flush=nothing, instants=7)).summary()
    for figures in (once, stepped):
        figures.pop("wall_seconds")
    assert stepped == once


def test_the_summary_fits_80_columns(tmp_path: Path) -> None:
    args = ["simulate", "--config", str(CONFIG), "--trace", str(TRACE), "--format", "csv", "--limit", "300"]
    done = subprocess.run(
        [str(Path(sys.executable).with_name("kuota")), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 80, done.stdout
    assert "p95 wait s" not in done.stdout  # a column only --wide shows
