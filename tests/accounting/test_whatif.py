"""`kuota whatif` on a ledger written by `kuota simulate` from the demo slice, on SQLite and PostgreSQL.

Under the same quota file the baseline and the proposal must agree with each other and with what the simulation
itself measured (the history read back from the ledger is the trace it replayed); under a file that gives one team
twice the GPUs, that team's waits must not grow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.whatif import FIGURES, whatif_from_ledger

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config" / "samples" / "org-quota.yaml"
TRACE = REPO / "config" / "samples" / "itp-slice.csv"
START, END = "2021-03-04", "2021-04-04"
JOBS = 1600
"""The first 1,600 jobs of the slice: enough for waits and preemptions in several teams, a few seconds to replay."""


def kuota(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-c", "from kuota.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kuota {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


def simulate(url: str, limit: int = JOBS) -> dict[str, Any]:
    done = kuota(
        "simulate", "--config", str(CONFIG), "--trace", str(TRACE), "--limit", str(limit),
        "--database-url", url, "--json", "--no-progress", "--victims", "spec",
    )  # fmt: skip
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def doubled(team: str, path: Path) -> Path:
    """The sample org with `team`'s nominal GPUs doubled in every flavor."""
    data = yaml.safe_load(CONFIG.read_text())
    for entry in data["teams"]:
        if entry["name"] == team:
            for quota in entry["quotas"]:
                gpu = quota["resources"]["nvidia.com/gpu"]
                gpu["nominal"] *= 2
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def when(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_whatif_replays_history_exactly_and_a_bigger_quota_never_waits_longer(empty_url: str, tmp_path: Path) -> None:
    simulated = simulate(empty_url)

    # With victims by the spec's order alone: the ledger does not record the trace's periodic checkpoints, which
    # the checkpoint-aware order would read.
    args = ["--from", START, "--to", END, "--database-url", empty_url, "--json", "--victims", "spec"]
    done = kuota("whatif", "--config", str(CONFIG), *args)
    same = json.loads(done.stdout)
    assert same["replayed"] == same["workloads"] == JOBS
    assert same["left_out"] == {} and same["estimated_run_time"] == 0
    assert "kuota simulate" in same["baseline"]["source"]  # the file the ledger recorded as in force
    assert same["baseline"]["jain_fairness"] == same["proposal"]["jain_fairness"] == simulated["jain_fairness"]
    assert same["baseline"]["utilization"] == simulated["utilization"]
    for team, sides in same["teams"].items():
        expected = {key: simulated["teams"][team][key] for key in FIGURES}
        assert sides["baseline"] == sides["proposal"] == expected, team
    assert sum(t["preemptions"] for t in simulated["teams"].values()) > 0  # the check covers preempted work too

    bigger = doubled("infra", tmp_path / "bigger.yaml")
    comparison = whatif_from_ledger(empty_url, bigger.read_text(), when(START), when(END), aware=False).as_dict()
    teams = comparison["teams"]
    assert isinstance(teams, dict)
    before, after = teams["infra"]["baseline"], teams["infra"]["proposal"]
    assert before == same["teams"]["infra"]["baseline"]
    assert before["mean_wait_s"] > 0  # infra waits in the demo slice, so there is something to shorten
    assert after["mean_wait_s"] <= before["mean_wait_s"]
    assert after["p95_wait_s"] <= before["p95_wait_s"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_whatif_table_fits_80_columns_and_bad_input_exits_2(empty_url: str, tmp_path: Path) -> None:
    simulate(empty_url, limit=300)
    done = kuota("whatif", "--config", str(CONFIG), "--from", START, "--to", END, "--database-url", empty_url)
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, done.stdout
    assert any(line.lstrip("│ ").startswith("nlp") for line in lines)
    assert "Jain's index now" in done.stdout and "300 of 300 workloads replayed" in done.stdout

    report = tmp_path / "report"
    kuota("whatif", "--config", str(CONFIG), "--from", START, "--to", END, "--database-url", empty_url,
          "--report", str(report), "--json")  # fmt: skip
    html = (report / "report.html").read_text()
    assert "Per team: now and new" in html and "now: run totals" in html and "new: run totals" in html

    bad = tmp_path / "bad.yaml"
    bad.write_text("teams: [{name: x, quotas: 3}]\n")
    cases = [
        (["--config", str(bad), "--from", START, "--to", END], "problem"),
        (["--config", str(CONFIG), "--from", END, "--to", START], "must be before"),
        (["--config", str(CONFIG), "--from", "yesterday", "--to", END], "not an ISO 8601"),
        (["--config", str(tmp_path / "missing.yaml"), "--from", START, "--to", END], "cannot read"),
        # Before the simulation's quota file was recorded: nothing in force, and nothing was created either.
        (["--config", str(CONFIG), "--from", "2021-03-01", "--to", "2021-03-02"], "no quota file in force"),
        (["--config", str(CONFIG), "--baseline", str(CONFIG), "--from", "2021-03-01", "--to", "2021-03-02"],
         "no workload created"),
    ]  # fmt: skip
    for args, message in cases:
        failed = kuota("whatif", *args, "--database-url", empty_url, check=False)
        assert failed.returncode == 2, (args, failed.stderr)
        assert failed.stderr.startswith("error: ") and message in failed.stderr, (args, failed.stderr)
        assert "Traceback" not in failed.stderr
