"""Admission webhooks through the fake API server, called over HTTPS like the real apiserver calls them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fakekube import FakeKubeServer
from tests.fakekube.testing import WebhookServer, job_manifest, job_rule, webhook_configuration

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"

Obj = dict[str, Any]


@pytest.fixture
async def server() -> AsyncIterator[FakeKubeServer]:
    async with FakeKubeServer() as srv:
        yield srv


@pytest.fixture
async def hooks() -> AsyncIterator[WebhookServer]:
    async with WebhookServer() as srv:
        yield srv


@pytest.fixture
async def batch(server: FakeKubeServer) -> client.BatchV1Api:
    return client.BatchV1Api(await server.api_client())


def add_queue_label(request: Obj) -> Obj:
    labels = request["object"]["metadata"].get("labels")
    if labels is None:
        return {"patch": [{"op": "add", "path": "/metadata/labels", "value": {"kuota.dev/queue": "default"}}]}
    return {"patch": [{"op": "add", "path": "/metadata/labels/kuota.dev~1queue", "value": "default"}]}


def deny_without_queue(request: Obj) -> Obj:
    labels = (request["object"] or {}).get("metadata", {}).get("labels") or {}
    if "kuota.dev/queue" in labels:
        return {"allowed": True}
    return {"allowed": False, "status": {"message": "a Job needs a kuota.dev/queue label", "code": 403}}


def register(server: FakeKubeServer, hooks: WebhookServer, *, mutating: bool = True, **extra: Any) -> None:
    mutate = {
        "name": "mutate.kuota.dev",
        "clientConfig": hooks.client_config("/mutate"),
        "rules": [job_rule("CREATE", "UPDATE")],
        **extra,
    }
    validate = {
        "name": "validate.kuota.dev",
        "clientConfig": hooks.client_config("/validate"),
        "rules": [job_rule("CREATE", "UPDATE")],
        **extra,
    }
    server.register_webhooks(
        mutating=webhook_configuration("MutatingWebhookConfiguration", "kuota-mutating", [mutate])
        if mutating
        else None,
        validating=webhook_configuration("ValidatingWebhookConfiguration", "kuota-validating", [validate]),
    )


async def test_mutating_webhook_patch_is_applied_then_validated(
    server: FakeKubeServer, hooks: WebhookServer, batch: client.BatchV1Api
) -> None:
    hooks.on("/mutate", add_queue_label)
    hooks.on("/validate", deny_without_queue)
    register(server, hooks)

    job = await batch.create_namespaced_job("default", job_manifest(generate_name="hooked-"))

    assert job.metadata.labels == {"kuota.dev/queue": "default"}
    assert [path for path, _ in hooks.reviews] == ["/mutate", "/validate"]
    mutate_review, validate_review = (review for _, review in hooks.reviews)
    request = mutate_review["request"]
    assert (mutate_review["apiVersion"], mutate_review["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert request["kind"] == {"group": "batch", "version": "v1", "kind": "Job"}
    assert request["resource"] == {"group": "batch", "version": "v1", "resource": "jobs"}
    assert (request["operation"], request["namespace"], request["dryRun"]) == ("CREATE", "default", False)
    assert request["userInfo"]["username"] == "kubernetes-admin"
    assert request["oldObject"] is None
    assert request["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    # Mutating webhooks run before the name is generated; validating webhooks see the final object.
    assert "name" not in request and request["object"]["metadata"]["generateName"] == "hooked-"
    assert validate_review["request"]["name"] == job.metadata.name
    assert validate_review["request"]["object"]["metadata"]["labels"] == {"kuota.dev/queue": "default"}
    assert validate_review["request"]["object"]["metadata"]["uid"] == job.metadata.uid

    fixture = SHARED / "data" / "k8s-api" / "admission.k8s.io.v1.AdmissionReview.json"
    if fixture.exists():
        real = json.loads(fixture.read_text())
        assert set(mutate_review) <= set(real) and set(request) <= set(real["request"])
        assert list(request) == [k for k in real["request"] if k in request]
        assert set(request["userInfo"]) <= set(real["request"]["userInfo"])
    stored = server.objects("MutatingWebhookConfiguration")[0]
    assert stored["webhooks"][0]["failurePolicy"] == "Fail"  # the v1 default
    real_config = SHARED / "data" / "k8s-api" / "admissionregistration.k8s.io.v1.MutatingWebhookConfiguration.json"
    if real_config.exists():
        real_hook = json.loads(real_config.read_text())["webhooks"][0]
        assert set(stored["webhooks"][0]) <= set(real_hook)
        assert set(stored["webhooks"][0]["rules"][0]) <= set(real_hook["rules"][0])
    assert [(r.webhook, r.allowed, r.patched) for r in server.admission_log] == [
        ("mutate.kuota.dev", True, True),
        ("validate.kuota.dev", True, False),
    ]


async def test_denial_carries_the_webhook_message_and_code(
    server: FakeKubeServer, hooks: WebhookServer, batch: client.BatchV1Api
) -> None:
    hooks.on("/validate", deny_without_queue)
    register(server, hooks, mutating=False)

    with pytest.raises(ApiException) as denied:
        await batch.create_namespaced_job("default", job_manifest("plain"))

    assert denied.value.status == 403
    body = json.loads(denied.value.body)
    assert body["message"] == (
        'admission webhook "validate.kuota.dev" denied the request: a Job needs a kuota.dev/queue label'
    )
    assert (body["kind"], body["status"], body["code"]) == ("Status", "Failure", 403)
    assert server.objects("Job") == []

    hooks.on("/validate", lambda request: False)  # no status at all: 400 "without explanation"
    with pytest.raises(ApiException) as bare:
        await batch.create_namespaced_job("default", job_manifest("plain"))
    assert bare.value.status == 400
    assert json.loads(bare.value.body)["message"] == (
        'admission webhook "validate.kuota.dev" denied the request without explanation'
    )


async def test_update_sends_the_old_object_and_the_user(server: FakeKubeServer, hooks: WebhookServer) -> None:
    hooks.on("/validate", lambda request: True)
    await server.create(job_manifest("u", labels={"kuota.dev/queue": "a"}))
    register(server, hooks, mutating=False)

    batch = client.BatchV1Api(await server.api_client(user="alice", groups=["team-a", "system:authenticated"]))
    await batch.patch_namespaced_job("u", "default", {"metadata": {"labels": {"kuota.dev/queue": "b"}}})

    ((_, review),) = hooks.reviews
    request = review["request"]
    assert request["operation"] == "UPDATE" and request["name"] == "u"
    assert request["options"]["kind"] == "PatchOptions"
    assert request["oldObject"]["metadata"]["labels"] == {"kuota.dev/queue": "a"}
    assert request["object"]["metadata"]["labels"] == {"kuota.dev/queue": "b"}
    assert request["userInfo"] == {"username": "alice", "groups": ["team-a", "system:authenticated"]}


async def test_failure_policy_decides_when_the_webhook_is_down(
    server: FakeKubeServer, hooks: WebhookServer, batch: client.BatchV1Api
) -> None:
    url = hooks.client_config("/validate")["url"]
    await hooks.stop()  # nothing listens on its port any more

    register(server, hooks, mutating=False)
    with pytest.raises(ApiException) as refused:
        await batch.create_namespaced_job("default", job_manifest("down"))
    body = json.loads(refused.value.body)
    assert (refused.value.status, body["reason"]) == (500, "InternalError")
    assert body["message"].startswith(
        f'Internal error occurred: failed calling webhook "validate.kuota.dev": failed to call webhook: '
        f'Post "{url}?timeout=10s": dial tcp 127.0.0.1:'
    )
    assert body["message"].endswith("connect: connection refused")

    register(server, hooks, mutating=False, failurePolicy="Ignore")
    created = await batch.create_namespaced_job("default", job_manifest("down"))
    assert created.metadata.name == "down"
    assert server.admission_log[-1].allowed is None and "connection refused" in server.admission_log[-1].error


async def test_timeout_seconds_is_honoured(
    server: FakeKubeServer, hooks: WebhookServer, batch: client.BatchV1Api
) -> None:
    async def slow(request: Obj) -> bool:
        await asyncio.sleep(3)
        return True

    hooks.on("/validate", slow)
    register(server, hooks, mutating=False, timeoutSeconds=1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ApiException) as timed_out:
        await batch.create_namespaced_job("default", job_manifest("slow"))
    assert loop.time() - started < 2.5
    assert timed_out.value.status == 500
    assert "?timeout=1s" in json.loads(timed_out.value.body)["message"]
    assert json.loads(timed_out.value.body)["message"].endswith("context deadline exceeded")


async def test_untrusted_certificate_is_a_call_failure(
    server: FakeKubeServer, hooks: WebhookServer, batch: client.BatchV1Api
) -> None:
    hooks.on("/validate", lambda request: True)
    async with WebhookServer() as stranger:
        config = hooks.client_config("/validate") | {"caBundle": stranger.ca_bundle}
        server.register_webhooks(
            validating=webhook_configuration(
                "ValidatingWebhookConfiguration",
                "kuota-validating",
                [{"name": "validate.kuota.dev", "clientConfig": config, "rules": [job_rule()]}],
            )
        )
        with pytest.raises(ApiException) as untrusted:
            await batch.create_namespaced_job("default", job_manifest("tls"))
    assert untrusted.value.status == 500
    assert "certificate verify failed" in json.loads(untrusted.value.body)["message"]
    assert hooks.reviews == []


async def test_invalid_responses_are_call_failures(
    server: FakeKubeServer, hooks: WebhookServer, batch: client.BatchV1Api
) -> None:
    register(server, hooks, mutating=False)
    wrong_uid = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "x"}}
    hooks.on("/validate", lambda request: {"review": wrong_uid})
    with pytest.raises(ApiException) as invalid:
        await batch.create_namespaced_job("default", job_manifest("uid"))
    assert "received invalid webhook response: expected response.uid=" in json.loads(invalid.value.body)["message"]

    hooks.on("/validate", lambda request: {"review": {"apiVersion": "admission.k8s.io/v1beta1"}})
    with pytest.raises(ApiException) as wrong_version:
        await batch.create_namespaced_job("default", job_manifest("uid"))
    assert (
        "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview"
        in json.loads(wrong_version.value.body)["message"]
    )


async def test_namespace_and_object_selectors(
    server: FakeKubeServer, hooks: WebhookServer, batch: client.BatchV1Api
) -> None:
    hooks.on("/validate", lambda request: False)
    core = client.CoreV1Api(batch.api_client)
    await core.create_namespace({"metadata": {"name": "managed", "labels": {"kuota.dev/managed": "true"}}})
    register(
        server,
        hooks,
        mutating=False,
        namespaceSelector={"matchExpressions": [{"key": "kuota.dev/managed", "operator": "In", "values": ["true"]}]},
        objectSelector={"matchExpressions": [{"key": "kuota.dev/skip", "operator": "DoesNotExist"}]},
    )

    await batch.create_namespaced_job("default", job_manifest("unmanaged-namespace"))
    await batch.create_namespaced_job(
        "managed", job_manifest("skipped", namespace="managed", labels={"kuota.dev/skip": "yes"})
    )
    with pytest.raises(ApiException) as denied:
        await batch.create_namespaced_job("managed", job_manifest("checked", namespace="managed"))
    assert denied.value.status == 400
    assert len(hooks.reviews) == 1


async def test_dry_run_goes_through_webhooks_and_stores_nothing(
    server: FakeKubeServer, hooks: WebhookServer, batch: client.BatchV1Api
) -> None:
    hooks.on("/mutate", add_queue_label)
    hooks.on("/validate", deny_without_queue)
    register(server, hooks)
    result = await batch.create_namespaced_job("default", job_manifest("dry"), dry_run="All")
    assert result.metadata.labels == {"kuota.dev/queue": "default"}
    assert [review["request"]["dryRun"] for _, review in hooks.reviews] == [True, True]
    assert server.objects("Job") == []


async def test_kueue_webhook_configuration_with_service_references(
    server: FakeKubeServer, batch: client.BatchV1Api
) -> None:
    manifest = SHARED / "data" / "manifests" / "kueue" / "config-webhook__manifests.yaml"
    if not manifest.exists():
        pytest.skip(f"{manifest} is not available")
    mutating, validating = list(yaml.safe_load_all(manifest.read_text()))[:2]
    async with WebhookServer(service_names=["webhook-service.system.svc"]) as hooks:
        for config in (mutating, validating):
            for hook in config["webhooks"]:
                hook["clientConfig"]["caBundle"] = hooks.ca_bundle  # what cert-manager's CA injector does
        hooks.on(
            "/mutate-batch-v1-job",
            lambda request: {"patch": [{"op": "replace", "path": "/spec/suspend", "value": True}]},
        )
        hooks.on("/validate-batch-v1-job", lambda request: True)
        server.register_webhooks(mutating=mutating, validating=validating)
        server.set_service_url("system", "webhook-service", hooks.url)

        job = await batch.create_namespaced_job("default", job_manifest("kueue"))

    assert job.spec.suspend is True
    assert sorted(path for path, _ in hooks.reviews) == ["/mutate-batch-v1-job", "/validate-batch-v1-job"]
    assert {r.webhook for r in server.admission_log} == {"mjob.kb.io", "vjob.kb.io"}


async def test_webhook_configurations_are_validated(server: FakeKubeServer) -> None:
    api = client.AdmissionregistrationV1Api(await server.api_client())
    with pytest.raises(ApiException) as invalid:
        await api.create_validating_webhook_configuration(
            {
                "metadata": {"name": "bad"},
                "webhooks": [
                    {
                        "name": "short",
                        "clientConfig": {"url": "http://127.0.0.1:1/x"},
                        "rules": [job_rule()],
                        "admissionReviewVersions": ["v1"],
                    }
                ],
            }
        )
    message = json.loads(invalid.value.body)["message"]
    assert invalid.value.status == 422
    assert "webhooks[0].name" in message and "webhooks[0].sideEffects" in message
    assert "'https' is the only allowed URL scheme" in message
