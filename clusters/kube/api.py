"""The few Kubernetes API calls kuota makes, with client-side rate limiting and retries.

Every call waits for a token (QPS/burst, like client-go's flowcontrol) so a burst of admissions cannot flood the
API server, and retries 429, 500, 502-504 and broken connections with capped exponential backoff (honouring
Retry-After). Every other error status is raised as a typed KubeApiError (NotFound, Conflict, Gone, ...), so
callers catch what they mean instead of comparing numbers.
Objects of every kind are read and patched as plain JSON (`_preload_content=False`): the job framework's pure
reading wants the API's own mappings, and skipping the model classes keeps big lists cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

import aiohttp
import orjson
import structlog
from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from yarl import URL

from clusters.kube.direct import DirectRequests, segment
from workloads.kind import JobKind, JSONPatch

log = structlog.get_logger("kuota.kube")

Obj = dict[str, Any]
T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class Resource(Protocol):
    """What listing and watching read of a kind: a job kind, or a kind that job kinds refer to (a TrainJob's
    training runtimes, some of them cluster-scoped: listing and watching across namespaces serves both)."""

    @property
    def group(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def plural(self) -> str: ...


def _is_pods(kind: Resource) -> bool:
    """Whether `kind` is the core group's Pod (the one core object kuota reads and writes)."""
    return kind.group == "" and kind.plural == "pods"


def _is_nodes(kind: Resource) -> bool:
    """Whether `kind` is the core group's Node (which kuota only lists and watches, for node failures)."""
    return kind.group == "" and kind.plural == "nodes"


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved up; `take()` waits for one."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = max(rate, 1e-9)
        self.burst = max(1, burst)
        self.tokens = float(self.burst)
        self.clock = clock
        self.stamp = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def try_take(self) -> bool:
        self._refill()
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    async def take(self) -> None:
        if self.try_take():
            return
        # Reserve the token now (the count may go negative) and sleep until it exists: waiters queue up fairly.
        self.tokens -= 1
        await asyncio.sleep(-self.tokens / self.rate)


