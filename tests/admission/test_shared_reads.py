"""The nominations' shared reads (admission/shared_reads.py) decide nothing differently: on random trees, with work
running, leaving and checkpointed, a cycle whose searches read each cohort's merged candidates once gives the same
decisions, victims and messages as one where every search walks its sources itself."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission import cycle
from admission.cycle import CycleResult, run_cycle
from admission.shared_reads import Replay, SharedReads
from admission.snapshot import Snapshot
from queues.manager import QueueManager
from tests.admission.strategies import quota_configs, workloads
from tests.admission.test_properties import drive

SETTINGS = settings(
    max_examples=int(os.environ.get("KUOTA_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

Decided = list[tuple[str, str, str, list[tuple[str, str]], dict[str, dict[str, str]]]]


def _decided(result: CycleResult) -> Decided:
    return [
        (d.workload.name, str(d.verdict), d.message, [(t.workload.name, str(t.reason)) for t in d.victims], d.flavors)
        for d in result.decisions
    ]


def _cycle(manager: QueueManager, saved: dict[str, int] | None) -> Decided:
    snapshot: Snapshot = manager.snapshot()
    snapshot.now = 10_000
    if saved is not None:
        snapshot.checkpoints = lambda w: saved.get(w.name)
    return _decided(run_cycle(snapshot, manager.heads()))


@SETTINGS
@given(data=st.data())
def test_shared_reads_decide_as_each_search_reading_alone(data: st.DataObject, monkeypatch: pytest.MonkeyPatch) -> None:
    config = data.draw(quota_configs(fair_sharing=False))
    manager = drive(config, data.draw(workloads(config, data.draw(st.integers(2, 12)))), cycles=2)
    for workload in data.draw(workloads(config, data.draw(st.integers(1, 10)))):
        if workload.name not in manager.workloads:
            manager.add(workload)
    manager.schedule(5_000)  # leaves victims evicting: the searches below read evicting candidates first
    saved = None
    if data.draw(st.booleans()):
        saved = {name: data.draw(st.integers(0, 3)) for name in sorted(manager.workloads)}

    shared = _cycle(manager, saved)
    unshared_factory: Callable[[], SharedReads | None] = lambda: None  # noqa: E731
    monkeypatch.setattr(cycle, "SharedReads", unshared_factory)
    alone = _cycle(manager, saved)
    monkeypatch.undo()
    assert shared == alone


def test_a_replay_gives_every_reader_the_whole_sequence_produced_once() -> None:
    produced: list[int] = []

    def items() -> Iterator[int]:
        for value in range(4):
            produced.append(value)
            yield value

    replay = Replay(items())
    first = iter(replay)
    assert [next(first), next(first)] == [0, 1]
    assert list(replay) == [0, 1, 2, 3]
    assert list(first) == [2, 3]
    assert produced == [0, 1, 2, 3]
    assert not Replay(iter(()))
