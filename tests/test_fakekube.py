"""The fake Kubernetes API server against the unmodified kubernetes_asyncio client: REST verbs, errors, watch,
history, failure injection, and the wire shapes of ../shared/data/k8s-api."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fakekube import FakeKubeServer
from tests.fakekube.patch import json_patch
from tests.fakekube.testing import job_manifest

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"
FIXTURES = SHARED / "data" / "k8s-api"


def fixture(name: str) -> dict[str, Any]:
    path = FIXTURES / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path} is not available")
    return json.loads(path.read_text())


def status_body(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


@pytest.fixture
async def server() -> AsyncIterator[FakeKubeServer]:
    async with FakeKubeServer(bookmark_interval_s=0.1) as srv:
        yield srv


@pytest.fixture
async def api_client(server: FakeKubeServer) -> client.ApiClient:
    return await server.api_client()


@pytest.fixture
def batch(api_client: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api_client)


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


async def raw_get(server: FakeKubeServer, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(server.url + path) as resp:
        return resp.status, await resp.json(content_type=None)


# create / get / list


async def test_create_job_applies_apiserver_defaults(server: FakeKubeServer, batch: client.BatchV1Api) -> None:
    created = await batch.create_namespaced_job("default", job_manifest(generate_name="train-"))

    assert created.metadata.name.startswith("train-") and len(created.metadata.name) == len("train-") + 5
    assert created.metadata.uid and created.metadata.creation_timestamp is not None
    assert int(created.metadata.resource_version) > 0
    assert created.metadata.generation == 1
    assert created.spec.suspend is False
    assert (created.spec.parallelism, created.spec.completions, created.spec.backoff_limit) == (1, 1, 6)
    assert created.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": created.metadata.uid}
    assert created.spec.template.metadata.labels["batch.kubernetes.io/job-name"] == created.metadata.name

    stored = server.get_object("Job", "default", created.metadata.name)
    assert stored is not None and stored["status"] == {}
    # Every field the fake writes exists, at the same place, in the real Job schema.
    real = fixture("batch.v1.Job")
    assert set(stored) <= set(real)
    assert set(stored["metadata"]) <= set(real["metadata"])
    assert set(stored["spec"]) <= set(real["spec"])
    assert set(stored["spec"]["template"]["spec"]) <= set(real["spec"]["template"]["spec"])


async def test_create_conflicts_and_errors_are_real_status_objects(
    server: FakeKubeServer, batch: client.BatchV1Api
) -> None:
    await batch.create_namespaced_job("default", job_manifest("dup"))
    with pytest.raises(ApiException) as exists:
        await batch.create_namespaced_job("default", job_manifest("dup"))
    with pytest.raises(ApiException) as missing:
        await batch.read_namespaced_job("nope", "default")
    with pytest.raises(ApiException) as no_namespace:
        await batch.create_namespaced_job("ghost", job_manifest("x", namespace="ghost"))
    bad = job_manifest("bad")
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(ApiException) as invalid:
        await batch.create_namespaced_job("default", bad)

    assert exists.value.status == 409
    assert status_body(exists.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'jobs.batch "dup" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "dup", "group": "batch", "kind": "jobs"},
        "code": 409,
    }
    assert (missing.value.status, status_body(missing.value)["reason"]) == (404, "NotFound")
    assert status_body(missing.value)["message"] == 'jobs.batch "nope" not found'
    assert status_body(no_namespace.value)["message"] == 'namespaces "ghost" not found'
    body = status_body(invalid.value)
    assert (invalid.value.status, body["reason"], body["details"]["kind"]) == (422, "Invalid", "Job")
    assert body["message"].startswith('Job.batch "bad" is invalid: spec.template.spec.restartPolicy: Unsupported')
    real = fixture("core.v1.Status")
    for status in (status_body(exists.value), body):
        assert set(status) <= set(real) and list(status) == [k for k in real if k in status]
        assert set(status["details"]) <= set(real["details"])
        for cause in status["details"].get("causes", []):
            assert set(cause) <= set(real["details"]["causes"][0])


async def test_invalid_label_value_from_a_real_manifest_is_rejected(batch: client.BatchV1Api) -> None:
    # The EIDF docs ship a Job whose queue label keeps a literal "<project-namespace>" placeholder.
    manifest = job_manifest(labels={"kueue.x-k8s.io/queue-name": "<project-namespace>-user-queue"})
    with pytest.raises(ApiException) as invalid:
        await batch.create_namespaced_job("default", manifest)
    assert invalid.value.status == 422
    assert 'metadata.labels: Invalid value: "<project-namespace>-user-queue"' in status_body(invalid.value)["message"]


async def test_list_with_selectors_pagination_and_all_namespaces(
    server: FakeKubeServer, batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    await core.create_namespace({"metadata": {"name": "team-a"}})
    for i in range(5):
        team = "a" if i % 2 else "b"
        namespace = "team-a" if i == 4 else "default"
        await batch.create_namespaced_job(
            namespace, job_manifest(f"job-{i}", namespace=namespace, labels={"team": team})
        )

    default = await batch.list_namespaced_job("default")
    assert [j.metadata.name for j in default.items] == ["job-0", "job-1", "job-2", "job-3"]
    team_a = await batch.list_job_for_all_namespaces(label_selector="team=a")
    assert [j.metadata.name for j in team_a.items] == ["job-1", "job-3"]
    not_b = await batch.list_namespaced_job("default", label_selector="team notin (b),!missing")
    assert [j.metadata.name for j in not_b.items] == ["job-1", "job-3"]
    by_name = await batch.list_job_for_all_namespaces(field_selector="metadata.name=job-4")
    assert [(j.metadata.namespace, j.metadata.name) for j in by_name.items] == [("team-a", "job-4")]
    by_ns = await batch.list_job_for_all_namespaces(field_selector="metadata.namespace!=default")
    assert [j.metadata.name for j in by_ns.items] == ["job-4"]
    with pytest.raises(ApiException) as unsupported:
        await batch.list_namespaced_job("default", field_selector="spec.parallelism=1")
    assert unsupported.value.status == 400
    assert status_body(unsupported.value)["message"] == "field label not supported: spec.parallelism"

    first = await batch.list_job_for_all_namespaces(limit=2)
    assert [j.metadata.name for j in first.items] == ["job-0", "job-1"]
    assert first.metadata.remaining_item_count == 3 and first.metadata._continue
    # Writes between pages do not show up: the continue token pins the first page's resourceVersion.
    await batch.create_namespaced_job("default", job_manifest("job-9"))
    second = await batch.list_job_for_all_namespaces(limit=2, _continue=first.metadata._continue)
    third = await batch.list_job_for_all_namespaces(limit=2, _continue=second.metadata._continue)
    assert [j.metadata.name for j in second.items + third.items] == ["job-2", "job-3", "job-4"]
    assert third.metadata._continue is None
    assert second.metadata.resource_version == first.metadata.resource_version

    status, raw = await raw_get(server, "/apis/batch/v1/namespaces/default/jobs")
    assert status == 200 and (raw["kind"], raw["apiVersion"]) == ("JobList", "batch/v1")
    # Items of a built-in list carry no kind/apiVersion on the wire.
    assert "kind" not in raw["items"][0] and "apiVersion" not in raw["items"][0]


async def test_list_with_compacted_continue_token_is_410(server: FakeKubeServer, batch: client.BatchV1Api) -> None:
    for i in range(3):
        await batch.create_namespaced_job("default", job_manifest(f"job-{i}"))
    first = await batch.list_namespaced_job("default", limit=1)
    await batch.create_namespaced_job("default", job_manifest("later"))
    server.compact()
    with pytest.raises(ApiException) as expired:
        await batch.list_namespaced_job("default", limit=1, _continue=first.metadata._continue)
    body = status_body(expired.value)
    assert (expired.value.status, body["reason"], body["code"]) == (410, "Expired", 410)
    assert body["message"].startswith("The provided continue parameter is too old")
    # The real apiserver hands back a token that continues, inconsistently, from the current state.
    rest = await batch.list_namespaced_job("default", _continue=body["metadata"]["continue"])
    assert [j.metadata.name for j in rest.items] == ["job-1", "job-2", "later"]


# update / patch / delete


async def test_replace_with_stale_resource_version_conflicts(batch: client.BatchV1Api) -> None:
    job = await batch.create_namespaced_job("default", job_manifest("j"))
    fresh = await batch.read_namespaced_job("j", "default")
    fresh.spec.parallelism = 3
    updated = await batch.replace_namespaced_job("j", "default", fresh)
    assert updated.spec.parallelism == 3 and updated.metadata.generation == 2
    assert int(updated.metadata.resource_version) > int(job.metadata.resource_version)

    job.spec.parallelism = 5  # still carries the original resourceVersion
    with pytest.raises(ApiException) as conflict:
        await batch.replace_namespaced_job("j", "default", job)
    body = status_body(conflict.value)
    assert (conflict.value.status, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        'Operation cannot be fulfilled on jobs.batch "j": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )

    # Writing back what is stored is not a write: same resourceVersion.
    again = await batch.replace_namespaced_job("j", "default", updated)
    assert again.metadata.resource_version == updated.metadata.resource_version


async def test_patch_with_all_three_content_types(batch: client.BatchV1Api, core: client.CoreV1Api) -> None:
    await batch.create_namespaced_job("default", job_manifest("p", suspend=True))

    # A dict body goes out as strategic merge patch.
    smp = await batch.patch_namespaced_job(
        "p", "default", {"metadata": {"labels": {"kuota.dev/queue": "q1", "drop": "me"}}}
    )
    assert smp.metadata.labels == {"kuota.dev/queue": "q1", "drop": "me"}
    merge = await batch.patch_namespaced_job(
        "p", "default", {"metadata": {"labels": {"drop": None}}}, _content_type="application/merge-patch+json"
    )
    assert merge.metadata.labels == {"kuota.dev/queue": "q1"}
    # A list body goes out as JSON patch.
    patched = await batch.patch_namespaced_job(
        "p",
        "default",
        [
            {"op": "test", "path": "/spec/suspend", "value": True},
            {"op": "replace", "path": "/spec/suspend", "value": False},
            {"op": "add", "path": "/metadata/annotations", "value": {"a/b": "c"}},
        ],
    )
    assert patched.spec.suspend is False and patched.metadata.annotations == {"a/b": "c"}
    assert patched.metadata.generation == 2  # only the last patch changed the spec

    with pytest.raises(ApiException) as failed_test:
        await batch.patch_namespaced_job("p", "default", [{"op": "test", "path": "/spec/suspend", "value": True}])
    assert failed_test.value.status == 422
    with pytest.raises(ApiException) as stale:
        await batch.patch_namespaced_job(
            "p",
            "default",
            {"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}},
            _content_type="application/merge-patch+json",
        )
    assert stale.value.status == 409
    # A Job's pod template is immutable once created (outside the suspended-Job exception below).
    with pytest.raises(ApiException) as immutable:
        await batch.patch_namespaced_job(
            "p",
            "default",
            {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "x:2"}]}}}},
        )
    assert immutable.value.status == 422

    # Strategic merge patch merges lists of containers by name.
    pod = {
        "metadata": {"name": "two"},
        "spec": {"containers": [{"name": "main", "image": "app:1"}, {"name": "sidecar", "image": "envoy:1"}]},
    }
    await core.create_namespaced_pod("default", pod)
    merged = await core.patch_namespaced_pod(
        "two", "default", {"spec": {"containers": [{"name": "sidecar", "image": "envoy:2"}]}}
    )
    assert [(c.name, c.image) for c in merged.spec.containers] == [("main", "app:1"), ("sidecar", "envoy:2")]


async def test_status_subresource_and_main_resource_do_not_overwrite_each_other(
    batch: client.BatchV1Api,
) -> None:
    await batch.create_namespaced_job("default", job_manifest("s"))
    job = await batch.read_namespaced_job("s", "default")
    job.status.active = 1
    job.spec.parallelism = 9  # ignored through /status
    via_status = await batch.replace_namespaced_job_status("s", "default", job)
    assert via_status.status.active == 1 and via_status.spec.parallelism == 1

    via_status.status.active = 7  # ignored through the main resource
    via_status.spec.parallelism = 2
    via_main = await batch.replace_namespaced_job("s", "default", via_status)
    assert via_main.status.active == 1 and via_main.spec.parallelism == 2

    patched = await batch.patch_namespaced_job_status("s", "default", {"status": {"ready": 1}})
    assert (patched.status.active, patched.status.ready) == (1, 1)


async def test_suspended_job_template_scheduling_directives_are_mutable_until_started(
    batch: client.BatchV1Api,
) -> None:
    await batch.create_namespaced_job("default", job_manifest("k", suspend=True))
    # What Kueue does when it admits a Job to a flavor.
    admitted = await batch.patch_namespaced_job(
        "k",
        "default",
        {"spec": {"suspend": False, "template": {"spec": {"nodeSelector": {"gpu": "a100"}}}}},
    )
    assert admitted.spec.template.spec.node_selector == {"gpu": "a100"}
    await batch.patch_namespaced_job_status("k", "default", {"status": {"startTime": "2026-01-01T00:00:00Z"}})
    with pytest.raises(ApiException) as immutable:
        await batch.patch_namespaced_job(
            "k", "default", {"spec": {"template": {"spec": {"nodeSelector": {"gpu": "h100"}}}}}
        )
    assert immutable.value.status == 422
    assert "spec.template: Invalid value" in status_body(immutable.value)["message"]
    assert "field is immutable" in status_body(immutable.value)["message"]


async def test_delete_answers_like_the_real_apiserver(server: FakeKubeServer, batch: client.BatchV1Api) -> None:
    job = await batch.create_namespaced_job("default", job_manifest("d"))
    pod = {
        "metadata": {
            "name": "d-pod",
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "d",
                    "uid": job.metadata.uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    core = client.CoreV1Api(batch.api_client)
    await core.create_namespaced_pod("default", pod)

    status = await batch.delete_namespaced_job("d", "default", propagation_policy="Background")
    assert (status.kind, status.status, status.details.name, status.details.uid) == (
        "Status",
        "Success",
        "d",
        job.metadata.uid,
    )
    assert server.objects("Pod", "default") == []  # collected with the Job
    with pytest.raises(ApiException) as gone:
        await batch.delete_namespaced_job("d", "default")
    assert gone.value.status == 404

    await core.create_namespaced_pod("default", {**pod, "metadata": {"name": "solo"}})
    deleted = await core.delete_namespaced_pod("solo", "default")
    assert (deleted.kind, deleted.metadata.name) == ("Pod", "solo")


async def test_dry_run_stores_nothing(server: FakeKubeServer, batch: client.BatchV1Api) -> None:
    before = server.resource_version
    result = await batch.create_namespaced_job("default", job_manifest("dry"), dry_run="All")
    assert result.metadata.name == "dry" and result.metadata.uid
    assert server.objects("Job") == [] and server.resource_version == before


# watch


async def next_events(stream: watch.Watch, count: int, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout_s):
        async for event in stream:
            events.append(event)
            if len(events) == count:
                break
    return events


async def test_list_then_watch_sees_added_modified_deleted_in_order(
    server: FakeKubeServer, batch: client.BatchV1Api
) -> None:
    await batch.create_namespaced_job("default", job_manifest("before"))
    listing = await batch.list_namespaced_job("default")

    async with watch.Watch() as w:
        stream = w.stream(batch.list_namespaced_job, "default", resource_version=listing.metadata.resource_version)
        collector = asyncio.create_task(next_events(stream, 3))
        await server.wait_for_watches(1)
        await batch.create_namespaced_job("default", job_manifest("w"))
        await batch.patch_namespaced_job("w", "default", {"metadata": {"labels": {"seen": "yes"}}})
        await batch.delete_namespaced_job("w", "default")
        events = await collector

    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "w"),
        ("MODIFIED", "w"),
        ("DELETED", "w"),
    ]
    versions = [int(e["object"].metadata.resource_version) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == 3
    assert events[1]["object"].metadata.labels == {"seen": "yes"}
    assert set(events[0]["raw_object"]) >= {"kind", "apiVersion", "metadata", "spec", "status"}


async def read_watch(server: FakeKubeServer, path: str, count: int, quiet_s: float = 0.0) -> list[Any]:
    """The first `count` events of a raw watch; with quiet_s, also check that nothing else comes that soon."""
    async with aiohttp.ClientSession() as session, session.get(server.url + path) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("application/json")
        events = [json.loads(await asyncio.wait_for(resp.content.readline(), 2)) for _ in range(count)]
        if quiet_s:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(resp.content.readline(), quiet_s)
    return events


async def test_raw_watch_lines_match_the_watch_event_fixture(server: FakeKubeServer) -> None:
    await server.create(job_manifest("raw"))
    # No bookmarks unless asked for: nothing more within three bookmark intervals.
    lines = await read_watch(server, "/apis/batch/v1/namespaces/default/jobs?watch=1&resourceVersion=0", 1, 0.35)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "raw")]
    assert set(lines[0]) == set(fixture("core.v1.WatchEvent"))
    assert (lines[0]["object"]["kind"], lines[0]["object"]["apiVersion"]) == ("Job", "batch/v1")


async def test_watch_with_selector_turns_relabels_into_added_and_deleted(
    server: FakeKubeServer, batch: client.BatchV1Api
) -> None:
    await batch.create_namespaced_job("default", job_manifest("r", labels={"queue": "a"}))
    listing = await batch.list_namespaced_job("default", label_selector="queue=a")
    async with watch.Watch() as w:
        stream = w.stream(
            batch.list_namespaced_job,
            "default",
            label_selector="queue=a",
            resource_version=listing.metadata.resource_version,
        )
        collector = asyncio.create_task(next_events(stream, 2))
        await server.wait_for_watches(1)
        await batch.patch_namespaced_job("r", "default", {"metadata": {"labels": {"queue": "b"}}})
        await batch.patch_namespaced_job("r", "default", {"metadata": {"labels": {"queue": "a"}}})
        events = await collector
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]
    # The DELETED object is the last state that matched, stamped with the write that made it stop matching.
    assert events[0]["object"].metadata.labels == {"queue": "a"}


async def test_bookmarks_arrive_when_asked_for(server: FakeKubeServer, batch: client.BatchV1Api) -> None:
    listing = await batch.list_namespaced_job("default")
    async with watch.Watch() as w:
        stream = w.stream(
            batch.list_namespaced_job,
            "default",
            resource_version=listing.metadata.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=5,
        )
        first = await next_events(stream, 1)
        await server.create(job_manifest("b"))
        after_write = await next_events(stream, 2)
        assert server.send_bookmarks() == 1
        forced = await next_events(stream, 1)
    bookmark = first[0]
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["raw_object"] == {
        "kind": "Job",
        "apiVersion": "batch/v1",
        "metadata": {"resourceVersion": listing.metadata.resource_version},
    }
    assert [e["type"] for e in after_write] == ["ADDED", "BOOKMARK"]
    assert after_write[1]["raw_object"]["metadata"]["resourceVersion"] == server.resource_version
    assert forced[0]["type"] == "BOOKMARK"
    assert w.resource_version == server.resource_version


async def test_send_initial_events_ends_with_the_annotated_bookmark(server: FakeKubeServer) -> None:
    await server.create(job_manifest("i"))
    path = (
        "/apis/batch/v1/namespaces/default/jobs?watch=1&sendInitialEvents=true"
        "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    )
    lines = await read_watch(server, path, 2)
    assert [e["type"] for e in lines] == ["ADDED", "BOOKMARK"]
    assert lines[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_watch_from_a_compacted_resource_version_gets_410(
    server: FakeKubeServer, batch: client.BatchV1Api
) -> None:
    old = (await batch.list_namespaced_job("default")).metadata.resource_version
    await server.create(job_manifest("c1"))
    await server.create(job_manifest("c2"))
    compacted = server.compact()

    # On the wire: a 200 stream whose only event is an ERROR carrying a 410 Expired Status.
    url = f"{server.url}/apis/batch/v1/namespaces/default/jobs?watch=1&resourceVersion={old}"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        lines = [json.loads(line) for line in (await resp.read()).splitlines()]
    assert lines == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {old} ({compacted})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]

    # kubernetes_asyncio turns the ERROR event into ApiException(status=410, reason="Expired: <message>").
    with pytest.raises(ApiException) as expired:
        async with watch.Watch() as w:
            async for _ in w.stream(batch.list_namespaced_job, "default", resource_version=old, timeout_seconds=5):
                pass
    assert expired.value.status == 410
    assert expired.value.reason == f"Expired: too old resource version: {old} ({compacted})"

    # Without timeout_seconds the client retries once from the same resourceVersion, then raises.
    watches_before = sum(1 for r in server.request_log if r.verb == "watch")
    with pytest.raises(ApiException) as again:
        async with watch.Watch() as w:
            async for _ in w.stream(batch.list_namespaced_job, "default", resource_version=old):
                pass
    assert again.value.status == 410
    assert sum(1 for r in server.request_log if r.verb == "watch") - watches_before == 2


async def test_history_window_expires_old_resource_versions() -> None:
    async with FakeKubeServer(history_limit=3) as server:
        start = server.resource_version
        for i in range(5):
            await server.create(job_manifest(f"h{i}"))
        batch = client.BatchV1Api(await server.api_client())
        with pytest.raises(ApiException) as expired:
            async with watch.Watch() as w:
                async for _ in w.stream(batch.list_job_for_all_namespaces, resource_version=start, timeout_seconds=2):
                    pass
        assert expired.value.status == 410


# failure injection and dropped streams


async def test_injected_500_and_429_carry_status_bodies(server: FakeKubeServer, batch: client.BatchV1Api) -> None:
    failure = server.inject_failure(500, verb="create", resource="jobs")
    with pytest.raises(ApiException) as internal:
        await batch.create_namespaced_job("default", job_manifest("f"))
    assert internal.value.status == 500
    assert status_body(internal.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Internal error occurred: injected failure",
        "reason": "InternalError",
        "details": {"causes": [{"message": "injected failure"}]},
        "code": 500,
    }
    await batch.create_namespaced_job("default", job_manifest("f"))  # only the next one failed
    assert failure.hits == 1 and failure.remaining == 0

    server.inject_failure(429, path="/apis/batch/v1/namespaces/*/jobs/f", times=2, retry_after_s=3)
    for _ in range(2):
        with pytest.raises(ApiException) as throttled:
            await batch.read_namespaced_job("f", "default")
        assert throttled.value.status == 429
        assert throttled.value.headers["Retry-After"] == "3"
        body = status_body(throttled.value)
        assert (body["reason"], body["details"], body["code"]) == (
            "TooManyRequests",
            {"retryAfterSeconds": 3},
            429,
        )
    assert (await batch.read_namespaced_job("f", "default")).metadata.name == "f"

    # A failed watch request: the Watch reads the Status line and raises it.
    server.inject_failure(503, verb="watch")
    with pytest.raises(ApiException) as unavailable:
        async with watch.Watch() as w:
            async for _ in w.stream(batch.list_namespaced_job, "default", timeout_seconds=2):
                pass
    assert unavailable.value.status == 503


async def test_dropped_watch_streams_end_cleanly(server: FakeKubeServer, batch: client.BatchV1Api) -> None:
    # With timeout_seconds the client treats end-of-stream as the end of the watch.
    async def drain() -> list[str]:
        async with watch.Watch() as w:
            return [e["type"] async for e in w.stream(batch.list_namespaced_job, "default", timeout_seconds=30)]

    task = asyncio.create_task(drain())
    await server.wait_for_watches(1)
    assert server.drop_watches() == 1
    assert await asyncio.wait_for(task, 2) == []

    # Without it, the client reconnects from the last resourceVersion it saw and misses nothing.
    await server.create(job_manifest("d1"))
    async with watch.Watch() as w:
        stream = w.stream(batch.list_namespaced_job, "default")
        first = await next_events(stream, 1)
        server.drop_watches()
        await server.create(job_manifest("d2"))
        second = await next_events(stream, 1)
    assert [(e["type"], e["object"].metadata.name) for e in first + second] == [
        ("ADDED", "d1"),
        ("ADDED", "d2"),
    ]
    # Requests are logged when they end; the server notices a departed watcher within its liveness interval.
    async with asyncio.timeout(3):
        while True:
            watch_requests = [r for r in server.request_log if r.verb == "watch"]
            if len(watch_requests) == 3:
                break
            await asyncio.sleep(0.05)
    assert f"resourceVersion={first[0]['object'].metadata.resource_version}" in watch_requests[-1].query


async def test_abruptly_dropped_watch_surfaces_as_a_payload_error(
    server: FakeKubeServer, batch: client.BatchV1Api
) -> None:
    async def drain() -> None:
        async with watch.Watch() as w:
            async for _ in w.stream(batch.list_namespaced_job, "default", timeout_seconds=30):
                pass

    task = asyncio.create_task(drain())
    await server.wait_for_watches(1)
    server.drop_watches(abrupt=True)
    with pytest.raises(aiohttp.ClientPayloadError):
        await asyncio.wait_for(task, 2)


# other kinds


async def test_lease_create_and_update_with_resource_version_conflicts(api_client: client.ApiClient) -> None:
    leases = client.CoordinationV1Api(api_client)
    body = {
        "metadata": {"name": "kuota-leader"},
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
        },
    }
    created = await leases.create_namespaced_lease("kube-system", body)
    with pytest.raises(ApiException) as taken:
        await leases.create_namespaced_lease("kube-system", body)
    assert (taken.value.status, status_body(taken.value)["reason"]) == (409, "AlreadyExists")

    # Two candidates read the same version; the second write loses.
    a = await leases.read_namespaced_lease("kuota-leader", "kube-system")
    b = await leases.read_namespaced_lease("kuota-leader", "kube-system")
    a.spec.renew_time = "2026-01-01T00:00:05.000000Z"
    renewed = await leases.replace_namespaced_lease("kuota-leader", "kube-system", a)
    b.spec.holder_identity = "b"
    with pytest.raises(ApiException) as lost:
        await leases.replace_namespaced_lease("kuota-leader", "kube-system", b)
    assert (lost.value.status, status_body(lost.value)["reason"]) == (409, "Conflict")
    assert renewed.spec.holder_identity == "a"
    assert int(renewed.metadata.resource_version) > int(created.metadata.resource_version)
    assert renewed.metadata.generation is None  # Leases have no generation


async def test_lease_shape_matches_the_fixture(server: FakeKubeServer) -> None:
    await server.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "l", "namespace": "kube-system"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        }
    )
    stored = server.get_object("Lease", "kube-system", "l") or {}
    real = fixture("coordination.k8s.io.v1.Lease")
    assert set(stored) <= set(real) and set(stored["metadata"]) <= set(real["metadata"])
    assert set(stored["spec"]) <= set(real["spec"])


async def test_events_are_one_storage_behind_two_apis(api_client: client.ApiClient, server: FakeKubeServer) -> None:
    events_v1 = client.EventsV1Api(api_client)
    core = client.CoreV1Api(api_client)
    await events_v1.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "job-admitted.1"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "kuota.dev/queue-manager",
            "reportingInstance": "kuota-0",
            "action": "Admit",
            "reason": "Admitted",
            "type": "Normal",
            "note": "admitted to flavor a100",
            "regarding": {"kind": "Job", "namespace": "default", "name": "train", "apiVersion": "batch/v1"},
        },
    )
    legacy = await core.list_namespaced_event("default", field_selector="involvedObject.name=train")
    assert [(e.message, e.reporting_component, e.involved_object.kind) for e in legacy.items] == [
        ("admitted to flavor a100", "kuota.dev/queue-manager", "Job")
    ]
    stored = server.objects("events.events.k8s.io")[0]
    assert set(stored) <= set(fixture("events.k8s.io.v1.Event"))
    assert set(server.objects("Event")[0]) <= set(fixture("core.v1.Event"))
    with pytest.raises(ApiException) as incomplete:
        await events_v1.create_namespaced_event("default", {"metadata": {"name": "x"}, "type": "Normal"})
    assert incomplete.value.status == 422
    assert "reportingController: Required value" in status_body(incomplete.value)["message"]


async def test_namespaces_and_configmaps(server: FakeKubeServer, core: client.CoreV1Api) -> None:
    ns = await core.create_namespace({"metadata": {"name": "team-x", "labels": {"kuota.dev/team": "x"}}})
    assert ns.metadata.labels == {"kuota.dev/team": "x", "kubernetes.io/metadata.name": "team-x"}
    assert ns.status.phase == "Active" and ns.spec.finalizers == ["kubernetes"]
    assert set(server.get_object("Namespace", "", "team-x") or {}) <= set(fixture("core.v1.Namespace"))
    cm = await core.create_namespaced_config_map("team-x", {"metadata": {"name": "quota"}, "data": {"a": "1"}})
    assert cm.data == {"a": "1"}
    assert set(server.get_object("ConfigMap", "team-x", "quota") or {}) <= set(fixture("core.v1.ConfigMap"))
    await core.delete_namespace("team-x")
    assert server.objects("ConfigMap", "team-x") == []


# clients


async def test_kubeconfig_works_with_load_kube_config(server: FakeKubeServer, tmp_path: Path) -> None:
    path = server.kubeconfig(tmp_path / "kubeconfig", user="alice")
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(path), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        namespaces = await client.CoreV1Api(api).list_namespace()
    assert {n.metadata.name for n in namespaces.items} >= {"default", "kube-system"}
    assert server.request_log[-1].user == "alice"

    other = await server.api_client(user="bob", groups=["devs"])
    await client.CoreV1Api(other).list_namespace()
    assert server.request_log[-1].user == "bob"


async def test_discovery_documents(server: FakeKubeServer) -> None:
    status, api_list = await raw_get(server, "/apis/batch/v1")
    assert status == 200
    names = {r["name"]: r for r in api_list["resources"]}
    assert names["jobs"]["kind"] == "Job" and names["jobs"]["namespaced"] is True
    assert names["jobs/status"]["verbs"] == ["get", "patch", "update"]
    _, groups = await raw_get(server, "/apis")
    assert {g["name"] for g in groups["groups"]} >= {"batch", "coordination.k8s.io", "events.k8s.io"}
    _, version = await raw_get(server, "/version")
    assert version["gitVersion"] == "v1.36.0"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_create_and_get(server: FakeKubeServer, tmp_path: Path) -> None:
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    sample = SHARED / "data" / "manifests" / "kueue" / "jobs__sample-job.yaml"
    if not sample.exists():
        pytest.skip(f"{sample} is not available")

    async def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            *args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 20)
        return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())

    created = await kubectl("create", "-f", str(sample))
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("job.batch/sample-job-")
    listed = await kubectl("get", "jobs")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert row.split()[:3] == [created.stdout.split("/")[1].split()[0], "Running", "0/3"]


# the JSON patch implementation


RFC6902_CASES = [
    ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}]),
    ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}]),
    ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc"]}]),
    ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}]),
    ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}]),
    ({"baz": "qux"}, [{"op": "replace", "path": "/baz", "value": "boo"}]),
    (
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
    ),
    ({"foo": ["all", "grass", "cows", "eat"]}, [{"op": "move", "from": "/foo/1", "path": "/foo/3"}]),
    ({"a/b": {"m~n": 1}}, [{"op": "copy", "from": "/a~1b/m~0n", "path": "/c"}]),
    ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "qux"}]),
]


@pytest.mark.parametrize(("document", "operations"), RFC6902_CASES)
def test_json_patch_agrees_with_the_jsonpatch_package(document: Any, operations: list[Any]) -> None:
    jsonpatch = pytest.importorskip("jsonpatch")
    assert json_patch(document, operations) == jsonpatch.apply_patch(document, operations)


async def test_kubernetes_asyncio_leader_election_hands_over_when_the_leader_cannot_renew(
    server: FakeKubeServer,
) -> None:
    from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
    from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

    leading: list[str] = []
    stopped: list[str] = []

    async def candidate(identity: str) -> None:
        api = await server.api_client(user=identity)
        lock = LeaseLock("kuota-leader", "kube-system", identity, api)

        async def on_started() -> None:
            leading.append(identity)

        async def on_stopped() -> None:
            stopped.append(identity)

        # About the smallest timings the library accepts: lease 2 s, renew deadline 1.3 s, retry every 1 s.
        config = electionconfig.Config(lock, 2, 1.3, 1, on_started, on_stopped)
        await leaderelection.LeaderElection(config).run()

    async def until(condition: Callable[[], bool], timeout_s: float) -> None:
        async with asyncio.timeout(timeout_s):
            while True:
                if condition():
                    return
                await asyncio.sleep(0.05)

    a = asyncio.create_task(candidate("a"))
    await until(lambda: bool(leading), 3)
    b = asyncio.create_task(candidate("b"))
    await asyncio.sleep(1.1)  # b has tried at least once
    assert leading == ["a"]
    lease = server.get_object("Lease", "kube-system", "kuota-leader") or {}
    assert lease["spec"]["holderIdentity"] == "a"

    # a's renewals start failing: it steps down after renew_deadline, and b takes over once the lease expires.
    server.inject_failure(500, verb="update", resource="leases", user="a", times=1000)
    await until(lambda: leading == ["a", "b"] and stopped == ["a"], 6)
    assert (server.get_object("Lease", "kube-system", "kuota-leader") or {})["spec"]["holderIdentity"] == "b"
    b.cancel()
    await asyncio.gather(a, b, return_exceptions=True)
