"""Budget spending survives a leader change: a new leader rebuilds it from the ledger (SQLite and PostgreSQL), open
intervals included, to the milli-unit-millisecond of what the old leader kept; and a budget added or changed by a
reload mid-window counts the window's spending from its start."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from accounting import Ledger
from accounting.spending import usage_since
from clusters.kube.term import load_budget_spending
from clusters.sim.cluster import SimJob, Simulation
from queues.controller import Controller
from queues.journal import NullJournal
from queues.ledger_journal import LedgerJournal
from quota.config import QuotaConfig
from quota.loader import load_config_text
from tests.admin.conftest import StubCluster
from tests.queues.gpu_jobs import MIN, gpu_job

HOUR = 60 * MIN
T0 = int(datetime(1970, 1, 5, tzinfo=UTC).timestamp()) * 1000
"""Monday 1970-01-05 00:00 UTC (the simulated clock counts from the epoch): the ISO week and the month are both
under way by the leader change."""

BUDGETS = """
    budgets:
      - {window: week, resources: {nvidia.com/gpu: 200}, onExhausted: lowerPriority}
      - {rolling: 6h, resources: {nvidia.com/gpu: 40}}
"""
CONFIG = """
flavors: [{name: a100}]
priorityClasses: [{name: research, value: 100, default: true}]
cohorts:
  - name: org
    budgets:
      - {window: month, resources: {nvidia.com/gpu: 300}, onExhausted: noBorrowing}
teams:
  - name: ml
    parent: org
    queues: [ml/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
ML_BUDGETS
  - name: nlp
    parent: org
    queues: [nlp/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
"""
LEADER_CHANGE = T0 + 30 * HOUR + 17 * MIN
"""Mid-window, with work still running (its ledger intervals open)."""


class NoTimers:
    def call_at(self, at: int) -> None:
        return None


def config(with_budgets: bool = True) -> QuotaConfig:
    return load_config_text(CONFIG.replace("ML_BUDGETS", BUDGETS if with_budgets else ""))


def jobs(cfg: QuotaConfig) -> list[SimJob]:
    # Odd sizes and minutes, preemption by nothing (one class), borrowing across the cohort, and two jobs that
    # outlive the leader change.
    out = []
    for index in range(12):
        team = "ml" if index % 3 else "nlp"
        gpus = 1 + index % 5
        out.append(gpu_job(cfg, f"j{index}", team, gpus, T0 + index * 137 * MIN + 7_001, 95 + 41 * index, "research"))
    out.append(gpu_job(cfg, "long-ml", "ml", 3, T0 + 29 * HOUR + 1234, 600, "research"))
    out.append(gpu_job(cfg, "long-nlp", "nlp", 2, T0 + 30 * HOUR + 5, 600, "research"))
    return out


def spent(controller: Controller) -> list[tuple[str, str, str, int, bool]]:
    return [(s.owner, s.resource, s.window, s.spent, s.exhausted) for s in controller.budgets.statuses]


async def new_leader(cfg: QuotaConfig, ledger: Ledger, old: Controller, now: int) -> Controller:
    """What a leader term does: the ledger's usage first, then the running workloads submitted as found."""
    await ledger.flush()
    controller = Controller(cfg, StubCluster(), NoTimers(), NullJournal())
    await load_budget_spending(controller, ledger.engine, now)
    for workload in old.manager.running():
        controller.submit(workload, now)
    return controller


async def test_a_new_leader_rebuilds_spending_exactly_mid_window(
    ledger_url: str, make_ledger: Callable[..., Awaitable[Ledger]]
) -> None:
    cfg = config()
    ledger = await make_ledger(ledger_url)
    sim = Simulation(cfg, jobs(cfg), LedgerJournal(ledger))
    sim.run(LEADER_CHANGE)
    old = sim.controller
    assert {"long-ml", "long-nlp"} <= {w.name for w in old.manager.running()}

    new = await new_leader(cfg, ledger, old, LEADER_CHANGE)
    old.budgets.review(LEADER_CHANGE)
    new.budgets.review(LEADER_CHANGE)
    assert spent(new) == spent(old)
    assert all(value > 0 for _, _, _, value, _ in spent(new))
    assert new.budgets.restrictions == old.budgets.restrictions

    # Both go on: the old leader's simulation runs on, and the new leader is told of the same ends (nothing is
    # pending, so nothing else happens); the open usage accrues alike.
    assert old.manager.pending() == []
    later = LEADER_CHANGE + 3 * HOUR
    sim.run(later)
    ended = sorted((j.finished_at, name) for name, j in sim.jobs.items() if (j.finished_at or 0) > LEADER_CHANGE)
    assert ended, "some work ends between the leader change and the second look"
    for at, name in ended:
        new.job_finished(name, at)
    old.budgets.review(later)
    new.budgets.review(later)
    assert spent(new) == spent(old)
    # And both equal the definition: the ledger's intervals (open ones up to `later`) clipped to each window.
    await ledger.flush()
    intervals = await usage_since(ledger.engine, T0 - 40 * 24 * HOUR, later)
    for status in new.budgets.statuses:
        teams = {"ml", "nlp"} if status.owner == "org" else {status.owner}
        want = sum(
            i.quantity_milli * max(0, min(i.end_ms or later, later) - max(i.start_ms, status.start))
            for i in intervals
            if i.team in teams and i.resource == status.resource
        )
        assert status.spent == want, status


async def test_a_budget_added_by_a_reload_mid_window_counts_the_window_from_its_start(
    ledger_url: str, make_ledger: Callable[..., Awaitable[Ledger]]
) -> None:
    cfg = config()
    ledger = await make_ledger(ledger_url)
    sim = Simulation(cfg, jobs(cfg), LedgerJournal(ledger))
    sim.run(LEADER_CHANGE)
    # The new leader starts with a file in which ml has no budget (only the cohort's), then one with them is applied.
    new = await new_leader(config(with_budgets=False), ledger, sim.controller, LEADER_CHANGE)
    new.budgets.review(LEADER_CHANGE)
    assert {s.owner for s in new.budgets.statuses} == {"org"}
    new.reload(cfg, "with ml's budgets", "test", LEADER_CHANGE)
    new.budgets.review(LEADER_CHANGE)
    sim.controller.budgets.review(LEADER_CHANGE)
    assert spent(new) == spent(sim.controller)
    week = next(s for s in new.budgets.statuses if s.owner == "ml" and s.window == "week")
    assert week.start == T0 and week.spent > 0
