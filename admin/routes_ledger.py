"""Reads of the ledger: usage reports (JSON or CSV) and the audit log."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

from aiohttp import web

from accounting import repository
from accounting.reports import usage_report
from admin.api import Context, Router, engine_of, runtime_of
from admin.models import AuditItem, AuditList, AuditQuery, UsageQuery, UsageReportView, UsageRowView
from admin.problems import ApiProblem

router = Router()
_CSV = {"text/csv": {"schema": {"type": "string"}}}


def _aware(value: datetime) -> datetime:
    return value if value.utcoffset() is not None else value.replace(tzinfo=UTC)


@router.add(
    "GET",
    "/api/v1/reports/usage",
    summary="Resource usage per team, flavor or day (JSON or CSV)",
    response=UsageReportView,
    query=UsageQuery,
    tag="reports",
    extra_content=_CSV,
    statuses=(503,),
)
async def usage(ctx: Context) -> UsageReportView | web.Response:
    q: UsageQuery = ctx.query
    start, end = _aware(q.start), _aware(q.end)
    if start >= end:
        raise ApiProblem(400, f"from ({start.isoformat()}) must be before to ({end.isoformat()})")
    try:
        rows = await usage_report(
            engine_of(ctx),
            start,
            end,
            by=q.by,
            resource=q.resource,
            now=datetime.fromtimestamp(runtime_of(ctx).now() / 1000, UTC),
        )
    except (ValueError, OverflowError) as exc:
        raise ApiProblem(400, str(exc)) from None
    view = UsageReportView(
        start=start,
        end=end,
        by=q.by,
        rows=[
            UsageRowView(key=r.key, resource=r.resource, milli_seconds=str(r.milli_seconds), hours=str(r.hours))
            for r in rows
        ],
    )
    if q.format == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow([q.by, "resource", "milli_seconds", "hours"])
        for row in view.rows:
            writer.writerow([row.key, row.resource, row.milli_seconds, row.hours])
        return web.Response(text=out.getvalue(), content_type="text/csv")
    return view


@router.add(
    "GET",
    "/api/v1/audit",
    summary="The audit log, newest first",
    response=AuditList,
    query=AuditQuery,
    tag="audit",
    statuses=(503,),
)
async def audit_log(ctx: Context) -> AuditList:
    rows = await repository.audit_log(engine_of(ctx), actor=ctx.query.actor, limit=ctx.query.limit)
    return AuditList(
        items=[
            AuditItem(actor=r.actor, action=r.action, target=r.target, before=r.before, after=r.after, at=r.at)
            for r in rows
        ]
    )
