"""kube-apiserver misbehaving, for real where it can be made to, through the fault proxy where it cannot.

Real: kube-apiserver restarted on the same etcd data (kuota's watch resumes, nothing is admitted twice); etcd
compacted past what kuota's watch has seen (kube-apiserver answers 410 Gone and kuota lists again); a server with
`--max-requests-inflight=1` answering 429 to a burst. Through tests/kube/proxy.py: watch streams cut mid-flight,
bursts of 500 and 503, 429 with Retry-After, and latency."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from kuota.components.controller import ControllerComponent
from tests.e2e.conftest import Rig, eventually, own_control_plane, rig_on, running
from tests.kube.controlplane import ControlPlane, Group
from tests.kube.manifests import complete


def reflector_of(controller: ControllerComponent) -> Any:
    """The reflector of Jobs, the one kind these tests create."""
    assert controller.term is not None and controller.term.cluster is not None
    return controller.term.cluster.reflectors["Job"]


async def leading(controller: ControllerComponent) -> ControllerComponent:
    await eventually(lambda: controller.term is not None and controller.runtime.leader, what="kuota leads")
    return controller


# -- through the proxy, on the session's control plane -----------------------------------------------------------


async def test_dropped_watches_are_resumed(rig: Rig) -> None:
    proxy = await rig.proxy()
    await leading(await rig.controller(via=proxy))
    await proxy.wait_for_watches(1)
    assert proxy.drop_watches() >= 1
    await rig.create_job("after-drop", runtime_s=0.5)
    await rig.wait_job("after-drop", complete, "seen after the stream broke", timeout_s=30)
    assert sum(n for (verb, resource, _), n in proxy.answered.items() if (verb, resource) == ("watch", "jobs")) >= 2


async def test_server_errors_and_throttling_are_retried(rig: Rig) -> None:
    proxy = await rig.proxy()
    await leading(await rig.controller(via=proxy))
    await proxy.wait_for_watches(1)
    patches = proxy.inject(500, verb="patch", resource="jobs", times=2)
    throttled = proxy.inject(429, verb="patch", resource="jobs", times=1, retry_after_s=1)
    watches = proxy.inject(503, verb="watch", resource="jobs", times=2)
    proxy.latency_s = 0.2
    proxy.drop_watches()
    await rig.create_job("flaky", runtime_s=0.5)
    await rig.wait_job("flaky", complete, "admitted despite 500s, 503s and a 429", timeout_s=40)
    assert (patches.hits, throttled.hits, watches.hits) == (2, 1, 2)


# -- kube-apiserver restarted on the same etcd --------------------------------------------------------------------


@pytest.fixture(scope="module")
def split_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Group]]:
    """etcd, kube-apiserver and the rest as three processes, so the API server can restart alone."""
    plane = ControlPlane(tmp_path_factory.mktemp("split"))
    plane.up(["etcd"])
    apiserver = plane.up(["kube-apiserver"])
    plane.up(["kube-controller-manager", "kube-scheduler", "kwok"], nodes=2)
    plane.install_kuota_identity()
    try:
        yield plane, apiserver
    finally:
        plane.down()


@pytest.fixture
async def split_rig(split_plane: tuple[ControlPlane, Group], tmp_path: Path) -> AsyncIterator[Rig]:
    async for value in rig_on(split_plane[0], tmp_path):
        yield value


async def test_watch_resumes_across_an_apiserver_restart(
    split_plane: tuple[ControlPlane, Group], split_rig: Rig
) -> None:
    plane, apiserver = split_plane  # module-scoped: the only test that restarts it
    rig = split_rig
    # A Lease long enough to outlive the restart: kuota keeps leading and its watch has to resume, not restart.
    controller = await leading(await rig.controller(lease_duration=20))
    await rig.create_job("before", cpu="400m")  # runs until deleted
    await rig.wait_job("before", running, "admitted")

    await asyncio.to_thread(plane.restart, apiserver)
    await rig.create_job("after", cpu="400m", runtime_s=0.5)
    await rig.wait_job("after", complete, "seen and admitted after the restart", timeout_s=40)
    assert controller.runtime.leader

    assert controller.runtime.ledger is not None
    await controller.runtime.ledger.flush()
    from sqlalchemy import text

    async with controller.runtime.ledger.engine.connect() as connection:
        rows = (await connection.execute(text("SELECT workload_id FROM admissions"))).all()
    admitted = [row[0] for row in rows]
    assert admitted.count(f"Job/{rig.namespace}/before") == 1, admitted


# -- 410 Gone after an etcd compaction ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def uncached_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """kube-apiserver without its watch cache: watches are served by etcd, so a compaction is what makes an old
    resourceVersion unusable (410 Gone), as it is behind any cache once the cache's window has passed."""
    yield from own_control_plane(tmp_path_factory.mktemp("uncached"), nodes=2, apiserver_args=["--watch-cache=false"])


