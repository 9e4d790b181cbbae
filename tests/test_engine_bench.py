"""bench/engine.py's growth sizes run as asked: a child process once ignored --tuned-collector, so the table said
"the controller's collector" over figures measured with Python's default one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from queues.heap import THRESHOLDS

BENCH = Path(__file__).resolve().parents[1] / "bench" / "engine.py"
TINY = json.dumps({"pending": 200, "teams": 10, "depth": 2, "cohort": 5, "fair_sharing": False})


def _one(*options: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--one", TINY, "--cycles", "2", *options],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def test_a_size_runs_with_the_collector_and_the_parking_it_was_asked_for() -> None:
    tuned = _one("--tuned-collector", "--park-equivalent")
    assert tuned["collector_threshold"] == THRESHOLDS[0]
    assert tuned["park_equivalent"] is True
    plain = _one()
    assert plain["collector_threshold"] != THRESHOLDS[0]
    assert plain["park_equivalent"] is False
    assert plain["saturated_ms"] > 0
