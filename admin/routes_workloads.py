"""A workload's detail with its ledger history, operator actions (audited), and recent preemptions."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

import structlog

from accounting import repository
from accounting.events import AuditEntry, JsonValue
from accounting.records import PreemptionRecord
from admin.api import Context, Endpoint, Router, engine_of, runtime_of
from admin.auth import Access
from admin.estimates import ESTIMATES_KEY, estimate_view
from admin.models import (
    ActionRequest,
    ActionResult,
    AdmissionView,
    DetailQuery,
    EstimateView,
    HistoryEvent,
    PreemptionList,
    PreemptionQuery,
    PreemptionView,
    WorkloadDetailView,
)
from admin.ports import RuntimePort
from admin.problems import ApiProblem
from admin.routes_state import live_view
from queues.read_model import ControllerReader
from quota.quantity import format_resource

router = Router()
log = logging.getLogger(__name__)
actions = structlog.get_logger("kuota.admin")
WORKLOAD_PATH = "/api/v1/workloads/{namespace}/{name}"
KIND_WORKLOAD_PATH = "/api/v1/workloads/{kind}/{namespace}/{name}"


def workload_id(ctx: Context) -> str:
    """The workload a path names: `KIND/NAMESPACE/NAME` on the kind's path; on the short path `NAMESPACE/NAME` as
    it is (simulated workloads are named so; `_` stands for no namespace), else the Job of that name, which is
    what a user means by `ns/name` on a cluster."""
    kind, namespace, name = ctx.path_or_none("kind"), ctx.path("namespace"), ctx.path("name")
    if kind is not None and kind != "_":  # `_`: no kind, as on the short path
        return f"{kind}/{namespace}/{name}"
    short = name if namespace == "_" else f"{namespace}/{name}"
    if namespace == "_" or live_view(ctx, short) is not None:
        return short
    job = f"Job/{short}"
    return job if live_view(ctx, job) is not None else short


def _on_both_paths(method: str, suffix: str, **options: Any) -> Callable[[Endpoint], Endpoint]:
    """Register an endpoint on the workload's kind-qualified path and on the short one."""

    def decorate(endpoint: Endpoint) -> Endpoint:
        router.add(method, KIND_WORKLOAD_PATH + suffix, **options)(endpoint)
        return router.add(method, WORKLOAD_PATH + suffix, **options)(endpoint)

    return decorate


@_on_both_paths(
    "GET",
    "",
    summary="A workload with its full event history",
    response=WorkloadDetailView,
    query=DetailQuery,
    tag="workloads",
    statuses=(503,),
)
async def detail(ctx: Context) -> WorkloadDetailView:
    name = workload_id(ctx)
    live = live_view(ctx, name)
    estimate = (
        await _estimate(ctx, name) if live is not None and live.state == "pending" and ctx.query.estimate else None
    )
    recorded = None
    if runtime_of(ctx).ledger is not None:
        recorded = await repository.workload_detail(engine_of(ctx), name)
        if live is None and recorded is None and name.count("/") == 1:
            name = f"Job/{name}"  # a Job the ledger knows, named as users type it
            recorded = await repository.workload_detail(engine_of(ctx), name)
    if live is None and recorded is None:
        raise ApiProblem(404, f"no workload {name!r} (neither running, pending nor in the ledger)")
    if recorded is None:
        return WorkloadDetailView(workload=live, admissions=[], preemptions=[], history=[], estimate=estimate)
    return WorkloadDetailView(
        workload=live,
        estimate=estimate,
        admissions=[
            AdmissionView(
                attempt=a.attempt,
                team=a.team,
                admitted_at=a.admitted_at,
                ended_at=a.ended_at,
                end_reason=a.end_reason,
                usage=[
                    {"flavor": f, "resource": r, "value": format_resource(r, v), "milli": v}
                    for (f, r), v in sorted(a.usage.items())
                ],
            )
            for a in recorded.admissions
        ],
        preemptions=[preemption_view(p) for p in recorded.preemptions],
        history=[HistoryEvent(kind=e.kind, at=e.at, data=e.data) for e in recorded.history],
    )


async def _estimate(ctx: Context, name: str) -> EstimateView | None:
    runtime = runtime_of(ctx)
    controller = runtime.controller
    if controller is None:
        return None
    ledger = runtime.ledger
    return await estimate_view(
        ctx.app[ESTIMATES_KEY],
        runtime.estimator,
        controller,
        name,
        config_text=runtime.config_text,
        now_ms=runtime.now(),
        ledger_url=ledger.url if ledger is not None else None,
    )


