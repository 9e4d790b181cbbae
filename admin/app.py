"""The admin aiohttp application: routes, bearer-token middleware, problem+json errors, size limits."""

from __future__ import annotations

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from admin import (
    dashboard,
    routes_budgets,
    routes_config,
    routes_health,
    routes_ledger,
    routes_state,
    routes_workloads,
)
from admin.api import PRINCIPAL_KEY, RUNTIME_KEY, Route
from admin.auth import TokenStore, TooManyAttempts
from admin.estimates import ESTIMATES_KEY, EstimateRunner
from admin.metrics import REGISTRY, RuntimeCollector
from admin.openapi import openapi_document
from admin.parsing import PARSER_KEY, WHATIF_KEY, ProposalParser, WhatIfRunner
from admin.ports import RuntimePort
from admin.problems import Handler, problem_middleware, problem_response
from admin.routes_health import OPENAPI_KEY, REGISTRY_KEY

MAX_BODY_BYTES = 1024 * 1024
TOKENS_KEY = web.AppKey("tokens", TokenStore)
API_ROUTERS = (routes_health, routes_state, routes_workloads, routes_ledger, routes_config, routes_budgets)
_PUBLIC_PREFIXES = ("/healthz", "/readyz", "/metrics", "/openapi.json")


def all_routes() -> list[Route]:
    return [route for module in API_ROUTERS for route in module.router.routes]


def build_app(
    runtime: RuntimePort,
    tokens: TokenStore,
    registry: CollectorRegistry | None = None,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> web.Application:
    """`runtime` is a kuota.runtime.Runtime (see admin.ports.RuntimePort). The registry gets a collector that reads
    the runtime at scrape time; the controller's MetricsJournal must write to the same registry."""
    registry = registry if registry is not None else REGISTRY
    app = web.Application(middlewares=[problem_middleware, _auth_middleware], client_max_size=max_body_bytes)
    app[RUNTIME_KEY] = runtime
    app[TOKENS_KEY] = tokens
    parser = app[PARSER_KEY] = ProposalParser()
    runner = app[WHATIF_KEY] = WhatIfRunner()
    estimates = app[ESTIMATES_KEY] = EstimateRunner()

    async def close_parser(_: web.Application) -> None:
        parser.close()
        runner.close()
        estimates.close()

    app.on_cleanup.append(close_parser)
    app[REGISTRY_KEY] = registry
    registry.register(RuntimeCollector(runtime))
    routes = all_routes()
    app[OPENAPI_KEY] = orjson.dumps(openapi_document(routes))
    for module in API_ROUTERS:
        module.router.install(app)
    dashboard.install(app)
    return app


def _is_public(path: str) -> bool:
    return path in _PUBLIC_PREFIXES or path in dashboard.PUBLIC_PATHS


@web.middleware
async def _auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if _is_public(request.path):
        return await handler(request)
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return problem_response(401, "send a bearer token: Authorization: Bearer <token>", request.path)
    tokens = request.app[TOKENS_KEY]
    try:
        principal = await tokens.authenticate_async(token.strip())
    except TooManyAttempts as exc:
        response = problem_response(429, str(exc), request.path)
        response.headers["Retry-After"] = "1"
        return response
    if principal is None:
        return problem_response(401, tokens.why_empty() or "unknown token", request.path)
    request[PRINCIPAL_KEY] = principal
    return await handler(request)
