"""Nobody skips the queue, with kube-apiserver itself calling kuota's webhooks as config/deploy registers them:
every denial below comes back from the real API server to the user `alice` (RBAC: edit in her namespace), and the
CEL matchConditions decide, inside kube-apiserver, which Jobs kuota sees at all."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from tests.e2e.conftest import Rig, eventually, running, suspended
from tests.kube.manifests import complete, job_manifest

MERGE = "application/merge-patch+json"


async def denied(call: Any) -> str:
    with pytest.raises(ApiException) as caught:
        await call
    assert caught.value.status in (400, 403, 422), caught.value.body
    return str(caught.value.body)


async def patch(rig: Rig, name: str, body: dict[str, Any]) -> Any:
    return await rig.batch.patch_namespaced_job(name, rig.namespace, body, _content_type=MERGE)


async def test_user_cannot_unsuspend_a_queued_job(rig: Rig) -> None:
    await rig.create_job("sneaky")  # no controller runs: it stays queued
    body = await denied(patch(rig, "sneaky", {"spec": {"suspend": False}}))
    assert "only kuota may start this Job" in body
    assert suspended(await rig.job("sneaky"))


async def test_user_cannot_create_an_unsuspended_job_past_the_mutating_webhook(rig: Rig) -> None:
    # The mutating webhook suspends it whatever the manifest says.
    created = await rig.create_job("eager", suspend=False)
    assert created["spec"]["suspend"] is True


async def test_user_cannot_set_kuotas_annotations(rig: Rig) -> None:
    body = await denied(rig.create_job("forged", annotations={"kuota.dev/admitted-flavor": "pool-a"}))
    assert "annotation kuota.dev/admitted-flavor is set by kuota only" in body
    await rig.create_job("plain")
    body = await denied(patch(rig, "plain", {"metadata": {"annotations": {"kuota.dev/workload-id": "x"}}}))
    assert "set by kuota only" in body


async def test_user_cannot_remove_the_queue_label(rig: Rig) -> None:
    await rig.create_job("escapee")
    body = await denied(patch(rig, "escapee", {"metadata": {"labels": {"kuota.dev/queue": None}}}))
    assert "would take this Job out of kuota's queue" in body


async def test_admitted_job_cannot_grow_or_move(rig: Rig) -> None:
    await rig.controller()
    await rig.create_job("grower", cpu="200m", parallelism=1)
    await rig.wait_job("grower", running, "admitted")
    body = await denied(patch(rig, "grower", {"spec": {"parallelism": 3}}))
    assert "cannot grow to 3" in body
    body = await denied(patch(rig, "grower", {"metadata": {"labels": {"kuota.dev/priority-class": "high"}}}))
    assert "cannot change to 'high'" in body


async def test_unknown_queue_and_never_fits_are_denied_at_create(rig: Rig) -> None:
    body = await denied(rig.create_job("lost", labels={"kuota.dev/queue": "nowhere"}))
    assert "nowhere" in body
    body = await denied(rig.create_job("huge", cpu="64"))
    assert "can never" in body


async def test_cel_match_conditions_leave_other_jobs_alone(rig: Rig) -> None:
    # No queue label, in a namespace not labelled kuota.dev/managed: kube-apiserver's CEL matchConditions skip
    # kuota's webhooks, the Job is not suspended, and the Job controller starts it without kuota (no kuota
    # controller is even running). Its pod stays Pending: every rig node carries a taint only kuota's flavor
    # tolerates, as GPU nodes of a kuota cluster would.
    plain = job_manifest("not-kuotas", namespace=rig.namespace, runtime_s=0.5)
    created = rig.admin.sanitize_for_serialization(await rig.batch.create_namespaced_job(rig.namespace, plain))
    assert not created["spec"].get("suspend")
    assert "kuota.dev/queue" not in (created["metadata"].get("labels") or {})
    await eventually(lambda: rig.pods("not-kuotas"), what="the Job controller made its pod")


async def test_kueue_queue_label_is_honoured(rig: Rig) -> None:
    await rig.controller()
    kueue = job_manifest(
        "from-kueue", namespace=rig.namespace, runtime_s=0.5, labels={"kueue.x-k8s.io/queue-name": "ml"}
    )
    created = rig.admin.sanitize_for_serialization(await rig.batch.create_namespaced_job(rig.namespace, kueue))
    assert created["spec"]["suspend"] is True
    await rig.wait_job("from-kueue", complete, "admitted through kuota and run", timeout_s=30)


MANAGED = """
namespaces:
  - {name: NAMESPACE, managed: true, defaultQueue: ml}
"""


@pytest.mark.quota_extra(MANAGED)
@pytest.mark.namespace_labels({"kuota.dev/managed": "true"})
async def test_managed_namespace_queues_every_job(rig: Rig) -> None:
    await rig.controller()
    plain = job_manifest("unlabelled", namespace=rig.namespace, runtime_s=0.5)
    created = rig.admin.sanitize_for_serialization(await rig.batch.create_namespaced_job(rig.namespace, plain))
    assert created["spec"]["suspend"] is True  # the second webhook of each configuration took it
    await rig.wait_job("unlabelled", complete, "admitted from the namespace's default queue", timeout_s=30)
    assert await eventually(lambda: rig.reasons("unlabelled"))
