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

import heapq
from bisect import insort
from collections import ChainMap
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from fractions import Fraction
from functools import partial
from itertools import chain, repeat

from admission.running import CandidateKey, candidate_sort_key
from admission.shared_reads import Replay, SegmentKey, SharedReads, StreamKey
from admission.snapshot import Snapshot
from admission.workload import Workload
from quota.config import (
    BorrowPolicy,
    PreemptionStrategy,
    ReclaimPolicy,
    WithinTeamPolicy,
)
from quota.preemption import PreemptionReason
from quota.tree import DominantShare, FlavorResource, Node, QuotaTree, ShareKey


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
    nodes_fit: Callable[[], bool] | None = None
    """Topology placement: whether the preemptor's pods also fit on the nodes as the search has left them."""
    keep: Callable[[Workload], bool] | None = None
    """Topology placement: only candidates this accepts (those on the domain being freed, or holding contested
    quota); None: every candidate."""


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


def search_covers(tree: QuotaTree, team: Node, usage: Mapping[FlavorResource, int], contested: FlavorResource) -> bool:
    """Whether a search for `usage` must find what the search for its `contested` part alone finds.

    It must when every other resource fits without anyone borrowing it: available to the team now (victims only
    add room), and once charged, within the subtree quota of the team and of every cohort its charge reaches.
    Then no test of either search (fits, borrowing, hierarchical advantage, shares) reads those resources
    differently, so the flavor assigner's oracle answer (a search for one resource) serves the nomination."""
    if contested not in usage:
        return False
    for fr, value in usage.items():
        if fr == contested:
            continue
        if value > tree.available(team, fr):
            return False
        node: Node | None = team
        while node is not None and value > 0:
            if node.usage.get(fr, 0) + value > node.subtree_quota.get(fr, 0):
                return False
            value -= node.local_available(fr)  # what a lending limit keeps below does not reach the parent
            node = node.parent
    return True


# -- shared pieces ----------------------------------------------------------------------------------------------


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
    return request.nodes_fit is None or request.nodes_fit()


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


@dataclass(frozen=True, slots=True)
class _Source:
    """A team whose running work may give victims, and where it stands relative to the preemptor."""

    team: Node
    lca: Node | None
    advantage: bool


def _classify(snapshot: Snapshot, request: PreemptionRequest, candidate: Workload, advantage: bool) -> Variant:
    team = request.team.team
    same_team = candidate.team == request.team.name
    policy = team.preemption.within_team if same_team else team.preemption.reclaim_within_cohort
    # Cheapest tests first: this runs for every running workload a search reaches.
    if not candidate.preemptible or not _allowed_by_policy(policy, request.preemptor, candidate):
        return Variant.NEVER
    if not _uses_contested(snapshot, candidate, request.contested):
        return Variant.NEVER
    variant = _variant(request, candidate, same_team, advantage)
    protection = snapshot.protection(candidate)
    if protection is not None and not (
        protection.except_reclaim and variant.reason() is PreemptionReason.COHORT_RECLAMATION
    ):
        snapshot.skip_protected(candidate)
        return Variant.NEVER
    return variant


def _variant(request: PreemptionRequest, candidate: Workload, same_team: bool, advantage: bool) -> Variant:
    if same_team:
        return Variant.WITHIN_TEAM
    if advantage:
        return Variant.HIERARCHICAL
    borrow = request.team.team.preemption.borrow_within_cohort
    if borrow.policy == BorrowPolicy.NEVER:
        return Variant.RECLAIM_WITHOUT_BORROWING
    if candidate.priority >= request.preemptor.priority or (
        borrow.max_priority_threshold is not None and candidate.priority > borrow.max_priority_threshold
    ):
        return Variant.RECLAIM_WITHOUT_BORROWING
    return Variant.RECLAIM_WHILE_BORROWING


def _priority_ceiling(policy: WithinTeamPolicy | ReclaimPolicy, preemptor: Workload) -> int | None:
    """The priority every candidate under `policy` is below (None: no such bound), to skip the rest unread."""
    if policy in (WithinTeamPolicy.LOWER_PRIORITY, ReclaimPolicy.LOWER_PRIORITY):
        return preemptor.priority
    if policy == WithinTeamPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
        return preemptor.priority + 1
    return None


