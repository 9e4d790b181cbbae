"""Property tests: whatever the tree, quotas and workloads, the engine never over-admits, always decides the
same way, and never evicts a victim it could have spared."""

from __future__ import annotations

import os
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.cycle import run_cycle
from admission.preemption import PreemptionRequest, find_targets
from admission.snapshot import Snapshot
from admission.workload import Workload
from queues.manager import QueueManager, State
from quota.config import QuotaConfig
from quota.tree import FlavorResource, QuotaTree
from tests.admission.strategies import quota_configs, workloads

SETTINGS = settings(
    max_examples=int(os.environ.get("KUOTA_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def assert_within_limits(config: QuotaConfig, running: list[Workload]) -> None:
    """No team or cohort uses more than its subtree may: every node's limits hold, read straight off the tree."""
    tree = QuotaTree.from_config(config)
    for workload in running:
        tree.add_all(tree.teams[workload.team], workload.usage())
    for node in tree.nodes():
        for fr, used in node.usage.items():
            limits = node.quotas.get(fr)
            if node.parent is None:
                assert used <= node.subtree_quota.get(fr, 0), f"{node} uses {used} of {fr} above its subtree quota"
            elif limits is not None and limits.borrowing_limit is not None:
                cap = node.subtree_quota.get(fr, 0) + limits.borrowing_limit
                assert used <= cap, f"{node} uses {used} of {fr} above nominal + borrowingLimit {cap}"
        if node.is_team:
            for fr in node.quotas:
                assert tree.available(node, fr) >= 0, f"{node} is over-admitted on {fr}"


def assert_live_tree_is_a_recount(config: QuotaConfig, manager: QueueManager) -> None:
    """Cycles run on the manager's live tree and take back what they charge: it must equal a recount."""
    recount = QuotaTree.from_config(config)
    for workload in manager.running():
        recount.add_all(recount.teams[workload.team], workload.usage())
    live = {node.name: {fr: v for fr, v in node.usage.items() if v} for node in manager.live.nodes()}
    fresh = {node.name: {fr: v for fr, v in node.usage.items() if v} for node in recount.nodes()}
    assert live == fresh


def drive(config: QuotaConfig, pending: list[Workload], cycles: int) -> QueueManager:
    manager = QueueManager(config)
    for workload in pending:
        manager.add(workload)
    for now in range(cycles):
        manager.schedule(1000 + now)
        # A victim keeps its quota until it is gone, and a later head of the same cycle may be admitted into the room
        # it leaves (semantics.md, one scheduling cycle, step 5; Kueue's scheduler judges later heads with the
        # cycle's preempted workloads removed too): until the victims are gone only the work not being evicted must
        # fit, and once they are, everything must.
        assert_within_limits(config, [w for w in manager.running() if not w.evicting])
        assert_live_tree_is_a_recount(config, manager)
        for name, state in list(manager.state.items()):
            if state is State.EVICTING:
                manager.complete_eviction(name)
        assert_within_limits(config, manager.running())
    return manager


@SETTINGS
@given(data=st.data())
def test_no_admission_ever_exceeds_what_a_team_or_cohort_may_use(data: st.DataObject) -> None:
    config = data.draw(quota_configs())
    pending = data.draw(workloads(config, data.draw(st.integers(1, 14))))
    drive(config, pending, cycles=6)


@SETTINGS
@given(data=st.data())
def test_a_cycle_is_deterministic(data: st.DataObject) -> None:
    config = data.draw(quota_configs())
    first = data.draw(workloads(config, data.draw(st.integers(1, 10))))
    manager = drive(config, first, cycles=2)
    heads = manager.heads()

    def decide() -> list[tuple[str, str, object, object, list[tuple[str, str]]]]:
        result = run_cycle(manager.snapshot(), heads)
        return [
            (
                d.workload.name,
                str(d.verdict),
                d.flavors,
                d.counts,
                [(t.workload.name, str(t.reason)) for t in d.victims],
            )
            for d in result.decisions
        ]

    assert decide() == decide()
    shuffled = data.draw(st.permutations(heads))
    result = run_cycle(manager.snapshot(), shuffled)
    assert sorted(d.workload.name for d in result.decisions) == sorted(h.name for h in heads)
    assert [(d.workload.name, str(d.verdict)) for d in result.decisions] == [(n, v) for n, v, *_ in decide()]


def _nonzero(usage: dict[str, dict[tuple[str, str], int]]) -> dict[str, dict[tuple[str, str], int]]:
    return {team: {fr: v for fr, v in used.items() if v} for team, used in usage.items()}


def plausible_usage(snapshot: Snapshot, preemptor: Workload) -> dict[FlavorResource, int]:
    """The preemptor's requests on its team's first flavor of each group: a plausible assignment."""
    team = snapshot.team(preemptor.team)
    usage: dict[FlavorResource, int] = {}
    for pod_set in preemptor.pod_sets:
        for resource, quantity in pod_set.total().items():
            group = team.group_of.get(resource)
            if group is None or quantity == 0:
                continue
            fr = (team.groups[group].flavors[0], resource)
            usage[fr] = usage.get(fr, 0) + quantity
    return usage


@SETTINGS
@given(data=st.data())
def test_a_victim_set_is_minimal(data: st.DataObject) -> None:
    config = data.draw(quota_configs())
    running_seed = data.draw(workloads(config, data.draw(st.integers(2, 12))))
    manager = drive(config, running_seed, cycles=3)
    running = manager.running()
    if not running:
        return
    preemptor = data.draw(workloads(config, 1))[0]
    preemptor = replace(preemptor, name="preemptor", priority=100)
    snapshot = Snapshot.build(config, running)
    team = snapshot.team(preemptor.team)
    usage = plausible_usage(snapshot, preemptor)
    if not usage or snapshot.tree.fits(team, usage):
        return  # the engine only looks for victims when the preemptor does not fit as things are
    request = PreemptionRequest(preemptor, team, usage, frozenset(usage))
    before = {n: dict(node.usage) for n, node in snapshot.tree.teams.items()}
    targets = find_targets(snapshot, request)
    after = {n: dict(node.usage) for n, node in snapshot.tree.teams.items()}
    assert _nonzero(after) == _nonzero(before), "search must restore usage"
    if not targets:
        return
    victims = [t.workload for t in targets]
    assert len({v.name for v in victims}) == len(victims)
    assert all(v.preemptible for v in victims), "a non-preemptible class was chosen"
    with snapshot.without(victims):
        assert snapshot.tree.fits(team, usage), "the preemptor must fit once every victim is gone"
    for spared in victims:
        with snapshot.without(v for v in victims if v is not spared):
            still_fits = all(
                not team.borrowing_with(fr, value) and value <= snapshot.tree.available(team, fr)
                for fr, value in usage.items()
            )
            assert not still_fits, (
                f"{spared.name} could have been spared: usage={usage} victims="
                f"{[(v.name, v.team, v.priority, v.usage()) for v in victims]} running="
                f"{[(w.name, w.team, w.priority, w.usage()) for w in running]}"
            )
