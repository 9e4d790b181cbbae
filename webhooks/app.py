"""The webhook's routes: AdmissionReview endpoints for every enabled kind, plus health and readiness.

A path names the kind's API resource (`/mutate/{group}/{version}/{plural}`, `core` for the core group) and is
found by one dictionary lookup; the kind's module does the rest. A path of a kind that is not enabled is still
answered, with a denial that says what is queued. webhooks/http.py serves these routes over TLS. Pods
(`/mutate/core/v1/pods`) are reviewed for whichever enabled kind claims each one (webhooks/pods.py). The paths of
the first version's configurations (`/mutate/batch/v1/job`) still serve Jobs, so an upgrade needs no new webhook
configuration.

Every failure mode answers with something the API server can report: 400 with a Status for a body that is not a
review, a well-formed denial for a review of a wrong object, and a denial (never a 500) if a rule itself breaks,
because with failurePolicy Fail an error and a denial block the same Job, but only a denial says why.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import structlog

from queues.tasks import BackgroundTasks
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


@dataclass(frozen=True, slots=True)
class Review:
    """One review path: its webhook, its rule and the kind it serves (or the path's resource, when no enabled kind
    has it)."""

    endpoint: str
    rule: Rule
    state: WebhookState
    kind: JobKind | str
    observe: Callable[[str, float], None] | None

    def answer(self, body: bytes) -> tuple[int, bytes]:
        started = time.perf_counter()
        try:
            return answer(self.endpoint, self.rule, self.state, body, self.kind)
        finally:
            if self.observe is not None:
                self.observe(self.endpoint, time.perf_counter() - started)


class Routes:
    """What each path serves, found by a dictionary lookup: the kinds served are fixed for the process's life.

    `observe(endpoint, seconds)` is told how long each review took (metrics).
    """

    def __init__(self, state: WebhookState, observe: Callable[[str, float], None] | None = None) -> None:
        self.state = state
        self.observe = observe
        self.large = LargeReviews()
        self.reviews: dict[str, Review] = {}
        for endpoint, rule in RULES.items():
            for kind in state.kinds:
                self.reviews[review_path(endpoint, kind)] = Review(endpoint, rule, state, kind, observe)
            # Pods are reviewed as the kind claiming each (webhooks/pods.py), whether or not a kind is gated.
            self.reviews[review_path(endpoint, GATED_POD)] = Review(endpoint, for_pods(rule), state, GATED_POD, observe)
            legacy = JOB if JOB.kind in state.kinds else f"{JOB.api_version} {JOB.plural}"
            self.reviews[LEGACY_PATHS[endpoint]] = Review(endpoint, rule, state, legacy, observe)

    def review(self, path: str) -> Review | None:
        found = self.reviews.get(path)
        if found is not None:
            return found
        # /ENDPOINT/GROUP/VERSION/PLURAL of a kind that is not enabled: still answered, with a denial saying so.
        parts = path.split("/")
        if len(parts) != 5 or parts[0] or parts[1] not in RULES or not all(parts[2:]):
            return None
        _, endpoint, group, version, plural = parts
        resource = f"{group}/{version} {plural}"[:200]
        return Review(endpoint, RULES[endpoint], self.state, resource, self.observe)

    def probe(self, path: str) -> tuple[int, bytes] | None:
        if path == "/healthz":
            return 200, b"ok"
        if path == "/readyz":
            return (200, b"ok") if self.state.ready else (503, b"not ready")
        return None

    def known(self, path: str) -> bool:
        """A path this server serves with some method."""
        return self.review(path) is not None or self.probe(path) is not None


class LargeReviews:
    """The one thread that answers large reviews, and the turn a large review waits for before its body is read."""

    def __init__(self) -> None:
        self.threads = ThreadPoolExecutor(max_workers=LARGE_REVIEW_THREADS, thread_name_prefix="kuota-large-review")
        self.turn = asyncio.Semaphore(LARGE_REVIEW_THREADS)
        self._holders: set[object] = set()
        self.tasks = BackgroundTasks("webhook large reviews")
        """The connections' tasks that wait for the turn or for the thread."""

    def has_turn(self, holder: object) -> bool:
        return holder in self._holders

    async def take_turn(self, holder: object) -> None:
        await self.turn.acquire()
        self._holders.add(holder)

    def release(self, holder: object) -> None:
        """Give the turn back, if `holder` has it (a connection that closed while waiting, or one whose body had
        arrived whole, may not)."""
        if holder in self._holders:
            self._holders.discard(holder)
            self.turn.release()

    async def answer(self, review: Review, body: bytes) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.threads, review.answer, body)

    async def close(self) -> None:
        await self.tasks.close()
        self.threads.shutdown(wait=False, cancel_futures=True)
