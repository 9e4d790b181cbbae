"""Nomination for workloads with pod sets on a flavor with a topology: quota and a placement, or victims for both.

The flavor assignment and the quota arithmetic are the ones every workload gets (admission.flavors); a pod set on
a topology flavor needs, on top, a placement (admission.placement). When the quota fits but no domain has room, a
preemption search per domain of the wish's level looks for victims on that domain's nodes whose eviction lets every
pod fit there, with the candidates, order and reasons of the quota searches (admission.preemption); the domain
needing the fewest victims (then the lowest-priority ones) wins. When the quota needs victims too, those holding
contested quota anywhere stay candidates. Partial admission shrinks the counts as for quota alone.
"""

from __future__ import annotations

from admission import partial
from admission.flavors import Assignment, FlavorAssigner, Mode, PodSetAssignment
from admission.never_fits import PODS
from admission.ordering import Entry
from admission.placement import Demand, Placer, WorkloadPlacement, per_pod_usage
from admission.preemption import PreemptionRequest, Target, find_targets
from admission.snapshot import Snapshot
from admission.workload import Workload
from quota.quantity import format_resource
from quota.tree import FlavorResource, Node


def involves_nodes(snapshot: Snapshot, assignment: Assignment) -> bool:
    """Whether some pod set of `assignment` landed on a flavor with a topology (needs a placement)."""
    placer = snapshot.placer
    if placer is None:
        return False
    placed = placer.topology_flavors
    return any(f in placed for ps in assignment.pod_sets for f in ps.flavors.values())


def _demands(placer: Placer, workload: Workload, assignment: Assignment) -> list[tuple[PodSetAssignment, Demand]]:
    by_name = {ps.name: ps for ps in workload.pod_sets}
    out = []
    for psa in assignment.pod_sets:
        demand = placer.demand(by_name[psa.name], psa.count, psa.flavors.values())
        if demand is not None:
            out.append((psa, demand))
    return out


def place_all(
    snapshot: Snapshot,
    workload: Workload,
    assignment: Assignment,
    scoped: str | None = None,
    scope: frozenset[str] | None = None,
) -> Demand | None:
    """Place every topology pod set of `assignment` (setting each one's `placement`), each seeing the ones before.

    Returns None when all are placed, else the demand of the first that is not (every placement is then cleared).
    `scope` restricts the pod set named `scoped` to those nodes."""
    placer = snapshot.placer
    assert placer is not None
    so_far = WorkloadPlacement()
    demands = _demands(placer, workload, assignment)
    for psa, demand in demands:
        found = placer.place(demand, so_far.usage, scope if psa.name == scoped else None)
        if found is None:
            for other, _ in demands:
                other.placement = None
            return demand
        psa.placement = found
        so_far.add(demand.pod_set, found)
    return None


def still_fits(snapshot: Snapshot, workload: Workload, assignment: Assignment) -> bool:
    """Whether every placed pod set's nodes still have room for its pods there (none missing a placement)."""
    placer, nodes = snapshot.placer, snapshot.nodes
    assert placer is not None and nodes is not None
    so_far = WorkloadPlacement()
    for psa, demand in _demands(placer, workload, assignment):
        if psa.placement is None or psa.placement.pods != psa.count:
            return False
        one = per_pod_usage(demand.pod_set.requests)
        for node, pods in psa.placement.nodes.items():
            state = nodes.node(node)
            if state is None or not state.schedulable:
                return False
            used, extra = nodes.used(node), so_far.usage.get(node, {})
            for resource, quantity in one.items():
                have = state.allocatable.get(resource)
                if have is None and resource == PODS:
                    continue
                if have is None or have - used.get(resource, 0) - extra.get(resource, 0) < quantity * pods:
                    return False
        so_far.add(demand.pod_set, psa.placement)
    return True


