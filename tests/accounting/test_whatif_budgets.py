"""Budgets in `kuota whatif`: the replay runs on the ledger's real calendar (the window's start is its time 0), so
a month's budget resets at 00:00 UTC on the 1st; spending from before the window is read back from the ledger; and
each budget window's spending is reported under both quota files, in JSON, the table and -o wide.

The ledger is written by `kuota simulate --start` from a three-job trace: team ml (4 GPUs) runs a 4-GPU job
from 31 March 00:00 to 03:00 UTC (12 GPU-hours), submits a 1-GPU one-hour job at 04:00 and another at 25:00
(1 April 01:00). Its budget: 10 GPU-hours a month, `block` with `blockAbove: zero`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HOUR = 1000 * 3_600_000
"""One resource-hour in milli-unit-milliseconds."""

TEAM = """flavors: [{name: a100}]
teams:
  - name: ml
    queues: [ml/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4}}}]
"""
TRACE = """submit_s,duration_s,team,priority_class,gpus,cpus,memory,checkpoint_s
0,10800,ml,,4,,,
14400,3600,ml,,1,,,
90000,3600,ml,,1,,,
"""


def budget(hours: int) -> str:
    return TEAM + (
        f"    budgets: [{{window: month, resources: {{nvidia.com/gpu: {hours}}}, onExhausted: block, "
        "blockAbove: zero}]\n"
    )


def kuota(*args: str, columns: int = 80) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": str(columns)}
    done = subprocess.run(
        [sys.executable, "-c", "from kuota.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, f"kuota {' '.join(args)} exited {done.returncode}: {done.stderr}"
    return done.stdout


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {"none": TEAM, "budget": budget(10), "roomier": budget(13), "trace": TRACE}
    out = {}
    for name, text in paths.items():
        out[name] = tmp_path / (f"{name}.csv" if name == "trace" else f"{name}.yaml")
        out[name].write_text(text)
    return out


def without_wall(value: Any) -> Any:
    """The same document with every `wall_seconds` left out: two runs never take the same time."""
    if isinstance(value, dict):
        return {k: without_wall(v) for k, v in value.items() if k != "wall_seconds"}
    if isinstance(value, list):
        return [without_wall(v) for v in value]
    return value


def record(url: str, files: dict[str, Path]) -> None:
    """The history: the three jobs replayed without a budget from 31 March 00:00 UTC into the ledger."""
    kuota("simulate", "--config", str(files["none"]), "--trace", str(files["trace"]), "--start", "2021-03-31",
          "--database-url", url, "--json", "--no-progress")  # fmt: skip


def whatif(url: str, proposal: Path, start: str, *extra: str, baseline: Path | None = None) -> dict[str, Any]:
    args = ["whatif", "--config", str(proposal), "--from", start, "--to", "2021-04-03", "--database-url", url]
    if baseline is not None:
        args += ["--baseline", str(baseline)]
    data: dict[str, Any] = json.loads(kuota(*args, "--json", *extra))
    return data


def windows(data: dict[str, Any], side: str) -> dict[str, dict[str, Any]]:
    return {row["label"]: row for row in data["budgets"]["ml"][side]}


def test_a_monthly_budget_blocks_until_the_first_at_midnight_utc_and_then_admits(
    empty_url: str, files: dict[str, Path]
) -> None:
    record(empty_url, files)
    data = whatif(empty_url, files["budget"], "2021-03-31")
    base, new = data["teams"]["ml"]["baseline"], data["teams"]["ml"]["proposal"]
    assert base["mean_wait_s"] == 0  # the ledger's own file has no budget: nothing waits
    # Spent at 02:30 (4 GPUs × 2.5 h = 10): the 04:00 job waits until 1 April 00:00 UTC exactly (20 h), the 01:00
    # one of April is admitted at once.
    assert new["p95_wait_s"] == 72_000 and new["mean_wait_s"] == 24_000
    assert data["budgets"]["ml"]["baseline"] == []
    march, april = windows(data, "proposal")["2021-03"], windows(data, "proposal")["2021-04"]
    assert (march["start"], march["end"]) == ("2021-03-01T00:00:00Z", "2021-04-01T00:00:00Z")
    assert march["spent_milli_unit_ms"] == 12 * HOUR  # running work is never stopped: 12 of 10
    assert (march["spent_hours"], march["remaining_hours"], march["budget_hours"]) == ("12", "0", "10")
    assert march["exhausted"] and march["exhausted_at"] == "2021-03-31T02:30:00Z"
    assert april["start"] == "2021-04-01T00:00:00Z" and april["end"] == "2021-04-01T02:00:00Z"  # the last event
    assert april["spent_milli_unit_ms"] == 2 * HOUR and april["remaining_hours"] == "8"
    assert not april["exhausted"] and april["exhausted_at"] is None


def test_a_whatif_of_the_second_half_counts_the_first_halfs_spending_from_the_ledger(
    empty_url: str, files: dict[str, Path]
) -> None:
    record(empty_url, files)
    # From 03:30 on, the 4-GPU job is history: its 12 GPU-hours spend March's budget before the replay starts.
    data = whatif(empty_url, files["budget"], "2021-03-31T03:30", baseline=files["budget"])
    assert data["replayed"] == 2
    assert data["teams"]["ml"]["proposal"]["p95_wait_s"] == 72_000  # blocked from the start until 1 April
    march = windows(data, "proposal")["2021-03"]
    assert march["spent_milli_unit_ms"] == 12 * HOUR
    assert march["exhausted_at"] == "2021-03-31T03:30:00Z"  # found spent by the replay's first review

    # With 13 GPU-hours the 04:00 job still fits: it runs at once and spends the 13th hour by 05:00 exactly.
    roomier = whatif(empty_url, files["roomier"], "2021-03-31T03:30", baseline=files["roomier"])
    assert roomier["teams"]["ml"]["proposal"]["mean_wait_s"] == 0
    assert windows(roomier, "proposal")["2021-03"]["exhausted_at"] == "2021-03-31T05:00:00Z"

    # A window starting while the 4-GPU job ran counts only what it spent before the start (4 GPU-hours by 01:00):
    # the rest belongs to a workload the replay leaves out (created before the window).
    cut = whatif(empty_url, files["budget"], "2021-03-31T01:00", baseline=files["budget"])
    assert cut["teams"]["ml"]["proposal"]["mean_wait_s"] == 0
    assert windows(cut, "proposal")["2021-03"]["spent_milli_unit_ms"] == (4 + 1) * HOUR


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_budget_columns_in_the_table_wide_and_json(empty_url: str, files: dict[str, Path]) -> None:
    record(empty_url, files)
    args = ["whatif", "--config", str(files["budget"]), "--from", "2021-03-31", "--to", "2021-04-03"]
    args += ["--database-url", empty_url]
    table = kuota(*args)
    assert max(len(line) for line in table.splitlines()) <= 80, table
    rows = [line for line in table.splitlines() if "2021-03 gpu" in line or "2021-04 gpu" in line]
    cells = [[cell.strip() for cell in row.strip("│").split("│")] for row in rows]
    assert cells == [["ml", "2021-03 gpu", "new", "12", "0", "03-31 02:30"], ["", "2021-04 gpu", "new", "2", "8", "—"]]
    for title in ("team", "window", "run", "spent h", "left h", "exhausted"):
        assert title in table

    wide = kuota(*args, "-o", "wide", columns=200)
    assert "2021-03-31T02:30:00Z" in wide and "nvidia.com/gpu" in wide and "budget h" in wide
    assert without_wall(json.loads(kuota(*args, "-o", "json"))) == without_wall(json.loads(kuota(*args, "--json")))

    # Without budgets on either side: no budget table, and an empty `budgets` in JSON.
    plain = [*args[:2], str(files["none"]), *args[3:], "--baseline", str(files["none"])]
    assert "budgets (resource-hours)" not in kuota(*plain)
    assert json.loads(kuota(*plain, "--json"))["budgets"] == {}
