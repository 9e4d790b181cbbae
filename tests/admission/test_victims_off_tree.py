"""The cycle's processing with its victims' usage kept off the quota tree (admission/cycle.py `_Preempted`) decides
nothing differently: on random trees without fair sharing (under it the victims stay on the tree), with work
running, leaving and checkpointed, a cycle gives the same decisions, victims and messages as one that takes the
victims off for every head and puts them back, and leaves the live tree as it found it."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission import cycle
from admission.cycle import run_cycle
from admission.snapshot import Snapshot
from queues.manager import QueueManager
from tests.admission.strategies import quota_configs, workloads
from tests.admission.test_properties import drive
from tests.admission.test_shared_reads import GPU, Decided, _config, _decided, _pending, _running

SETTINGS = settings(
    max_examples=int(os.environ.get("KUOTA_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _on_the_tree(snapshot: Snapshot) -> bool:
    return False


def _usage(manager: QueueManager) -> dict[str, dict[tuple[str, str], int]]:
    return {name: {fr: v for fr, v in node.usage.items() if v} for name, node in manager.live.teams.items()}


def _cycle(manager: QueueManager, saved: dict[str, int] | None) -> Decided:
    """One cycle on the manager's live tree, as `QueueManager.schedule` runs it, its charges taken back after."""
    snapshot = Snapshot.of_running(
        manager.config, manager.live, manager.running_by_team, manager.usage, share_tree=True
    )
    snapshot.now = 10_000
    if saved is not None:
        snapshot.checkpoints = lambda w: saved.get(w.name)
    try:
        return _decided(run_cycle(snapshot, manager.heads()))
    finally:
        snapshot.release()


@SETTINGS
@given(data=st.data())
def test_victims_kept_off_the_tree_decide_as_victims_taken_off_per_head(
    data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = data.draw(quota_configs(fair_sharing=False))
    manager = drive(config, data.draw(workloads(config, data.draw(st.integers(2, 12)))), cycles=2)
    for workload in data.draw(workloads(config, data.draw(st.integers(1, 10)))):
        if workload.name not in manager.workloads:
            manager.add(workload)
    manager.schedule(5_000)  # leaves victims evicting
    saved = None
    if data.draw(st.booleans()):
        saved = {name: data.draw(st.integers(0, 3)) for name in sorted(manager.workloads)}
    tree_before = _usage(manager)

    kept_off = _cycle(manager, saved)
    with monkeypatch.context() as patched:
        patched.setattr(cycle, "_victims_off_tree", _on_the_tree)
        taken_off_per_head = _cycle(manager, saved)
    assert kept_off == taken_off_per_head
    # and the live tree the cycles ran on is as it was: every victim put back, every charge taken back
    assert _usage(manager) == tree_before


def _capped_team(name: str, nominal: int, borrowing_limit: int | None, reclaim: str) -> dict[str, Any]:
    quota: dict[str, int] = {"nominal": nominal}
    if borrowing_limit is not None:
        quota["borrowingLimit"] = borrowing_limit
    return {
        "name": name,
        "parent": "org",
        "queues": [f"{name}/q"],
        "quotas": [{"flavor": "a100", "resources": {GPU: quota}}],
        "preemption": {"reclaimWithinCohort": reclaim},
    }


def test_a_head_with_no_victims_reserves_what_its_team_holds_with_its_leaving_work_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # b reclaims a's borrowed job; a's own head then has no possible victims and reserves what its borrowing limit
    # leaves it, counting the job still leaving (none: a is at its limit). Counted without that job, a would hold a
    # GPU back and c's head, which fits once the victim is gone, would be skipped.
    config = _config(
        {
            "cohorts": [{"name": "org"}],
            "teams": [
                _capped_team("a", 1, 2, "LowerPriority"),
                _capped_team("b", 3, None, "Any"),
                _capped_team("c", 0, None, "Never"),
            ],
        }
    )
    running = [_running("a-job", "a", 3, 0, admitted_at=1)]
    heads = [
        replace(_pending("b-head", "b", 3, 5), created_at=3),
        replace(_pending("a-head", "a", 1, 0), created_at=1),
        replace(_pending("c-head", "c", 1, 0), created_at=2),
    ]
    kept_off = _decided(run_cycle(Snapshot.build(config, running), heads))
    with monkeypatch.context() as patched:
        patched.setattr(cycle, "_victims_off_tree", _on_the_tree)
        taken_off_per_head = _decided(run_cycle(Snapshot.build(config, running), heads))
    assert kept_off == taken_off_per_head
    assert [(name, verdict) for name, verdict, *_ in kept_off] == [
        ("b-head", "preempting"),
        ("a-head", "no-candidates"),
        ("c-head", "admitted"),
    ]
