"""A plain fair-sharing victim search, written for reading rather than speed, to hold the engine's to.

It follows semantics.md ("Fair sharing") step by step: every team that may give victims gets the full list of its
eligible running workloads, sorted once; shares are recomputed from the tree whenever they are asked for; every
victim is judged on its own. Nothing is cached, nothing is skipped unread. The engine's search
(admission/preemption.py) must choose exactly the same victims, in the same order, for the same reasons.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from admission.preemption import OrderKey, PreemptionRequest, Target, order_key
from admission.snapshot import Snapshot
from admission.workload import Workload
from quota.config import PreemptionStrategy, ReclaimPolicy, WithinTeamPolicy
from quota.preemption import PreemptionReason
from quota.tree import DominantShare, Node


def reference_fair_targets(snapshot: Snapshot, request: PreemptionRequest) -> list[Target]:
    team = request.team
    queues = _queues(snapshot, request)
    if not queues:
        return []
    taken: list[Target] = []
    snapshot.tree.add_all(team, request.usage)
    try:
        found = _search(snapshot, request, queues, taken)
    finally:
        snapshot.tree.remove_all(team, request.usage)
    if not found:
        for target in taken:
            snapshot.add_workload(target.workload)
        return []
    # Give back every victim, newest first, whose return still lets the preemptor fit (never the last one taken).
    kept = list(taken)
    for index in range(len(kept) - 2, -1, -1):
        victim = kept[index].workload
        snapshot.add_workload(victim)
        if _fits(snapshot, request):
            del kept[index]
        else:
            snapshot.remove_workload(victim)
    for target in kept:
        snapshot.add_workload(target.workload)
    return kept


def _fits(snapshot: Snapshot, request: PreemptionRequest) -> bool:
    tree = snapshot.tree
    if any(value > tree.available(request.team, fr) for fr, value in request.usage.items()):
        return False
    return request.nodes_fit is None or request.nodes_fit()


def _allowed(policy: WithinTeamPolicy | ReclaimPolicy, preemptor: Workload, candidate: Workload) -> bool:
    if policy in (WithinTeamPolicy.NEVER, ReclaimPolicy.NEVER):
        return False
    if policy in (WithinTeamPolicy.LOWER_PRIORITY, ReclaimPolicy.LOWER_PRIORITY):
        return candidate.priority < preemptor.priority
    if policy is WithinTeamPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
        if candidate.priority == preemptor.priority:
            return preemptor.created_at < candidate.created_at
        return candidate.priority < preemptor.priority
    return True


def _eligible(
    snapshot: Snapshot, request: PreemptionRequest, team: Node, policy: WithinTeamPolicy | ReclaimPolicy, reclaim: bool
) -> list[Workload]:
    chosen = []
    for workload in snapshot.workloads[team.name].values():
        if not workload.preemptible or not _allowed(policy, request.preemptor, workload):
            continue
        if request.keep is not None and not request.keep(workload):
            continue
        protection = snapshot.protection(workload)
        if protection is not None and not (reclaim and protection.except_reclaim):
            continue
        if not any(fr in request.contested for fr in snapshot.usage_of(workload)):
            continue
        chosen.append(workload)
    return sorted(chosen, key=lambda w: order_key(snapshot, w))


def _queues(snapshot: Snapshot, request: PreemptionRequest) -> dict[str, list[Workload]]:
    team = request.team
    spec = team.team.preemption
    queues: dict[str, list[Workload]] = {}
    if spec.within_team is not WithinTeamPolicy.NEVER:
        queues[team.name] = _eligible(snapshot, request, team, spec.within_team, reclaim=False)
    if team.parent is not None and spec.reclaim_within_cohort is not ReclaimPolicy.NEVER:
        reclaim = all(
            team.usage.get(fr, 0) + request.usage.get(fr, 0) <= team.subtree_quota.get(fr, 0)
            for fr in request.contested
        )
        for other in team.root().subtree_teams():
            if other is team or not any(other.borrowing(fr) for fr in request.contested):
                continue
            queues[other.name] = _eligible(snapshot, request, other, spec.reclaim_within_cohort, reclaim)
    return {name: victims for name, victims in queues.items() if victims}


def _share(snapshot: Snapshot, node: Node) -> DominantShare:
    return snapshot.tree.dominant_resource_share(node, factor=snapshot.factor(node.name))


def _share_without(snapshot: Snapshot, node: Node, victim: Workload) -> DominantShare:
    snapshot.remove_workload(victim)
    try:
        return _share(snapshot, node)
    finally:
        snapshot.add_workload(victim)


def _sides(preemptor_team: Node, target_team: Node) -> tuple[Node, Node]:
    """The two children of the lowest common ancestor, on the preemptor's side and on the target's."""
    preemptor_path = [preemptor_team, *preemptor_team.ancestors()]
    target_path = [target_team, *target_team.ancestors()]
    for depth, node in enumerate(target_path):
        if node in preemptor_path:
            return preemptor_path[preemptor_path.index(node) - 1], target_path[depth - 1]
    return preemptor_team, target_team


def plain_share_key(share: DominantShare) -> tuple[int, Fraction]:
    """The order of shares as the spec gives it, infinitely unfair last: exact fractions only, none of the
    engine's shortcuts."""
    return (
        (1, share.ratio)
        if share.weight == 0 and share.borrowing
        else (0, share.ratio / share.weight if share.ratio and share.weight else share.ratio)
    )


