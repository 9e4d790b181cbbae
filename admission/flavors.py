"""Flavor assignment: which flavor each pod set's resources come from, and at what cost.

Pod sets are assigned in order, each seeing the usage of the pod sets before it. For each resource group the
flavors are walked in the team's order; each flavor's outcome is Fit (perhaps borrowing), Preempt (reclaim from
other teams, or preempt in the own team), Preempt-with-no-victims, or NoFit. `flavorFungibility` decides where the
walk stops and which outcome wins (semantics.md, "One scheduling cycle", step 2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from admission.never_fits import PODS, label_keys, requests_at, selector_admits
from admission.placement import PodSetPlacement
from admission.workload import Workload
from quota.config import (
    BorrowPolicy,
    FlavorFungibility,
    FungibilityPolicy,
    FungibilityPreference,
    QuotaConfig,
    ReclaimPolicy,
)
from quota.pod_set import PodSet
from quota.quantity import format_resource
from quota.tree import FlavorResource, Node, QuotaTree


class Mode(IntEnum):
    """What admitting on a flavor takes; higher is better."""

    NO_FIT = 0
    NO_CANDIDATES = 1
    """Would fit after preemption, but nobody may be preempted."""
    PREEMPT = 2
    """Fits after preempting, some victims in the own team."""
    RECLAIM = 3
    """Fits after preempting, all victims in other teams."""
    FIT = 4

    @property
    def needs_preemption(self) -> bool:
        return self in (Mode.NO_CANDIDATES, Mode.PREEMPT, Mode.RECLAIM)


@dataclass(frozen=True, slots=True)
class Outcome:
    mode: Mode
    borrow: int
    """Height of the lowest cohort subtree that supplies it; 0 when the team's own quota does."""


#: Asks the preemptor whether preempting for `value` of one flavor/resource is possible: (mode, borrow level).
PreemptionOracle = Callable[[Node, FlavorResource, int], Outcome]


@dataclass(slots=True)
class PodSetAssignment:
    name: str
    count: int
    requests: dict[str, int]
    """Total requests of the pod set at `count`, per resource."""
    flavors: dict[str, str] = field(default_factory=dict)
    modes: dict[str, Outcome] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    failed: bool = False
    placement: PodSetPlacement | None = None
    """On a flavor with a topology: the nodes its pods go to (set once the workload's placement is found)."""

    @property
    def mode(self) -> Mode:
        if self.failed:
            return Mode.NO_FIT
        if not self.reasons:
            return Mode.FIT
        return min((o.mode for o in self.modes.values()), default=Mode.FIT)


@dataclass(slots=True)
class Assignment:
    pod_sets: list[PodSetAssignment] = field(default_factory=list)
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    borrowing: int = 0

    @property
    def mode(self) -> Mode:
        """The worst outcome over the pod sets; preemption outcomes collapse to PREEMPT."""
        if not self.pod_sets:
            return Mode.NO_FIT
        worst = min(ps.mode for ps in self.pod_sets)
        return Mode.PREEMPT if worst.needs_preemption else worst

    @property
    def contested(self) -> frozenset[FlavorResource]:
        """Flavor/resources whose assignment needs preemption."""
        return frozenset(
            (ps.flavors[resource], resource)
            for ps in self.pod_sets
            for resource, outcome in ps.modes.items()
            if outcome.mode.needs_preemption
        )

    def flavors(self) -> dict[str, dict[str, str]]:
        return {ps.name: dict(ps.flavors) for ps in self.pod_sets}

    def counts(self) -> dict[str, int]:
        return {ps.name: ps.count for ps in self.pod_sets}

    def placements(self) -> dict[str, PodSetPlacement]:
        """Per pod set on a flavor with a topology, where its pods go (the admit patch's node selector and
        per-node counts); pod sets on other flavors are not in it."""
        return {ps.name: ps.placement for ps in self.pod_sets if ps.placement is not None}

    def node_counts(self) -> dict[str, dict[str, int]]:
        """Per placed pod set, node → pods: what a running workload's Admission keeps."""
        return {name: dict(p.nodes) for name, p in self.placements().items()}

    def message(self) -> str:
        parts = []
        for ps in self.pod_sets:
            if ps.mode is Mode.FIT:
                continue
            parts.append(f"couldn't assign flavors to pod set {ps.name}: {', '.join(sorted(set(ps.reasons)))}")
        return "; ".join(parts)


def _preferred(a: Outcome, b: Outcome, fungibility: FlavorFungibility) -> bool:
    """Whether outcome `a` beats `b` under the team's preference."""
    if a.mode is Mode.NO_FIT:
        return False
    if b.mode is Mode.NO_FIT:
        return True
    # Under either preference a flavor with no possible victims ranks below every Fit, reclaim and preempt,
    # whatever its borrowing level (semantics.md step 2): the oracle gives it the level it would need without
    # victims, usually none at all, but the rule must not rest on that.
    if (a.mode is Mode.NO_CANDIDATES) != (b.mode is Mode.NO_CANDIDATES):
        return b.mode is Mode.NO_CANDIDATES
    if fungibility.preference is FungibilityPreference.PREEMPTION_OVER_BORROWING:
        if a.borrow != b.borrow:
            return a.borrow < b.borrow
        return a.mode > b.mode
    if a.mode != b.mode:
        return a.mode > b.mode
    return a.borrow < b.borrow


def _should_try_next(outcome: Outcome, fungibility: FlavorFungibility) -> bool:
    may_stop_preempt = fungibility.when_can_preempt is FungibilityPolicy.MAY_STOP_SEARCH
    may_stop_borrow = fungibility.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH
    borrows = outcome.borrow > 0
    if outcome.mode in (Mode.PREEMPT, Mode.RECLAIM) and may_stop_preempt and (not borrows or may_stop_borrow):
        return False
    if outcome.mode is Mode.FIT:
        return borrows and not may_stop_borrow
    return True


