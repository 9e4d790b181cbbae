"""A Job's life through kuota on a (fake) cluster: queued by the webhook, admitted by the controller, run by the
kubelet, released in the ledger; and the ways a user cannot skip the queue."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from sqlalchemy import text

from tests.e2e.conftest import Rig, eventually
from tests.fakekube.testing import job_manifest

QUEUE = {"kuota.dev/queue": "ml"}


def queued_job(name: str, *, cpu: str = "500m", runtime_s: float = 0.5, **labels: str) -> dict[str, object]:
    return job_manifest(name, labels={**QUEUE, **labels}, cpu=cpu, runtime_s=runtime_s)


def complete(job: dict[str, object]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []  # type: ignore[attr-defined]
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


async def test_job_is_queued_admitted_run_and_released(rig: Rig) -> None:
    controller = await rig.controller()
    created = await rig.batch.create_namespaced_job("default", queued_job("train", runtime_s=0.8))
    assert created.spec.suspend is True  # the mutating webhook queued it

    admitted = await eventually(lambda: rig.job("train")["spec"].get("suspend") is False and rig.job("train"))
    pod = admitted["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kuota.dev/pool": "a"}
    assert {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    annotations = admitted["metadata"]["annotations"]
    assert annotations["kuota.dev/admitted-flavor"] == "pool-a"
    assert annotations["kuota.dev/workload-id"] == "default/train"

    await eventually(lambda: complete(rig.job("train")), what="the kubelet completes the Job")
    runtime = controller.runtime
    assert runtime.controller is not None
    await eventually(lambda: "default/train" not in runtime.controller.manager.workloads, what="quota released")
    assert not any(runtime.controller.manager.usage.values())

    assert runtime.ledger is not None
    await runtime.ledger.flush()
    async with runtime.ledger.engine.connect() as connection:
        rows = (await connection.execute(text("SELECT workload_id, ended_at FROM usage_intervals"))).all()
    assert rows and all(ended is not None for _, ended in rows)

    reasons = {e["reason"] for e in rig.server.objects("Event", "default")}
    assert {"Queued", "Admitted"} <= reasons


async def test_second_job_waits_for_quota_then_runs(rig: Rig) -> None:
    await rig.controller()
    await rig.batch.create_namespaced_job("default", queued_job("first", cpu="800m", runtime_s=1.0))
    await eventually(lambda: rig.job("first")["spec"].get("suspend") is False)
    await rig.batch.create_namespaced_job("default", queued_job("second", cpu="800m", runtime_s=0.2))
    assert rig.job("second")["spec"]["suspend"] is True
    await eventually(lambda: complete(rig.job("first")))
    await eventually(lambda: complete(rig.job("second")), what="second admitted once first freed its quota")


async def test_user_cannot_unsuspend_their_own_job(rig: Rig) -> None:
    await rig.batch.create_namespaced_job("default", queued_job("sneaky"))  # no controller runs: it stays queued
    with pytest.raises(ApiException) as denied:
        await rig.batch.patch_namespaced_job(
            "sneaky", "default", {"spec": {"suspend": False}}, _content_type="application/merge-patch+json"
        )
    assert denied.value.status == 403
    assert "only kuota may start this Job" in denied.value.body
