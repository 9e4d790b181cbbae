"""The cohort tree: how much each team and cohort may use, lend and borrow, and what it uses now.

The arithmetic follows Kueue's resource nodes so that people who know Kueue get the answers they expect:

* a node's *subtree quota* is its own nominal quota plus what each child lends it (the child's subtree quota minus
  what the child keeps for itself because of its lendingLimit);
* a node's *usage* counts only what its children use beyond what they keep for themselves, so quota held back by a
  lendingLimit is invisible above that child;
* borrowing walks up the tree and every node on the path bounds it (borrowingLimit caps how far above its own
  subtree quota a node may reach).

Everything is integer milli-units. Usage lives on the nodes so a snapshot is a cheap copy of the usage maps.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from quota.config import Cohort, QuotaConfig, Team, _QuotaHolder

FlavorResource = tuple[str, str]
"""(flavor, resource), e.g. ("h100", "nvidia.com/gpu"): the unit quota is kept in."""


@dataclass(frozen=True, slots=True)
class Limits:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class ResourceGroupSpec:
    """A set of resources that always come from the same flavor, and the flavors to try, in order."""

    resources: tuple[str, ...]
    flavors: tuple[str, ...]


class Node:
    """A team (leaf) or a cohort (inner node)."""

    __slots__ = (
        "child_cohorts",
        "child_teams",
        "group_of",
        "groups",
        "height",
        "is_team",
        "lendable",
        "local_quota",
        "name",
        "over",
        "parent",
        "position",
        "quotas",
        "share",
        "spec",
        "subtree_quota",
        "usage",
        "weight",
    )

    def __init__(self, name: str, is_team: bool, spec: _QuotaHolder | None) -> None:
        self.name = name
        self.is_team = is_team
        self.spec = spec
        self.parent: Node | None = None
        self.child_cohorts: list[Node] = []
        self.child_teams: list[Node] = []
        self.quotas: dict[FlavorResource, Limits] = {}
        self.groups: tuple[ResourceGroupSpec, ...] = ()
        self.group_of: dict[str, int] = {}
        self.subtree_quota: dict[FlavorResource, int] = {}
        self.local_quota: dict[FlavorResource, int] = {}
        self.lendable: dict[str, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        self.share: tuple[Fraction | None, DominantShare] | None = None
        """The node's DRS at its usage now and the factor it was computed with; None once its usage moved."""
        self.weight: Fraction = Fraction(1)
        self.height = 0
        self.position = 0
        """Where the node stands among its parent's children: child cohorts first, then child teams."""
        self.over: dict[FlavorResource, dict[Node, None]] = {}
        """Per flavor/resource, the children using more of it than their subtree quota (kept by the tree's usage
        methods). A preemption search looks for victims only under such children: reading this instead of every
        child made a search follow the borrowers rather than the cohort's size."""

    def __repr__(self) -> str:
        return f"<{'team' if self.is_team else 'cohort'} {self.name}>"

    @property
    def team(self) -> Team:
        assert isinstance(self.spec, Team)
        return self.spec

    def nominal(self, fr: FlavorResource) -> int:
        limits = self.quotas.get(fr)
        return limits.nominal if limits is not None else 0

    def ancestors(self) -> Iterator[Node]:
        """Parent first, root last."""
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> Node:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def borrowing_with(self, fr: FlavorResource, value: int) -> bool:
        return self.usage.get(fr, 0) + value > self.subtree_quota.get(fr, 0)

    def borrowing(self, fr: FlavorResource) -> bool:
        return self.usage.get(fr, 0) > self.subtree_quota.get(fr, 0)

    def local_available(self, fr: FlavorResource) -> int:
        """Quota kept back from the parent by a lendingLimit that this node does not use yet."""
        return max(0, self.local_quota.get(fr, 0) - self.usage.get(fr, 0))

    def within_nominal(self, frs: Iterable[FlavorResource]) -> bool:
        # A plain loop: every preemption search asks this of every team of its cohort, and a generator under
        # all() costs twice as much per call.
        usage, quota = self.usage, self.subtree_quota
        for fr in frs:  # noqa: SIM110 (see above)
            if usage.get(fr, 0) > quota.get(fr, 0):
                return False
        return True

    def children_over(self, frs: Iterable[FlavorResource]) -> list[Node]:
        """The children that are not `within_nominal(frs)`: child cohorts first, then teams, each in tree order."""
        over = self.over
        found: dict[Node, None] | None = None
        for fr in frs:
            children = over.get(fr)
            if not children:
                continue
            # The common case, one contested resource: its children are read, not copied.
            found = children if found is None else {**found, **children}
        if found is None:
            return []
        if len(found) < 2:
            return list(found)
        return sorted(found, key=_tree_order)

    def subtree_teams(self) -> Iterator[Node]:
        if self.is_team:
            yield self
            return
        for child in self.child_cohorts:
            yield from child.subtree_teams()
        yield from self.child_teams


