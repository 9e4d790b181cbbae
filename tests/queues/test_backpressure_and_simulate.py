"""Admissions pause while the ledger's outbox is full (nothing is lost, the queue keeps it); and
`kuota simulate --database-url` persists a run whose report then comes from the ledger."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from admission.workload import Workload
from clusters.sim.cluster import SimJob, Simulation
from queues.controller import Controller
from queues.loop import ControllerLoop, LoopTimers
from queues.manager import State
from quota.loader import load_config_text
from quota.pod_set import PodSet

ROOT = Path(__file__).resolve().parents[2]
KUOTA = Path(sys.executable).with_name("kuota")
CONFIG = load_config_text(
    "flavors: [{name: a100}]\n"
    "teams: [{name: nlp, queues: [nlp/q], quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]}]\n"
)


async def test_admissions_pause_while_the_ledger_is_full() -> None:
    full = True
    workload = Workload("ns/a", "nlp", 0, (PodSet("main", 1, {"nvidia.com/gpu": 1000}),))
    cluster = Simulation(CONFIG, [SimJob(workload, 1_000, 60_000)]).cluster
    controller = Controller(CONFIG, cluster, LoopTimers())
    loop = ControllerLoop(controller, LoopTimers(), clock=lambda: 1_000, backpressure=lambda: full)
    controller.submit(workload, 1_000)
    assert loop.step() == 0
    assert controller.manager.state["ns/a"] is State.PENDING, "no admission while events could not be kept"
    full = False
    assert loop.step() >= 1
    assert controller.manager.state["ns/a"] is State.ADMITTED


def test_simulate_with_a_ledger_reports_from_it(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    run = subprocess.run(
        [str(KUOTA), "simulate", "--config", str(ROOT / "config/samples/org-quota.yaml"), "--trace",
         str(ROOT / "config/samples/itp-slice.csv"), "--limit", "60", "--json", "--database-url", url],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    summary = json.loads(run.stdout)
    simulated = sum(team["gpu_hours"] for team in summary["teams"].values())
    report = subprocess.run(
        [str(KUOTA), "usage", "--database-url", url, "--from", "2021-03-04", "--to", "2021-04-04",
         "--by", "team", "--resource", "nvidia.com/gpu", "-o", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    rows = json.loads(report.stdout)
    from_ledger = sum(float(row["hours"]) for row in (rows if isinstance(rows, list) else rows["rows"]))
    assert summary["finished"] == 60
    assert abs(from_ledger - simulated) < 0.05, (from_ledger, simulated)