def _ceiling_for(request: PreemptionRequest, own_team: bool, ceiling: int | None) -> int | None:
    """The priority a search's candidates in the preemptor's own team (or in other teams) must be below, if any:
    the lower of `ceiling` and what the policy for that team allows."""
    spec = request.team.team.preemption
    by_policy = _priority_ceiling(spec.within_team if own_team else spec.reclaim_within_cohort, request.preemptor)
    if ceiling is None or (by_policy is not None and by_policy < ceiling):
        return by_policy
    return ceiling


OrderKey = tuple[bool, int, int, int, str]
"""(not evicting, priority, −admitted at, −last checkpoint, name): the full candidate order, smaller first."""


def order_key(snapshot: Snapshot, workload: Workload) -> OrderKey:
    """The spec's candidate order, and between candidates it leaves equal but for their names (same evicting
    state, priority and admission time), the most recent checkpoint first: the least work lost. A workload that
    never checkpointed has saved nothing since its admission. Without checkpoint knowledge: the spec's order."""
    evicting_last, priority, admitted, name = candidate_sort_key(workload)
    saved = -snapshot.saved_at(workload) if snapshot.checkpoints is not None else 0
    return (evicting_last, priority, admitted, saved, name)


def _checkpoint_order(snapshot: Snapshot, team: str, keys: Iterable[CandidateKey]) -> Iterable[CandidateKey]:
    """`keys` (in the spec's order) with every run that only names separate put in `order_key`'s order, lazily."""
    if snapshot.checkpoints is None or (isinstance(keys, list) and len(keys) < 2):
        return keys
    return _runs_by_checkpoint(snapshot, snapshot.workloads[team], iter(keys))


def _runs_by_checkpoint(
    snapshot: Snapshot, running: Mapping[str, Workload], keys: Iterator[CandidateKey]
) -> Iterator[CandidateKey]:
    first = next(keys, None)
    while first is not None:
        run = [first]
        first = None
        for key in keys:  # the run goes on while evicting state, priority and admission time are the first's
            if key[2] == run[0][2] and key[1] == run[0][1] and key[0] == run[0][0]:
                run.append(key)
            else:
                first = key
                break
        if len(run) == 1:
            yield run[0]
        else:
            yield from sorted(run, key=lambda k: (-snapshot.saved_at(running[k[3]]), k[3]))


def _candidates(
    snapshot: Snapshot,
    request: PreemptionRequest,
    sources: list[_Source],
    evicting: bool,
    ceiling: int | None = None,
) -> Iterator[_Candidate]:
    """The candidates of `sources` that are (or are not) evicting, in candidate order, classified as reached.

    `ceiling`: only candidates below this priority.
    """
    # Each team's keys are walked lazily: a search mostly stops after a few victims, and a saturated cohort has
    # hundreds of borrowing teams whose orders it would otherwise copy.
    if not sources:
        return
    # A group of sources is the preemptor's own team alone, or other teams only.
    below = _ceiling_for(request, sources[0].team is request.team, ceiling)
    tagged = []
    for index, source in enumerate(sources):
        keys = snapshot.workloads[source.team.name].walk_candidates(evicting=evicting, below_priority=below)
        if keys is not None:
            tagged.append(zip(_checkpoint_order(snapshot, source.team.name, keys), repeat(index)))
    if len(tagged) < 2:
        merged: Iterable[tuple[CandidateKey, int]] = tagged[0] if tagged else ()
    elif snapshot.checkpoints is None:
        merged = heapq.merge(*tagged)
    else:

        def full(item: tuple[CandidateKey, int]) -> OrderKey:
            return order_key(snapshot, snapshot.workloads[sources[item[1]].team.name][item[0][3]])

        merged = heapq.merge(*tagged, key=full)
    for key, index in merged:
        source = sources[index]
        workload = snapshot.workloads[source.team.name][key[3]]
        if request.keep is not None and not request.keep(workload):
            continue
        variant = _classify(snapshot, request, workload, source.advantage)
        if variant is not Variant.NEVER:
            yield _Candidate(workload, variant, source.lca)


