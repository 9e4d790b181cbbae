"""Budgets in the controller on the simulated cluster's virtual clock (which starts at 1970-01-01T00:00:00Z): warnings
at 80 % and 100 % at the instant spending reaches them (a timer, not a poll), admissions back the instant the
window rolls over, a budget changed mid-window by a reload, and lowerPriority making running work preemptible."""

from __future__ import annotations

from clusters.sim.cluster import Kind, SimJob, Simulation
from queues.journal import RecordingJournal
from quota.config import QuotaConfig
from quota.loader import load_config_text
from tests.queues.gpu_jobs import MIN, gpu_job

HOUR = 60 * MIN
DAY = 24 * HOUR

CONFIG = """
flavors: [{name: a100}]
priorityClasses: [{name: research, value: 100, default: true}]
cohorts: [{name: org}]
teams:
  - name: ml
    parent: org
    queues: [ml/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
    budgets:
      - {window: day, resources: {nvidia.com/gpu: BUDGET}, onExhausted: block, blockAbove: zero}
  - name: nlp
    parent: org
    queues: [nlp/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
    preemption: {reclaimWithinCohort: LowerPriority}
"""


def config(budget: int = 20, effect: str = "onExhausted: block, blockAbove: zero") -> QuotaConfig:
    text = CONFIG.replace("BUDGET", str(budget)).replace("onExhausted: block, blockAbove: zero", effect)
    return load_config_text(text)


def job(name: str, team: str, gpus: int, at: int, minutes: int) -> SimJob:
    return gpu_job(config(), name, team, gpus, at, minutes, "research")


BUSY = job("busy", "nlp", 8, 0, 20 * 60)
"""nlp's quota in use for 20 hours: ml cannot borrow."""


def admitted_at(journal: RecordingJournal, name: str) -> list[int]:
    return [p["args"][-1] for p in journal.named("admitted") if p["args"][0].name == name]


def crossings(journal: RecordingJournal) -> list[tuple[str, int, int, list[str]]]:
    return [
        (p["args"][0].owner, p["args"][1], p["args"][-1], [w.name for w in p["args"][2]])
        for p in journal.named("budget_reached")
    ]


def test_warned_at_80_and_100_percent_then_admitted_when_the_day_rolls_over() -> None:
    # ml: two 4-GPU jobs for 3 h from 0 (8 GPUs: 80 % of 20 GPU-hours at 2 h, 100 % at 2.5 h); `late` comes at 1 h
    # and waits for quota (nlp's is busy); when it frees at 3 h the day's budget is spent: it waits for midnight.
    journal = RecordingJournal()
    jobs = [job("a", "ml", 4, 0, 180), job("b", "ml", 4, 0, 180), job("late", "ml", 4, HOUR, 60), BUSY]
    sim = Simulation(config(), jobs, journal)
    sim.run(12 * HOUR)
    assert crossings(journal) == [("ml", 80, 2 * HOUR, ["late"]), ("ml", 100, 150 * MIN, ["late"])]
    manager = sim.controller.manager
    assert manager.inadmissible("late")
    assert manager.messages["late"].startswith("budget spent: team ml's day budget of 20 nvidia.com/gpu-hours (24 ")
    assert manager.messages["late"].endswith("no new admissions until 1970-01-02T00:00:00Z")
    assert sim.controller.next_due() == DAY, "the controller wakes at the window's end"
    cycles = len(journal.named("cycle"))
    sim.run(DAY - 1)
    assert len(journal.named("cycle")) - cycles == 1, "no busy loop while the budget is spent (one cycle: busy ends)"
    sim.run(DAY)
    assert admitted_at(journal, "late") == [DAY], "admitted the instant the next day began"
    status = next(s for s in sim.controller.budgets.statuses if s.owner == "ml")
    assert (status.start, status.spent, status.exhausted) == (DAY, 0, False)


def test_a_reload_mid_window_applies_the_new_budget_at_once() -> None:
    journal = RecordingJournal()
    jobs = [job("a", "ml", 8, 0, 180), job("late", "ml", 4, HOUR, 60), BUSY]
    sim = Simulation(config(20), jobs, journal)
    sim.run(5 * HOUR)
    assert admitted_at(journal, "late") == [], "24 GPU-hours spent of 20"
    # Raised to 40: the spending so far (24) counts against it, so late is admitted at the reload's instant.
    sim.controller.reload(config(40), "raised", "test", 5 * HOUR)
    sim.run(6 * HOUR + 1)
    assert admitted_at(journal, "late") == [5 * HOUR]
    # Lowered to 25 while late runs (28 GPU-hours by its end): it finishes (running work is never stopped), but a
    # new job waits for the next day.
    sim.controller.reload(config(25), "lowered", "test", 6 * HOUR + 1)
    sim.jobs["next"] = job("next", "ml", 1, 7 * HOUR, 10)
    sim.push(7 * HOUR, Kind.SUBMIT, "next", 0)
    sim.run()
    assert sim.jobs["late"].finished_at == 6 * HOUR
    assert admitted_at(journal, "next") == [DAY]


def test_lower_priority_makes_the_teams_running_work_preemptible_when_spent() -> None:
    # ml borrows 12 GPUs (nominal 8) from 0; nlp's 8-GPU job comes at 1 h and may reclaim only from lower priority:
    # same class, so it waits. ml's 24 GPU-hours are spent at 2 h: from then on ml counts as the lowest priority,
    # and nlp takes its GPUs back at that instant.
    journal = RecordingJournal()
    cfg = config(24, "onExhausted: lowerPriority")
    jobs = [
        gpu_job(cfg, "borrower", "ml", 12, 0, 30 * 60, "research"),
        gpu_job(cfg, "reclaimer", "nlp", 8, HOUR, 60, "research"),
    ]
    sim = Simulation(cfg, jobs, journal)
    sim.run(2 * HOUR - 1)
    assert journal.named("preemption_issued") == []
    sim.run(3 * HOUR)
    [issued] = journal.named("preemption_issued")
    assert (issued["args"][0].name, issued["args"][3], issued["args"][-1]) == (
        "borrower",
        "CohortReclamation",
        2 * HOUR,
    )
    assert sim.controller.manager.own_priority("borrower") == 100
    assert sim.controller.manager.workloads["borrower"].priority == -1
    sim.run(DAY + 1)
    assert sim.controller.manager.workloads["borrower"].priority == 100, "its own priority back the next day"
