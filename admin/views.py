"""Turn the controller's live state into the API's models: the tree, queues and workloads."""

from __future__ import annotations

from datetime import UTC, datetime

from admin.models import PodSetView, Quantity, ResourceAmounts, TeamQueueView, WorkloadView
from queues.read_model import ControllerReader, QueueManagerReader
from quota.tree import Node, QuotaTree
from workloads.reading import split_key

PENDING_STATES = ("pending",)


def node_resources(tree: QuotaTree, node: Node, lent: dict[tuple[str, str], int]) -> list[ResourceAmounts]:
    keys = sorted(set(node.quotas) | set(node.subtree_quota) | {fr for fr, v in node.usage.items() if v})
    rows = []
    for fr in keys:
        flavor, resource = fr
        limits = node.quotas.get(fr)
        usage = node.usage.get(fr, 0)
        subtree = node.subtree_quota.get(fr, 0)
        rows.append(
            ResourceAmounts(
                flavor=flavor,
                resource=resource,
                nominal=Quantity.of(resource, limits.nominal if limits else 0),
                borrowing_limit=_maybe(resource, limits.borrowing_limit if limits else None),
                lending_limit=_maybe(resource, limits.lending_limit if limits else None),
                subtree_quota=Quantity.of(resource, subtree),
                usage=Quantity.of(resource, usage),
                borrowed=Quantity.of(resource, max(0, usage - subtree) if node.parent is not None else 0),
                lent=Quantity.of(resource, lent.get(fr, 0)),
                available=Quantity.of(resource, tree.available(node, fr)),
            )
        )
    return rows


def _maybe(resource: str, milli: int | None) -> Quantity | None:
    return None if milli is None else Quantity.of(resource, milli)


def lent_amounts(tree: QuotaTree) -> dict[str, dict[tuple[str, str], int]]:
    """Per node: how much of its unused lendable quota its siblings use now.

    A cohort's demand on its children is what they use above what they brought in, beyond the cohort's own pool;
    it is charged to the children with unused lendable quota in tree order, so the numbers add up (which lender
    "really" lent is not something the tree records).
    """
    out: dict[str, dict[tuple[str, str], int]] = {}
    for parent in tree.cohorts.values():
        children = [*parent.child_cohorts, *parent.child_teams]
        frs = {fr for child in children for fr in child.subtree_quota} | {
            fr for child in children for fr in child.usage
        }
        for fr in frs:
            own_pool = parent.quotas[fr].nominal if fr in parent.quotas else 0
            over = 0
            spare: list[tuple[Node, int]] = []
            for child in children:
                local = child.local_quota.get(fr, 0)
                brought = child.subtree_quota.get(fr, 0) - local
                used_above = max(0, child.usage.get(fr, 0) - local)
                if used_above > brought:
                    over += used_above - brought
                else:
                    spare.append((child, brought - used_above))
            demand = max(0, over - own_pool)
            for child, free in spare:
                if demand <= 0:
                    break
                taken = min(free, demand)
                demand -= taken
                if taken:
                    out.setdefault(child.name, {})[fr] = taken
    return out


def iso_time(ms: int) -> str:
    """A controller time (epoch milliseconds) as people read it: ISO 8601 in UTC, to the second."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def kind_and_namespace(name: str, team: str) -> tuple[str, str]:
    """The kind and namespace a workload's name carries: `KIND/NAMESPACE/NAME`, the older `NAMESPACE/NAME` (a
    Job), or a simulated Job's bare trace name (its team stands in for the namespace)."""
    try:
        kind, namespace, _ = split_key(name)
    except ValueError:
        return "Job", team
    return kind, namespace


def position_of(manager: QueueManagerReader, name: str) -> tuple[int, int] | None:
    """One pending workload's (position in its team, in its queue): its team's queue read up to it, not every
    queue (`positions()` is for pages of many)."""
    workload = manager.workloads[name]
    in_queue = 0
    for in_team, other in enumerate(manager.queues[workload.team].ordered(), start=1):
        in_queue += other.queue == workload.queue
        if other.name == name:
            return in_team, in_queue
    return None


def workload_view(
    controller: ControllerReader, name: str, positions: dict[str, tuple[int, int]] | None = None
) -> WorkloadView:
    manager = controller.manager
    workload = manager.workloads[name]
    state = str(manager.state[name])
    track = controller.tracking.get(name)
    admission = workload.admission
    kind, namespace = kind_and_namespace(name, workload.team)
    status = None
    reason = None
    position: tuple[int | None, int | None] = (None, None)
    if state == "pending":
        status = pending_status(manager, name)
        reason = manager.messages.get(name) or None
        if status == "held":
            reason = "held by an operator"
        elif status == "deactivated":
            reason = manager.messages.get(name) or "deactivated"
        elif status == "backoff" and track is not None:
            reason = f"requeued after eviction; eligible again at {iso_time(track.eligible_at)}"
        elif status == "awaiting-victims":
            victims = ", ".join(sorted(manager.awaiting.get(name, ())))
            reason = f"waiting for its victims to leave: {victims}"
        found = positions.get(name) if positions is not None else position_of(manager, name)
        if found is not None:
            position = found
    pod_sets = []
    for ps in workload.pod_sets:
        flavors = dict(admission.flavors.get(ps.name, {})) if admission else {}
        pod_sets.append(
            PodSetView(
                name=ps.name,
                count=ps.count,
                min_count=ps.min_count,
                requests={r: Quantity.of(r, v) for r, v in ps.requests.items()},
                flavors=flavors,
                admitted_count=admission.counts.get(ps.name, ps.count) if admission else None,
            )
        )
    return WorkloadView(
        name=name,
        kind=kind,
        namespace=namespace,
        team=workload.team,
        queue=workload.queue,
        priority=workload.priority,
        priority_class=workload.priority_class,
        state=state,
        status=status,
        position_in_team=position[0],
        position_in_queue=position[1],
        reason=reason,
        created_at=workload.created_at,
        admitted_at=admission.admitted_at if admission else None,
        held=name in manager.held,
        evictions=track.evictions if track is not None else 0,
        pod_sets=pod_sets,
    )


def pending_status(manager: QueueManagerReader, name: str) -> str:
    if name in manager.held:
        return "held"
    if name in manager.deactivated:
        return "deactivated"
    if name in manager.awaiting:
        return "awaiting-victims"
    if name in manager.delayed:
        return "backoff"
    if manager.inadmissible(name):
        return "inadmissible"
    return "active"


def team_queue_view(
    controller: ControllerReader, team: str, limit: int, positions: dict[str, tuple[int, int]]
) -> TeamQueueView:
    manager = controller.manager
    queue = manager.queues[team]
    spec = manager.live.teams[team].team
    names = [w.name for _, w in zip(range(limit), queue.ordered(), strict=False)]
    return TeamQueueView(
        team=team,
        queues=list(spec.queues),
        strategy=str(queue.strategy),
        pending=len(queue),
        inadmissible=len(queue.inadmissible),
        workloads=[workload_view(controller, n, positions) for n in names],
    )
