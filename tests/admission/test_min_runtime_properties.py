"""Property tests for minimum runtimes and the checkpoint-aware victim order: whatever the tree, quotas, workloads,
minimum runtimes, admission and checkpoint times, no workload within its minimum runtime is ever chosen as a victim
(but for a reclaim its class allows), and the candidate order is a total order that extends the spec's."""

from __future__ import annotations

import os
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.cycle import run_cycle
from admission.preemption import _checkpoint_order, order_key
from admission.running import RunningWorkloads, candidate_sort_key
from admission.snapshot import Snapshot
from admission.workload import Workload
from queues.manager import QueueManager, State
from quota.config import MinRuntime, QuotaConfig
from quota.preemption import PreemptionReason
from tests.admission.strategies import quota_configs, workloads

SETTINGS = settings(
    max_examples=int(os.environ.get("KUOTA_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SECOND = 1000


@st.composite
def protected_configs(draw: st.DrawFn) -> QuotaConfig:
    """A random quota file whose classes (and some teams) have random minimum runtimes, with or without reclaim."""
    config = draw(quota_configs())

    def min_runtime() -> MinRuntime | None:
        seconds = draw(st.sampled_from([None, 0, 30, 60, 90]))
        if seconds is None:
            return None
        return MinRuntime(duration=seconds, except_reclaim=draw(st.booleans()))  # whole seconds, as in YAML

    classes = tuple(c.model_copy(update={"min_runtime": min_runtime()}) for c in config.priority_classes)
    teams = tuple(
        t.model_copy(update={"min_runtime": min_runtime()}) if draw(st.integers(0, 3)) == 0 else t for t in config.teams
    )
    return config.model_copy(update={"priority_classes": classes, "teams": teams})


def _running_at_random_times(data: st.DataObject, config: QuotaConfig) -> tuple[QueueManager, list[Workload]]:
    """Work admitted by a few cycles, then moved to random admission times; then more, of a higher priority, pending
    (so that the heads look for victims)."""
    manager = QueueManager(config)
    low = config.priority_class("low")
    assert low is not None
    for workload in data.draw(workloads(config, data.draw(st.integers(2, 12)))):
        manager.add(replace(workload, priority=low.value, priority_class=low.name, preemptible=True))
    for cycle in range(3):
        manager.schedule(cycle)
        for name, state in list(manager.state.items()):
            if state is State.EVICTING:
                manager.complete_eviction(name)
    running = []
    for workload in manager.running():
        assert workload.admission is not None
        # Few distinct times: ties in the spec's order (what the checkpoint rule orders) are common.
        admitted_at = data.draw(st.integers(0, 2)) * 30 * SECOND
        running.append(replace(workload, admission=replace(workload.admission, admitted_at=admitted_at)))
    for workload in data.draw(workloads(config, data.draw(st.integers(1, 5)))):
        manager.add(replace(workload, name=f"late-{workload.name}", created_at=100 + workload.created_at))
    return manager, running


def _checkpoints(data: st.DataObject, running: list[Workload]) -> dict[str, int]:
    out = {}
    for workload in running:
        assert workload.admission is not None
        if data.draw(st.booleans()):
            out[workload.name] = workload.admission.admitted_at + data.draw(st.integers(0, 6)) * 10 * SECOND
    return out


def _protected(config: QuotaConfig, workload: Workload, now: int) -> MinRuntime | None:
    """Worked out from the quota file alone, not from the engine's code."""
    found = config.min_runtime(workload.team, workload.priority_class)
    assert workload.admission is not None
    if found is None or workload.evicting or workload.admission.admitted_at + found.duration <= now:
        return None
    return found


@SETTINGS
@given(data=st.data())
def test_no_protected_workload_is_ever_a_victim(data: st.DataObject) -> None:
    config = data.draw(protected_configs())
    manager, running = _running_at_random_times(data, config)
    heads = manager.heads()
    if not running or not heads:
        return
    now = data.draw(st.integers(0, 10)) * 20 * SECOND
    checkpoints = _checkpoints(data, running)
    snapshot = Snapshot.build(config, running)
    snapshot.now = now
    snapshot.checkpoints = lambda w: checkpoints.get(w.name)
    result = run_cycle(snapshot, heads)
    for eviction in result.evictions:
        protection = _protected(config, eviction.victim, now)
        if protection is None:
            continue
        assert protection.except_reclaim and eviction.reason is PreemptionReason.COHORT_RECLAMATION, (
            f"{eviction.victim.name} (admitted at {eviction.victim.admission}, {protection}) preempted at {now} "
            f"for {eviction.preemptor.name} ({eviction.reason})"
        )
    for decision in result.decisions:
        if decision.wait_until is not None:
            assert decision.wait_until > now, "a wake-up in the past would be a busy loop"
            assert "minimum runtime" in decision.message


@SETTINGS
@given(data=st.data())
def test_the_candidate_order_is_total_deterministic_and_extends_the_spec(data: st.DataObject) -> None:
    config = data.draw(quota_configs())
    _, running = _running_at_random_times(data, config)
    running = [replace(w, evicting=data.draw(st.booleans())) for w in running]
    checkpoints = _checkpoints(data, running)
    snapshot = Snapshot.build(config, running)
    snapshot.checkpoints = lambda w: checkpoints.get(w.name)
    keys = [order_key(snapshot, w) for w in running]
    assert len(set(keys)) == len(keys), "two candidates compare equal: the order is not total"
    ordered = [w.name for w in sorted(running, key=lambda w: order_key(snapshot, w))]
    shuffled = data.draw(st.permutations(running))
    assert [w.name for w in sorted(shuffled, key=lambda w: order_key(snapshot, w))] == ordered

    def lost_since(workload: Workload) -> int:
        assert workload.admission is not None
        return max(workload.admission.admitted_at, checkpoints.get(workload.name, 0))

    position = {name: index for index, name in enumerate(ordered)}
    for a in running:
        for b in running:
            spec_a, spec_b = candidate_sort_key(a)[:3], candidate_sort_key(b)[:3]
            if spec_a != spec_b:
                assert (spec_a < spec_b) == (position[a.name] < position[b.name]), "the spec's order was changed"
            elif lost_since(a) != lost_since(b):
                assert (lost_since(a) > lost_since(b)) == (position[a.name] < position[b.name]), (
                    "among equals the most recent checkpoint goes first"
                )
    # What a search reads, team by team and lazily, is that same order.
    for team in {w.team for w in running}:
        mine = [w for w in shuffled if w.team == team]
        table = RunningWorkloads(mine)
        read = [
            k[3]
            for evicting in (True, False)
            for k in _checkpoint_order(snapshot, team, table.candidate_order(evicting=evicting))
        ]
        assert read == [n for n in ordered if n in {w.name for w in mine}]