def bind_placement(snapshot: Snapshot, workload: Workload, assignment: Assignment) -> None:
    """Charge an admitted (or preempting) head's placement to the cycle's nodes: later heads see it taken."""
    if snapshot.nodes is None:
        return
    so_far = WorkloadPlacement()
    by_name = {ps.name: ps for ps in workload.pod_sets}
    for name, found in assignment.placements().items():
        so_far.add(by_name[name], found)
    for node, requests in so_far.usage.items():
        snapshot.nodes.bind(workload.name, node, requests)


def nominate(snapshot: Snapshot, workload: Workload, team: Node, assigner: FlavorAssigner, full: Assignment) -> Entry:
    """The entry of a head whose flavor assignment put some pod set on a topology flavor."""
    assert snapshot.placer is not None
    placer: Placer = snapshot.placer
    failed: list[Demand] = []
    never: list[tuple[Demand, str]] = []

    def hopeless(missing: Demand | None) -> bool:
        """Whether the pod set that found no room never could (checked only then: a head placed needs no check)."""
        reason = placer.never_fits(missing) if missing is not None else None
        if reason is not None and missing is not None:
            never.append((missing, reason))
        return reason is not None

    def attempt(assignment: Assignment) -> Entry | None:
        if assignment.mode is Mode.FIT:
            missing = place_all(snapshot, workload, assignment)
            if missing is None:
                return Entry(workload, team, assignment)
            if hopeless(missing):
                return None  # no victim could ever make room: none is searched for
            targets = _targets(snapshot, workload, team, assignment, missing)
            if not targets:
                failed.append(missing)
            return Entry(workload, team, assignment, targets) if targets else None
        if assignment.mode is Mode.PREEMPT:
            if not find_targets(snapshot, _quota_request(workload, team, assignment)):
                return None  # no victims for the quota alone: it waits as any such head does
            missing = place_all(snapshot, workload, assignment)
            if hopeless(missing):
                return None
            targets = _targets(snapshot, workload, team, assignment, missing)
            if not targets and missing is not None:
                failed.append(missing)
            return Entry(workload, team, assignment, targets) if targets else None
        return None

    entry = attempt(full)
    if entry is not None:
        return entry
    # The never-fits check counts a pod set at its smallest admissible count: fewer pods could not fit either.
    if not never and partial.can_shrink(workload.pod_sets):
        shrunk = partial.search(workload.pod_sets, lambda counts: attempt(assigner.assign(counts)))
        if shrunk is not None:
            return shrunk
    if never:
        _never_fits(full, *never[0])
    elif failed:
        _no_domain(full, failed[0])
    return Entry(workload, team, full)


def victims(snapshot: Snapshot, workload: Workload, team: Node, assignment: Assignment) -> list[Target]:
    """Victims for a head whose earlier victims went to other heads of the cycle (those are gone already)."""
    if assignment.mode is Mode.PREEMPT and not find_targets(snapshot, _quota_request(workload, team, assignment)):
        return []
    return _targets(snapshot, workload, team, assignment, place_all(snapshot, workload, assignment))


def _quota_request(workload: Workload, team: Node, assignment: Assignment) -> PreemptionRequest:
    return PreemptionRequest(workload, team, assignment.usage, assignment.contested)


def _targets(
    snapshot: Snapshot, workload: Workload, team: Node, assignment: Assignment, missing: Demand | None
) -> list[Target]:
    """Victims that let the head fit both its quota and a placement; [] when there are none.

    With every pod placed already (`missing` None) only the quota needs victims: the usual search, each of its
    steps also checking that a placement still exists. Otherwise one search per domain of the missing pod set's
    wish, among the candidates on that domain's nodes (then, if they are not enough, those holding contested quota
    as well)."""
    placer, nodes = snapshot.placer, snapshot.nodes
    assert placer is not None and nodes is not None
    quota_contested = assignment.contested
    if missing is None:
        request = PreemptionRequest(
            workload,
            team,
            assignment.usage,
            quota_contested,
            nodes_fit=lambda: place_all(snapshot, workload, assignment) is None,
        )
        quota_victims = find_targets(snapshot, request)
        if quota_victims:
            with snapshot.without(t.workload for t in quota_victims):
                place_all(snapshot, workload, assignment)
        return quota_victims
    # Victims on the domain's nodes hold the topology flavor's resources: those are contested too.
    flavor_frs: set[FlavorResource] = set()
    for psa in assignment.pod_sets:
        if psa.name == missing.pod_set.name:
            flavor_frs.update((flavor, resource) for resource, flavor in psa.flavors.items())
    contested = quota_contested | frozenset(flavor_frs)
    # Level by level as placement tries them (a `preferred` wish falls back to wider levels): the first level at
    # which some domain can be freed wins, so victims are never taken to free a wider domain than needed.
    for domains in placer.domain_levels(missing):
        found = _free_one_domain(snapshot, workload, team, assignment, missing, contested, domains)
        if found:
            return found
    return []


