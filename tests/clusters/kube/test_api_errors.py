"""KubeApi turns every error status into a typed error: the one callers catch (NotFound, Conflict, Gone, ...), the
ones a retry can fix retried, and a patch that conflicts (or whose JSON patch no longer applies) made again."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from clusters.kube.api import (
    Conflict,
    Forbidden,
    Gone,
    InternalError,
    Invalid,
    KubeApi,
    KubeApiError,
    NotFound,
    ServerError,
    TooManyRequests,
    Unavailable,
    retryable,
)
from clusters.kube.direct import ACCEPT
from workloads.kinds.job import JOB


class Response:
    def __init__(self, status: int, body: object = None, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.body = orjson.dumps(body if body is not None else {"kind": "Status", "code": status})
        self.headers = headers or {}

    async def read(self) -> bytes:
        return self.body

    def release(self) -> None:
        return None


class Objects:
    """A real HTTP server on loopback that answers patches from a script of responses (recording what was sent) and
    gets with the object as it is now: patches go out on the client's session, gets through kubernetes_asyncio."""

    def __init__(self, patches: list[Response], current: dict[str, Any] | None = None) -> None:
        self.patches = patches
        self.current = current or {"metadata": {"name": "a"}}
        self.bodies: list[object] = []
        self.content_types: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.events: list[object] = []
        self.runner: web.AppRunner | None = None

    async def _patch(self, request: web.Request) -> web.Response:
        self.bodies.append(orjson.loads(await request.read()))
        self.content_types.append(request.content_type)
        self.headers.append(dict(request.headers))
        answer = self.patches.pop(0)
        return web.Response(status=answer.status, body=answer.body, headers=answer.headers)

    async def _get(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self.current), content_type="application/json")

    async def _event(self, request: web.Request) -> web.Response:
        self.events.append(orjson.loads(await request.read()))
        self.headers.append(dict(request.headers))
        answer = self.patches.pop(0) if self.patches else Response(201, {"kind": "Event"})
        return web.Response(status=answer.status, body=answer.body, headers=answer.headers)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_patch("/apis/batch/v1/namespaces/{ns}/jobs/{name}", self._patch)
        app.router.add_get("/apis/batch/v1/namespaces/{ns}/jobs/{name}", self._get)
        app.router.add_post("/api/v1/namespaces/{ns}/events", self._event)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"


@pytest.fixture
async def served() -> AsyncIterator[Callable[[Objects], Awaitable[KubeApi]]]:
    """KubeApi clients of Objects servers; every server and client closed after the test."""
    made: list[tuple[Objects, KubeApi]] = []

    async def serve(objects: Objects) -> KubeApi:
        configuration = client.Configuration()
        configuration.host = await objects.start()
        configuration.api_key = {"BearerToken": "Bearer t0ken"}
        api = KubeApi(client.ApiClient(configuration), backoff_s=0.0, backoff_max_s=0.0)
        made.append((objects, api))
        return api

    yield serve
    for objects, api in made:
        await api.close()
        await api.api_client.close()
        if objects.runner is not None:
            await objects.runner.cleanup()


def api_with() -> KubeApi:
    """A client for the tests that hand `_json` their answers themselves (no server)."""
    return KubeApi(client.ApiClient(client.Configuration()), backoff_s=0.0, backoff_max_s=0.0)


Serve = Callable[[Objects], Awaitable[KubeApi]]


async def answer(response: Response) -> Response:
    return response


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, KubeApiError),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (410, Gone),
        (422, Invalid),
        (429, TooManyRequests),
        (500, InternalError),
        (501, ServerError),
        (502, Unavailable),
        (503, Unavailable),
        (504, Unavailable),
    ],
)
async def test_each_error_status_is_its_typed_error(status: int, error: type[KubeApiError]) -> None:
    api = api_with()
    with pytest.raises(KubeApiError) as caught:
        await api._json(answer(Response(status, headers={"Retry-After": "3"})))
    assert type(caught.value) is error
    assert caught.value.status == status
    assert caught.value.retry_after == 3.0
    assert retryable(caught.value) == (status in (429, 500, 502, 503, 504))
    await api.close()
    await api.api_client.close()


async def test_an_api_exception_from_the_client_is_translated() -> None:
    async def raising() -> Response:
        raise ApiException(status=404, reason="Not Found")

    api = api_with()
    with pytest.raises(NotFound, match="Not Found"):
        await api._json(raising())
    await api.close()
    await api.api_client.close()


