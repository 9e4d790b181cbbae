"""Read-only routes over the controller's live state: the cohort tree, team queues, workloads, credits."""

from __future__ import annotations

from admin.api import Context, Router, controller_of, runtime_of
from admin.models import (
    CohortView,
    CreditList,
    CreditView,
    QueueList,
    QueueQuery,
    TeamQueueView,
    TeamView,
    TreeView,
    WhoAmI,
    WorkloadList,
    WorkloadQuery,
    WorkloadView,
)
from admin.problems import ApiProblem
from admin.routes_budgets import budget_views
from admin.views import kind_and_namespace, lent_amounts, node_resources, team_queue_view, workload_view
from queues.read_model import ControllerReader

router = Router()


@router.add("GET", "/api/v1/whoami", summary="Who the token belongs to", response=WhoAmI, tag="auth")
async def whoami(ctx: Context) -> WhoAmI:
    return WhoAmI(name=ctx.principal.name, role=ctx.principal.role)


@router.add(
    "GET",
    "/api/v1/tree",
    summary="The cohort tree with quota, usage, borrowing and lending",
    response=TreeView,
    tag="quota",
    statuses=(503,),
)
async def tree(ctx: Context) -> TreeView:
    controller = controller_of(ctx)
    manager = controller.manager
    live = manager.live
    lent = lent_amounts(live)
    counts = _state_counts(controller)
    cohorts = [
        CohortView(
            name=node.name,
            parent=node.parent.name if node.parent else None,
            cohorts=[c.name for c in node.child_cohorts],
            teams=[t.name for t in node.child_teams],
            weight=str(node.spec.fair_sharing.weight) if node.spec is not None else "1",
            resources=node_resources(live, node, lent.get(node.name, {})),
        )
        for node in live.cohorts.values()
    ]
    now = runtime_of(ctx).now()
    teams = [_team_view(controller, name, lent, counts, now) for name in live.teams]
    roots = [n.name for n in (*live.cohorts.values(), *live.teams.values()) if n.parent is None]
    return TreeView(roots=roots, cohorts=cohorts, teams=teams, fair_sharing=live.fair_sharing)


@router.add(
    "GET", "/api/v1/teams/{team}", summary="One team's quota and usage", response=TeamView, tag="quota", statuses=(503,)
)
async def team(ctx: Context) -> TeamView:
    controller = controller_of(ctx)
    name = ctx.path("team")
    if name not in controller.manager.live.teams:
        raise ApiProblem(404, f"no team named {name!r}")
    lent = lent_amounts(controller.manager.live)
    return _team_view(controller, name, lent, _state_counts(controller), runtime_of(ctx).now())


def _state_counts(controller: ControllerReader) -> dict[tuple[str, str], int]:
    manager = controller.manager
    counts: dict[tuple[str, str], int] = {}
    for name, state in manager.state.items():
        key = (manager.workloads[name].team, str(state))
        counts[key] = counts.get(key, 0) + 1
    return counts


def _team_view(
    controller: ControllerReader,
    name: str,
    lent: dict[str, dict[tuple[str, str], int]],
    counts: dict[tuple[str, str], int],
    now: int,
) -> TeamView:
    manager = controller.manager
    live = manager.live
    node = live.teams[name]
    share = live.dominant_resource_share(node)
    queue = manager.queues[name]
    owners = {(name, False), *((a.name, True) for a in node.ancestors())}
    restriction = controller.budgets.restrictions.get(name)
    return TeamView(
        name=name,
        parent=node.parent.name if node.parent else None,
        queues=list(node.team.queues),
        queueing_strategy=str(node.team.queueing_strategy),
        weight=str(node.team.fair_sharing.weight),
        weighted_share=None if share.infinite else float(share.value),
        pending=len(queue),
        inadmissible=len(queue.inadmissible),
        admitted=counts.get((name, "admitted"), 0),
        evicting=counts.get((name, "evicting"), 0),
        resources=node_resources(live, node, lent.get(name, {})),
        budgets=budget_views(s for s in controller.budgets.current(now) if (s.owner, s.cohort) in owners),
        budget_restriction=restriction.reason if restriction is not None else None,
    )


@router.add(
    "GET",
    "/api/v1/queues",
    summary="Pending workloads per team, in admission order",
    response=QueueList,
    query=QueueQuery,
    tag="queues",
    statuses=(503,),
)
async def queues(ctx: Context) -> QueueList:
    controller = controller_of(ctx)
    positions = controller.manager.positions()
    return QueueList(
        teams=[team_queue_view(controller, t, ctx.query.limit, positions) for t in controller.manager.queues]
    )


@router.add(
    "GET",
    "/api/v1/queues/{team}",
    summary="One team's pending workloads in order",
    response=TeamQueueView,
    query=QueueQuery,
    tag="queues",
    statuses=(503,),
)
async def team_queue(ctx: Context) -> TeamQueueView:
    controller = controller_of(ctx)
    name = ctx.path("team")
    if name not in controller.manager.queues:
        raise ApiProblem(404, f"no team named {name!r}")
    return team_queue_view(controller, name, ctx.query.limit, controller.manager.positions())


@router.add(
    "GET",
    "/api/v1/workloads",
    summary="List workloads the controller knows",
    response=WorkloadList,
    query=WorkloadQuery,
    tag="workloads",
    statuses=(503,),
)
async def workloads(ctx: Context) -> WorkloadList:
    controller = controller_of(ctx)
    manager = controller.manager
    q: WorkloadQuery = ctx.query
    positions = manager.positions()
    order = {name: i for i, name in enumerate(positions)}
    names = []
    for name, workload in manager.workloads.items():
        kind, namespace = kind_and_namespace(name, workload.team)
        if q.kind is not None and kind != q.kind:
            continue
        if q.team is not None and workload.team != q.team:
            continue
        if q.queue is not None and workload.queue != q.queue:
            continue
        if q.state is not None and str(manager.state[name]) != q.state:
            continue
        if q.namespace is not None and namespace != q.namespace:
            continue
        names.append(name)
    # Running work first (by admission), then pending in queue order: what an operator scans for.
    names.sort(key=lambda n: (n in order, order.get(n, 0), manager.workloads[n].created_at, n))
    page = names[q.offset : q.offset + q.limit]
    end = q.offset + len(page)
    return WorkloadList(
        total=len(names),
        limit=q.limit,
        offset=q.offset,
        next_offset=end if end < len(names) else None,
        items=[workload_view(controller, n, positions) for n in page],
    )


@router.add(
    "GET",
    "/api/v1/credits",
    summary="Fair-share credits per team",
    response=CreditList,
    tag="fair-share",
    statuses=(503,),
)
async def credits(ctx: Context) -> CreditList:
    controller = controller_of(ctx)
    now = runtime_of(ctx).now()
    book = controller.credits.credits(now)
    return CreditList(
        at=now,
        teams=[
            CreditView(
                team=team,
                usage=str(c.usage),
                usage_share=str(c.usage_share),
                share=str(c.share),
                factor=str(c.factor),
                credit=str(c.credit),
            )
            for team, c in sorted(book.items())
        ],
    )


def live_view(ctx: Context, name: str) -> WorkloadView | None:
    controller = runtime_of(ctx).controller
    if controller is None or name not in controller.manager.workloads:
        return None
    return workload_view(controller, name)
