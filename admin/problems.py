"""Errors as RFC 9457 problem+json, and the middleware that turns every failure into one."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web

from admin.models import Problem

PROBLEM_TYPE = "application/problem+json"
log = logging.getLogger(__name__)


class ApiProblem(Exception):
    def __init__(self, status: int, detail: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors


def problem_response(
    status: int, detail: str, instance: str | None = None, errors: list[dict[str, Any]] | None = None
) -> web.Response:
    body = Problem(title=HTTPStatus(status).phrase, status=status, detail=detail, instance=instance, errors=errors)
    headers = {"WWW-Authenticate": 'Bearer realm="kuota"'} if status == 401 else None
    return web.Response(
        status=status,
        text=body.model_dump_json(exclude_none=True),
        content_type=PROBLEM_TYPE,
        headers=headers,
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def problem_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiProblem as exc:
        return problem_response(exc.status, exc.detail, request.path, exc.errors)
    except web.HTTPRequestEntityTooLarge as exc:
        return problem_response(413, f"the request body is too large: {exc.text}", request.path)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        detail = exc.text if exc.text and exc.text != exc.reason and not exc.text.startswith("<") else exc.reason
        if exc.status == 404:
            detail = f"no such endpoint: {request.path}"
        elif exc.status == 405:
            detail = f"{request.method} is not allowed on {request.path}"
        return problem_response(exc.status, detail or exc.reason, request.path)
    except Exception:
        log.exception("admin API: unexpected error on %s %s", request.method, request.path)
        return problem_response(500, "internal error; the server log has the details", request.path)
