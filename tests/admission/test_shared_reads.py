"""The nominations' shared reads (admission/shared_reads.py) decide nothing differently: on random trees, with work
running, leaving and checkpointed, a cycle whose searches read each cohort's merged candidates once gives the same
decisions, victims and messages as one where every search walks its sources itself."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission import cycle, preemption
from admission.cycle import CycleResult, run_cycle
from admission.shared_reads import Replay, SharedReads
from admission.snapshot import Snapshot
from admission.workload import Admission, Workload
from queues.manager import QueueManager
from quota.config import QuotaConfig
from quota.loader import load_config_data
from quota.pod_set import PodSet
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


GPU = "nvidia.com/gpu"


def _config(body: dict[str, Any]) -> QuotaConfig:
    return load_config_data({"flavors": [{"name": "a100"}], **body})


def _running(name: str, team: str, gpus: int, priority: int, admitted_at: int) -> Workload:
    return Workload(
        name=name,
        team=team,
        priority=priority,
        pod_sets=(PodSet("main", 1, {GPU: gpus * 1000}),),
        admission=Admission({"main": {GPU: "a100"}}, {"main": 1}, admitted_at),
    )


def _pending(name: str, team: str, gpus: int, priority: int) -> Workload:
    return Workload(name=name, team=team, priority=priority, pod_sets=(PodSet("main", 1, {GPU: gpus * 1000}),))


def _team(name: str, nominal: int, **preemption: object) -> dict[str, Any]:
    return {
        "name": name,
        "parent": "org",
        "queues": [f"{name}/q"],
        "quotas": [{"flavor": "a100", "resources": {GPU: {"nominal": nominal}}}],
        "preemption": {"reclaimWithinCohort": "Any", **preemption},
    }


def _both_ways(
    config: QuotaConfig, running: list[Workload], heads: list[Workload], monkeypatch: pytest.MonkeyPatch
) -> tuple[Decided, Decided]:
    shared = _decided(run_cycle(Snapshot.build(config, running), heads))
    unshared_factory: Callable[[], SharedReads | None] = lambda: None  # noqa: E731
    with monkeypatch.context() as patched:
        patched.setattr(cycle, "SharedReads", unshared_factory)
        alone = _decided(run_cycle(Snapshot.build(config, running), heads))
    return shared, alone


def test_a_borrowing_preemptor_never_takes_its_own_teams_work_as_a_cohort_victim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a and b both borrow from org's own quota; a's head may preempt lower priority work while borrowing. a's own
    # newer job sorts before b's in the cohort's merged order, which holds every team above its quota, a among them:
    # the search must still take b's job for the cohort (a's own is only for the within-team group, read last).
    config = _config(
        {
            "cohorts": [{"name": "org", "quotas": [{"flavor": "a100", "resources": {GPU: {"nominal": 2}}}]}],
            "teams": [
                _team("a", 2, withinTeam="LowerPriority", borrowWithinCohort={"policy": "LowerPriority"}),
                _team("b", 2),
                _team("c", 0),
            ],
        }
    )
    running = [_running("b-old", "b", 3, 0, admitted_at=1), _running("a-new", "a", 3, 0, admitted_at=2)]
    heads = [_pending("a-head", "a", 1, 10), _pending("c-head", "c", 1, 0)]
    shared, alone = _both_ways(config, running, heads, monkeypatch)
    assert shared == alone
    (a_head,) = [d for d in shared if d[0] == "a-head"]
    assert a_head[3] == [("b-old", "CohortReclaimWhileBorrowing")]


def test_a_merged_order_made_while_a_search_has_work_taken_out_still_holds_that_work() -> None:
    # The readers skip what they took out themselves; a stream made mid-search must not lose it for every later head.
    config = _config({"cohorts": [{"name": "org"}], "teams": [_team("a", 1), _team("b", 1)]})
    running = [_running(f"{team}-{i}", team, 1, 0, admitted_at=i) for team in "ab" for i in range(3)]
    snapshot = Snapshot.build(config, running)
    teams = [snapshot.team("a"), snapshot.team("b")]
    whole = [key[3] for key, _ in preemption._merged_keys(snapshot, teams, False, None)]
    with snapshot.without([running[1], running[4]]):
        during = [key[3] for key, _ in preemption._merged_keys(snapshot, teams, False, None)]
    assert during == whole
    assert sorted(whole) == sorted(w.name for w in running)
