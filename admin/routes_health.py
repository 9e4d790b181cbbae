"""Liveness, readiness, the OpenAPI document and /metrics: the only routes that answer without a token."""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from admin.api import Context, Router, runtime_of
from admin.auth import Access
from admin.models import Health, Readiness

router = Router()
REGISTRY_KEY = web.AppKey("registry", CollectorRegistry)
OPENAPI_KEY = web.AppKey("openapi", bytes)
PING_TIMEOUT_S = 2.0


@router.add("GET", "/healthz", summary="Liveness", access=Access.PUBLIC, response=Health, tag="health")
async def healthz(ctx: Context) -> Health:
    return Health(status="ok")


@router.add(
    "GET",
    "/readyz",
    summary="Readiness: config loaded and ledger healthy",
    access=Access.PUBLIC,
    response=Readiness,
    tag="health",
    statuses=(503,),
    same_body=(503,),
)
async def readyz(ctx: Context) -> web.Response:
    runtime = runtime_of(ctx)
    config_loaded = runtime.config is not None
    ledger = runtime.ledger
    backlog = 0
    detail = None
    state = "absent"
    if ledger is not None:
        backlog = ledger.backlog
        try:
            async with asyncio.timeout(PING_TIMEOUT_S):
                ok = await ledger.ping()
        except (TimeoutError, RuntimeError):
            ok = False
        state = "healthy" if ok and ledger.healthy else "unhealthy"
        if state == "unhealthy":
            detail = ledger.last_error or "the ledger does not answer"
    loop = runtime.loop if runtime.leader else None
    scheduling = "standby" if loop is None else ("running" if loop.healthy else "failing")
    if scheduling == "failing" and loop is not None:
        detail = f"the scheduling loop keeps failing ({loop.failures} in a row): {loop.last_error}"
    ready = config_loaded and state != "unhealthy" and scheduling != "failing"
    body = Readiness(
        ready=ready,
        config_loaded=config_loaded,
        ledger=state,
        ledger_backlog=backlog,
        leader=bool(runtime.leader),
        scheduling=scheduling,
        detail=detail,
    )
    return web.Response(status=200 if ready else 503, text=body.model_dump_json(), content_type="application/json")


@router.add(
    "GET",
    "/metrics",
    summary="Prometheus metrics",
    access=Access.PUBLIC,
    response=None,
    tag="health",
    extra_content={"text/plain": {"schema": {"type": "string"}}},
)
async def metrics(ctx: Context) -> web.Response:
    data = generate_latest(ctx.app[REGISTRY_KEY])
    response = web.Response(body=data)
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


@router.add(
    "GET",
    "/openapi.json",
    summary="This API's OpenAPI document",
    access=Access.PUBLIC,
    response=None,
    tag="health",
    extra_content={"application/json": {"schema": {"type": "object"}}},
)
async def openapi(ctx: Context) -> web.Response:
    return web.Response(body=ctx.app[OPENAPI_KEY], content_type="application/json")
