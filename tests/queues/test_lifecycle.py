"""The whole life of workloads in simulation: admit, run, finish, release; preempt with a checkpoint hook that
answers, one that never answers, one whose URL is unreachable; requeue with backoff and resume."""

from __future__ import annotations

import pytest

from clusters.sim.cluster import SimJob, Simulation
from queues.journal import RecordingJournal
from queues.manager import State
from quota.loader import load_config_text
from tests.queues.gpu_jobs import MIN, gpu_job

CONFIG = """
flavors: [{name: a100, nodeLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}}]
priorityClasses:
  - {name: production, value: 1000, checkpointTimeout: 30s}
  - {name: research, value: 100, default: true, checkpointTimeout: 20s}
  - {name: pinned, value: 10, preemptible: false}
cohorts: [{name: org}]
teams:
  - name: nlp
    parent: org
    queues: [nlp/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4}}}]
    preemption: {withinTeam: LowerPriority, reclaimWithinCohort: Any}
  - name: vision
    parent: org
    queues: [vision/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4}}}]
"""


def job(name: str, team: str, gpus: int, at: int, minutes: int, klass: str = "research", **kw: object) -> SimJob:
    return gpu_job(load_config_text(CONFIG), name, team, gpus, at, minutes, klass, **kw)


def simulate(*jobs: SimJob) -> tuple[Simulation, RecordingJournal]:
    journal = RecordingJournal()
    sim = Simulation(load_config_text(CONFIG), jobs, journal)
    sim.run()
    return sim, journal


def test_admit_run_finish_release() -> None:
    sim, journal = simulate(job("a", "nlp", 2, 0, 10), job("b", "nlp", 2, 0, 5), job("c", "nlp", 6, 0, 5))
    assert {n: j.finished_at for n, j in sim.jobs.items()} == {"a": 10 * MIN, "b": 5 * MIN, "c": 10 * MIN}
    # c (6 GPUs: 2 of nlp's own and 4 borrowed from idle vision) waited for b, released the moment b finished.
    assert [p["args"][0].name for p in journal.named("admitted")] == ["a", "b", "c"]
    assert journal.named("admitted")[2]["args"][-1] == 5 * MIN
    assert not sim.controller.manager.workloads, "finished work is forgotten"
    assert all(v == 0 for v in sim.controller.manager.live.teams["nlp"].usage.values())


def test_preempt_with_hook_acked_then_requeue_and_resume() -> None:
    victim = job("borrower", "vision", 8, 0, 60, hook_delay_ms=5_000)
    sim, journal = simulate(victim, job("owner", "nlp", 4, MIN, 10, "production"))
    names = [(kind, p["args"][0].name) for kind, p in journal.entries if kind != "cycle"]
    steps = [k for k, n in names if n == "borrower"]
    assert steps[:6] == [
        "workload_seen",
        "queued",
        "admitted",
        "preemption_issued",
        "checkpoint_requested",
        "checkpoint_acked",
    ]
    assert "suspended" in steps and "requeued" in steps
    issued = journal.named("preemption_issued")[0]
    assert issued["args"][2:4] == ("owner", "CohortReclamation")
    acked = journal.named("checkpoint_acked")[0]
    assert acked["args"][2] == "borrower@1" and acked["args"][3] == MIN + 5_000
    suspended = journal.named("suspended")[0]
    assert suspended["args"][2] == 0, "an acked checkpoint loses nothing"
    # The owner waits for the victim's pods, not for the whole timeout.
    owner_admitted = next(p for p in journal.named("admitted") if p["args"][0].name == "owner")
    assert owner_admitted["args"][-1] == MIN + 5_000
    # Requeued keeping its creation time, readmitted once the owner finished, told where to resume.
    job_state = sim.jobs["borrower"]
    assert job_state.resumed_from == [None, "borrower@1"]
    owner_done = MIN + 5_000 + 10 * MIN
    assert job_state.finished_at == owner_done + (60 * MIN - (MIN + 5_000))


