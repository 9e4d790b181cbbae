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


def gpus(name: str, team: str, count: int, created_at: int) -> Workload:
    return Workload(name, team, 5, (PodSet("main", count, {"nvidia.com/gpu": 1000}),), created_at, queue=f"{team}/default")


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
