"""GPU-hour budgets: every budget's spending in its current window, and what spent ones restrict."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from admin.api import Context, Router, controller_of, runtime_of
from admin.models import BudgetList, BudgetView
from quota.budgets import BudgetStatus, format_hours

router = Router()


@router.add(
    "GET",
    "/api/v1/budgets",
    summary="Budgets of teams and cohorts: spent, remaining, and the restrictions of spent ones",
    response=BudgetList,
    tag="quota",
    statuses=(503,),
)
async def budgets(ctx: Context) -> BudgetList:
    controller = controller_of(ctx)
    now = runtime_of(ctx).now()
    return BudgetList(
        at=now,
        budgets=budget_views(controller.budgets.current(now)),
        restricted={team: r.reason for team, r in sorted(controller.budgets.restrictions.items())},
    )


def budget_views(found: Iterable[BudgetStatus]) -> list[BudgetView]:
    return [
        BudgetView(
            owner=s.owner,
            scope="cohort" if s.cohort else "team",
            resource=s.resource,
            window=s.window,
            start=_at(s.start),
            end=_at(s.end) if s.end is not None else None,
            limit_hours=format_hours(s.limit),
            spent_hours=format_hours(s.spent),
            remaining_hours=format_hours(s.remaining),
            limit=s.limit,
            spent=s.spent,
            percent=round(s.spent * 100 / s.limit, 3) if s.limit else 100.0,
            exhausted=s.exhausted,
            on_exhausted=s.on_exhausted.value,
            block_above=s.block_above.value,
            effect=s.effect(),
        )
        for s in found
    ]


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=(ms % 1000) * 1000)
