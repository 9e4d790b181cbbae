"""Choosing victims: the smallest set of running workloads whose eviction lets a preemptor fit.

Two searches share one shape — remove candidates greedily until the preemptor fits, then add back every victim
whose return still lets it fit (so the result is minimal):

* classical (semantics.md "Choosing victims"): candidates from the own team (`withinTeam`) and from borrowing teams
  in the cohort tree (`reclaimWithinCohort`, `borrowWithinCohort`), with hierarchical advantage;
* fair sharing (semantics.md "Fair sharing"): candidates taken from the team with the highest dominant resource
  share, tested against the configured strategies.

Everything here works on a Snapshot and leaves it exactly as it found it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from fractions import Fraction
from functools import partial

from admission.snapshot import Snapshot
from admission.workload import FlavorResource, PreemptionReason, Workload
from quota.config import (
    BorrowPolicy,
    PreemptionStrategy,
    ReclaimPolicy,
    WithinTeamPolicy,
)
from quota.tree import DominantShare, Node


@dataclass(frozen=True, slots=True)
class Target:
    workload: Workload
    reason: PreemptionReason


@dataclass(frozen=True, slots=True)
class PreemptionRequest:
    """A preemptor, where it wants to go, and for which flavor/resources preemption is needed."""

    preemptor: Workload
    team: Node
    usage: Mapping[FlavorResource, int]
    contested: frozenset[FlavorResource]


class Variant(IntEnum):
    NEVER = 0
    WITHIN_TEAM = 1
    HIERARCHICAL = 2
    RECLAIM_WITHOUT_BORROWING = 3
    RECLAIM_WHILE_BORROWING = 4

    def reason(self) -> PreemptionReason:
        if self is Variant.WITHIN_TEAM:
            return PreemptionReason.WITHIN_TEAM
        if self is Variant.RECLAIM_WHILE_BORROWING:
            return PreemptionReason.COHORT_RECLAIM_WHILE_BORROWING
        return PreemptionReason.COHORT_RECLAMATION


def find_targets(snapshot: Snapshot, request: PreemptionRequest) -> list[Target]:
    if snapshot.fair_sharing:
        return _fair_targets(snapshot, request)
    return _classical_targets(snapshot, request)


# -- shared pieces ----------------------------------------------------------------------------------------------


def candidate_sort_key(workload: Workload) -> tuple[bool, int, int, str]:
    """Already-evicting first, then lower priority, then most recently admitted, then name."""
    admitted_at = workload.admission.admitted_at if workload.admission is not None else 0
    return (not workload.evicting, workload.priority, -admitted_at, workload.name)


def _uses_contested(snapshot: Snapshot, workload: Workload, contested: frozenset[FlavorResource]) -> bool:
    return any(fr in contested for fr in snapshot.usage_of(workload))


def _allowed_by_policy(policy: WithinTeamPolicy | ReclaimPolicy, preemptor: Workload, candidate: Workload) -> bool:
    if policy in (WithinTeamPolicy.NEVER, ReclaimPolicy.NEVER):
        return False
    if policy in (WithinTeamPolicy.LOWER_PRIORITY, ReclaimPolicy.LOWER_PRIORITY):
        return candidate.priority < preemptor.priority
    if policy == WithinTeamPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
        return candidate.priority < preemptor.priority or (
            candidate.priority == preemptor.priority and preemptor.created_at < candidate.created_at
        )
    return True  # ReclaimPolicy.ANY


def _fits(snapshot: Snapshot, request: PreemptionRequest, allow_borrowing: bool) -> bool:
    tree = snapshot.tree
    for fr, value in request.usage.items():
        if not allow_borrowing and request.team.borrowing_with(fr, value):
            return False
        if value > tree.available(request.team, fr):
            return False
    return True


def _fill_back(snapshot: Snapshot, targets: list[Target], fits: Callable[[], bool]) -> list[Target]:
    """Return victims, newest first, whose comeback still lets the preemptor fit (they were removed already)."""
    kept = list(targets)
    for index in range(len(kept) - 2, -1, -1):
        victim = kept[index].workload
        snapshot.add_workload(victim)
        if fits():
            del kept[index]
        else:
            snapshot.remove_workload(victim)
    return kept


def _restore(snapshot: Snapshot, targets: Iterable[Target]) -> None:
    for target in targets:
        if not snapshot.contains(target.workload):
            snapshot.add_workload(target.workload)


# -- classical --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Candidate:
    workload: Workload
    variant: Variant
    lca: Node | None


def _classify(snapshot: Snapshot, request: PreemptionRequest, candidate: Workload, advantage: bool) -> Variant:
    team = request.team.team
    same_team = candidate.team == request.team.name
    policy = team.preemption.within_team if same_team else team.preemption.reclaim_within_cohort
    # Cheapest tests first: this runs for every running workload of every team a search looks at.
    if not candidate.preemptible or not _allowed_by_policy(policy, request.preemptor, candidate):
        return Variant.NEVER
    if not _uses_contested(snapshot, candidate, request.contested):
        return Variant.NEVER
    if same_team:
        return Variant.WITHIN_TEAM
    if advantage:
        return Variant.HIERARCHICAL
    borrow = team.preemption.borrow_within_cohort
    if borrow.policy == BorrowPolicy.NEVER:
        return Variant.RECLAIM_WITHOUT_BORROWING
    if candidate.priority >= request.preemptor.priority or (
        borrow.max_priority_threshold is not None and candidate.priority > borrow.max_priority_threshold
    ):
        return Variant.RECLAIM_WITHOUT_BORROWING
    return Variant.RECLAIM_WHILE_BORROWING


def _team_candidates(
    snapshot: Snapshot, request: PreemptionRequest, team: Node, lca: Node | None, advantage: bool
) -> list[_Candidate]:
    found = []
    spec = request.team.team.preemption
    policy = spec.within_team if team is request.team else spec.reclaim_within_cohort
    workloads = snapshot.workloads[team.name].values()
    if policy in (WithinTeamPolicy.LOWER_PRIORITY, ReclaimPolicy.LOWER_PRIORITY):
        # Most running work is usually not below the preemptor; skip it before the full classification.
        floor = request.preemptor.priority
        workloads = [w for w in workloads if w.priority < floor]  # type: ignore[assignment]
    for workload in workloads:
        variant = _classify(snapshot, request, workload, advantage)
        if variant is not Variant.NEVER:
            found.append(_Candidate(workload, variant, lca))
    return found


def _collect_in_subtree(
    snapshot: Snapshot,
    request: PreemptionRequest,
    cohort: Node,
    subtree_root: Node,
    skip: Node | None,
    advantage: bool,
    into: list[_Candidate],
) -> None:
    for child in cohort.child_cohorts:
        if child is skip or child.within_nominal(request.contested):
            continue
        _collect_in_subtree(snapshot, request, child, subtree_root, skip, advantage, into)
    for child in cohort.child_teams:
        if child is request.team or child.within_nominal(request.contested):
            continue
        into.extend(_team_candidates(snapshot, request, child, subtree_root, advantage))


def _cohort_candidates(snapshot: Snapshot, request: PreemptionRequest) -> tuple[list[_Candidate], list[_Candidate]]:
    """(hierarchical candidates, priority candidates) from other teams, walking up from the preemptor."""
    hierarchical: list[_Candidate] = []
    priority: list[_Candidate] = []
    team = request.team
    if team.parent is None or team.team.preemption.reclaim_within_cohort == ReclaimPolicy.NEVER:
        return hierarchical, priority
    tree = snapshot.tree
    advantage, remaining = tree.quantities_fit_in_quota(team, request.usage)
    previous: Node | None = None
    for subtree_root in team.ancestors():
        into = hierarchical if advantage else priority
        _collect_in_subtree(snapshot, request, subtree_root, subtree_root, previous, advantage, into)
        fits, remaining = tree.quantities_fit_in_quota(subtree_root, remaining)
        advantage = advantage or fits
        previous = subtree_root
    return hierarchical, priority


def _ordered(candidates: list[_Candidate]) -> list[_Candidate]:
    return sorted(candidates, key=lambda c: candidate_sort_key(c.workload))


def _still_valid(snapshot: Snapshot, request: PreemptionRequest, candidate: _Candidate, borrowing: bool) -> bool:
    """Other-team victims stay valid only while their team and cohorts up to the LCA are above nominal."""
    if candidate.workload.team == request.team.name:
        return True
    if borrowing and candidate.variant is Variant.RECLAIM_WITHOUT_BORROWING:
        return False
    node = snapshot.team(candidate.workload.team)
    if node.within_nominal(request.contested):
        return False
    for ancestor in node.ancestors():
        if ancestor is candidate.lca:
            break
        if ancestor.within_nominal(request.contested):
            return False
    return True


def _under_nominal(request: PreemptionRequest) -> bool:
    team = request.team
    return all(team.usage.get(fr, 0) < team.nominal(fr) for fr in request.contested)


def _classical_targets(snapshot: Snapshot, request: PreemptionRequest) -> list[Target]:
    team_spec = request.team.team
    same: list[_Candidate] = []
    if team_spec.preemption.within_team != WithinTeamPolicy.NEVER:
        same = _team_candidates(snapshot, request, request.team, None, False)
    hierarchical, priority = _cohort_candidates(snapshot, request)
    groups = [_ordered(hierarchical), _ordered(priority), _ordered(same)]
    candidates = [c for g in groups for c in g if c.workload.evicting] + [
        c for g in groups for c in g if not c.workload.evicting
    ]
    if not candidates:
        return []
    borrow_forbidden = team_spec.preemption.borrow_within_cohort.policy == BorrowPolicy.NEVER
    if (not hierarchical and not priority) or (borrow_forbidden and not _under_nominal(request)):
        attempts = [True]
    elif borrow_forbidden and not hierarchical:
        attempts = [False, True]
    else:
        attempts = [True, False]

    for borrowing in attempts:
        targets: list[Target] = []
        for candidate in candidates:
            if not _still_valid(snapshot, request, candidate, borrowing):
                continue
            snapshot.remove_workload(candidate.workload)
            targets.append(Target(candidate.workload, candidate.variant.reason()))
            if _fits(snapshot, request, borrowing):
                kept = _fill_back(snapshot, targets, partial(_fits, snapshot, request, borrowing))
                _restore(snapshot, kept)
                return kept
        _restore(snapshot, targets)
    return []


# -- fair sharing -----------------------------------------------------------------------------------------------


def _fair_candidates(snapshot: Snapshot, request: PreemptionRequest) -> list[Workload]:
    preemptor, team = request.preemptor, request.team
    spec = team.team.preemption
    found: list[Workload] = []
    if spec.within_team != WithinTeamPolicy.NEVER:
        for workload in snapshot.workloads[team.name].values():
            if (
                workload.preemptible
                and _allowed_by_policy(spec.within_team, preemptor, workload)
                and _uses_contested(snapshot, workload, request.contested)
            ):
                found.append(workload)
    if team.parent is not None and spec.reclaim_within_cohort != ReclaimPolicy.NEVER:
        for other in team.root().subtree_teams():
            if other is team or not any(other.borrowing(fr) for fr in request.contested):
                continue
            for workload in snapshot.workloads[other.name].values():
                if (
                    workload.preemptible
                    and _allowed_by_policy(spec.reclaim_within_cohort, preemptor, workload)
                    and _uses_contested(snapshot, workload, request.contested)
                ):
                    found.append(workload)
    return sorted(found, key=lambda w: (w.team != team.name, *candidate_sort_key(w)))


def _almost_lcas(preemptor_team: Node, target_team: Node) -> tuple[Node, Node]:
    """The children of the lowest common ancestor on the way to each team (the teams themselves when siblings)."""
    path = [preemptor_team, *preemptor_team.ancestors()]
    on_path = {id(node) for node in path}
    target_side = target_team
    for ancestor in target_team.ancestors():
        if id(ancestor) in on_path:
            lca = ancestor
            break
        target_side = ancestor
    else:
        return preemptor_team, target_team
    preemptor_side = preemptor_team
    for node in path[1:]:
        if node is lca:
            break
        preemptor_side = node
    return preemptor_side, target_side


class _FairSearch:
    def __init__(self, snapshot: Snapshot, request: PreemptionRequest, candidates: list[Workload]) -> None:
        self.snapshot = snapshot
        self.request = request
        self.order = {w.name: index for index, w in enumerate(candidates)}
        self.queues: dict[str, list[Workload]] = {}
        for workload in candidates:
            self.queues.setdefault(workload.team, []).append(workload)
        self.targets: list[Target] = []
        self._shares_without: dict[tuple[str, str, tuple[tuple[FlavorResource, int], ...]], DominantShare] = {}
        self._shares: dict[str, DominantShare] = {}

    def share(self, node: Node) -> DominantShare:
        # Shares only move when a victim is taken; between takes every pick asks for the same ones.
        cached = self._shares.get(node.name)
        if cached is None:
            cached = self.snapshot.tree.dominant_resource_share(node, factor=self.snapshot.factor(node.name))
            self._shares[node.name] = cached
        return cached

    def fits(self) -> bool:
        # The preemptor's usage is charged while the search runs (so shares include it); take it out to test.
        with_removed = self.request.usage
        tree = self.snapshot.tree
        tree.remove_all(self.request.team, with_removed)
        try:
            return _fits(self.snapshot, self.request, True)
        finally:
            tree.add_all(self.request.team, with_removed)

    def take(self, workload: Workload, reason: PreemptionReason) -> bool:
        self._shares_without.clear()
        self._shares.clear()
        self.queues[workload.team].remove(workload)
        self.snapshot.remove_workload(workload)
        self.targets.append(Target(workload, reason))
        return self.fits()

    def pick(self, teams: Iterable[str], include_preemptor: bool) -> str | None:
        """The team with the highest share; the preemptor's own team loses ties; then candidate order."""
        best: tuple[tuple[int, Fraction], int, int] | None = None
        chosen: str | None = None
        for name in teams:
            queue = self.queues.get(name)
            if not queue:
                continue
            node = self.snapshot.team(name)
            own = name == self.request.team.name
            if own and not include_preemptor:
                continue
            share = self.share(node)
            if not own and share.sort_key == (0, Fraction(0)):
                continue  # not borrowing (or borrowing nothing anyone lends): nothing to reclaim here
            key = (share.sort_key, 0 if own else 1, -self.order[queue[0].name])
            if best is None or key > best:
                best, chosen = key, name
        return chosen

    def share_without(self, node: Node, victim: Workload) -> DominantShare:
        """`node`'s share if `victim` were gone (usage leaves through the victim's team, as lending limits say)."""
        usage = self.snapshot.usage_of(victim)
        # Until the next victim is taken nothing changes, and look-alike victims (the many one-GPU jobs of a
        # team) give the same answer: compute it once.
        key = (node.name, victim.team, tuple(sorted(usage.items())))
        cached = self._shares_without.get(key)
        if cached is not None:
            return cached
        share = self._share_without(node, victim, usage)
        self._shares_without[key] = share
        return share

    def _share_without(self, node: Node, victim: Workload, usage: dict[FlavorResource, int]) -> DominantShare:
        victim_team = self.snapshot.team(victim.team)
        self.snapshot.tree.remove_all(victim_team, usage)
        try:
            return self.snapshot.tree.dominant_resource_share(node, factor=self.snapshot.factor(node.name))
        finally:
            self.snapshot.tree.add_all(victim_team, usage)

    def shares_against(self, target_team: str) -> tuple[DominantShare, DominantShare, Node]:
        mine, theirs = _almost_lcas(self.request.team, self.snapshot.team(target_team))
        return self.share(mine), self.share(theirs), theirs


