"""The fake kubelet: Jobs start, run for their annotated time, complete or fail, and stop when suspended,
with the status the real job controller writes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, watch

from tests.fakekube import FakeKubelet, FakeKubeServer
from tests.fakekube.testing import job_manifest

FIXTURES = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "k8s-api"

Obj = dict[str, Any]


@pytest.fixture
async def server() -> AsyncIterator[FakeKubeServer]:
    async with FakeKubeServer() as srv:
        yield srv


@pytest.fixture
async def batch(server: FakeKubeServer) -> client.BatchV1Api:
    return client.BatchV1Api(await server.api_client())


def conditions(job: Obj) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in (job.get("status") or {}).get("conditions") or []]


async def wait_for(server: FakeKubeServer, name: str, predicate: Callable[[Obj], bool], timeout_s: float = 5) -> Obj:
    async with asyncio.timeout(timeout_s):
        while True:
            job = server.get_object("Job", "default", name)
            if job is not None and predicate(job):
                return job
            await asyncio.sleep(0.02)


def running(job: Obj) -> bool:
    return bool((job.get("status") or {}).get("active"))


async def test_job_runs_for_its_annotated_time_then_completes(server: FakeKubeServer, batch: client.BatchV1Api) -> None:
    listing = await batch.list_namespaced_job("default")
    async with FakeKubelet(server, default_runtime_s=30), watch.Watch() as w:
        await batch.create_namespaced_job("default", job_manifest("quick", runtime_s=0.3, parallelism=2, completions=4))
        seen: list[Obj] = []
        async with asyncio.timeout(5):
            async for event in w.stream(
                batch.list_namespaced_job, "default", resource_version=listing.metadata.resource_version
            ):
                seen.append(event["raw_object"])
                if ("Complete", "True", "CompletionsReached") in conditions(event["raw_object"]):
                    break

    started = next(j for j in seen if running(j))["status"]
    assert (started["active"], started["ready"]) == (2, 2) and "startTime" in started
    done = seen[-1]["status"]
    assert conditions(seen[-1]) == [
        ("SuccessCriteriaMet", "True", "CompletionsReached"),
        ("Complete", "True", "CompletionsReached"),
    ]
    assert (done["active"], done["succeeded"], done["ready"]) == (0, 4, 0)
    assert done["completionTime"] >= done["startTime"]
    real = json.loads((FIXTURES / "batch.v1.Job.json").read_text()) if FIXTURES.exists() else None
    if real is not None:
        assert set(done) <= set(real["status"])
        for condition in done["conditions"]:
            assert list(condition) == list(real["status"]["conditions"][0])


async def test_fail_annotation_fails_the_job(server: FakeKubeServer, batch: client.BatchV1Api) -> None:
    async with FakeKubelet(server):
        await batch.create_namespaced_job("default", job_manifest("doomed", runtime_s=0.1, fail=True))
        job = await wait_for(server, "doomed", lambda j: ("Failed", "True", "BackoffLimitExceeded") in conditions(j))
    assert conditions(job) == [
        ("FailureTarget", "True", "BackoffLimitExceeded"),
        ("Failed", "True", "BackoffLimitExceeded"),
    ]
    assert job["status"]["failed"] == 7 and job["status"]["active"] == 0
    assert "completionTime" not in job["status"]


async def test_suspend_stops_a_running_job_and_resume_restarts_the_clock(
    server: FakeKubeServer, batch: client.BatchV1Api
) -> None:
    async with FakeKubelet(server) as kubelet:
        await batch.create_namespaced_job("default", job_manifest("s", suspend=True, runtime_s=0.6))
        created = await wait_for(server, "s", lambda j: bool(conditions(j)))
        assert conditions(created) == [("Suspended", "True", "JobSuspended")]
        assert kubelet.running() == set()

        await batch.patch_namespaced_job("s", "default", {"spec": {"suspend": False}})
        resumed = await wait_for(server, "s", running)
        assert conditions(resumed) == [("Suspended", "False", "JobResumed")]
        assert kubelet.running() == {("default", "s")}

        await asyncio.sleep(0.3)  # half its runtime
        await batch.patch_namespaced_job("s", "default", {"spec": {"suspend": True}})
        stopped = await wait_for(server, "s", lambda j: ("Suspended", "True", "JobSuspended") in conditions(j))
        assert stopped["status"]["active"] == 0 and "startTime" not in stopped["status"]

        await asyncio.sleep(0.5)  # longer than what was left: a stopped clock must not complete it
        assert conditions(server.get_object("Job", "default", "s") or {}) == [("Suspended", "True", "JobSuspended")]

        loop = asyncio.get_running_loop()
        await batch.patch_namespaced_job("s", "default", {"spec": {"suspend": False}})
        restarted_at = loop.time()
        done = await wait_for(server, "s", lambda j: ("Complete", "True", "CompletionsReached") in conditions(j))
        assert loop.time() - restarted_at >= 0.55  # the full runtime again, not the remainder
    assert ("Suspended", "False", "JobResumed") in conditions(done)


async def test_pods_follow_their_job(server: FakeKubeServer, batch: client.BatchV1Api) -> None:
    async with FakeKubelet(server, create_pods=True, default_runtime_s=0.3):
        job = await batch.create_namespaced_job("default", job_manifest("with-pods", parallelism=2, completions=2))
        await wait_for(server, "with-pods", running)
        pods = server.objects("Pod", "default")
        assert len(pods) == 2
        for pod in pods:
            assert pod["status"]["phase"] == "Running"
            assert pod["metadata"]["name"].startswith("with-pods-")
            assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "with-pods"
            assert pod["metadata"]["ownerReferences"][0]["uid"] == job.metadata.uid
        await wait_for(server, "with-pods", lambda j: ("Complete", "True", "CompletionsReached") in conditions(j))
        await asyncio.sleep(0.05)
        assert {p["status"]["phase"] for p in server.objects("Pod", "default")} == {"Succeeded"}


async def test_finish_ends_a_job_at_once(server: FakeKubeServer, batch: client.BatchV1Api) -> None:
    async with FakeKubelet(server, default_runtime_s=60) as kubelet:
        await batch.create_namespaced_job("default", job_manifest("long"))
        await wait_for(server, "long", running)
        job = await kubelet.finish("default", "long")
        assert ("Complete", "True", "CompletionsReached") in conditions(job)
        assert kubelet.running() == set() and kubelet.errors == []