class QuotaTree:
    """The whole forest of cohorts and teams for one QuotaConfig, with current usage."""

    def __init__(self, nodes: dict[str, Node], cohorts: dict[str, Node], fair_sharing: bool) -> None:
        self.teams = nodes
        self.cohorts = cohorts
        self.fair_sharing = fair_sharing

    # -- construction -------------------------------------------------------------------------------------------

    @classmethod
    def from_config(cls, config: QuotaConfig) -> QuotaTree:
        cohorts = {c.name: _node(c, is_team=False) for c in config.cohorts}
        teams = {t.name: _node(t, is_team=True) for t in config.teams}
        for cohort in config.cohorts:
            if cohort.parent is not None:
                parent = cohorts[cohort.parent]
                cohorts[cohort.name].parent = parent
                cohorts[cohort.name].position = len(parent.child_cohorts)
                parent.child_cohorts.append(cohorts[cohort.name])
        for team in config.teams:
            if team.parent is not None:
                parent = cohorts[team.parent]
                teams[team.name].parent = parent
                teams[team.name].position = _TEAMS_AFTER_COHORTS + len(parent.child_teams)
                parent.child_teams.append(teams[team.name])
        tree = cls(teams, cohorts, config.fair_sharing.enabled)
        for node in (*cohorts.values(), *teams.values()):
            if node.parent is None:
                _accumulate(node)
        for node in cohorts.values():
            node.lendable = _lendable(node)
        return tree

    def copy(self) -> QuotaTree:
        """A snapshot: same structure and quotas, its own usage maps."""
        mapping: dict[int, Node] = {}

        def clone(node: Node) -> Node:
            twin = Node.__new__(Node)
            # Spelled out: this runs for every node of every snapshot, and a getattr/setattr loop costs 3× more.
            twin.name, twin.is_team, twin.spec = node.name, node.is_team, node.spec
            twin.parent, twin.child_cohorts, twin.child_teams = node.parent, node.child_cohorts, node.child_teams
            twin.quotas, twin.groups, twin.group_of = node.quotas, node.groups, node.group_of
            twin.subtree_quota, twin.local_quota, twin.lendable = node.subtree_quota, node.local_quota, node.lendable
            twin.weight, twin.height, twin.position = node.weight, node.height, node.position
            twin.usage, twin.share = dict(node.usage), node.share
            twin.over = node.over  # remapped below, once every twin exists
            mapping[id(node)] = twin
            return twin

        teams = {name: clone(node) for name, node in self.teams.items()}
        cohorts = {name: clone(node) for name, node in self.cohorts.items()}
        for node in (*teams.values(), *cohorts.values()):
            if node.parent is not None:
                node.parent = mapping[id(node.parent)]
            node.child_cohorts = [mapping[id(c)] for c in node.child_cohorts]
            node.child_teams = [mapping[id(c)] for c in node.child_teams]
            # Always a dict of the copy's own: an empty one shared with the original would be filled by both.
            node.over = {fr: dict.fromkeys(mapping[id(c)] for c in kids) for fr, kids in node.over.items() if kids}
        return QuotaTree(teams, cohorts, self.fair_sharing)

    def nodes(self) -> Iterator[Node]:
        yield from self.cohorts.values()
        yield from self.teams.values()

    # -- capacity -----------------------------------------------------------------------------------------------

    def available(self, node: Node, fr: FlavorResource) -> int:
        """What `node` could still take of `fr` now (negative when over-admitted after a quota cut)."""
        if node.parent is None:
            return node.subtree_quota.get(fr, 0) - node.usage.get(fr, 0)
        parent_available = self.available(node.parent, fr)
        limits = node.quotas.get(fr)
        if limits is not None and limits.borrowing_limit is not None:
            local = node.local_quota.get(fr, 0)
            stored_in_parent = node.subtree_quota.get(fr, 0) - local
            used_in_parent = max(0, node.usage.get(fr, 0) - local)
            parent_available = min(stored_in_parent - used_in_parent + limits.borrowing_limit, parent_available)
        return node.local_available(fr) + parent_available

    def potential_available(self, node: Node, fr: FlavorResource) -> int:
        """The most `node` could ever hold of `fr`, with the whole tree idle."""
        if node.parent is None:
            return node.subtree_quota.get(fr, 0)
        available = node.local_quota.get(fr, 0) + self.potential_available(node.parent, fr)
        limits = node.quotas.get(fr)
        if limits is not None and limits.borrowing_limit is not None:
            available = min(node.subtree_quota.get(fr, 0) + limits.borrowing_limit, available)
        return available

    def fits(self, team: Node, usage: Mapping[FlavorResource, int]) -> bool:
        return all(self.available(team, fr) >= value for fr, value in usage.items())

    # -- usage --------------------------------------------------------------------------------------------------

    def add_usage(self, node: Node, fr: FlavorResource, value: int) -> None:
        if value == 0:
            return
        local_available = node.local_available(fr)
        before = node.usage.get(fr, 0)
        node.usage[fr] = before + value
        node.share = None
        if node.parent is not None:
            _note_crossing(node, fr, before)
            if value > local_available:
                self.add_usage(node.parent, fr, value - local_available)

    def remove_usage(self, node: Node, fr: FlavorResource, value: int) -> None:
        if value == 0:
            return
        before = node.usage.get(fr, 0)
        stored_in_parent = before - node.local_quota.get(fr, 0)
        node.usage[fr] = before - value
        node.share = None
        if node.parent is None:
            return
        _note_crossing(node, fr, before)
        if stored_in_parent <= 0:
            return
        self.remove_usage(node.parent, fr, min(value, stored_in_parent))

    def add_all(self, team: Node, usage: Mapping[FlavorResource, int]) -> None:
        for fr, value in usage.items():
            self.add_usage(team, fr, value)

    def remove_all(self, team: Node, usage: Mapping[FlavorResource, int]) -> None:
        for fr, value in usage.items():
            self.remove_usage(team, fr, value)

    # -- borrowing levels ---------------------------------------------------------------------------------------

    def lowest_subtree_that_fits(self, team: Node, fr: FlavorResource, value: int) -> tuple[int, bool]:
        """Height of the lowest ancestor subtree that can supply `value` more of `fr` (0: no borrowing).

        The second value tells whether that subtree is smaller than the whole tree, i.e. whether a cohort below
        the root could supply it, which makes hierarchical reclaim possible.
        """
        if not (team.borrowing_with(fr, value) and team.parent is not None):
            return 0, team.parent is not None
        remaining = value - team.local_available(fr)
        tracking = team.parent
        for tracking in team.ancestors():
            if not tracking.borrowing_with(fr, remaining):
                return tracking.height, tracking.parent is not None
            remaining -= tracking.local_available(fr)
        return tracking.height, tracking.parent is not None

    def quantities_fit_in_quota(
        self, node: Node, requests: Mapping[FlavorResource, int]
    ) -> tuple[bool, dict[FlavorResource, int]]:
        """Whether `requests` fit in `node`'s own subtree quota, and what would be left for its parent."""
        fits = True
        remaining: dict[FlavorResource, int] = {}
        for fr, value in requests.items():
            if node.usage.get(fr, 0) + value > node.subtree_quota.get(fr, 0):
                fits = False
            remaining[fr] = max(0, value - node.local_available(fr))
        return fits, remaining

    # -- fair sharing -------------------------------------------------------------------------------------------

    def dominant_resource_share(
        self,
        node: Node,
        extra: Mapping[FlavorResource, int] | None = None,
        factor: Fraction | None = None,
    ) -> DominantShare:
        """Kueue's DRS: the largest borrowed fraction of what the parent could lend, divided by the weight.

        `extra` is usage to count as if admitted (negative to count as if removed); `factor` scales the weight
        (fair-share credits: weight × 2F).

        Without `extra` the answer is kept on the node until its usage next moves: between two starts or stops
        under a node, every cycle's searches and every admin read ask for the same shares.
        """
        if not extra:
            cached = node.share
            if cached is not None and cached[0] == factor:
                return cached[1]
            share = self._share(node, None, factor)
            node.share = (factor, share)
            return share
        return self._share(node, extra, factor)

    def share_with(
        self, node: Node, team: Node, usage: Mapping[FlavorResource, int], factor: Fraction | None = None
    ) -> DominantShare:
        """`node`'s DRS were `usage` charged to `team` (in `node`'s subtree), without charging it: what reaches
        each node on the way up is what `add_usage` would move there, so the answer is the charged tree's."""
        arriving = dict(usage)
        below = team
        while below is not node:
            # What `add_usage` passes to the parent: beyond what the lending limit still keeps local.
            for fr, value in list(arriving.items()):
                kept = below.local_available(fr)
                if value > kept:
                    arriving[fr] = value - kept
                else:
                    del arriving[fr]
            assert below.parent is not None, f"{node} is not above {team}"
            below = below.parent
        return self._share(node, arriving, factor)

    def _share(self, node: Node, extra: Mapping[FlavorResource, int] | None, factor: Fraction | None) -> DominantShare:
        weight = node.weight if factor is None else node.weight * 2 * factor
        if node.parent is None:
            return DominantShare(weight, Fraction(0), "", False)
        borrowed: dict[str, int] = {}
        for fr, quota in node.subtree_quota.items():
            amount = node.usage.get(fr, 0) + (extra.get(fr, 0) if extra else 0) - quota
            if amount > 0:
                borrowed[fr[1]] = borrowed.get(fr[1], 0) + amount
        if not borrowed:
            return DominantShare(weight, Fraction(0), "", False)
        ratio = Fraction(0)
        dominant = ""
        lendable = node.parent.lendable
        for resource in sorted(borrowed):
            lend = lendable.get(resource, 0)
            if lend > 0:
                candidate = Fraction(borrowed[resource] * 1000, lend)
                if candidate > ratio:
                    ratio = candidate
                    dominant = resource
        return DominantShare(weight, ratio, dominant, True)


