"""Wait-time estimates on small hand-made states: a controller brought to a state on the simulated cluster (the
"live" one), its state taken as the admin API takes it, the queue simulated from there with the expected run
times of a hand-made history, and the estimate's basis checked against what the state is."""

from __future__ import annotations

from dataclasses import replace

from clusters.sim.cluster import SimJob, Simulation
from queues.wait_estimates import explain, live_state
from quota.loader import load_config_text
from sim.estimates import simulate_starts
from sim.runtimes import RunSample, RuntimeBook
from tests.queues.gpu_jobs import MIN, gpu_job

CONFIG = """
flavors: [{name: a100}]
priorityClasses:
  - {name: production, value: 1000}
  - {name: research, value: 100, default: true, checkpointTimeout: 2m}
cohorts: [{name: org}]
teams:
  - {name: nlp, parent: org, queues: [nlp/default], quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4}}}]}
  - {name: vision, parent: org, queues: [vision/default],
     quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4, borrowingLimit: 0}}}]}
  - {name: ml, queues: [ml/default], quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4}}}],
     preemption: {withinTeam: LowerPriority}}
"""
HOUR = 60 * MIN


def job(name: str, team: str, gpus: int, at: int, minutes: int, klass: str = "research") -> SimJob:
    return gpu_job(load_config_text(CONFIG), name, team, gpus, at, minutes, klass)


def history(team: str, gpus: int, *minutes: int) -> list[RunSample]:
    return [RunSample(team, f"{team}/default", gpus * 1000, m * MIN) for m in minutes]


def live(*jobs: SimJob, until: int) -> Simulation:
    """The 'cluster': the real controller run on the simulated one up to `until`."""
    sim = Simulation(load_config_text(CONFIG), jobs)
    sim.run(until)
    return sim


def test_the_next_start_is_when_the_running_work_is_expected_to_end() -> None:
    # train holds all 4 of nlp's GPUs since 0 (and vision lends nlp nothing it may borrow past: vision has its own
    # 4, nlp may borrow them); eval (4 GPUs) comes at 10 min; history: nlp's 4-GPU runs take 60, 90, 120 min.
    state_sim = live(
        job("train", "nlp", 4, 0, 600),
        job("hog", "vision", 4, 0, 600),
        job("eval", "nlp", 4, 10 * MIN, 30),
        until=30 * MIN,
    )
    controller = state_sim.controller
    assert controller.manager.state["eval"] == "pending"
    book = RuntimeBook(history("nlp", 4, 60, 90, 120) + history("vision", 4, 200, 300, 400))
    state = live_state(controller, CONFIG, 30 * MIN)
    starts = simulate_starts(state, load_config_text(CONFIG), book)
    # train has run 30 min: the median of the runs longer than that (60, 90, 120) is 90 → ends at 90 min.
    assert starts.ends["train"] == (90 * MIN, "median of 3 finished (team+queue+size, of those longer)")
    assert starts.starts["eval"] == 90 * MIN
    estimate = explain(controller, state, "eval", starts, None)
    assert estimate.start_at == 90 * MIN and estimate.unknown is None
    assert (estimate.position_in_team, estimate.position_in_queue) == (1, 1)
    assert estimate.own_runtime == "median of 3 finished (team+queue+size)"
    assert estimate.cohort == "org" and estimate.running == 2
    assert [e.name for e in estimate.next_ends] == ["train", "hog"]
    assert estimate.next_ends[0].ends_at == 90 * MIN


def test_work_ahead_in_the_queue_is_counted_and_simulated() -> None:
    # Size classes: 1 GPU, and 2-8 (train and b); a and c take one GPU each.
    sim = live(
        job("train", "nlp", 4, 0, 600),
        job("hog", "vision", 4, 0, 600),
        job("a", "nlp", 1, 1 * MIN, 30),
        job("b", "nlp", 4, 2 * MIN, 30),
        job("c", "nlp", 1, 3 * MIN, 30),
        until=10 * MIN,
    )
    book = RuntimeBook(
        history("nlp", 4, 60, 60, 60) + history("nlp", 1, 20, 20, 20) + history("vision", 4, 600, 600, 600)
    )
    state = live_state(sim.controller, CONFIG, 10 * MIN)
    starts = simulate_starts(state, load_config_text(CONFIG), book)
    # train ends at 60 min: a starts; b (4 GPUs) cannot fit beside it and, with no victim to take, holds the quota
    # it waits for, so c waits too; a ends 20 min later, b starts and runs 60 min, then c.
    assert starts.starts["a"] == 60 * MIN
    assert starts.starts["b"] == 80 * MIN
    assert starts.starts["c"] == 140 * MIN
    estimate = explain(sim.controller, state, "b", starts, None)
    assert (
        estimate.ahead.workloads == 1
        and estimate.ahead.gpu_ms == 1000 * 20 * MIN
        and estimate.ahead.without_runtime == 0
    )
    assert estimate.position_in_team == 2
    assert estimate.start_at == 80 * MIN


def test_no_history_says_unknown_and_why() -> None:
    sim = live(
        job("train", "nlp", 4, 0, 600), job("hog", "vision", 4, 0, 600), job("eval", "nlp", 4, MIN, 30), until=5 * MIN
    )
    state = live_state(sim.controller, CONFIG, 5 * MIN)
    starts = simulate_starts(state, load_config_text(CONFIG), RuntimeBook(()))
    estimate = explain(sim.controller, state, "eval", starts, None)
    assert estimate.start_at is None
    assert estimate.unknown is not None
    assert "3 workload(s) have no expected run time" in estimate.unknown
    assert "does not start within the 168 h" in estimate.unknown


def test_a_declared_runtime_is_taken_at_its_word() -> None:
    train = job("train", "nlp", 4, 0, 600)
    train = replace(train, workload=replace(train.workload, expected_runtime_ms=45 * MIN))
    sim = live(train, job("hog", "vision", 4, 0, 600), job("eval", "nlp", 4, MIN, 30), until=5 * MIN)
    starts = simulate_starts(live_state(sim.controller, CONFIG, 5 * MIN), load_config_text(CONFIG), RuntimeBook(()))
    assert starts.ends["train"] == (45 * MIN, "declared (kuota.dev/expected-runtime)")
    assert starts.starts["eval"] == 45 * MIN


def test_work_being_evicted_frees_its_quota_when_it_is_expected_to_leave() -> None:
    # sweep (research, never answers a checkpoint request) holds ml's 4 GPUs; release (production) comes at 10 min
    # and preempts it: the checkpoint deadline is 2 min later. At 11 min sweep is still leaving.
    sweep = job("sweep", "ml", 4, 0, 600)
    sweep.hook_delay_ms = None
    sim = live(sweep, job("release", "ml", 4, 10 * MIN, 30, "production"), until=11 * MIN)
    assert sim.controller.manager.state["sweep"] == "evicting"
    book = RuntimeBook(history("ml", 4, 600, 600, 600))
    state = live_state(sim.controller, CONFIG, 11 * MIN)
    assert [w.name for w, _ in state.leaving] == ["sweep"] and state.leaving[0][1] == 12 * MIN
    starts = simulate_starts(state, load_config_text(CONFIG), book)
    assert starts.starts["release"] == 12 * MIN
    sim.run()  # what the cluster then does
    assert sim.stats.admit_times["release"] == 12 * MIN
