"""The ledger journal splits a workload's name into the namespace and name the ledger keeps: `KIND/NAMESPACE/NAME`
(every workload in a cluster, and a simulated job of any kind but Job), `NAMESPACE/NAME`, or a simulated Job's bare
name (its team stands for the namespace)."""

from __future__ import annotations

import pytest

from accounting.events import LedgerEvent, WorkloadSeen
from accounting.rows import plan_writes
from admission.workload import PodSet, Workload
from queues.ledger_journal import LedgerJournal


class Outbox:
    """What `Ledger.record` is to the journal: a place events go."""

    def __init__(self) -> None:
        self.events: list[LedgerEvent] = []

    def record(self, event: LedgerEvent) -> None:
        self.events.append(event)


@pytest.mark.parametrize(
    ("workload", "kind", "namespace", "name"),
    [
        ("JobSet/nlp/pretrain", "JobSet", "nlp", "pretrain"),
        ("Job/nlp/train", "Job", "nlp", "train"),
        ("nlp/train", "Job", "nlp", "train"),
        ("train", "Job", "speech", "train"),
    ],
)
def test_workload_seen_names_namespace_and_kind(workload: str, kind: str, namespace: str, name: str) -> None:
    outbox = Outbox()
    journal = LedgerJournal(outbox)  # type: ignore[arg-type]
    journal.workload_seen(Workload(workload, "speech", 0, (PodSet("main", 4, {"nvidia.com/gpu": 2000}),)), 0)
    [seen] = outbox.events
    assert isinstance(seen, WorkloadSeen)
    assert (seen.workload_id, seen.namespace, seen.name) == (workload, namespace, name)
    [row] = plan_writes(outbox.events).workloads
    assert (row["kind"], row["namespace"], row["name"]) == (kind, namespace, name)
