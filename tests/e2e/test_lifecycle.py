"""A Job's life through kuota on the real control plane: kube-apiserver calls kuota's webhook, which queues the
Job; the controller admits it with its ServiceAccount's token; the Job controller makes pods, the scheduler binds
them to a kwok GPU node of the admitted flavor, they run and finish; the ledger closes the interval."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text

from clusters.kube.api import KubeApi
from clusters.kube.watch import Reflector
from tests.e2e.conftest import Rig, eventually, running, suspended
from tests.kube.manifests import complete
from workloads.kind import condition_true
from workloads.kinds.job import JOB


async def test_job_is_queued_admitted_scheduled_run_and_released(rig: Rig) -> None:
    controller = await rig.controller()
    created = await rig.create_job("train", cpu="500m", runtime_s=2)
    assert created["spec"]["suspend"] is True  # the mutating webhook queued it, called by kube-apiserver

    admitted = await rig.wait_job("train", running, "admitted")
    pod = admitted["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kuota.dev/pool": "a"}
    assert {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    annotations = admitted["metadata"]["annotations"]
    assert annotations["kuota.dev/admitted-flavor"] == "pool-a"
    assert annotations["kuota.dev/workload-id"] == f"Job/{rig.namespace}/train"

    # The scheduler placed the pod on a node of the flavor (its label and taint), and kwok ran it.
    pods = await eventually(lambda: rig.pods("train"), what="the Job controller made a pod")
    node = await eventually(lambda: _node_of(rig), what="the pod is bound to a node")
    labels = (await _read_node(rig, node))["metadata"]["labels"]
    assert labels["kuota.dev/pool"] == "a", pods
    await rig.wait_job("train", complete, "completes", timeout_s=30)

    runtime = controller.runtime
    assert runtime.controller is not None
    workload = f"Job/{rig.namespace}/train"
    await eventually(lambda: workload not in runtime.controller.manager.workloads, what="quota released")
    assert not any(runtime.controller.manager.usage.values())
    assert runtime.ledger is not None
    await runtime.ledger.flush()
    async with runtime.ledger.engine.connect() as connection:
        rows = (await connection.execute(text("SELECT workload_id, ended_at FROM usage_intervals"))).all()
    assert rows and all(ended is not None for _, ended in rows)
    # Admitted in the first cycle that saw it: told Admitted alone, no Queued Event before it.
    reasons = await rig.reasons("train")
    assert "Admitted" in reasons and "Queued" not in reasons, reasons


async def _node_of(rig: Rig) -> str | None:
    pods = await rig.pods("train")
    return next((p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")), None)


async def _read_node(rig: Rig, name: str) -> dict[str, object]:
    from kubernetes_asyncio import client

    node = await client.CoreV1Api(rig.admin).read_node(name)
    return rig.admin.sanitize_for_serialization(node)  # type: ignore[no-any-return]


async def test_job_controllers_decided_state_ends_the_job_before_complete(rig: Rig) -> None:
    # kuota gives a Job's quota back at SuccessCriteriaMet once no pod is left (workloads/kinds/job.py): this checks
    # that the real Job controller writes that state as a version of its own before Complete, in the shape read.
    await rig.controller()
    versions: list[dict[str, Any]] = []
    reflector = Reflector(
        KubeApi(rig.admin),
        JOB,
        versions.extend,
        lambda _, obj: versions.append(obj),
        field_selector=f"metadata.namespace={rig.namespace}",
    )
    watching = asyncio.create_task(reflector.run())
    try:
        await eventually(lambda: reflector.synced.is_set(), what="the watch")
        await rig.create_job("decided", cpu="500m", runtime_s=0.5)
        await rig.wait_job("decided", complete, "completes", timeout_s=30)
        await eventually(lambda: any(condition_true(v, "Complete") for v in versions), what="Complete watched")
    finally:
        watching.cancel()
    decided = [v for v in versions if condition_true(v, "SuccessCriteriaMet") and not condition_true(v, "Complete")]
    assert decided, [v.get("status") for v in versions]
    assert JOB.status(decided[-1]).finished is True, decided[-1]["status"]


async def test_second_job_waits_for_quota_then_runs(rig: Rig) -> None:
    await rig.controller()
    await rig.create_job("first", cpu="800m", runtime_s=3)
    await rig.wait_job("first", running, "admitted")
    await rig.create_job("second", cpu="800m", runtime_s=0.5)
    await eventually(lambda: rig.reasons("second"), what="second seen by kuota")
    assert suspended(await rig.job("second"))
    await rig.wait_job("first", complete, "completes", timeout_s=30)
    await rig.wait_job("second", complete, "admitted once first freed its quota, then completes", timeout_s=30)


async def test_kuota_admits_while_its_webhook_is_down(rig: Rig) -> None:
    # The validating webhooks' CEL matchCondition skips kuota's own UPDATEs (it would allow them anyway): with the
    # webhook server gone (failurePolicy Fail), kube-apiserver still lets kuota start a queued Job.
    await rig.create_job("during-outage", runtime_s=0.5)
    assert rig.webhook is not None
    await rig.webhook.stop()
    await rig.controller()
    await rig.wait_job("during-outage", running, "admitted with the webhook down")
    await rig.wait_job("during-outage", complete, "run", timeout_s=30)
