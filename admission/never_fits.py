"""Whether a pod set could ever be admitted by its team, with the whole cluster idle.

The engine would leave such a workload pending forever (its flavor assignment is NoFit on every flavor, whatever
the usage), so the validating webhook refuses it at the door instead, saying which resource is short and how much
the team could ever hold. The rule is flavor assignment's (admission/flavors.py) with every usage at zero: every
requested resource must be covered by one of the team's resource groups, and within a group one flavor whose node
labels agree with the pod's nodeSelector must hold every resource of the group the pod set asks for. The two pieces
both sides must read alike, a pod set's totals at a count and which flavors a nodeSelector rules in, live here and
flavor assignment uses them too.

Pure: a quota file in, answers out; the per-team maxima are computed once per quota file.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from admission.labels import MIN_PARALLELISM
from admission.workload import Workload
from quota.config import QuotaConfig
from quota.quantity import format_resource
from quota.tree import QuotaTree

#: Answers remembered per quota file; Jobs come in few shapes, so this bounds memory, not hits.
_MAX_ANSWERS = 4096

#: The pseudo-resource a team may have quota for: one pod is 1000 milli-pods.
PODS = "pods"


class PodSetShape(Protocol):
    """What the rule reads of a pod set: an engine `PodSet`, or the lighter reading of a Job the webhook makes."""

    @property
    def count(self) -> int: ...

    @property
    def min_count(self) -> int | None: ...

    @property
    def requests(self) -> Mapping[str, int]:
        """Per-pod requests in milli-units."""
        ...

    @property
    def node_selector(self) -> Mapping[str, str]: ...


def requests_at(per_pod: Mapping[str, int], count: int, counts_pods: bool) -> dict[str, int]:
    """A pod set's total requests with `count` pods; `counts_pods` when the team has quota for `pods`."""
    totals = {resource: quantity * count for resource, quantity in per_pod.items() if quantity > 0}
    if counts_pods and count > 0:
        totals[PODS] = count * 1000
    return totals


def label_keys(flavors: Iterable[str], flavor_labels: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    """The node labels a resource group's flavors set: only these in a nodeSelector rule a flavor in or out."""
    return frozenset(key for flavor in flavors for key in flavor_labels.get(flavor, {}))


def selector_admits(labels: Mapping[str, str], node_selector: Mapping[str, str], keys: Collection[str]) -> bool:
    """Whether a flavor with node `labels` can run a pod with `node_selector`, judged on its group's label `keys`."""
    return all(labels.get(key) == value for key, value in node_selector.items() if key in keys)


@dataclass(frozen=True, slots=True)
class FlavorCapacity:
    name: str
    labels: Mapping[str, str]
    maximum: Mapping[str, int]
    """Per resource of the group, the most the team could ever hold of it on this flavor."""


@dataclass(frozen=True, slots=True)
class GroupCapacity:
    resources: tuple[str, ...]
    flavors: tuple[FlavorCapacity, ...]
    label_keys: frozenset[str]


@dataclass(frozen=True, slots=True)
class TeamCapacity:
    name: str
    groups: tuple[GroupCapacity, ...]
    group_of: Mapping[str, int]


class Capacity:
    """Per team, the most it could ever hold: computed once per quota file, read per request."""

    def __init__(self, config: QuotaConfig) -> None:
        tree = QuotaTree.from_config(config)
        labels = {f.name: dict(f.node_labels) for f in config.flavors}
        self.teams: dict[str, TeamCapacity] = {}
        for name, node in tree.teams.items():
            groups = tuple(
                GroupCapacity(
                    resources=group.resources,
                    flavors=tuple(
                        FlavorCapacity(
                            flavor,
                            labels.get(flavor, {}),
                            {r: tree.potential_available(node, (flavor, r)) for r in group.resources},
                        )
                        for flavor in group.flavors
                    ),
                    label_keys=label_keys(group.flavors, labels),
                )
                for group in node.groups
            )
            self.teams[name] = TeamCapacity(name, groups, dict(node.group_of))
        self._answers: dict[tuple[object, ...], str | None] = {}

    def never_fits(self, workload: Workload) -> str | None:
        """Why `workload` can never be admitted (what is short, and what to do), or None when it could be."""
        return self.pod_sets_never_fit(workload.team, workload.pod_sets)

    def pod_sets_never_fit(self, team_name: str, pod_sets: Sequence[PodSetShape]) -> str | None:
        """Why a workload of these pod sets can never be admitted: one pod set that never fits, or a gang whose pod
        sets each fit but never all at once (a JobSet's, a PyTorchJob's are admitted together or not at all)."""
        for pod_set in pod_sets:
            reason = self.pod_set_never_fits(team_name, pod_set)
            if reason is not None:
                return reason
        team = self.teams.get(team_name)
        if team is None or len(pod_sets) < 2:
            return None
        return _gang_never_fits(team, pod_sets)

    def pod_set_never_fits(self, team_name: str, pod_set: PodSetShape) -> str | None:
        """Why one pod set of a workload of `team_name` can never be admitted, or None (also for unknown teams)."""
        team = self.teams.get(team_name)
        if team is None:
            return None
        # Jobs come in families (sweeps, arrays, the same manifest resubmitted): one answer per shape and team.
        key = (
            team_name,
            pod_set.count,
            pod_set.min_count,
            tuple(pod_set.requests.items()),
            tuple(pod_set.node_selector.items()),
        )
        try:
            return self._answers[key]
        except KeyError:
            pass
        if len(self._answers) >= _MAX_ANSWERS:
            self._answers.clear()
        reason = self._answers[key] = _pod_set_never_fits(team, pod_set)
        return reason


def _pod_set_never_fits(team: TeamCapacity, pod_set: PodSetShape) -> str | None:
    # The smallest count kuota could admit is what has to fit: partial admission may go down to minCount.
    count = pod_set.min_count if pod_set.min_count is not None else pod_set.count
    if count <= 0:
        return None
    totals = requests_at(pod_set.requests, count, PODS in team.group_of)
    by_group: dict[int, dict[str, int]] = {}
    for resource in sorted(totals):
        index = team.group_of.get(resource)
        if index is None:
            return (
                f"this Job requests {resource}, and team {team.name} has no quota for it (it can never hold any); "
                f"use a queue of a team with {resource} quota, or remove the {resource} request"
            )
        by_group.setdefault(index, {})[resource] = totals[resource]
    for index, wanted in by_group.items():
        reason = _group_never_fits(team, team.groups[index], wanted, pod_set, count)
        if reason is not None:
            return reason
    return None


def _group_never_fits(
    team: TeamCapacity, group: GroupCapacity, wanted: Mapping[str, int], pod_set: PodSetShape, count: int
) -> str | None:
    flavors = [f for f in group.flavors if selector_admits(f.labels, pod_set.node_selector, group.label_keys)]
    if any(all(f.maximum.get(r, 0) >= v for r, v in wanted.items()) for f in flavors):
        return None
    if not flavors:
        selector = {k: v for k, v in pod_set.node_selector.items() if k in group.label_keys}
        asked = ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))
        offered = "; ".join(
            f"{f.name}: " + ", ".join(f"{k}={f.labels.get(k, '(unset)')}" for k in sorted(selector))
            for f in group.flavors
        )
        return (
            f"the Job's nodeSelector {asked} matches none of team {team.name}'s flavors for "
            f"{', '.join(sorted(wanted))} ({offered}); change the nodeSelector to one of those, or remove it"
        )
    for resource, value in wanted.items():
        best = max(f.maximum.get(resource, 0) for f in flavors)
        if best < value:
            return _too_big(team, flavors, resource, value, pod_set, count, best)
    # Each resource fits in some flavor, but no one flavor holds them all, and a group's resources share one.
    need = ", ".join(f"{format_resource(r, v)} {r}" for r, v in sorted(wanted.items()))
    per_flavor = "; ".join(
        f"{f.name}: " + ", ".join(f"{format_resource(r, f.maximum.get(r, 0))} {r}" for r in sorted(wanted))
        for f in flavors
    )
    return (
        f"this Job needs {need} from one flavor, and no flavor of team {team.name} can ever hold all of it "
        f"(at most {per_flavor}); lower spec.parallelism or the per-pod requests, "
        f"or use a queue of a team with more quota"
    )


