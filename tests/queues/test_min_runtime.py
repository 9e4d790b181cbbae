"""Minimum runtime and checkpoint-aware victims in the controller, on the simulated cluster's virtual clock: a
preemptor blocked by a protected workload is woken up when the protection ends (a timer, not a poll) and preempts
then; reclaim goes through protection when the class says so; victims the spec leaves equal go most recent
checkpoint first, or by name with the rule off."""

from __future__ import annotations

from clusters.sim.cluster import SimJob, Simulation
from queues.journal import RecordingJournal
from quota.loader import load_config_text
from tests.queues.gpu_jobs import MIN, gpu_job

CONFIG = """
flavors: [{name: a100}]
priorityClasses:
  - {name: production, value: 1000}
  - {name: research, value: 100, default: true, checkpointTimeout: 20s, minRuntime: 1h}
  - {name: lender, value: 100, minRuntime: {duration: 1h, exceptReclaim: true}}
  - {name: plain, value: 100}
cohorts: [{name: org}]
teams:
  # nlp and vision share a cohort and reclaim from each other; ml stands alone.
  - {name: nlp, parent: org, queues: [nlp/default], quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4}}}],
     preemption: {withinTeam: LowerPriority, reclaimWithinCohort: Any}}
  - {name: vision, parent: org, queues: [vision/default],
     quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4}}}],
     preemption: {withinTeam: LowerPriority, reclaimWithinCohort: Any}}
  - {name: ml, queues: [ml/default], quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4}}}],
     preemption: {withinTeam: LowerPriority}}
"""

HOUR = 60 * MIN


def job(name: str, team: str, gpus: int, at: int, minutes: int, klass: str = "research", **kw: object) -> SimJob:
    return gpu_job(load_config_text(CONFIG), name, team, gpus, at, minutes, klass, **kw)


def simulate(*jobs: SimJob, until: int | None = None, aware: bool = True) -> tuple[Simulation, RecordingJournal]:
    journal = RecordingJournal()
    sim = Simulation(load_config_text(CONFIG), jobs, journal, checkpoint_aware_victims=aware)
    sim.run(until)
    return sim, journal


def _issued(journal: RecordingJournal) -> list[tuple[str, int]]:
    return [(p["args"][0].name, p["args"][-1]) for p in journal.named("preemption_issued")]


def test_waits_for_the_minimum_runtime_then_preempts_at_its_end() -> None:
    # sweep (research: 1h) holds all of ml's 4 GPUs from 0; release (production) arrives at 10 minutes.
    sweep = job("sweep", "ml", 4, 0, 5 * 60)
    release = job("release", "ml", 4, 10 * MIN, 30, "production")
    sim, journal = simulate(sweep, release, until=30 * MIN)
    assert _issued(journal) == [], "a protected workload is no victim"
    manager = sim.controller.manager
    assert manager.messages["release"].endswith("waits for sweep to reach its minimum runtime at 3600s")
    assert manager.inadmissible("release")
    cycles = len(journal.named("cycle"))
    assert cycles <= 4, f"no busy loop while it waits: {cycles} cycles in 30 virtual minutes"
    assert sim.controller.next_due() == HOUR, "the controller asked to be woken when the protection ends"

    sim.run()
    assert _issued(journal)[0] == ("sweep", HOUR), "preempted the instant its minimum runtime was over"
    assert sim.jobs["release"].finished_at is not None


def test_the_earliest_protection_end_wakes_the_controller() -> None:
    # Two sweeps of 2 GPUs, admitted at 0 and at 20 minutes; release needs 2: the first sweep is free at 1h.
    first = job("first", "ml", 2, 0, 5 * 60)
    second = job("second", "ml", 2, 20 * MIN, 5 * 60)
    release = job("release", "ml", 2, 30 * MIN, 30, "production")
    sim, journal = simulate(first, second, release, until=40 * MIN)
    # Without protection `second` (most recently admitted) would go: the message names it and its end.
    assert "waits for second to reach its minimum runtime at 4800s" in sim.controller.manager.messages["release"]
    assert sim.controller.next_due() == HOUR
    sim.run()
    assert _issued(journal)[0] == ("first", HOUR)


def test_reclaim_goes_through_protection_with_except_reclaim() -> None:
    # nlp's borrower (class lender: 1h, exceptReclaim) uses vision's idle quota; vision takes it back at once.
    borrower = job("borrower", "nlp", 8, 0, 5 * 60, "lender")
    owner = job("owner", "vision", 4, 10 * MIN, 30, "production")
    _, journal = simulate(borrower, owner)
    assert _issued(journal)[0] == ("borrower", 10 * MIN)
    assert str(journal.named("preemption_issued")[0]["args"][3]) == "CohortReclamation"


def test_reclaim_waits_without_except_reclaim() -> None:
    borrower = job("borrower", "nlp", 8, 0, 5 * 60)
    owner = job("owner", "vision", 4, 10 * MIN, 30, "production")
    _, journal = simulate(borrower, owner)
    assert _issued(journal)[0] == ("borrower", HOUR)


def test_readmission_starts_the_minimum_runtime_again() -> None:
    # sweep is preempted at 1h, readmitted once release ends (1h30m), and protected again for an hour from then.
    sweep = job("sweep", "ml", 4, 0, 5 * 60)
    release = job("release", "ml", 4, 10 * MIN, 30, "production")
    again = job("again", "ml", 4, 100 * MIN, 30, "production")
    _, journal = simulate(sweep, release, again)
    issued = _issued(journal)
    readmitted = [p["args"][-1] for p in journal.named("admitted") if p["args"][0].name == "sweep"][1]
    assert issued[0] == ("sweep", HOUR)
    assert issued[1] == ("sweep", readmitted + HOUR)


def test_most_recent_checkpoint_goes_first_among_equals() -> None:
    # Two research jobs of 2 GPUs admitted together at 0 (class plain: no minimum runtime); b checkpoints every
    # 10 minutes, a never. At 25 minutes release needs 2: b has lost 5 minutes, a 25.
    a = job("a", "ml", 2, 0, 5 * 60, "plain", hook_delay_ms=None)
    b = job("b", "ml", 2, 0, 5 * 60, "plain", checkpoint_interval_ms=10 * MIN)
    release = job("release", "ml", 2, 25 * MIN, 30, "production")
    _, journal = simulate(a, b, release, until=30 * MIN)
    assert _issued(journal) == [("b", 25 * MIN)]
    _, journal = simulate(a, b, release, until=30 * MIN, aware=False)
    assert _issued(journal) == [("a", 25 * MIN)], "the spec's order alone: the name decides"
