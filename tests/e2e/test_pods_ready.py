"""Gang readiness on the real control plane: a Job whose pods can never be scheduled (a node selector no kwok node
has) stays Pending, so the Job controller never reports its pods ready; kuota evicts it after the quota file's
short `waitForPodsReady.timeout` (checkpoint asked, then suspended), requeues it with backoff, and deactivates it
after `requeuingLimit` requeues: it stays suspended with a Deactivated Event, the reason in the admin read model and
kuota's mark on the Job, until an operator's release. A normal Job admitted beside it runs untouched."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from admission.labels import DEACTIVATED
from tests.e2e.conftest import Rig, eventually, running, suspended
from tests.kube.manifests import complete

pytestmark = pytest.mark.quota_extra("waitForPodsReady: {timeout: 3s, requeuingLimit: 1, backoffBase: 1s}\n")


async def test_a_gang_that_never_gets_ready_is_evicted_requeued_and_deactivated(rig: Rig) -> None:
    component = await rig.controller()
    runtime = component.runtime
    stuck = rig.manifest("stuck", cpu="200m", parallelism=2, completions=2)
    stuck["spec"]["template"]["spec"]["nodeSelector"] = {"kuota.test/never": "scheduled"}
    await rig.batch.create_namespaced_job(rig.namespace, stuck)
    await rig.wait_job("stuck", running, "admitted")
    await rig.create_job("normal", cpu="100m", runtime_s=8)
    await rig.wait_job("normal", running, "admitted beside it")

    name = f"Job/{rig.namespace}/stuck"
    controller = runtime.controller
    assert controller is not None
    pods = await eventually(lambda: rig.pods("stuck"), what="the Job controller made the pods")
    assert all(p["status"].get("phase") == "Pending" for p in pods)

    await eventually(lambda: name in controller.manager.deactivated, timeout_s=40, what="stuck deactivated")
    assert suspended(await rig.job("stuck"))
    assert controller.tracking[name].attempt == 2, "admitted twice: requeued once (the limit), then deactivated"
    assert "requeuingLimit 1" in controller.manager.messages[name]
    # Marked on the Job, so that a controller that starts later keeps it out of the queue too.
    marked = await eventually(lambda: _mark(rig, "stuck"), what="the deactivation marked on the Job")
    assert marked == controller.manager.messages[name]
    # Events per Job are budgeted (10 at once): the first eviction's steps are told, and the deactivation always.
    await eventually(lambda: _told(rig, "stuck", "Deactivated"), what="the Deactivated Event")
    told = await rig.told("stuck")
    assert {"Admitted", "Evicted", "CheckpointTimedOut", "Requeued"} <= set(told), told
    assert any("PodsReadyTimeout" in m and "checkpoint requested via" in m for m in told["Evicted"]), told

    # It stays out: no third admission while deactivated.
    await asyncio.sleep(3)
    assert suspended(await rig.job("stuck"))
    assert controller.tracking[name].attempt == 2 and name in controller.manager.deactivated

    # The normal Job was admitted while the stuck one waited and ran to its end, never evicted.
    await rig.wait_job("normal", complete, "completes", timeout_s=30)
    assert "Evicted" not in await rig.reasons("normal")

    assert runtime.ledger is not None
    await runtime.ledger.flush()
    async with runtime.ledger.engine.connect() as connection:
        rows = (await connection.execute(text("SELECT victim, preemptor, reason FROM preemptions"))).all()
    assert sorted(rows) == [(name, None, "PodsReadyTimeout")] * 2

    # An operator's release puts it back in the queue: admitted again.
    runtime.release(name, "ops")
    await rig.wait_job("stuck", running, "admitted again after its release")
    assert controller.tracking[name].attempt == 3
    await eventually(lambda: _unmarked(rig, "stuck"), what="the deactivation mark taken off")


async def _mark(rig: Rig, job: str) -> str | None:
    return (await rig.annotations(job)).get(DEACTIVATED)


async def _unmarked(rig: Rig, job: str) -> bool:
    return DEACTIVATED not in await rig.annotations(job)


async def _told(rig: Rig, job: str, reason: str) -> bool:
    return reason in await rig.reasons(job)