class KubeApiError(Exception):
    """The API server (or a proxy in front of it) answered with an error status.

    KubeApi raises one of the subclasses below wherever a status means something to kuota, so that callers say
    `except NotFound:` rather than compare numbers; any other status is a KubeApiError itself.
    """

    def __init__(self, status: int, body: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body
        self.retry_after = retry_after


class Forbidden(KubeApiError):
    """403: RBAC, or an admission webhook or policy, refuses the request."""


class NotFound(KubeApiError):
    """404: the object (or its namespace) is not there."""


class Conflict(KubeApiError):
    """409: written at an older resourceVersion, or created when it exists already."""


class Gone(KubeApiError):
    """410: the resourceVersion (or list continue token) asked for has been compacted away."""


class Invalid(KubeApiError):
    """422: the object, or the patch, does not validate."""


class TooManyRequests(KubeApiError):
    """429: the API server's priority and fairness throttles us; worth retrying (after Retry-After)."""


class ServerError(KubeApiError):
    """5xx. Itself (501, 505, ...) no retry will fix; its InternalError and Unavailable are worth retrying."""


class InternalError(ServerError):
    """500: worth retrying."""


class Unavailable(ServerError):
    """502, 503 or 504 from the API server or a proxy in front of it, or no status at all: worth retrying."""


_ERRORS: dict[int, type[KubeApiError]] = {
    0: Unavailable,  # kubernetes_asyncio's ApiException without a status: the request got no answer
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    500: InternalError,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}
RETRYABLE: tuple[type[KubeApiError], ...] = (TooManyRequests, InternalError, Unavailable)


def api_error(status: int, body: str, retry_after: float | None = None) -> KubeApiError:
    """The typed error for an answer with this status."""
    fallback = ServerError if status >= 500 else KubeApiError
    return _ERRORS.get(status, fallback)(status, body, retry_after)


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    # aiohttp's headers match names in any case; an answer read directly has them in lower case.
    raw = (headers.get("Retry-After") or headers.get("retry-after")) if headers else None
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def _translated(exc: ApiException) -> KubeApiError:
    body = exc.body if isinstance(exc.body, str) else (exc.body or b"").decode("utf-8", "replace")
    return api_error(int(exc.status or 0), body or str(exc.reason or ""), _retry_after(exc.headers))


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an error from KubeApi, for logs (decisions catch the typed errors)."""
    return exc.status if isinstance(exc, KubeApiError) else None


def retryable(exc: BaseException) -> bool:
    if isinstance(exc, KubeApiError):
        return isinstance(exc, RETRYABLE)
    return isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | ConnectionError)


def resolve_environment_once(api_client: client.ApiClient) -> None:
    """Look up the proxy and ~/.netrc for the API server once, instead of on every request.

    kubernetes_asyncio opens its aiohttp session with `trust_env=True`, so aiohttp reads the proxy variables and
    ~/.netrc in a worker thread, twice, for every request: under load that is a quarter of the controller's CPU.
    Every request goes to one API server, so the answer is the same each time: a proxy that applies to it becomes
    the client's explicit proxy (as a kubeconfig `proxy-url` would be), and the session stops looking. When ~/.netrc
    holds credentials for the API server's host (aiohttp would send them), nothing changes.
    """
    rest = getattr(api_client, "rest_client", None)
    session = getattr(rest, "pool_manager", None)
    if rest is None or not isinstance(session, aiohttp.ClientSession) or not session.trust_env:
        return
    host = api_client.configuration.host
    try:
        url = URL(host) if host else None
    except (TypeError, ValueError):
        return
    if url is None or url.host is None:
        return
    try:
        basicauth_from_netrc(netrc_from_env(), url.host)
        return  # credentials for the API server in ~/.netrc: leave aiohttp to send them
    except LookupError:
        pass
    if not rest.proxy:
        try:
            proxy, proxy_auth = get_env_proxy_for_url(url)
        except LookupError:
            proxy, proxy_auth = None, None
        if proxy is not None:
            rest.proxy = str(proxy)
            if proxy_auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}), "Proxy-Authorization": proxy_auth.encode()}
    session._trust_env = False


_PLAIN_JSON_ONLY = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


def pass_plain_json_through(api_client: client.ApiClient) -> None:
    """Send plain JSON bodies as they are instead of rebuilding them key by key first.

    kuota's bodies (patches, Events) are plain dicts; kubernetes_asyncio's `sanitize_for_serialization` walks every
    one recursively and rebuilds it unchanged, a tenth of the controller's CPU under load. A dict that orjson can
    encode without help (only dicts, lists, strings, numbers, booleans and None) is returned as it is; anything
    else (models, dates, subclasses) takes the client's own path.
    """
    original = api_client.sanitize_for_serialization

    def sanitize(obj: Any) -> Any:
        if type(obj) is dict:
            try:
                orjson.dumps(obj, option=_PLAIN_JSON_ONLY)
            except TypeError:
                return original(obj)
            return obj
        return original(obj)

    api_client.sanitize_for_serialization = sanitize  # type: ignore[method-assign]


class KubeApi:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        qps: float = 50.0,
        burst: int = 100,
        max_attempts: int = 8,
        backoff_s: float = 0.05,
        backoff_max_s: float = 5.0,
    ) -> None:
        self.api_client = api_client
        resolve_environment_once(api_client)
        pass_plain_json_through(api_client)
        # Typed as Any: kuota calls them with plain JSON bodies and `_preload_content=False`, which the generated
        # signatures do not describe.
        self.objects: Any = client.CustomObjectsApi(api_client)
        self.core: Any = client.CoreV1Api(api_client)
        self.coordination: Any = client.CoordinationV1Api(api_client)
        self.direct = DirectRequests(api_client)
        self.bucket = TokenBucket(qps, burst)
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s

    async def close(self) -> None:
        """Close the connections of the requests sent directly (the ApiClient's own are its owner's to close)."""
        await self.direct.close()

    async def call(
        self, what: str, fn: Callable[[], Awaitable[T]], *, attempts: int | None = None, limited: bool = True
    ) -> T:
        """Run `fn` under the rate limit, retrying what a retry can fix; other errors propagate at once.

        `limited=False` for calls budgeted elsewhere (Events), so that they never hold up admissions.
        """
        limit = attempts or self.max_attempts
        for attempt in range(1, limit + 1):
            if limited:
                await self.bucket.take()
            try:
                return await fn()
            except Exception as exc:
                if attempt == limit or not retryable(exc):
                    raise
                retry_after = exc.retry_after if isinstance(exc, KubeApiError) else None
                delay = retry_after or min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 1))
                delay *= 0.5 + random.random()  # jitter: replicas and Jobs do not retry in lockstep
                log.info("kube_retry", call=what, attempt=attempt, status=status_of(exc), error=str(exc)[:200])
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    # -- objects of every kind, as plain JSON ---------------------------------------------------------------------
    # Every kind kuota queues or reads lives under /apis/GROUP/VERSION (batch/v1 Jobs too), so the custom-objects
    # calls serve them all: one code path, whatever the kind. The one object of the core group kuota reads and
    # writes is the Pod (for the kinds held back pod by pod), through the core API's own calls.

    async def list_objects(
        self,
        kind: Resource,
        *,
        limit: int = 500,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        """Every object of `kind` in every namespace (paged; those `label_selector` and `field_selector` select,
        when given), and the list's resourceVersion to watch from."""
        items: list[Obj] = []
        token: str | None = None
        version = ""
        while True:
            kwargs: dict[str, Any] = {"limit": limit, "_preload_content": False}
            if label_selector:
                kwargs["label_selector"] = label_selector
            if field_selector:
                kwargs["field_selector"] = field_selector
            if token:
                kwargs["_continue"] = token
            page = await self.call(f"list {kind.plural}", self._lister(kind, kwargs))
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            version = meta.get("resourceVersion") or version
            token = meta.get("continue")
            if not token:
                return items, version

    def _list_call(self, kind: Resource, **kwargs: Any) -> Awaitable[Any]:
        if _is_pods(kind):
            return self.core.list_pod_for_all_namespaces(**kwargs)  # type: ignore[no-any-return]
        if _is_nodes(kind):
            return self.core.list_node(**kwargs)  # type: ignore[no-any-return]
        return self.objects.list_cluster_custom_object(  # type: ignore[no-any-return]
            kind.group, kind.version, kind.plural, **kwargs
        )

    def _lister(self, kind: Resource, kwargs: dict[str, Any]) -> Callable[[], Awaitable[Obj]]:
        return lambda: self._json(self._list_call(kind, **kwargs))

    async def watch_objects(
        self,
        kind: Resource,
        version: str,
        timeout_s: int,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Any:
        """The raw watch response for `kind` from `version`, with bookmarks (the caller reads and releases it)."""
        selected = {"label_selector": label_selector} if label_selector else {}
        if field_selector:
            selected["field_selector"] = field_selector
        return await self._list_call(
            kind,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_s,
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(sock_connect=10, sock_read=timeout_s + 30),
            **selected,
        )

    async def get_object(self, kind: JobKind, namespace: str, name: str) -> Obj:
        def get() -> Awaitable[Obj]:
            if _is_pods(kind):
                return self._json(self.core.read_namespaced_pod(name, namespace, _preload_content=False))
            return self._json(
                self.objects.get_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name, _preload_content=False
                )
            )

        return await self.call(f"get {kind.plural} {namespace}/{name}", get)

    async def delete_object(self, kind: JobKind, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete an object (pods only, so far: stopping a workload held back pod by pod), only while it is the one
        whose `uid` is given: a pod its operator created again under the same name is not the one to delete. Gone
        already, or replaced, is done."""
        if not _is_pods(kind):
            raise ValueError(f"kuota deletes pods only, not {kind.plural}")
        body = {"preconditions": {"uid": uid}} if uid else {}
        with contextlib.suppress(NotFound, Conflict):
            await self.call(
                f"delete {kind.plural} {namespace}/{name}",
                lambda: self._json(self.core.delete_namespaced_pod(name, namespace, body=body, _preload_content=False)),
            )

    async def patch_object(
        self,
        kind: JobKind,
        namespace: str,
        name: str,
        patch: Obj | Callable[[Obj | None], JSONPatch],
        *,
        reread: bool = True,
    ) -> None:
        """A merge patch (a mapping), or a JSON patch computed from the object as it is (a function of it).

        A JSON patch names list positions and expects what it changes to be there, so it is made from the object
        the watch last saw (the function gets None) and, on 409 or 422, from the object read again (the function
        gets it). A merge patch is absolute and is simply sent again after a conflict. Without `reread` the 409 or
        422 is raised instead (the caller waits for its watch: no `get` right needed). The patched object the
        server answers with is checked, not decoded: the watch brings it too, and every admission makes a patch.
        """
        what = f"patch {kind.plural} {namespace}/{name}"
        current: Obj | None = None
        for _ in range(5):
            body, content_type = (patch(current), JSON_PATCH) if callable(patch) else (patch, MERGE_PATCH)
            try:
                await self.call(what, self._patcher(kind, namespace, name, body, content_type))
                return
            except Invalid:
                if not callable(patch) or not reread:
                    raise
            except Conflict:
                if not reread:
                    raise
            current = await self.get_object(kind, namespace, name)
        raise Conflict(409, f"{kind.plural} {namespace}/{name} kept conflicting")

    def _patcher(
        self, kind: JobKind, namespace: str, name: str, body: Any, content_type: str
    ) -> Callable[[], Awaitable[bytes]]:
        # Sent directly (clusters/kube/direct.py): every admission makes one.
        if _is_pods(kind):
            path = f"/api/v1/namespaces/{segment(namespace)}/pods/{segment(name)}"
        else:
            path = f"/apis/{kind.group}/{kind.version}/namespaces/{segment(namespace)}/{kind.plural}/{segment(name)}"
        encoded = orjson.dumps(body)
        return lambda: self._direct("PATCH", path, encoded, content_type)

    async def _direct(self, method: str, path: str, body: bytes, content_type: str) -> bytes:
        """The body of a 2xx answer to a request sent directly; any other raises its KubeApiError."""
        answer = await self.direct.send(method, path, body, content_type)
        if not 200 <= answer.status <= 299:
            raise api_error(answer.status, answer.body.decode("utf-8", "replace"), _retry_after(answer.headers))
        return answer.body

    async def _json(self, pending: Awaitable[Any]) -> Obj:
        """The JSON body of a 2xx answer; any other raises its KubeApiError."""
        decoded: Obj = orjson.loads(await self._checked(pending))
        return decoded

    async def _checked(self, pending: Awaitable[Any]) -> bytes:
        """The body of a 2xx answer, as it came; any other raises its KubeApiError."""
        try:
            response = await pending
        except ApiException as exc:
            raise _translated(exc) from exc
        try:
            body: bytes = await response.read()
        finally:
            response.release()
        if not 200 <= response.status <= 299:
            raise api_error(response.status, body.decode("utf-8", "replace"), _retry_after(response.headers))
        return body

    # -- the Lease and the quota file's ConfigMap ---------------------------------------------------------------

    async def get_lease(self, namespace: str, name: str) -> Obj:
        return await self.call(
            "get lease",
            lambda: self._json(self.coordination.read_namespaced_lease(name, namespace, _preload_content=False)),
            attempts=2,
        )

    # Writes of the Lease are neither rate-limited nor retried: the elector tries again every retry period, and a
    # renewal must not queue behind admissions for a token.

    async def create_lease(self, namespace: str, body: Obj) -> Obj:
        return await self._json(self.coordination.create_namespaced_lease(namespace, body, _preload_content=False))

    async def replace_lease(self, namespace: str, name: str, body: Obj) -> Obj:
        return await self._json(
            self.coordination.replace_namespaced_lease(name, namespace, body, _preload_content=False)
        )

    async def label_pod(self, namespace: str, name: str, labels: dict[str, str | None]) -> None:
        """Set (or, with None, remove) labels on one pod: kuota marks its own pod as the leader's."""
        await self.call(
            f"label pod {namespace}/{name}",
            lambda: self._json(
                self.core.patch_namespaced_pod(
                    name, namespace, {"metadata": {"labels": labels}}, _content_type=MERGE_PATCH, _preload_content=False
                )
            ),
            attempts=3,
        )

    async def get_config_map(self, namespace: str, name: str) -> Obj:
        return await self.call(
            "get configmap",
            lambda: self._json(self.core.read_namespaced_config_map(name, namespace, _preload_content=False)),
        )

    async def create_event(self, namespace: str, body: Obj) -> None:
        """Sent directly (clusters/kube/direct.py), two for every Job; the answer is checked, not decoded."""
        path = f"/api/v1/namespaces/{segment(namespace)}/events"
        encoded = orjson.dumps(body)
        await self.call(
            "create event",
            lambda: self._direct("POST", path, encoded, "application/json"),
            attempts=3,
            limited=False,
        )