def _teams_over(cohort: Node, contested: frozenset[FlavorResource], skip: Node | None) -> Iterator[Node]:
    """The teams below `cohort`, but those under `skip`, that may hold victims: only children above their quota of a
    contested resource can (child cohorts come first, each walked the same way)."""
    for child in cohort.children_over(contested):
        if child is skip:
            continue
        if child.is_team:
            yield child
        else:
            yield from _teams_over(child, contested, skip)


@dataclass(frozen=True, slots=True)
class _Segment:
    """One step up from the preemptor: the teams below `cohort` but outside `skip` (the subtree it came from), all
    giving candidates with or without hierarchical advantage."""

    cohort: Node
    skip: Node | None
    advantage: bool

    def key(self, contested: frozenset[FlavorResource]) -> SegmentKey:
        return (id(self.cohort), id(self.skip) if self.skip is not None else 0, contested)


def _segment_sources(request: PreemptionRequest, segments: list[_Segment]) -> list[_Source]:
    return [
        _Source(team, segment.cohort, segment.advantage)
        for segment in segments
        for team in _teams_over(segment.cohort, request.contested, segment.skip)
        if team is not request.team
    ]


def _cohort_segments(snapshot: Snapshot, request: PreemptionRequest) -> tuple[list[_Segment], list[_Segment]]:
    """(segments giving hierarchical candidates, segments giving priority candidates), walking up from the
    preemptor."""
    hierarchical: list[_Segment] = []
    priority: list[_Segment] = []
    team = request.team
    if team.parent is None or team.team.preemption.reclaim_within_cohort == ReclaimPolicy.NEVER:
        return hierarchical, priority
    tree = snapshot.tree
    advantage, remaining = tree.quantities_fit_in_quota(team, request.usage)
    previous: Node | None = None
    for subtree_root in team.ancestors():
        (hierarchical if advantage else priority).append(_Segment(subtree_root, previous, advantage))
        fits, remaining = tree.quantities_fit_in_quota(subtree_root, remaining)
        advantage = advantage or fits
        previous = subtree_root
    return hierarchical, priority


_Shared = list[tuple[_Segment, list[Node]]]
"""Segments with their source teams as the nominations' shared reads keep them (the preemptor's own among them)."""


def _shared_segments(shared: SharedReads, request: PreemptionRequest, segments: list[_Segment]) -> _Shared:
    out = []
    for segment in segments:
        key = segment.key(request.contested)
        teams = shared.teams.get(key)
        if teams is None:
            teams = shared.teams[key] = list(_teams_over(segment.cohort, request.contested, segment.skip))
        out.append((segment, teams))
    return out


def _merged_keys(
    snapshot: Snapshot, teams: list[Node], evicting: bool, below: int | None
) -> Iterator[tuple[CandidateKey, Node]]:
    """Every candidate key of `teams` (evicting or not, below a priority), merged in candidate order, as the running
    work stands with every workload a search has taken out put back: the readers skip what they took out."""
    out = snapshot.taken_out
    parts = []
    for team in teams:
        running = snapshot.workloads[team.name]
        keys = running.candidate_order(evicting=evicting, below_priority=below)
        for workload in out.values():
            taken = workload.team == team.name and workload.evicting == evicting
            if taken and (below is None or workload.priority < below):
                insort(keys, candidate_sort_key(workload))
        if keys:
            ordered: Iterable[CandidateKey] = keys
            if snapshot.checkpoints is not None and len(keys) > 1:
                ordered = _runs_by_checkpoint(snapshot, ChainMap(running, out), iter(keys))
            parts.append(zip(ordered, repeat(team)))
    if len(parts) < 2:
        yield from parts[0] if parts else ()
    elif snapshot.checkpoints is None:
        yield from heapq.merge(*parts)
    else:
        yield from heapq.merge(*parts, key=partial(_full_key, snapshot))


def _full_key(snapshot: Snapshot, item: tuple[CandidateKey, Node]) -> OrderKey:
    key, team = item
    workload = snapshot.workloads[team.name].get(key[3]) or snapshot.taken_out[key[3]]
    return order_key(snapshot, workload)


