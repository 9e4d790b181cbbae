"""The aiohttp application: AdmissionReview endpoints for batch/v1 Jobs, plus health and readiness.

Every failure mode answers with something the API server can report: 400 with a Status for a body that is not a
review, a well-formed denial for a review of a wrong object, and a denial (never a 500) if a rule itself breaks,
because with failurePolicy Fail an error and a denial block the same Job, but only a denial says why.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from webhooks.mutate import mutate_job
from webhooks.review import (
    AdmissionRequest,
    Decision,
    ReviewError,
    deny,
    parse_review,
    render_bad_request,
    render_response,
)
from webhooks.state import WebhookState
from webhooks.validate import validate_job

MUTATE_PATH = "/mutate/batch/v1/job"
VALIDATE_PATH = "/validate/batch/v1/job"

#: Object and oldObject of a Job near etcd's 1.5 MiB limit, with room for the review around them.
MAX_BODY_BYTES = 8 * 1024 * 1024

Rule = Callable[[AdmissionRequest, WebhookState], Decision]

log = structlog.get_logger("kuota.webhook")


def make_app(state: WebhookState, observe: Callable[[str, float], None] | None = None) -> web.Application:
    """The webhook application; `observe(endpoint, seconds)` is told how long each review took (metrics)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post(MUTATE_PATH, _review_handler("mutate", mutate_job, state, observe))
    app.router.add_post(VALIDATE_PATH, _review_handler("validate", validate_job, state, observe))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz_handler(state))
    return app


def answer(endpoint: str, rule: Rule, state: WebhookState, body: bytes) -> tuple[int, bytes]:
    """HTTP status and body for one review: the whole request path, synchronous and in memory."""
    try:
        review = parse_review(body)
    except ReviewError as exc:
        return 400, render_bad_request(str(exc))
    try:
        decision = rule(review, state)
    except Exception:
        incident = uuid.uuid4().hex[:12]
        log.exception("review failed", endpoint=endpoint, uid=review.uid, incident=incident)
        decision = deny(
            f"kuota could not review this Job (internal error {incident}); try again, and tell your cluster "
            "admin if it keeps happening",
            code=500,
            reason="InternalError",
        )
    if not decision.allowed:
        log.info(
            "denied",
            endpoint=endpoint,
            uid=review.uid,
            operation=review.operation,
            namespace=review.namespace,
            name=review.name,
            user=review.username,
            dry_run=review.dry_run,
            code=decision.code,
            message=decision.message,
        )
    return 200, render_response(review.uid, decision)


def _review_handler(
    endpoint: str, rule: Rule, state: WebhookState, observe: Callable[[str, float], None] | None = None
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            status, body = answer(endpoint, rule, state, await request.read())
            return web.Response(body=body, status=status, content_type="application/json")
        finally:
            if observe is not None:
                observe(endpoint, time.perf_counter() - started)

    return handle


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def _readyz_handler(state: WebhookState) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def readyz(request: web.Request) -> web.Response:
        if state.ready:
            return web.Response(text="ok")
        return web.Response(text="not ready", status=503)

    return readyz
