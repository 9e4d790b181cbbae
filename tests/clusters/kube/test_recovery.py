"""A new leader records admissions the ledger never received (its predecessor died before they committed)."""

from __future__ import annotations

from admission.workload import Admission, Workload
from clusters.kube.term import record_unknown_admissions
from clusters.sim.cluster import Simulation
from queues.controller import Controller, Tracking
from queues.journal import RecordingJournal
from queues.loop import LoopTimers
from quota.loader import load_config_text
from quota.pod_set import PodSet

CONFIG = load_config_text(
    """
flavors: [{name: a100}]
teams:
  - {name: nlp, queues: [nlp/q], quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]}
"""
)


def running(name: str, at: int) -> Workload:
    return Workload(
        name=name,
        team="nlp",
        priority=0,
        pod_sets=(PodSet("main", 1, {"nvidia.com/gpu": 2000}),),
        admission=Admission({"main": {"nvidia.com/gpu": "a100"}}, {"main": 1}, admitted_at=at),
    )


def test_running_work_unknown_to_the_ledger_gets_an_admission_with_the_next_attempt() -> None:
    journal = RecordingJournal()
    cluster = Simulation(CONFIG, []).cluster
    controller = Controller(CONFIG, cluster, LoopTimers(), journal)
    attempts = {"ns/known": 1, "ns/lost": 2}  # lost: two admissions committed, the third never reached the ledger
    for name, attempt in attempts.items():
        controller.tracking[name] = Tracking(attempt=attempt)
    for name in ("ns/known", "ns/lost", "ns/new"):
        controller.submit(running(name, 5_000), 10_000)

    record_unknown_admissions(controller, {"ns/known": 1, "ns/lost": 1, "ns/new": 1}, {"ns/known"}, attempts)

    admitted = {p["args"][0].name: p["args"] for p in journal.named("admitted")}
    assert set(admitted) == {"ns/lost", "ns/new"}, "the ledger already has ns/known's open admission"
    assert admitted["ns/lost"][1] == 3 and admitted["ns/new"][1] == 1
    assert admitted["ns/lost"][2] == {("a100", "nvidia.com/gpu"): 2000}
    assert admitted["ns/lost"][-1] == 5_000, "usage counts from the Job's own admission time"
    assert controller.tracking["ns/lost"].attempt == 3
