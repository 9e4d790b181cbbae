"""KubeApi turns every error status into a typed error: the one callers catch (NotFound, Conflict, Gone, ...), the
ones a retry can fix retried, and a patch that conflicts (or whose JSON patch no longer applies) made again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
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
    """Answers patches from a script of responses, and gets with the object as it is now."""

    def __init__(self, patches: list[Response], current: dict[str, Any] | None = None) -> None:
        self.patches = patches
        self.current = current or {"metadata": {"name": "a"}}
        self.bodies: list[object] = []

    async def patch_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Response:
        self.bodies.append(args[5])
        return self.patches.pop(0)

    async def get_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Response:
        return Response(200, self.current)


def api_with(objects: Objects) -> KubeApi:
    api = KubeApi(client.ApiClient(client.Configuration()), backoff_s=0.0, backoff_max_s=0.0)
    api.objects = objects
    return api


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
    api = api_with(Objects([]))
    with pytest.raises(KubeApiError) as caught:
        await api._json(answer(Response(status, headers={"Retry-After": "3"})))
    assert type(caught.value) is error
    assert caught.value.status == status
    assert caught.value.retry_after == 3.0
    assert retryable(caught.value) == (status in (429, 500, 502, 503, 504))
    await api.api_client.close()


async def test_an_api_exception_from_the_client_is_translated() -> None:
    async def raising() -> Response:
        raise ApiException(status=404, reason="Not Found")

    api = api_with(Objects([]))
    with pytest.raises(NotFound, match="Not Found"):
        await api._json(raising())
    await api.api_client.close()


async def test_retryable_errors_are_retried_and_others_raised_at_once() -> None:
    answers = [Response(503), Response(429), Response(200, {"ok": True})]
    api = api_with(Objects([]))
    assert await api.call("get", lambda: api._json(answer(answers.pop(0)))) == {"ok": True}
    attempts: list[int] = []

    def missing() -> Any:
        attempts.append(1)
        return api._json(answer(Response(404)))

    with pytest.raises(NotFound):
        await api.call("get", missing)
    assert len(attempts) == 1
    await api.api_client.close()


async def test_a_merge_patch_is_sent_again_after_a_conflict() -> None:
    objects = Objects([Response(409), Response(200, {"patched": True})])
    api = api_with(objects)
    patch = {"metadata": {"labels": {"a": "b"}}}
    assert await api.patch_object(JOB, "ns", "a", patch) == {"patched": True}
    assert objects.bodies == [patch, patch]
    await api.api_client.close()


async def test_a_json_patch_that_no_longer_applies_is_made_again_from_the_object_read_again() -> None:
    objects = Objects([Response(422), Response(200, {"patched": True})], current={"metadata": {"name": "now"}})
    api = api_with(objects)
    seen: list[object] = []

    def patch(current: dict[str, Any] | None) -> list[dict[str, Any]]:
        seen.append(current)
        return [{"op": "add", "path": "/x", "value": len(seen)}]

    assert await api.patch_object(JOB, "ns", "a", patch) == {"patched": True}
    assert seen == [None, {"metadata": {"name": "now"}}]
    await api.api_client.close()


@pytest.mark.parametrize(
    ("status", "error", "patch"),
    [
        (422, Invalid, {"spec": {"x": 1}}),  # a merge patch is absolute: invalid stays invalid
        (404, NotFound, {"spec": {"x": 1}}),
        (403, Forbidden, lambda current: []),
    ],
)
async def test_other_patch_errors_propagate_as_they_are(
    status: int, error: type[KubeApiError], patch: dict[str, Any] | Callable[[Any], list[Any]]
) -> None:
    objects = Objects([Response(status)])
    api = api_with(objects)
    with pytest.raises(error):
        await api.patch_object(JOB, "ns", "a", patch)
    assert len(objects.bodies) == 1
    await api.api_client.close()


async def test_a_patch_that_keeps_conflicting_gives_up_with_a_conflict() -> None:
    objects = Objects([Response(409) for _ in range(5)])
    api = api_with(objects)
    with pytest.raises(Conflict, match="kept conflicting"):
        await api.patch_object(JOB, "ns", "a", {"spec": {}})
    assert len(objects.bodies) == 5
    await api.api_client.close()