class FlavorAssigner:
    def __init__(
        self,
        config: QuotaConfig,
        tree: QuotaTree,
        workload: Workload,
        oracle: PreemptionOracle,
    ) -> None:
        self.tree = tree
        self.workload = workload
        self.team = tree.teams[workload.team]
        self.spec = self.team.team
        self.oracle = oracle
        self.fair_sharing = config.fair_sharing.enabled
        self.flavor_labels = {f.name: f.node_labels for f in config.flavors}

    def assign(self, counts: Mapping[str, int] | None = None) -> Assignment:
        assignment = Assignment()
        for pod_set in self.workload.pod_sets:
            count = pod_set.count if counts is None else counts[pod_set.name]
            requests = requests_at(pod_set.requests, count, PODS in self.team.group_of)
            psa = PodSetAssignment(pod_set.name, count, requests)
            self._assign_pod_set(pod_set, psa, assignment.usage)
            assignment.pod_sets.append(psa)
            for resource, flavor in psa.flavors.items():
                fr = (flavor, resource)
                assignment.usage[fr] = assignment.usage.get(fr, 0) + requests[resource]
                assignment.borrowing = max(assignment.borrowing, psa.modes[resource].borrow)
            if psa.failed:
                break
        return assignment

    def _assign_pod_set(self, pod_set: PodSet, psa: PodSetAssignment, usage: Mapping[FlavorResource, int]) -> None:
        for resource in sorted(psa.requests):
            if resource in psa.flavors:
                continue  # assigned together with its resource group
            group_index = self.team.group_of.get(resource)
            if group_index is None:
                psa.reasons.append(f"resource {resource} unavailable in team {self.team.name}")
                psa.failed = True
                psa.flavors.clear()
                psa.modes.clear()
                return
            chosen, reasons = self._find_flavor(pod_set, group_index, psa.requests, usage)
            psa.reasons.extend(reasons)
            if chosen is None:
                psa.failed = True
                psa.flavors.clear()
                psa.modes.clear()
                return
            for res, (flavor, outcome) in chosen.items():
                psa.flavors[res] = flavor
                psa.modes[res] = outcome
        if all(o.mode is Mode.FIT for o in psa.modes.values()):
            psa.reasons.clear()

    def _matches(self, pod_set: PodSet, flavor: str, keys: frozenset[str]) -> bool:
        # The never-fits rule filters flavors with the same test, so the webhook and the engine agree on them.
        return selector_admits(self.flavor_labels.get(flavor, {}), pod_set.node_selector, keys)

    def _find_flavor(
        self,
        pod_set: PodSet,
        group_index: int,
        requests: Mapping[str, int],
        usage: Mapping[FlavorResource, int],
    ) -> tuple[dict[str, tuple[str, Outcome]] | None, list[str]]:
        group = self.team.groups[group_index]
        wanted = {r: q for r, q in requests.items() if r in group.resources}
        keys = label_keys(group.flavors, self.flavor_labels)
        fungibility = self.spec.flavor_fungibility
        reasons: list[str] = []
        best: dict[str, tuple[str, Outcome]] | None = None
        best_outcome = Outcome(Mode.NO_FIT, 0)
        for flavor in group.flavors:
            if not self._matches(pod_set, flavor, keys):
                reasons.append(f"flavor {flavor} doesn't match node affinity")
                continue
            chosen: dict[str, tuple[str, Outcome]] = {}
            representative = Outcome(Mode.FIT, 0)
            for resource in sorted(wanted):
                fr = (flavor, resource)
                outcome, reason = self._fits_quota(fr, wanted[resource] + usage.get(fr, 0))
                if reason:
                    reasons.append(reason)
                if _preferred(representative, outcome, fungibility):
                    representative = outcome  # a flavor is only as good as its worst resource
                if representative.mode is Mode.NO_FIT:
                    break
                chosen[resource] = (flavor, outcome)
            if representative.mode is Mode.NO_FIT:
                continue
            if not _should_try_next(representative, fungibility):
                best, best_outcome = chosen, representative
                break
            if _preferred(representative, best_outcome, fungibility):
                best, best_outcome = chosen, representative
        if best is not None and best_outcome.mode is Mode.FIT:
            return best, []
        return best, reasons

    def _fits_quota(self, fr: FlavorResource, value: int) -> tuple[Outcome, str]:
        tree, team = self.tree, self.team
        flavor, resource = fr
        available = tree.available(team, fr)
        maximum = tree.potential_available(team, fr)
        if value > maximum:
            return Outcome(Mode.NO_FIT, 0), (
                f"insufficient quota for {resource} in flavor {flavor}, request > maximum capacity "
                f"({format_resource(resource, value)} > {format_resource(resource, maximum)})"
            )
        borrow, may_reclaim = tree.lowest_subtree_that_fits(team, fr, value)
        if value <= available:
            return Outcome(Mode.FIT, borrow), ""
        reason = (
            f"insufficient unused quota for {resource} in flavor {flavor}, "
            f"{format_resource(resource, value - available)} more needed"
        )
        if value <= team.nominal(fr) or may_reclaim or self._may_preempt_while_borrowing():
            return self.oracle(team, fr, value), reason
        return Outcome(Mode.NO_FIT, borrow), reason

    def _may_preempt_while_borrowing(self) -> bool:
        preemption = self.spec.preemption
        return preemption.borrow_within_cohort.policy is not BorrowPolicy.NEVER or (
            self.fair_sharing and preemption.reclaim_within_cohort is not ReclaimPolicy.NEVER
        )