def _shared_candidates(
    snapshot: Snapshot,
    request: PreemptionRequest,
    shared: SharedReads,
    segments: _Shared,
    evicting: bool,
    ceiling: int | None = None,
) -> Iterator[_Candidate]:
    """`_candidates` for cohort segments, read from the merged orders the nominations share."""
    below = _ceiling_for(request, False, ceiling)
    # Each stream's items paired with their segment by zip rather than a generator of its own: every candidate of
    # a search passes through here, and each generator stage is a Python frame per candidate.
    streams: list[Iterable[tuple[tuple[CandidateKey, Node], _Segment]]] = []
    for segment, teams in segments:
        key: StreamKey = (*segment.key(request.contested), evicting, below)
        stream = shared.streams.get(key)
        if stream is None:
            stream = shared.streams[key] = Replay(_merged_keys(snapshot, teams, evicting, below))
        streams.append(zip(stream, repeat(segment)))
    if len(streams) < 2:
        merged: Iterable[tuple[tuple[CandidateKey, Node], _Segment]] = streams[0] if streams else ()
    elif snapshot.checkpoints is None:
        merged = heapq.merge(*streams, key=lambda item: item[0][0])
    else:
        merged = heapq.merge(*streams, key=lambda item: _full_key(snapshot, item[0]))
    own = request.team
    for (key_, team), segment in merged:
        if team is own:
            continue
        workload = snapshot.workloads[team.name].get(key_[3])
        if workload is None:  # this search took it out
            continue
        if request.keep is not None and not request.keep(workload):
            continue
        variant = _classify(snapshot, request, workload, segment.advantage)
        if variant is not Variant.NEVER:
            yield _Candidate(workload, variant, segment.cohort)


def _others(teams: list[Node], request: PreemptionRequest) -> bool:
    """Whether `teams` holds a team other than the preemptor's."""
    own = request.team
    return any(team is not own for team in teams)


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
    same = [_Source(request.team, None, False)] if team_spec.preemption.within_team != WithinTeamPolicy.NEVER else []
    hierarchical_segments, priority_segments = _cohort_segments(snapshot, request)
    # The nominations' shared reads hold for a search that starts with nothing taken out (the state they were read in).
    shared = snapshot.shared if not snapshot.taken_out else None
    if shared is None:
        sources = (_segment_sources(request, hierarchical_segments), _segment_sources(request, priority_segments))

        def cohort(group: int, evicting: bool, ceiling: int | None = None) -> Replay[_Candidate]:
            if not sources[group]:
                return Replay(iter(()))
            return Replay(_candidates(snapshot, request, sources[group], evicting, ceiling))

    else:
        # Segments whose teams over quota are the preemptor's own alone give nobody: left out, so that a group of
        # only those reads nothing (as the unshared path does for a group without sources).
        read = tuple(
            [
                (segment, teams)
                for segment, teams in _shared_segments(shared, request, segments)
                if _others(teams, request)
            ]
            for segments in (hierarchical_segments, priority_segments)
        )

        def cohort(group: int, evicting: bool, ceiling: int | None = None) -> Replay[_Candidate]:
            assert shared is not None
            if not read[group]:
                return Replay(iter(()))
            return Replay(_shared_candidates(snapshot, request, shared, read[group], evicting, ceiling))

    # Already-evicting candidates of every group first, then the others, each group in candidate order.
    evicting = [cohort(0, True), cohort(1, True), Replay(_candidates(snapshot, request, same, True))]
    others = [cohort(0, False), cohort(1, False), Replay(_candidates(snapshot, request, same, False))]
    hierarchical = bool(evicting[0]) or bool(others[0])
    priority = bool(evicting[1]) or bool(others[1])
    if not (hierarchical or priority or evicting[2] or others[2]):
        return []
    borrow_forbidden = team_spec.preemption.borrow_within_cohort.policy == BorrowPolicy.NEVER
    if (not hierarchical and not priority) or (borrow_forbidden and not _under_nominal(request)):
        attempts = [True]
    elif borrow_forbidden and not hierarchical:
        attempts = [False, True]
    else:
        attempts = [True, False]

    # While the preemptor borrows, a non-hierarchical victim of another team must be one it may take while
    # borrowing (RECLAIM_WHILE_BORROWING), which only its priority decides; skip the others of that group unread.
    borrow = team_spec.preemption.borrow_within_cohort
    if borrow_forbidden:
        while_borrowing: list[Iterable[_Candidate]] = [(), ()]
    else:
        ceiling = request.preemptor.priority
        if borrow.max_priority_threshold is not None:
            ceiling = min(ceiling, borrow.max_priority_threshold + 1)
        while_borrowing = [cohort(1, e, ceiling) for e in (True, False)]
    in_order: dict[bool, list[Iterable[_Candidate]]] = {
        True: [evicting[0], while_borrowing[0], evicting[2], others[0], while_borrowing[1], others[2]],
        False: [*evicting, *others],
    }

    for borrowing in attempts:
        targets: list[Target] = []
        for candidate in chain(*in_order[borrowing]):
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