def _gang_never_fits(team: TeamCapacity, pod_sets: Sequence[PodSetShape]) -> str | None:
    """The pod sets' totals against everything the team could ever hold in each resource group, over every flavor
    some pod set's nodeSelector allows. Pod sets may land on different flavors, so this is a bound, not the
    assignment: it refuses only gangs that no assignment could ever place."""
    counts_pods = PODS in team.group_of
    totals = [
        requests_at(p.requests, p.min_count if p.min_count is not None else p.count, counts_pods) for p in pod_sets
    ]
    for resource in sorted({r for t in totals for r in t}):
        group = team.groups[team.group_of[resource]]
        flavors = [
            f
            for f in group.flavors
            if any(
                resource in t and selector_admits(f.labels, p.node_selector, group.label_keys)
                for p, t in zip(pod_sets, totals, strict=True)
            )
        ]
        wanted = sum(t.get(resource, 0) for t in totals)
        most = sum(f.maximum.get(resource, 0) for f in flavors)
        if wanted > most:
            parts = " + ".join(format_resource(resource, t.get(resource, 0)) for t in totals)
            per_flavor = ", ".join(
                f"{f.name}: {format_resource(resource, f.maximum.get(resource, 0))}" for f in flavors
            )
            return (
                f"this workload's {len(pod_sets)} pod sets need {format_resource(resource, wanted)} {resource} "
                f"together ({parts}), and are admitted all at once or not at all, but team {team.name} can never "
                f"hold more than {format_resource(resource, most)} of it ({per_flavor}); make the pod sets smaller, "
                f"or use a queue of a team with more quota"
            )
    return None


def _too_big(
    team: TeamCapacity,
    flavors: list[FlavorCapacity],
    resource: str,
    value: int,
    pod_set: PodSetShape,
    count: int,
    best: int,
) -> str:
    per_pod = pod_set.requests.get(resource, 1000 if resource == PODS else 0)
    how = f"{count} pod{'s' if count != 1 else ''} × {format_resource(resource, per_pod)}"
    if pod_set.min_count is not None:
        how += f", already at its {MIN_PARALLELISM}"
    per_flavor = ", ".join(f"{f.name}: {format_resource(resource, f.maximum.get(resource, 0))}" for f in flavors)
    if pod_set.min_count is None:
        remedy = f"lower spec.parallelism or the per-pod request, set {MIN_PARALLELISM} to start with fewer pods"
    else:
        remedy = f"lower {MIN_PARALLELISM} or the per-pod request"
    return (
        f"this Job needs {format_resource(resource, value)} {resource} in total ({how}), but team {team.name} "
        f"can never hold more than {format_resource(resource, best)} of it ({per_flavor}); "
        f"{remedy}, or use a queue of a team with more quota"
    )