ShareKey = tuple[int, int, Fraction]
"""`DominantShare.key`: (infinite, the share rounded down to an integer multiple of 2**-32, the exact share)."""

_COARSE = 1 << 32


@dataclass(frozen=True)
class DominantShare:
    """A DRS value compared exactly: weight 0 while borrowing is infinitely unfair."""

    weight: Fraction
    ratio: Fraction
    resource: str
    borrowing: bool

    @property
    def infinite(self) -> bool:
        # `not x` rather than `x == 0`: a Fraction's equality with an int checks its type against numbers.Rational.
        return not self.weight and self.borrowing

    @cached_property
    def value(self) -> Fraction:
        """The weighted share (meaningless when `infinite`)."""
        if not self.ratio or not self.weight:
            return self.ratio
        return self.ratio / self.weight

    @cached_property
    def sort_key(self) -> ShareKey:
        """Sort key: larger means less entitled to more capacity."""
        return self.key()

    def key(self) -> ShareKey:
        """Sort key: larger means less entitled to more capacity. (1 when infinite, else 0; the exact share rounded
        down to a multiple of 2**-32, as an integer; the exact share.) Fair-sharing searches compare shares in a
        heap many times per victim, and two Fractions compare through type checks and products of their parts; the
        middle integer orders every two shares that differ by more than 2**-32 in one integer comparison, and,
        being rounded down, never against their exact order, so the exact share decides only near-ties."""
        exact = self.ratio if self.infinite else self.value
        return (1 if self.infinite else 0, exact.numerator * _COARSE // exact.denominator, exact)

    def display(self) -> str:
        if self.infinite:
            return "inf"
        return str(round(float(self.value), 3)) if self.value else "0"


def _note_crossing(node: Node, fr: FlavorResource, before: int) -> None:
    """Keep the parent's `over` index true after `node`'s usage of `fr` moved from `before`."""
    assert node.parent is not None
    quota = node.subtree_quota.get(fr, 0)
    was, now = before > quota, node.usage[fr] > quota
    if was is now:
        return
    if now:
        node.parent.over.setdefault(fr, {})[node] = None
    else:
        del node.parent.over[fr][node]


_TEAMS_AFTER_COHORTS = 1 << 40
"""Added to a team's position, so that one number orders a cohort's children (no tuple made to sort them)."""


def _tree_order(node: Node) -> int:
    return node.position


def _node(spec: Cohort | Team, is_team: bool) -> Node:
    node = Node(spec.name, is_team, spec)
    groups: list[ResourceGroupSpec] = []
    for index, group in enumerate(spec.groups()):
        groups.append(ResourceGroupSpec(tuple(group.covered_resources), tuple(f.flavor for f in group.flavors)))
        for resource in group.covered_resources:
            node.group_of.setdefault(resource, index)
        for entry in group.flavors:
            for resource, quota in entry.resources.items():
                node.quotas[(entry.flavor, resource)] = Limits(
                    quota.nominal, quota.borrowing_limit, quota.lending_limit
                )
    node.groups = tuple(groups)
    node.weight = Fraction(spec.fair_sharing.weight)
    return node


def _accumulate(node: Node) -> None:
    """Fill subtree quotas, local quotas and heights bottom-up (Kueue's updateCohortResourceNode)."""
    node.subtree_quota = {fr: limits.nominal for fr, limits in node.quotas.items()}
    height = 1 if (node.child_cohorts or node.child_teams) else 0
    for child in (*node.child_cohorts, *node.child_teams):
        _accumulate(child)
        for fr, child_quota in child.subtree_quota.items():
            node.subtree_quota[fr] = node.subtree_quota.get(fr, 0) + child_quota - child.local_quota.get(fr, 0)
        if not child.is_team:
            height = max(height, child.height + 1)
    node.height = height
    node.local_quota = {}
    for fr, limits in node.quotas.items():
        if limits.lending_limit is not None:
            node.local_quota[fr] = max(0, node.subtree_quota.get(fr, 0) - limits.lending_limit)


def _lendable(node: Node) -> dict[str, int]:
    """Per resource name, what `node` could lend its children: the DRS denominator (static, no usage)."""
    root = node.root()
    lendable: dict[str, int] = {}
    tree = QuotaTree({}, {}, False)
    for fr in root.subtree_quota:
        lendable[fr[1]] = lendable.get(fr[1], 0) + tree.potential_available(node, fr)
    return lendable