async def test_retryable_errors_are_retried_and_others_raised_at_once() -> None:
    answers = [Response(503), Response(429), Response(200, {"ok": True})]
    api = api_with()
    assert await api.call("get", lambda: api._json(answer(answers.pop(0)))) == {"ok": True}
    attempts: list[int] = []

    def missing() -> Any:
        attempts.append(1)
        return api._json(answer(Response(404)))

    with pytest.raises(NotFound):
        await api.call("get", missing)
    assert len(attempts) == 1
    await api.close()
    await api.api_client.close()


async def test_a_merge_patch_is_sent_again_after_a_conflict(served: Serve) -> None:
    objects = Objects([Response(409), Response(200, {"patched": True})])
    api = await served(objects)
    patch = {"metadata": {"labels": {"a": "b"}}}
    await api.patch_object(JOB, "ns", "a", patch)  # the answer is checked, not decoded
    assert objects.bodies == [patch, patch]
    assert objects.content_types == ["application/merge-patch+json"] * 2


async def test_a_patch_answer_is_checked_not_decoded(served: Serve) -> None:
    # The patched object comes back in the answer and again on the watch; only its status is read here.
    answer = Response(200)
    answer.body = b'{"kind":"Job","metadata":'  # cut short: decoding it would fail
    objects = Objects([answer])
    api = await served(objects)
    await api.patch_object(JOB, "ns", "a", {"spec": {}})
    assert len(objects.bodies) == 1


async def test_a_json_patch_that_no_longer_applies_is_made_again_from_the_object_read_again(served: Serve) -> None:
    objects = Objects([Response(422), Response(200, {"patched": True})], current={"metadata": {"name": "now"}})
    api = await served(objects)
    seen: list[object] = []

    def patch(current: dict[str, Any] | None) -> list[dict[str, Any]]:
        seen.append(current)
        return [{"op": "add", "path": "/x", "value": len(seen)}]

    await api.patch_object(JOB, "ns", "a", patch)  # the answer is checked, not decoded
    assert seen == [None, {"metadata": {"name": "now"}}]
    assert objects.bodies == [[{"op": "add", "path": "/x", "value": n}] for n in (1, 2)]
    assert objects.content_types == ["application/json-patch+json"] * 2


@pytest.mark.parametrize(
    ("status", "error", "patch"),
    [
        (422, Invalid, {"spec": {"x": 1}}),  # a merge patch is absolute: invalid stays invalid
        (404, NotFound, {"spec": {"x": 1}}),
        (403, Forbidden, lambda current: []),
    ],
)
async def test_other_patch_errors_propagate_as_they_are(
    status: int, error: type[KubeApiError], patch: dict[str, Any] | Callable[[Any], list[Any]], served: Serve
) -> None:
    objects = Objects([Response(status)])
    api = await served(objects)
    with pytest.raises(error):
        await api.patch_object(JOB, "ns", "a", patch)
    assert len(objects.bodies) == 1


async def test_a_patch_that_keeps_conflicting_gives_up_with_a_conflict(served: Serve) -> None:
    objects = Objects([Response(409) for _ in range(5)])
    api = await served(objects)
    with pytest.raises(Conflict, match="kept conflicting"):
        await api.patch_object(JOB, "ns", "a", {"spec": {}})
    assert len(objects.bodies) == 5


async def test_direct_requests_carry_the_clients_headers_and_current_credentials(served: Serve) -> None:
    objects = Objects([Response(200, {"patched": True})])
    api = await served(objects)
    api.api_client.set_default_header("Impersonate-User", "alice")
    api.api_client.configuration.api_key["BearerToken"] = "Bearer rotated"  # a token read again from its file
    await api.patch_object(JOB, "ns", "a", {"spec": {}})
    await api.create_event("ns", {"reason": "Queued", "message": "ü"})
    for sent in objects.headers:
        assert sent["Authorization"] == "Bearer rotated"
        assert sent["Impersonate-User"] == "alice"
        assert sent["Accept"] == ACCEPT  # metadata only: nothing reads a 2xx answer
    assert objects.events == [{"reason": "Queued", "message": "ü"}]


async def test_an_event_the_server_refuses_raises_its_typed_error_after_retries(served: Serve) -> None:
    objects = Objects([Response(503), Response(503), Response(403)])
    api = await served(objects)
    with pytest.raises(Forbidden):
        await api.create_event("ns", {"reason": "Queued"})
    assert len(objects.events) == 3
