"""`kuota simulate` with budgets on real dates: the trace's time 0 stands for `--start` (by default 2021-03-04
00:00 UTC), so a month's budget resets on the real 1st at 00:00 UTC, wherever in the trace that falls; the summary,
`--json` and the table give each budget window's spending, what remained and when it was spent. A file without
budgets prints and reports exactly what it did before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kuota.commands import simulate as simulate_command

app = typer.Typer()
simulate_command.register(app)
runner = CliRunner()

TEAM = """\
flavors: [{name: a100}]
teams:
  - name: ml
    queues: [ml/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4}}}]
"""
BUDGET = "    budgets: [{window: month, resources: {nvidia.com/gpu: 10}, onExhausted: block, blockAbove: zero}]\n"
# 12 GPU-hours from time 0 to 3 h, then a 1-GPU hour submitted at 4 h.
TRACE = """\
submit_s,duration_s,team,priority_class,gpus,cpus,memory,checkpoint_s
0,10800,ml,,4,,,
14400,3600,ml,,1,,,
"""
HOUR_S = 3600
HOUR = 1000 * 3_600_000
"""One resource-hour in milli-unit-milliseconds."""


def simulate(tmp_path: Path, quota: str, *extra: str) -> str:
    (tmp_path / "quota.yaml").write_text(quota)
    (tmp_path / "trace.csv").write_text(TRACE)
    args = ["--config", str(tmp_path / "quota.yaml"), "--trace", str(tmp_path / "trace.csv"), "--no-progress"]
    result = runner.invoke(app, [*args, *extra], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    return result.stdout


def summary(tmp_path: Path, quota: str, *extra: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(simulate(tmp_path, quota, "--json", *extra))
    return data


@pytest.mark.parametrize(
    ("start", "wait_s", "exhausted_at"),
    [
        # Spent at 02:30 on 31 March: the 04:00 job waits for 1 April 00:00 UTC, 20 hours.
        ("2021-03-31", 20 * HOUR_S, "2021-03-31T02:30:00Z"),
        # Mid-month: it waits from 15 March 04:00 until 1 April, 16 days and 20 hours.
        ("2021-03-15", (16 * 24 + 20) * HOUR_S, "2021-03-15T02:30:00Z"),
        # From 31 March 22:00 only 8 GPU-hours fall in March and 4 in April: never spent, nothing waits.
        ("2021-03-31T22:00", 0, None),
    ],
    ids=["the-last-day", "mid-month", "across-midnight"],
)
def test_a_monthly_budget_falls_on_the_real_calendar(
    tmp_path: Path, start: str, wait_s: int, exhausted_at: str | None
) -> None:
    data = summary(tmp_path, TEAM + BUDGET, "--start", start)
    assert data["teams"]["ml"]["p95_wait_s"] == wait_s
    first = data["budgets"][0]
    assert first["owner"] == "ml" and first["window"] == "month" and first["exhausted_at"] == exhausted_at
    if exhausted_at is None:
        assert [(row["label"], row["spent_hours"]) for row in data["budgets"]] == [("2021-03", "8"), ("2021-04", "5")]


def test_the_default_start_is_4_march_2021(tmp_path: Path) -> None:
    default = summary(tmp_path, TEAM + BUDGET)
    assert default == {
        **summary(tmp_path, TEAM + BUDGET, "--start", "2021-03-04"),
        "wall_seconds": default["wall_seconds"],
    }
    # Spent on 4 March at 02:30: the 04:00 job waits for 1 April, 27 days and 20 hours later.
    assert default["teams"]["ml"]["p95_wait_s"] == (27 * 24 + 20) * HOUR_S
    rows = [(r["label"], r["start"], r["spent_milli_unit_ms"]) for r in default["budgets"]]
    assert rows == [("2021-03", "2021-03-01T00:00:00Z", 12 * HOUR), ("2021-04", "2021-04-01T00:00:00Z", HOUR)]


def test_the_budget_table_fits_80_columns_and_a_file_without_budgets_shows_none(tmp_path: Path) -> None:
    out = simulate(tmp_path, TEAM + BUDGET, "--start", "2021-03-31")
    assert max(len(line) for line in out.splitlines()) <= 80, out
    row = next(line for line in out.splitlines() if "2021-03 gpu" in line)
    assert [cell.strip() for cell in row.strip("│").split("│")] == ["ml", "2021-03 gpu", "12", "0", "03-31 02:30"]

    simulate(tmp_path, TEAM + BUDGET, "--start", "2021-03-31", "--report", str(tmp_path / "report"))
    html = (tmp_path / "report" / "report.html").read_text()
    assert "<h2>Budget spending</h2>" in html and "2021-03-31T02:30:00Z" in html

    plain = summary(tmp_path, TEAM, "--start", "2021-03-31")
    assert "budgets" not in plain and plain["teams"]["ml"]["p95_wait_s"] == 0
    assert "budgets" not in simulate(tmp_path, TEAM)


def test_a_bad_start_is_refused(tmp_path: Path) -> None:
    (tmp_path / "quota.yaml").write_text(TEAM)
    (tmp_path / "trace.csv").write_text(TRACE)
    args = ["--config", str(tmp_path / "quota.yaml"), "--trace", str(tmp_path / "trace.csv"), "--start", "soon"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "--start: not an ISO 8601" in result.stderr