def _free_one_domain(
    snapshot: Snapshot,
    workload: Workload,
    team: Node,
    assignment: Assignment,
    missing: Demand,
    contested: frozenset[FlavorResource],
    domains: list[frozenset[str]],
) -> list[Target]:
    """The victims of the best search among `domains` (fewest victims, then lowest priorities, then the first), with
    the head placed in that domain; [] when no search frees one."""
    nodes = snapshot.nodes
    assert nodes is not None
    quota_contested = assignment.contested
    best: tuple[tuple[int, int, int], list[Target], frozenset[str]] | None = None
    for index, domain in enumerate(domains):
        if not any(nodes.owners_on(node) for node in domain):
            continue  # nothing runs there: no victim could free it

        def inside(candidate: Workload, domain: frozenset[str] = domain) -> bool:
            on = nodes.nodes_of(candidate.name)
            return bool(on) and not on.isdisjoint(domain)

        def inside_or_quota(candidate: Workload) -> bool:
            return inside(candidate) or any(fr in quota_contested for fr in snapshot.usage_of(candidate))

        def fits(domain: frozenset[str] = domain) -> bool:
            return place_all(snapshot, workload, assignment, missing.pod_set.name, domain) is None

        # The domain's own workloads first: taking quota back from elsewhere first could use up what the rules let
        # it reclaim (a borrower back at its nominal quota is no candidate) before the domain is free. Only when
        # they cannot do it alone, the holders of contested quota anywhere too.
        found: list[Target] = []
        for keep in (inside, inside_or_quota) if quota_contested else (inside,):
            found = find_targets(snapshot, PreemptionRequest(workload, team, assignment.usage, contested, fits, keep))
            if found:
                break
        if not found:
            continue
        rank = (len(found), max(t.workload.priority for t in found), index)
        if best is None or rank < best[0]:
            best = (rank, found, domain)
    if best is None:
        return []
    _, found, domain = best
    with snapshot.without(t.workload for t in found):
        place_all(snapshot, workload, assignment, missing.pod_set.name, domain)
    return found


def _never_fits(assignment: Assignment, demand: Demand, reason: str) -> None:
    """Mark the pod set that no domain its wish accepts could ever hold, whatever is evicted (as Kueue marks such a
    workload inadmissible): the head does not fit, and says it never will on these nodes."""
    for psa in assignment.pod_sets:
        if psa.name == demand.pod_set.name:
            psa.reasons.append(reason)
            psa.failed = True


def _no_domain(assignment: Assignment, demand: Demand) -> None:
    """Mark the pod set no domain could take: the head does not fit (and says why)."""
    pod_set = demand.pod_set
    for psa in assignment.pod_sets:
        if psa.name != pod_set.name:
            continue
        wish = pod_set.topology
        each = ", ".join(f"{format_resource(r, q)} {r}" for r, q in sorted(pod_set.requests.items()) if q > 0)
        room = f"room for {demand.count} pods ({each or 'no resources'} each), node by node"
        if wish is not None and wish.required:
            psa.reasons.append(f"no {wish.level} domain of topology {demand.topology.name} has {room}")
        else:
            psa.reasons.append(f"the nodes of topology {demand.topology.name} have no {room}")
        psa.failed = True