def _strategy(kind: PreemptionStrategy) -> Callable[[DominantShare, DominantShare, DominantShare], bool]:
    if kind is PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return lambda mine, _old, new: mine.sort_key <= new.sort_key
    return lambda mine, old, _new: mine.sort_key < old.sort_key


def _fair_targets(snapshot: Snapshot, request: PreemptionRequest) -> list[Target]:
    candidates = _fair_candidates(snapshot, request)
    if not candidates:
        return []
    search = _FairSearch(snapshot, request, candidates)
    tree = snapshot.tree
    tree.add_all(request.team, request.usage)
    try:
        fits = _fair_search(search)
    finally:
        tree.remove_all(request.team, request.usage)
    if not fits:
        _restore(snapshot, search.targets)
        return []
    kept = _fill_back(snapshot, search.targets, lambda: _fits(snapshot, request, True))
    _restore(snapshot, kept)
    return kept


def _fair_search(search: _FairSearch) -> bool:
    request, snapshot = search.request, search.snapshot
    team = request.team
    if all(team.usage.get(fr, 0) <= team.subtree_quota.get(fr, 0) for fr in request.contested):
        # Within nominal even with the incoming workload: plain reclamation from the most unfair borrower.
        while (name := search.pick(list(search.queues), include_preemptor=False)) is not None:
            if search.take(search.queues[name][0], PreemptionReason.COHORT_RECLAMATION):
                return True
        return False

    strategies = [_strategy(s) for s in snapshot.config.fair_sharing.preemption_strategies]
    retry: list[Workload] = []
    while (name := search.pick(list(search.queues), include_preemptor=True)) is not None:
        if name == team.name:
            if search.take(search.queues[name][0], PreemptionReason.WITHIN_TEAM):
                return True
            continue
        mine, old, target_node = search.shares_against(name)
        while search.queues[name]:
            victim = search.queues[name].pop(0)
            if strategies[0](mine, old, search.share_without(target_node, victim)):
                search.queues[name].insert(0, victim)
                if search.take(victim, PreemptionReason.COHORT_FAIR_SHARING):
                    return True
                break
            retry.append(victim)
    if len(strategies) < 2:
        return False

    second = strategies[1]
    search.queues = {}
    for victim in retry:
        search.queues.setdefault(victim.team, []).append(victim)
    while (name := search.pick(list(search.queues), include_preemptor=False)) is not None:
        mine, old, target_node = search.shares_against(name)
        victim = search.queues[name][0]
        if second(mine, old, search.share_without(target_node, victim)) and search.take(
            victim, PreemptionReason.COHORT_FAIR_SHARING
        ):
            return True
        search.queues[name] = []  # at most one victim per team in the second pass
    return False