@pytest.fixture
async def uncached_rig(uncached_plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Rig]:
    async for value in rig_on(uncached_plane, tmp_path):
        yield value


def compact_etcd(plane: ControlPlane) -> int:
    """Compact etcd at its current revision through etcd's own JSON gateway."""

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            plane.etcd + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    revision = int(post("/v3/kv/range", {"key": base64.b64encode(b"/registry").decode()})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


async def test_compaction_makes_kuota_list_again(uncached_rig: Rig, uncached_plane: ControlPlane) -> None:
    rig = uncached_rig
    proxy = await rig.proxy()
    controller = await leading(await rig.controller(via=proxy))
    await proxy.wait_for_watches(1)
    reflector = reflector_of(controller)
    lists = reflector.lists

    proxy.hold_watches()  # kuota's next watch waits at the proxy...
    proxy.drop_watches()
    await rig.create_job("during-gap", runtime_s=0.5)  # ...while Jobs arrive and etcd forgets the history
    await rig.create_job("after-gap", runtime_s=0.5)  # (the compaction keeps its own revision: go one past)
    await asyncio.to_thread(compact_etcd, uncached_plane)
    proxy.release_watches()

    for name in ("during-gap", "after-gap"):
        await rig.wait_job(name, complete, "seen through a fresh list after 410", timeout_s=40)
    # kube-apiserver said so inside the watch stream (an ERROR event of code 410), and kuota listed again.
    assert proxy.gone_in_watch >= 1, proxy.answered
    assert reflector.lists > lists


# -- 429 from a server with little room -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def narrow_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    flags = ["--enable-priority-and-fairness=false", "--max-requests-inflight=1", "--max-mutating-requests-inflight=1"]
    yield from own_control_plane(tmp_path_factory.mktemp("narrow"), nodes=2, apiserver_args=flags)


@pytest.fixture
async def narrow_rig(narrow_plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Rig]:
    async for value in rig_on(narrow_plane, tmp_path):
        yield value


async def create_until_accepted(rig: Rig, name: str, **kwargs: Any) -> None:
    for _ in range(200):
        try:
            await rig.create_job(name, **kwargs)
            return
        except ApiException as exc:
            if exc.status != 429:
                raise
            await asyncio.sleep(0.05)
    raise AssertionError(f"{name}: still 429 after 200 tries")


async def test_throttled_by_max_requests_inflight(narrow_rig: Rig) -> None:
    rig = narrow_rig
    proxy = await rig.proxy()  # only to count what kube-apiserver answered kuota
    await leading(await rig.controller(via=proxy))
    names = [f"burst-{i}" for i in range(16)]
    await asyncio.gather(*(create_until_accepted(rig, n, cpu="100m", runtime_s=0.3) for n in names))
    for name in names:
        await rig.wait_job(name, complete, "admitted and run despite 429s", timeout_s=90)
    throttled = sum(count for (_, _, status), count in proxy.answered.items() if status == 429)
    assert throttled > 0, f"kube-apiserver never answered kuota 429: {proxy.answered}"