def preemption_view(p: PreemptionRecord) -> PreemptionView:
    lost = p.lost_gpu_milliseconds
    return PreemptionView(
        victim=p.victim,
        victim_attempt=p.victim_attempt,
        victim_team=p.victim_team,
        preemptor=p.preemptor,
        reason=p.reason,
        issued_at=p.issued_at,
        checkpoint_via=p.checkpoint_via,
        checkpoint_requested_at=p.checkpoint_requested_at,
        checkpoint_acked_at=p.checkpoint_acked_at,
        checkpoint_timed_out_at=p.checkpoint_timed_out_at,
        checkpoint_id=p.checkpoint_id,
        suspended_at=p.suspended_at,
        requeued_at=p.requeued_at,
        lost_gpu_seconds=None if lost is None else f"{lost / 1000:.3f}",
        node=p.node,
    )


@router.add(
    "GET",
    "/api/v1/preemptions",
    summary="Recent preemptions, newest first",
    response=PreemptionList,
    query=PreemptionQuery,
    tag="workloads",
    statuses=(503,),
)
async def preemptions(ctx: Context) -> PreemptionList:
    rows = await repository.list_preemptions(engine_of(ctx), team=ctx.query.team, limit=ctx.query.limit)
    return PreemptionList(items=[preemption_view(p) for p in rows])


Action = Literal["hold", "release", "preempt"]


async def _act(ctx: Context, action: Action) -> ActionResult:
    runtime = runtime_of(ctx)
    name = workload_id(ctx)
    controller = runtime.controller
    if controller is None or not runtime.leader:
        raise ApiProblem(503, "this replica is not the leader; send actions to the leader")
    if name not in controller.manager.workloads:
        raise ApiProblem(404, f"no live workload {name!r}")
    team = controller.manager.workloads[name].team
    if not ctx.principal.may(Access.TEAM_ACTION, team):
        raise ApiProblem(403, f"{ctx.principal.name} ({ctx.principal.role}) may not {action} {team}'s workloads")
    before = _snapshot(controller, name)
    actor = ctx.principal.name
    act = {"hold": runtime.hold, "release": runtime.release, "preempt": runtime.preempt}[action]
    try:
        act(name, actor)
    except KeyError:
        raise ApiProblem(404, f"no live workload {name!r}") from None
    except ValueError as exc:
        raise ApiProblem(409, f"cannot {action} {name}: {exc}") from None
    after = _snapshot(controller, name)
    reason = ctx.body.reason if ctx.body is not None else None
    audit(runtime, actor, action, name, before, {**after, "reason": reason} if reason else after)
    return ActionResult(workload=name, action=action, actor=actor, before=before, after=after)


def _snapshot(controller: ControllerReader, name: str) -> dict[str, JsonValue]:
    manager = controller.manager
    if name not in manager.workloads:
        return {"state": "gone"}
    return {"state": str(manager.state[name]), "held": name in manager.held}


def audit(runtime: RuntimePort, actor: str, action: str, target: str, before: JsonValue, after: JsonValue) -> None:
    entry = AuditEntry(actor=actor, action=action, target=target, before=before, after=after, at=datetime.now(UTC))
    # One log line per action, whatever else records it (the ledger's audit table, when there is a ledger).
    actions.info("admin_action", actor=actor, action=action, target=target, before=before, after=after,
                 recorded=runtime.ledger is not None)  # fmt: skip
    if runtime.ledger is not None:
        runtime.ledger.record(entry)


@_on_both_paths(
    "POST",
    "/hold",
    summary="Hold a pending workload",
    access=Access.TEAM_ACTION,
    response=ActionResult,
    body=ActionRequest,
    tag="actions",
    statuses=(409, 503),
)
async def hold(ctx: Context) -> ActionResult:
    return await _act(ctx, "hold")


@_on_both_paths(
    "POST",
    "/release",
    summary="Release a held workload",
    access=Access.TEAM_ACTION,
    response=ActionResult,
    body=ActionRequest,
    tag="actions",
    statuses=(409, 503),
)
async def release(ctx: Context) -> ActionResult:
    return await _act(ctx, "release")


@_on_both_paths(
    "POST",
    "/preempt",
    summary="Preempt an admitted workload, with its checkpoint",
    access=Access.TEAM_ACTION,
    response=ActionResult,
    body=ActionRequest,
    tag="actions",
    statuses=(409, 503),
)
async def preempt(ctx: Context) -> ActionResult:
    return await _act(ctx, "preempt")
