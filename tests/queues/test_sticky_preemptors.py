"""`stickyPreemptors: true` through the queue manager: a preempting head keeps its team's turn when its victim's
leaving unparks older work, across a reload of the quota file too; without the setting the older work takes the
turn and the victim comes back (the loop of kubernetes-sigs/kueue#6947)."""

from __future__ import annotations

import pytest

from admission.cycle import Verdict
from admission.workload import Workload
from queues.manager import QueueManager, State
from quota.loader import load_config_text
from quota.pod_set import PodSet

CONFIG = """
flavors: [{name: h100}]
cohorts: [{name: research}]
teams:
  - name: a
    parent: research
    queues: [a/default]
    quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 3}}}]
    preemption: {reclaimWithinCohort: Any}
  - name: b
    parent: research
    queues: [b/default]
    quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 0}}}]
"""


def gpus(name: str, team: str, count: int, created_at: int, priority: int = 5) -> Workload:
    pod_sets = (PodSet("main", count, {"nvidia.com/gpu": 1000}),)
    return Workload(name, team, priority, pod_sets, created_at, queue=f"{team}/default")


@pytest.mark.parametrize("sticky", [True, False])
def test_the_preemptor_keeps_its_turn_across_a_reload_only_when_sticky(sticky: bool) -> None:
    text = ("stickyPreemptors: true\n" if sticky else "") + CONFIG
    manager = QueueManager(load_config_text(text))
    for workload in (gpus("b-one", "b", 1, 1), gpus("a-four", "a", 4, 2), gpus("a-three", "a", 3, 3)):
        manager.add(workload)
    first = manager.schedule(1)
    assert first.decision("b-one").verdict is Verdict.ADMITTED  # type: ignore[union-attr]
    assert manager.inadmissible("a-four")
    second = manager.schedule(2)
    assert [t.workload.name for t in second.decision("a-three").victims] == ["b-one"]  # type: ignore[union-attr]
    manager.reload(load_config_text(text))
    manager.complete_eviction("b-one")
    third = manager.schedule(3)
    if sticky:
        assert third.decision("a-three").verdict is Verdict.ADMITTED  # type: ignore[union-attr]
        assert third.decision("a-four") is None
        assert manager.state["b-one"] is State.PENDING and manager.queues["a"].preemptor is None
    else:
        assert third.decision("a-three") is None and manager.inadmissible("a-four")
        assert manager.state["b-one"] is State.ADMITTED  # back, to be reclaimed again


OWN_TEAM = """
flavors: [{name: h100}]
teams:
  - name: a
    queues: [a/default]
    quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 4}}}]
    preemption: {withinTeam: LowerPriority}
"""


@pytest.mark.parametrize("sticky", [True, False])
def test_while_its_victims_leave_one_by_one_the_team_waits_for_its_preemptor_only_when_sticky(sticky: bool) -> None:
    manager = QueueManager(load_config_text(("stickyPreemptors: true\n" if sticky else "") + OWN_TEAM))
    for name in ("low-1", "low-2"):
        manager.add(gpus(name, "a", 2, 1, priority=1))
        manager.schedule(1)
    assert manager.state["low-1"] is manager.state["low-2"] is State.ADMITTED
    manager.add(gpus("high", "a", 4, 2, priority=9))
    preempting = manager.schedule(2).decision("high")
    assert preempting is not None and {t.workload.name for t in preempting.victims} == {"low-1", "low-2"}
    manager.complete_eviction("low-1")  # the first victim is gone, the second still checkpointing
    waiting = manager.schedule(3)
    if sticky:
        # The team's turn is high's: low-1 does not take back the GPUs its leaving freed.
        assert waiting.decisions == [] and manager.state["low-1"] is State.PENDING
        manager.complete_eviction("low-2")
        assert manager.schedule(4).decision("high").verdict is Verdict.ADMITTED  # type: ignore[union-attr]
    else:
        assert waiting.decision("low-1").verdict is Verdict.ADMITTED  # type: ignore[union-attr]
        manager.complete_eviction("low-2")
        again = manager.schedule(4).decision("high")
        assert again is not None and [t.workload.name for t in again.victims] == ["low-1"]  # preempted twice


def test_a_held_preemptor_does_not_keep_its_team_waiting() -> None:
    manager = QueueManager(load_config_text("stickyPreemptors: true\n" + OWN_TEAM))
    for name in ("low-1", "low-2"):
        manager.add(gpus(name, "a", 2, 1, priority=1))
        manager.schedule(1)
    manager.add(gpus("high", "a", 4, 2, priority=9))
    manager.schedule(2)
    manager.complete_eviction("low-1")
    manager.hold("high")  # an operator holds it while its second victim is still leaving
    assert manager.schedule(3).decision("low-1").verdict is Verdict.ADMITTED  # type: ignore[union-attr]