class _VictimQueue:
    """One team's eligible victims in candidate order, each checked only when the search reaches it."""

    def __init__(self, victims: Iterator[Workload]) -> None:
        self._victims = victims
        self._front: list[Workload] = []
        """Victims already read (or put back), the head last."""
        self.version = 0
        """Counts the changes of head (pops and drains), so that a pick's kept entry for the team can tell it is old."""

    def head(self) -> Workload | None:
        if not self._front:
            victim = next(self._victims, None)
            if victim is None:
                return None
            self._front.append(victim)
        return self._front[-1]

    def pop(self) -> Workload:
        victim = self.head()
        assert victim is not None, "pop from a team with no victims left"
        self.version += 1
        return self._front.pop()

    def drain(self, read: bool) -> None:
        """Drop every victim left. `read`: read them all the same, as popping them one by one would (reading a
        candidate that a minimum runtime protects records when the protection ends)."""
        self._front.clear()
        self.version += 1
        if read:
            for _ in self._victims:
                pass
        self._victims = iter(())


def _eligible(
    snapshot: Snapshot,
    request: PreemptionRequest,
    team: Node,
    policy: WithinTeamPolicy | ReclaimPolicy,
    reclaim: bool = False,
) -> Iterator[Workload]:
    """`reclaim`: victims taken from this team are CohortReclamation (minimum runtimes with exceptReclaim yield)."""
    if policy in (WithinTeamPolicy.NEVER, ReclaimPolicy.NEVER):
        return
    running = snapshot.workloads[team.name]
    ceiling = _priority_ceiling(policy, request.preemptor)
    keys = _checkpoint_order(snapshot, team.name, running.candidate_order(evicting=True, below_priority=ceiling))
    rest = _checkpoint_order(snapshot, team.name, running.candidate_order(evicting=False, below_priority=ceiling))
    # The priority cut applies LowerPriority and Any needs nothing: only the equal-priority rule looks at each.
    check_policy = policy == WithinTeamPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
    # When the team holds nothing but contested resources, every workload holding anything uses one of them.
    only_contested = all(fr in request.contested for fr in team.usage)
    for key in chain(keys, rest):
        workload = running[key[3]]
        if not workload.preemptible or (request.keep is not None and not request.keep(workload)):
            continue
        protection = snapshot.protection(workload)
        if protection is not None and not (reclaim and protection.except_reclaim):
            snapshot.skip_protected(workload)
            continue
        if check_policy and not _allowed_by_policy(policy, request.preemptor, workload):
            continue
        if only_contested:
            if snapshot.usage_of(workload):
                yield workload
        elif _uses_contested(snapshot, workload, request.contested):
            yield workload


def _fair_candidates(snapshot: Snapshot, request: PreemptionRequest) -> dict[str, _VictimQueue]:
    """Per team that may give victims (the preemptor's own first), its victims in candidate order."""
    team = request.team
    spec = team.team.preemption
    queues: dict[str, _VictimQueue] = {}
    if spec.within_team != WithinTeamPolicy.NEVER:
        queues[team.name] = _VictimQueue(_eligible(snapshot, request, team, spec.within_team))
    if team.parent is not None and spec.reclaim_within_cohort != ReclaimPolicy.NEVER:
        reclaim = _reclaims(request)
        for other in _borrowing_teams(team.root(), request.contested):
            if other is team:
                continue
            victims = _eligible(snapshot, request, other, spec.reclaim_within_cohort, reclaim)
            queues[other.name] = _VictimQueue(victims)
    return {name: queue for name, queue in queues.items() if queue.head() is not None}


