"""Routes declared once with their models: the same declaration registers the aiohttp handler, validates the
query and the body, checks the caller's role, and produces the OpenAPI document."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from admin.auth import Access, Principal
from admin.ports import RuntimePort
from admin.problems import ApiProblem
from queues.read_model import ControllerReader

PRINCIPAL_KEY = web.RequestKey("principal", Principal)


@dataclass
class Context:
    request: web.Request
    principal: Principal
    query: Any
    body: Any

    @property
    def app(self) -> web.Application:
        return self.request.app

    def path(self, name: str) -> str:
        return self.request.match_info[name]

    def path_or_none(self, name: str) -> str | None:
        """A path parameter that only some of an endpoint's paths have."""
        return self.request.match_info.get(name)


Endpoint = Callable[[Context], Awaitable[BaseModel | web.StreamResponse]]


@dataclass
class Route:
    method: str
    path: str
    endpoint: Endpoint
    summary: str
    access: Access
    response: type[BaseModel] | None
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    tag: str = "kuota"
    extra_content: dict[str, Any] = field(default_factory=dict)
    """Other media types the endpoint can answer with (CSV)."""
    statuses: tuple[int, ...] = ()
    same_body: tuple[int, ...] = ()
    """Statuses answered with the response model rather than a problem (readiness says why it is not ready)."""


class Router:
    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(
        self,
        method: str,
        path: str,
        *,
        summary: str,
        access: Access = Access.READ,
        response: type[BaseModel] | None = None,
        query: type[BaseModel] | None = None,
        body: type[BaseModel] | None = None,
        tag: str = "kuota",
        extra_content: dict[str, Any] | None = None,
        statuses: tuple[int, ...] = (),
        same_body: tuple[int, ...] = (),
    ) -> Callable[[Endpoint], Endpoint]:
        def decorate(endpoint: Endpoint) -> Endpoint:
            self.routes.append(
                Route(
                    method,
                    path,
                    endpoint,
                    summary,
                    access,
                    response,
                    query,
                    body,
                    tag,
                    extra_content or {},
                    statuses,
                    same_body,
                )
            )
            return endpoint

        return decorate

    def install(self, app: web.Application) -> None:
        for route in self.routes:
            app.router.add_route(route.method, route.path, _handler(route))


#: A body that stops coming would hold its handler and connection for good.
BODY_TIMEOUT_S = 10.0


def _handler(route: Route) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        principal = request.get(PRINCIPAL_KEY) or Principal("anonymous", "none")
        if route.access is Access.ADMIN and not principal.may(Access.ADMIN):
            raise ApiProblem(403, f"{principal.name} ({principal.role}) may not {route.summary.lower()}: admin only")
        if route.access is Access.TEAM_ACTION and not principal.may(Access.TEAM_ACTION):
            raise ApiProblem(403, f"{principal.name} ({principal.role}) may not act on workloads: admin or team lead")
        query = _validate(route.query, dict(request.query), "query") if route.query else None
        body = None
        if route.body is not None:
            try:
                raw = await asyncio.wait_for(request.read(), BODY_TIMEOUT_S)
            except TimeoutError:
                raise ApiProblem(408, f"the request body did not arrive within {BODY_TIMEOUT_S:.0f} s") from None
            try:
                body = route.body.model_validate_json(raw or b"{}")
            except ValidationError as exc:
                raise ApiProblem(422, _summary(exc, "body"), _errors(exc)) from None
        result = await route.endpoint(Context(request, principal, query, body))
        if isinstance(result, web.StreamResponse):
            return result
        return web.Response(text=result.model_dump_json(), content_type="application/json")

    return handle


def _validate(model: type[BaseModel], data: dict[str, str], where: str) -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiProblem(400, _summary(exc, where), _errors(exc)) from None


def _summary(exc: ValidationError, where: str) -> str:
    parts = []
    for error in exc.errors()[:5]:
        loc = ".".join(str(p) for p in error["loc"]) or where
        parts.append(f"{where} {loc}: {error['msg']}")
    return "; ".join(parts)


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [{"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]


RUNTIME_KEY: web.AppKey[RuntimePort] = web.AppKey("runtime")


def runtime_of(ctx: Context) -> RuntimePort:
    return ctx.app[RUNTIME_KEY]


def controller_of(ctx: Context) -> ControllerReader:
    controller = runtime_of(ctx).controller
    if controller is None:
        raise ApiProblem(503, "this replica does not run the controller: ask the leader's admin API")
    return controller


def engine_of(ctx: Context) -> AsyncEngine:
    ledger = runtime_of(ctx).ledger
    if ledger is None:
        raise ApiProblem(503, "this process has no ledger (start it with a database)")
    try:
        return ledger.engine
    except RuntimeError:
        raise ApiProblem(503, "the ledger is not started yet") from None