def test_hook_that_never_answers_times_out_and_loses_work() -> None:
    victim = job("borrower", "vision", 8, 0, 60, hook_delay_ms=None, checkpoint_interval_ms=10 * MIN)
    sim, journal = simulate(victim, job("owner", "nlp", 4, 25 * MIN, 10, "production"))
    timed_out = journal.named("checkpoint_timed_out")
    assert len(timed_out) == 1 and timed_out[0]["args"][2] == 25 * MIN + 20_000, "research's checkpointTimeout: 20s"
    lost = journal.named("suspended")[0]["args"][2]
    # 8 GPUs since the last periodic checkpoint at 20 min, stopped at 25 min 20 s: 320 s × 8 GPUs.
    assert lost == 8 * 1000 * 320
    assert sim.jobs["borrower"].resumed_from == [None, None], "no checkpoint id was reported"
    assert sim.jobs["borrower"].progress_ms == 20 * MIN


def test_unreachable_hook_url_is_a_hook_that_never_answers() -> None:
    victim = job("borrower", "vision", 8, 0, 60, hook_delay_ms=None, checkpoint_url="http://127.0.0.1:9/never")
    _, journal = simulate(victim, job("owner", "nlp", 4, MIN, 10, "production"))
    assert journal.named("checkpoint_requested")[0]["args"][3] == "url"
    assert len(journal.named("checkpoint_timed_out")) == 1
    assert journal.named("suspended")[0]["args"][2] == 8 * 1000 * (MIN + 20_000) // 1000


def test_requeue_backs_off_exponentially() -> None:
    sim = Simulation(load_config_text(CONFIG), [job("borrower", "vision", 8, 0, 600)])
    sim.run(until_ms=MIN)
    controller = sim.controller
    for round_ in range(3):
        controller.preempt("borrower", "admin", sim.now)
        sim.run(until_ms=sim.now + MIN)  # checkpoint acked after 10 s, suspended, requeued with backoff
        track = controller.tracking["borrower"]
        assert track.evictions == round_ + 1
        sim.run(until_ms=sim.now + 10_000 * 2**round_ + 1)
        assert controller.manager.state["borrower"] is State.ADMITTED


def test_preempted_capacity_is_not_handed_out_twice_while_checkpointing() -> None:
    victim = job("borrower", "vision", 8, 0, 60, hook_delay_ms=None)
    late = job("other", "vision", 4, MIN + 1, 10)
    sim = Simulation(load_config_text(CONFIG), [victim, job("owner", "nlp", 4, MIN, 10, "production"), late])
    sim.run(until_ms=MIN + 10_000)
    manager = sim.controller.manager
    assert manager.state["borrower"] is State.EVICTING
    assert manager.state["owner"] is State.PENDING
    assert manager.state["other"] is State.PENDING, "the victim still holds its quota while it checkpoints"


def test_non_preemptible_class_is_never_a_victim() -> None:
    _, journal = simulate(job("pinned", "vision", 8, 0, 30, "pinned"), job("owner", "nlp", 4, MIN, 10, "production"))
    assert not journal.named("preemption_issued")


def test_hold_and_release() -> None:
    sim = Simulation(load_config_text(CONFIG), [job("a", "nlp", 1, 0, 10)])
    sim.controller.submit(sim.jobs["a"].workload, 0)
    sim.controller.hold("a", "alice", 0)
    sim.run(until_ms=MIN)
    assert sim.controller.manager.state["a"] is State.PENDING
    sim.controller.release("a", "alice", MIN)
    sim.run()
    assert sim.jobs["a"].finished_at == 11 * MIN


def test_reload_without_restart_and_invalid_reload_rejected() -> None:
    sim = Simulation(load_config_text(CONFIG), [job("big", "nlp", 6, 0, 10)])
    sim.run(until_ms=MIN)
    assert sim.controller.manager.state["big"] is State.ADMITTED  # borrows 2 from vision
    bigger = CONFIG.replace("nominal: 4}}}]\n    preemption", "nominal: 8}}}]\n    preemption")
    sim.controller.reload(load_config_text(bigger), bigger, "test", sim.now)
    assert sim.controller.manager.tree.teams["nlp"].nominal(("a100", "nvidia.com/gpu")) == 8000
    without_nlp = CONFIG.split("  - name: nlp")[0] + "  - name: vision" + CONFIG.split("  - name: vision")[1]
    from queues.manager import ReloadRejected

    with pytest.raises(ReloadRejected, match="nlp"):
        sim.controller.reload(load_config_text(without_nlp), without_nlp, "test", sim.now)
    assert "nlp" in sim.controller.manager.queues, "the old configuration stays"
