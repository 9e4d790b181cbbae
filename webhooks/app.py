"""The aiohttp application: AdmissionReview endpoints for every enabled kind, plus health and readiness.

One generic handler per webhook serves every kind: the path names the kind's API resource
(`/mutate/{group}/{version}/{plural}`, `core` for the core group), and the kind's module does the rest. Pods
(`/mutate/core/v1/pods`) are reviewed for whichever enabled kind claims each one (webhooks/pods.py). The paths of
the first version's configurations (`/mutate/batch/v1/job`) still serve Jobs, so an upgrade needs no new webhook
configuration.

Every failure mode answers with something the API server can report: 400 with a Status for a body that is not a
review, a well-formed denial for a review of a wrong object, and a denial (never a 500) if a rule itself breaks,
because with failurePolicy Fail an error and a denial block the same Job, but only a denial says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import structlog
from aiohttp import web

from webhooks.mutate import mutate
from webhooks.pods import for_pods
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
from webhooks.validate import validate
from workloads.gates import GATED_POD
from workloads.kind import JobKind
from workloads.kinds.job import JOB


def review_path(endpoint: str, kind: JobKind) -> str:
    """The path the webhook configuration names for `kind`: /mutate/batch/v1/jobs, /validate/ray.io/v1/rayjobs."""
    return f"/{endpoint}/{kind.group or 'core'}/{kind.version}/{kind.plural}"


MUTATE_PATH = review_path("mutate", JOB)
VALIDATE_PATH = review_path("validate", JOB)
LEGACY_PATHS = {"mutate": "/mutate/batch/v1/job", "validate": "/validate/batch/v1/job"}

#: Object and oldObject of a Job near etcd's 1.5 MiB limit, with room for the review around them.
MAX_BODY_BYTES = 8 * 1024 * 1024

#: Reviews larger than this are answered off the event loop. A real Job's review is a few KiB and is answered in
#: well under a millisecond on the loop; one near the body cap (thousands of containers) takes 0.1 s or more of
#: parsing and rules, which on the loop would hold every other review and /healthz for that long.
LARGE_REVIEW_BYTES = 256 * 1024

#: Large reviews are read and answered one at a time, by one thread: a flood of them waits its turn (the senders
#: held back by TCP flow control, not buffered here), and the loop keeps answering small reviews and probes.
LARGE_REVIEW_THREADS = 1

Rule = Callable[[JobKind, AdmissionRequest, WebhookState], Decision]
RULES: dict[str, Rule] = {"mutate": mutate, "validate": validate}

log = structlog.get_logger("kuota.webhook")


def make_app(state: WebhookState, observe: Callable[[str, float], None] | None = None) -> web.Application:
    """The webhook application; `observe(endpoint, seconds)` is told how long each review took (metrics)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    large = LargeReviews()

    async def stop_large(_: web.Application) -> None:
        large.threads.shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(stop_large)
    for endpoint, rule in RULES.items():
        # Pods first: their path would match the generic route, and they are reviewed as the kind claiming each.
        pods_path = review_path(endpoint, GATED_POD)
        pods = _review_handler(endpoint, for_pods(rule), state, observe, _always(GATED_POD), large)
        app.router.add_post(pods_path, pods)
        # The kinds served are fixed for the process's life, so each gets its path as a plain route: aiohttp finds
        # those by a lookup, where the generic route below costs a regular expression per review (about 4 of the
        # 93 µs a review cost in bench/webhook.py). The generic route answers paths of kinds that are not enabled.
        for kind in state.kinds:
            path = review_path(endpoint, kind)
            if path != pods_path:
                app.router.add_post(path, _review_handler(endpoint, rule, state, observe, _always(kind), large))
        handler = _review_handler(endpoint, rule, state, observe, _by_path(state), large)
        app.router.add_post(f"/{endpoint}/{{group}}/{{version}}/{{plural}}", handler)
        legacy = _review_handler(endpoint, rule, state, observe, _legacy(state), large)
        app.router.add_post(LEGACY_PATHS[endpoint], legacy)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz_handler(state))
    return app