def _borrowing_teams(cohort: Node, contested: frozenset[FlavorResource]) -> Iterator[Node]:
    """The teams under `cohort` borrowing a contested resource, in `subtree_teams` order: read from each cohort's
    index of children above quota, so a search follows the borrowers rather than the size of the tree."""
    for child in cohort.child_cohorts:
        yield from _borrowing_teams(child, contested)
    for child in cohort.children_over(contested):
        if child.is_team:
            yield child


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


_UsageKey = tuple[tuple[FlavorResource, int], ...]


def _gives_nothing(share: DominantShare) -> bool:
    """Whether a team's DRS is that of a team borrowing nothing anyone lends (a sort key of (0, 0, 0)). Told from the
    key's parts: comparing the key with (0, 0, Fraction(0)) costs a Fraction comparison, with its type checks, for
    every team of every pick."""
    kind, _, value = share.sort_key
    return kind == 0 and not value


_SCAN_AT_MOST = 8
"""Up to this many teams with victims, a pick scans them all (see `_FairSearch.pick`)."""

_PickEntry = tuple[tuple[int, int, Fraction], int, "OrderKey", str, _VictimQueue, int, int]
"""(−share key, −1 for another team / 0 for the preemptor's, next victim's candidate order, team, its queue, the
queue's version and the team's share version when pushed): the smallest is the pick."""


@dataclass(slots=True)
class _Picks:
    queues: dict[str, _VictimQueue]
    own: bool
    """Whether the preemptor's own team may be picked."""
    heap: list[_PickEntry] = field(default_factory=list)