def _pick(
    snapshot: Snapshot, request: PreemptionRequest, queues: dict[str, list[Workload]], include_preemptor: bool
) -> str | None:
    """The team with the highest share (the preemptor's own loses ties), then the earliest next victim."""
    ranked: list[tuple[tuple[tuple[int, object], int], OrderKey, str]] = []
    for name, victims in queues.items():
        own = name == request.team.name
        if not victims or (own and not include_preemptor):
            continue
        share = _share(snapshot, snapshot.team(name))
        if not own and plain_share_key(share) == (0, Fraction(0)):
            continue
        ranked.append(((plain_share_key(share), 0 if own else 1), order_key(snapshot, victims[0]), name))
    if not ranked:
        return None
    highest = max(rank for rank, _, _ in ranked)
    return min((head, name) for rank, head, name in ranked if rank == highest)[1]


_Strategy = Callable[[DominantShare, DominantShare, DominantShare], bool]


def _strategy(kind: PreemptionStrategy) -> _Strategy:
    if kind is PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return lambda mine, _old, new: plain_share_key(mine) <= plain_share_key(new)
    return lambda mine, old, _new: plain_share_key(mine) < plain_share_key(old)


def _search(
    snapshot: Snapshot, request: PreemptionRequest, queues: dict[str, list[Workload]], taken: list[Target]
) -> bool:
    team = request.team

    def take(victim: Workload, reason: PreemptionReason) -> bool:
        snapshot.remove_workload(victim)
        taken.append(Target(victim, reason))
        snapshot.tree.remove_all(team, request.usage)
        try:
            return _fits(snapshot, request)
        finally:
            snapshot.tree.add_all(team, request.usage)

    if all(team.usage.get(fr, 0) <= team.subtree_quota.get(fr, 0) for fr in request.contested):
        while (name := _pick(snapshot, request, queues, include_preemptor=False)) is not None:
            if take(queues[name].pop(0), PreemptionReason.COHORT_RECLAMATION):
                return True
        return False

    strategies = [_strategy(s) for s in snapshot.config.fair_sharing.preemption_strategies]
    refused: list[Workload] = []
    while (name := _pick(snapshot, request, queues, include_preemptor=True)) is not None:
        victims = queues[name]
        if name == team.name:
            if take(victims.pop(0), PreemptionReason.WITHIN_TEAM):
                return True
            continue
        mine, theirs = _sides(team, snapshot.team(name))
        # Judge this team's victims in order until one is accepted; the refused are out of this pass.
        while victims:
            victim = victims[0]
            new = _share_without(snapshot, theirs, victim)
            if strategies[0](_share(snapshot, mine), _share(snapshot, theirs), new):
                if take(victims.pop(0), PreemptionReason.COHORT_FAIR_SHARING):
                    return True
                break
            refused.append(victims.pop(0))
    if len(strategies) < 2:
        return False

    # The second strategy: each team's refused victims again, at most one per team.
    again: dict[str, list[Workload]] = {}
    for victim in refused:
        again.setdefault(victim.team, []).append(victim)
    while (name := _pick(snapshot, request, again, include_preemptor=False)) is not None:
        victim = again.pop(name)[0]
        mine, theirs = _sides(team, snapshot.team(name))
        new = _share_without(snapshot, theirs, victim)
        if strategies[1](_share(snapshot, mine), _share(snapshot, theirs), new) and take(
            victim, PreemptionReason.COHORT_FAIR_SHARING
        ):
            return True
    return False