def answer(endpoint: str, rule: Rule, state: WebhookState, body: bytes, kind: JobKind | str = JOB) -> tuple[int, bytes]:
    """HTTP status and body for one review: the whole request path, synchronous and in memory.

    `kind` is the kind the path serves, or the path's resource when no enabled kind has it: the review is still
    answered (with a denial saying so), since the API server needs an answer to report.
    """
    try:
        review = parse_review(body)
    except ReviewError as exc:
        return 400, render_bad_request(str(exc))
    if isinstance(kind, str):
        return 200, render_response(review.uid, _not_enabled(kind, state))
    try:
        decision = rule(kind, review, state)
    except Exception:
        incident = uuid.uuid4().hex[:12]
        log.exception("review failed", endpoint=endpoint, uid=review.uid, incident=incident)
        decision = deny(
            f"kuota could not review this {kind.kind} (internal error {incident}); try again, and tell your cluster "
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


def _not_enabled(resource: str, state: WebhookState) -> Decision:
    return deny(
        f"kuota does not queue {resource[:120]} here (it queues: {', '.join(state.kinds.names())}); enable the kind "
        "in the quota file's jobKinds, or remove it from the rules of kuota's webhook configuration",
        code=400,
        reason="BadRequest",
    )


Resolve = Callable[[web.Request], JobKind | str]
"""The kind a request's path serves, or the path's resource when no enabled kind has it."""


def _by_path(state: WebhookState) -> Resolve:
    def resolve(request: web.Request) -> JobKind | str:
        info = request.match_info
        group = "" if info["group"] == "core" else info["group"]
        found = state.kinds.by_resource(group, info["version"], info["plural"])
        return found if found is not None else f"{info['group']}/{info['version']} {info['plural']}"

    return resolve


#: kube-apiserver sends a review at once and waits at most 30 s (timeoutSeconds) for the answer.
BODY_TIMEOUT_S = 10.0


def _always(kind: JobKind) -> Resolve:
    return lambda _: kind


def _legacy(state: WebhookState) -> Resolve:
    return lambda _: JOB if JOB.kind in state.kinds else f"{JOB.api_version} {JOB.plural}"


def _review_handler(
    endpoint: str,
    rule: Rule,
    state: WebhookState,
    observe: Callable[[str, float], None] | None,
    resolve: Resolve,
    large: LargeReviews,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        started = time.perf_counter()
        kind = resolve(request)
        try:
            # A large body waits for its turn before it is read, so a flood of them is held back by TCP flow
            # control instead of being decrypted and buffered all at once (a chunked one is known only once read).
            length = request.content_length
            waits = length is not None and length > LARGE_REVIEW_BYTES
            async with large.turn if waits else contextlib.nullcontext():
                raw = await _read_body(request)
                if raw is None:
                    return _body_timed_out()
                if len(raw) > LARGE_REVIEW_BYTES:
                    status, body = await large.answer(endpoint, rule, state, raw, kind)
                else:
                    status, body = answer(endpoint, rule, state, raw, kind)
            return web.Response(body=body, status=status, content_type="application/json")
        finally:
            if observe is not None:
                observe(endpoint, time.perf_counter() - started)

    return handle


class LargeReviews:
    """The one thread that answers large reviews, and the turn a large review waits for before its body is read."""

    def __init__(self) -> None:
        self.threads = ThreadPoolExecutor(max_workers=LARGE_REVIEW_THREADS, thread_name_prefix="kuota-large-review")
        self.turn = asyncio.Semaphore(LARGE_REVIEW_THREADS)

    async def answer(
        self, endpoint: str, rule: Rule, state: WebhookState, body: bytes, kind: JobKind | str
    ) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.threads, answer, endpoint, rule, state, body, kind)


async def _read_body(request: web.Request) -> bytes | None:
    """The body, or None when it stops coming: such a body would hold this handler (and its connection) for good."""
    if request.content.is_eof():
        # The whole body has arrived (the usual case: kube-apiserver sends a review in one go), so reading cannot
        # wait; a timeout would cost a task, a timer and a turn of the loop per review for nothing.
        return await request.read()
    try:
        return await asyncio.wait_for(request.read(), BODY_TIMEOUT_S)
    except TimeoutError:
        return None


def _body_timed_out() -> web.Response:
    return web.Response(status=408, text=f"the review's body did not arrive within {BODY_TIMEOUT_S:.0f} s")


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def _readyz_handler(state: WebhookState) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def readyz(request: web.Request) -> web.Response:
        if state.ready:
            return web.Response(text="ok")
        return web.Response(text="not ready", status=503)

    return readyz