class _FairSearch:
    def __init__(self, snapshot: Snapshot, request: PreemptionRequest, queues: dict[str, _VictimQueue]) -> None:
        self.snapshot = snapshot
        self.request = request
        self.queues = queues
        self.targets: list[Target] = []
        self._shares_without: dict[tuple[str, str, _UsageKey], DominantShare] = {}
        self._shares: dict[str, DominantShare] = {}
        self._picks: _Picks | None = None
        self._share_versions: dict[str, int] = {}
        """Per team, how many victims were taken from it: its share changes only then."""

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

    def head(self, team: str) -> Workload:
        victim = self.queues[team].head()
        assert victim is not None, "pick only chooses teams with a victim left"
        return victim

    def take(self, workload: Workload, reason: PreemptionReason) -> bool:
        self._shares_without.clear()
        self._shares.clear()
        self._share_versions[workload.team] = self._share_versions.get(workload.team, 0) + 1
        taken = self.queues[workload.team].pop()
        assert taken is workload, "victims are taken from the head of their team's queue"
        self.snapshot.remove_workload(workload)
        self.targets.append(Target(workload, reason))
        return self.fits()

    def pick(self, include_preemptor: bool) -> str | None:
        """The team of `queues` with the highest share; the preemptor's own team loses ties; then candidate order
        of their next victims. Others that borrow nothing anyone lends are never picked.

        The teams wait in a heap kept between picks: a take moves only the share of the team it takes from (a
        team's DRS is its own usage against what its parent lends), and pops and drains only that team's head, so
        after a pick only the team picked is looked at again. Scanning every team for every victim taken was most
        of a saturated cycle under fair sharing (heads × borrowers × victims). A few teams are scanned instead:
        the heap reads every team's next victim's candidate order up front, which a scan reads only for ties."""
        if len(self.queues) <= _SCAN_AT_MOST:
            return self._scan(include_preemptor)
        if self._picks is None or self._picks.queues is not self.queues or self._picks.own is not include_preemptor:
            self._picks = _Picks(self.queues, include_preemptor)
            for name in self.queues:
                self._push(name)
        heap = self._picks.heap
        while heap:
            _, _, _, name, queue, version, shares = heap[0]
            if self.queues.get(name) is queue and queue.version == version and self._share_versions[name] == shares:
                return name
            heapq.heappop(heap)
            if self.queues.get(name) is queue:
                self._push(name)
        return None

    def _scan(self, include_preemptor: bool) -> str | None:
        best: tuple[ShareKey, int] | None = None
        best_victim: Workload | None = None
        # The best victim's candidate-order key is read only once another team ties with it: it asks when each
        # victim last checkpointed, and most picks have no tie.
        best_head: OrderKey | None = None
        chosen: str | None = None
        preemptor = self.request.team.name
        for name, queue in self.queues.items():
            found = self._pickable(name, queue, include_preemptor)
            if found is None:
                continue
            victim, share = found
            own = name == preemptor
            key = (share.sort_key, 0 if own else 1)
            if best is None or key > best:
                best, best_victim, best_head, chosen = key, victim, None, name
            elif key == best:
                # Equal keys can only be two other teams: the one whose next victim comes first in candidate order.
                assert best_victim is not None
                if best_head is None:
                    best_head = order_key(self.snapshot, best_victim)
                head = order_key(self.snapshot, victim)
                if head < best_head:
                    best, best_victim, best_head, chosen = key, victim, head, name
        return chosen

    def _pickable(
        self, name: str, queue: _VictimQueue, include_preemptor: bool
    ) -> tuple[Workload, DominantShare] | None:
        """The team's next victim and its share, when a pick may choose the team."""
        victim = queue.head()
        if victim is None:
            return None
        own = name == self.request.team.name
        if own and not include_preemptor:
            return None
        share = self.share(self.snapshot.team(name))
        if not own and _gives_nothing(share):
            return None  # not borrowing (or borrowing nothing anyone lends): nothing to reclaim here
        return victim, share

    def _push(self, name: str) -> None:
        assert self._picks is not None
        queue = self.queues[name]
        found = self._pickable(name, queue, self._picks.own)
        if found is None:
            return
        victim, share = found
        kind, coarse, value = share.sort_key
        own = name == self.request.team.name
        shares = self._share_versions.setdefault(name, 0)
        head = order_key(self.snapshot, victim)
        heapq.heappush(
            self._picks.heap, ((-kind, -coarse, -value), 0 if own else -1, head, name, queue, queue.version, shares)
        )

    def usage_key(self, victim: Workload) -> _UsageKey:
        items = tuple(self.snapshot.usage_of(victim).items())
        return items if len(items) < 2 else tuple(sorted(items))

    def signatures(self, team: str) -> Iterator[_UsageKey]:
        """Every distinct usage among `team`'s running workloads that holds a contested resource: a superset of
        the usages of its victims still queued (victims only leave the team by being taken)."""
        contested = self.request.contested
        for signature in self.snapshot.workloads[team].signatures():
            if any(fr in contested for fr, _ in signature):
                yield signature

    def share_without(self, node: Node, victim: Workload) -> DominantShare:
        """`node`'s share if `victim` were gone (usage leaves through the victim's team, as lending limits say)."""
        return self.share_without_usage(node, victim.team, self.usage_key(victim), self.snapshot.usage_of(victim))

    def share_without_usage(
        self, node: Node, team: str, key: _UsageKey, usage: Mapping[FlavorResource, int]
    ) -> DominantShare:
        """`node`'s share if a workload of `team` holding `usage` (whose `usage_key` is `key`) were gone."""
        # Until the next victim is taken nothing changes, and look-alike victims (the many one-GPU jobs of a
        # team) give the same answer: compute it once.
        cache_key = (node.name, team, key)
        cached = self._shares_without.get(cache_key)
        if cached is not None:
            return cached
        share = self._share_without(node, team, usage)
        self._shares_without[cache_key] = share
        return share

    def _share_without(self, node: Node, team: str, usage: Mapping[FlavorResource, int]) -> DominantShare:
        # Computed, not simulated: what would leave `node` (the team itself or one of its cohorts) if `usage` left
        # the team, walking up as QuotaTree.remove_usage does, counted as negative extra usage of `node` alone.
        leaving: dict[FlavorResource, int] = {}
        victim_team = self.snapshot.team(team)
        for fr, value in usage.items():
            below = victim_team
            while below is not node and value > 0:
                # Usage a lending limit keeps below is invisible above: only what the child stores up there leaves.
                stored_above = below.usage.get(fr, 0) - below.local_quota.get(fr, 0)
                value = min(value, stored_above) if stored_above > 0 else 0
                assert below.parent is not None, "`node` is the victim's team or one of its cohorts"
                below = below.parent
            if value:
                leaving[fr] = -value
        return self.snapshot.tree.dominant_resource_share(node, leaving, factor=self.snapshot.factor(node.name))

    def shares_against(self, target_team: str) -> tuple[DominantShare, DominantShare, Node]:
        mine, theirs = _almost_lcas(self.request.team, self.snapshot.team(target_team))
        return self.share(mine), self.share(theirs), theirs


