"""The fan-out hands every step of the Journal to every journal, in order, with the arguments as given; and the
journals that ignore steps still answer every one of them."""

from __future__ import annotations

import pytest

from admission.workload import Workload
from queues.journal import Journal, Journals, LogJournal, NullJournal, RecordingJournal
from quota.budgets import BudgetStatus
from quota.config import BlockAbove, OnExhausted
from quota.pod_set import PodSet

WORKLOAD = Workload("ns/a", "nlp", 0, (PodSet("main", 1, {"cpu": 1000}),))
SPENT = BudgetStatus(
    "nlp", False, "cpu", "day", 0, 86_400_000, 86_400_000, 1000, 800, 0, OnExhausted.BLOCK, BlockAbove.NOMINAL
)
STEPS: list[tuple[str, tuple[object, ...]]] = [
    ("workload_seen", (WORKLOAD, 1)),
    ("queued", (WORKLOAD, 3, 2)),
    ("admitted", (WORKLOAD, 1, {("f", "cpu"): 1000}, {}, 3)),
    ("finished", (WORKLOAD, 1, True, 4)),
    ("preemption_issued", (WORKLOAD, 1, "ns/b", "WithinTeam", 5)),
    ("checkpoint_requested", (WORKLOAD, 1, 60, "url", 6)),
    ("checkpoint_acked", (WORKLOAD, 1, "ck-1", 7)),
    ("checkpoint_timed_out", (WORKLOAD, 1, 8)),
    ("suspended", (WORKLOAD, 1, 2500, 9)),
    ("requeued", (WORKLOAD, 1, 20, 10)),
    ("deactivated", (WORKLOAD, 1, "deactivated: not ready in time", 10)),
    ("node_failed", (WORKLOAD, 1, "gpu-7", 9, 10)),
    ("held", (WORKLOAD, "root", 11)),
    ("released", (WORKLOAD, "root", 12)),
    ("config_applied", ("teams: []", "file", 13)),
    ("cycle", (4, 1, 1, 0.5, 14)),
    ("decision_failed", (WORKLOAD, "boom", 15)),
    ("budget_reached", (SPENT, 80, [WORKLOAD], 16)),
]
JOURNAL_STEPS = {name for name in vars(Journal) if not name.startswith("_")}


def test_the_steps_here_are_every_step_of_the_journal() -> None:
    assert {name for name, _ in STEPS} == JOURNAL_STEPS


def test_the_fan_out_calls_every_journal_in_order_with_the_arguments() -> None:
    seen: list[tuple[str, str]] = []
    first, second = _Tagged("first", seen), _Tagged("second", seen)
    fan = Journals(first, second)
    for name, args in STEPS:
        getattr(fan, name)(*args)
    assert first.entries == second.entries == [(name, {"args": args}) for name, args in STEPS]
    assert seen == [(tag, name) for name, _ in STEPS for tag in ("first", "second")]


@pytest.mark.parametrize("journal", [NullJournal(), LogJournal(), Journals()], ids=type)
def test_journals_that_ignore_steps_answer_every_one(journal: Journal) -> None:
    for name, args in STEPS:
        assert getattr(journal, name)(*args) is None


class _Tagged(RecordingJournal):
    """Also notes, in a list shared with the others, which journal heard which step."""

    def __init__(self, tag: str, seen: list[tuple[str, str]]) -> None:
        super().__init__()
        self.tag, self.seen = tag, seen

    def _record(self, name: str, *args: object) -> None:
        self.seen.append((self.tag, name))
        super()._record(name, *args)
