"""Events are budgeted on their own: a burst of submissions sends at most the budget's worth (the rest are
counted as dropped), and Events never take from the client's request budget that admissions and evictions use."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from kubernetes_asyncio import client

from clusters.kube.api import KubeApi, TokenBucket
from clusters.kube.events import EventRecorder


class Response:
    status = 201
    headers: ClassVar[dict[str, str]] = {}

    async def read(self) -> bytes:
        return b"{}"

    def release(self) -> None:
        return None


class Core:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    async def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> Response:
        self.created.append(body)
        return Response()


def api_with_fake_core(qps: float, burst: int) -> tuple[KubeApi, Core]:
    api = KubeApi(client.ApiClient(client.Configuration()), qps=qps, burst=burst)
    core = Core()
    api.core = core
    return api, core


async def test_a_burst_sends_at_most_the_budget_and_counts_the_rest() -> None:
    api, core = api_with_fake_core(qps=1000, burst=1000)
    now = [0.0]
    recorder = EventRecorder(api, lambda _key: "uid", budget=TokenBucket(1.0, 5, clock=lambda: now[0]))
    for i in range(20):
        recorder.emit(f"ns/job-{i}", "Queued", "Queued in q at position 1", 1_000)
    await recorder.drain()
    assert len(core.created) == 5
    assert recorder.dropped == 15
    now[0] = 2.0  # two seconds later the budget has two more
    for i in range(20, 25):
        recorder.emit(f"ns/job-{i}", "Queued", "Queued in q at position 1", 3_000)
    await recorder.drain()
    assert len(core.created) == 7
    assert api.bucket.tokens == 1000  # the client's own budget was never touched
    await api.api_client.close()


async def test_events_do_not_wait_behind_an_exhausted_client_budget() -> None:
    api, core = api_with_fake_core(qps=0.01, burst=1)
    assert api.bucket.try_take()  # the client's budget is spent: its next request would wait for 100 s
    recorder = EventRecorder(api, lambda _key: "uid")
    recorder.emit("ns/job", "Admitted", "Admitted by team t on flavor f, attempt 1", 1_000)
    await asyncio.wait_for(recorder.drain(), timeout=5)
    assert [e["reason"] for e in core.created] == ["Admitted"]
    await api.api_client.close()
