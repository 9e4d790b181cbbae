"""The API server misbehaving: dropped watch streams, 410 Gone after compaction, 500s and 429s. kuota relists,
retries with backoff and still carries out every decision."""

from __future__ import annotations

from tests.e2e.conftest import Rig, eventually
from tests.e2e.test_lifecycle import complete, queued_job


async def test_dropped_watches_and_compaction_relist(rig: Rig) -> None:
    controller = await rig.controller()
    await eventually(lambda: controller.runtime.leader)
    await rig.server.wait_for_watches(1)
    assert controller.term is not None and controller.term.cluster is not None
    reflector = controller.term.cluster.reflector
    lists = reflector.lists

    rig.server.drop_watches(abrupt=True)
    await rig.batch.create_namespaced_job("default", queued_job("after-drop", runtime_s=0.2))
    await eventually(lambda: complete(rig.job("after-drop")), what="seen after the stream broke")

    # Compact past what the watcher has seen, then break the stream: resuming gets 410 and kuota lists again.
    await rig.batch.create_namespaced_job("default", queued_job("during-gap", runtime_s=0.2))
    rig.server.compact()
    rig.server.drop_watches()
    await eventually(lambda: complete(rig.job("during-gap")), what="seen after 410")
    await rig.batch.delete_namespaced_job("after-drop", "default")
    await eventually(lambda: reflector.lists >= lists, what="relisted")


async def test_server_errors_are_retried(rig: Rig) -> None:
    controller = await rig.controller()
    await eventually(lambda: controller.runtime.leader)
    await rig.server.wait_for_watches(1)
    patches = rig.server.inject_failure(500, verb="patch", resource="jobs", times=2)
    throttled = rig.server.inject_failure(429, verb="patch", resource="jobs", times=1, retry_after_s=0)
    rig.server.inject_failure(503, verb="watch", resource="jobs", times=2)
    rig.server.drop_watches()
    await rig.batch.create_namespaced_job("default", queued_job("flaky", runtime_s=0.2))
    await eventually(lambda: complete(rig.job("flaky")), timeout_s=15, what="admitted despite 500s and 429")
    assert patches.hits == 2 and throttled.hits == 1