_Strategy = Callable[[DominantShare, DominantShare, DominantShare], bool]


class _Verdicts:
    """One strategy's answer for victims of one team, per usage: until a victim is taken nothing moves, so
    look-alike victims (a team's many one-GPU jobs) get one answer."""

    def __init__(self, search: _FairSearch, strategy: _Strategy, team: str) -> None:
        self.search, self.strategy, self.team = search, strategy, team
        self.mine, self.old, self.target = search.shares_against(team)
        self._answers: dict[_UsageKey, bool] = {}

    def accepts(self, key: _UsageKey, usage: Mapping[FlavorResource, int]) -> bool:
        answer = self._answers.get(key)
        if answer is None:
            new = self.search.share_without_usage(self.target, self.team, key, usage)
            answer = self._answers[key] = self.strategy(self.mine, self.old, new)
        return answer

    def accepts_victim(self, victim: Workload) -> bool:
        return self.accepts(self.search.usage_key(victim), self.search.snapshot.usage_of(victim))

    def refuses_every_usage(self) -> bool:
        """Whether no usage the team's victims may hold is accepted: then none of them is, read or not."""
        return not any(self.accepts(key, dict(key)) for key in self.search.signatures(self.team))


def _strategy(kind: PreemptionStrategy) -> _Strategy:
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


def _reclaims(request: PreemptionRequest) -> bool:
    """Whether the preemptor's team, with the incoming workload added, stays within nominal on the contested
    resources: a fair search then only reclaims (semantics.md, Fair sharing)."""
    team = request.team
    return all(
        team.usage.get(fr, 0) + request.usage.get(fr, 0) <= team.subtree_quota.get(fr, 0) for fr in request.contested
    )


def _fair_search(search: _FairSearch) -> bool:
    request, snapshot = search.request, search.snapshot
    team = request.team
    if all(team.usage.get(fr, 0) <= team.subtree_quota.get(fr, 0) for fr in request.contested):
        # Within nominal even with the incoming workload: plain reclamation from the most unfair borrower.
        while (name := search.pick(include_preemptor=False)) is not None:
            if search.take(search.head(name), PreemptionReason.COHORT_RECLAMATION):
                return True
        return False

    strategies = [_strategy(s) for s in snapshot.config.fair_sharing.preemption_strategies]
    # Per team, the first victim the first strategy refused: the second pass tries at most one victim per team,
    # and that is the one (the later refused never come back).
    refused: dict[str, Workload] = {}
    while (name := search.pick(include_preemptor=True)) is not None:
        if name == team.name:
            if search.take(search.head(name), PreemptionReason.WITHIN_TEAM):
                return True
            continue
        queue = search.queues[name]
        verdicts = _Verdicts(search, strategies[0], name)
        if verdicts.refuses_every_usage():
            # Every victim left would be refused in turn: skip reading them one by one (most of a busy search).
            refused.setdefault(name, queue.pop())
            queue.drain(read=snapshot.may_protect())
            continue
        while (victim := queue.head()) is not None:
            if verdicts.accepts_victim(victim):
                if search.take(victim, PreemptionReason.COHORT_FAIR_SHARING):
                    return True
                break
            refused.setdefault(name, queue.pop())
    if len(strategies) < 2:
        return False

    second = strategies[1]
    search.queues = {name: _VictimQueue(iter([victim])) for name, victim in refused.items()}
    while (name := search.pick(include_preemptor=False)) is not None:
        mine, old, target_node = search.shares_against(name)
        victim = search.head(name)
        if second(mine, old, search.share_without(target_node, victim)) and search.take(
            victim, PreemptionReason.COHORT_FAIR_SHARING
        ):
            return True
        del search.queues[name]  # at most one victim per team in the second pass
    return False
