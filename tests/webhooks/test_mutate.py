"""The mutating webhook on realistic Jobs: suspend, normalise the queue label, default queue, priority, idempotence."""

from __future__ import annotations

import pytest

from quota.loader import load_config_file, load_config_text
from webhooks.state import WebhookState

from .helpers import QUOTA_FILE, call, decode_patch, gpu_job, manifest, mutated, review


def test_eidf_mig_job_is_suspended_and_stamped(state: WebhookState) -> None:
    job = manifest("eidf-gpu-service/training__L3_running_a_pytorch_task__block2.yaml", "eidf018ns")
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "eidf018ns-user-queue"}
    result = mutated(state, job)
    assert result["spec"]["suspend"] is True
    assert result["metadata"]["labels"] == {
        "kueue.x-k8s.io/queue-name": "eidf018ns-user-queue",
        "kuota.dev/queue": "eidf018ns-user-queue",
        "kuota.dev/priority-class": "research",
    }
    # Nothing else changes: the MIG node selector and the GPU limit stay as written.
    assert result["spec"]["template"] == job["spec"]["template"]


def test_patch_is_rfc6902_with_escaped_label_keys(state: WebhookState) -> None:
    response = call("mutate", state, review(manifest("kueue/jobs__sample-job.yaml")))
    assert response["allowed"] and response["patchType"] == "JSONPatch"
    assert decode_patch(response) == [
        {"op": "add", "path": "/metadata/labels/kuota.dev~1queue", "value": "user-queue"},
        {"op": "add", "path": "/metadata/labels/kuota.dev~1priority-class", "value": "research"},
        {"op": "replace", "path": "/spec/suspend", "value": True},
    ]


def test_suspend_is_added_when_absent(state: WebhookState) -> None:
    job = manifest("kueue/jobs__sample-job.yaml")
    del job["spec"]["suspend"]
    assert {"op": "add", "path": "/spec/suspend", "value": True} in decode_patch(call("mutate", state, review(job)))


def test_reinvocation_changes_nothing(state: WebhookState) -> None:
    for job in (
        manifest("kueue/jobs__sample-job.yaml"),
        gpu_job(queue=None),
        manifest("kueue/admin__shared-quota-sample-job.yaml"),
    ):
        once = mutated(state, job)
        response = call("mutate", state, review(once))
        assert response["allowed"] and "patch" not in response and "patchType" not in response
        assert mutated(state, once) == once


def test_default_queue_of_a_managed_namespace(state: WebhookState) -> None:
    result = mutated(state, gpu_job(queue=None))
    assert result["metadata"]["labels"]["kuota.dev/queue"] == "eidf018ns-user-queue"
    assert result["spec"]["suspend"] is True


def test_default_queue_given_as_namespace_and_name() -> None:
    text = QUOTA_FILE.read_text().replace("defaultQueue: eidf018ns-user-queue", "defaultQueue: eidf018ns/urgent")
    state = WebhookState(load_config_text(text))
    assert mutated(state, gpu_job(queue=None))["metadata"]["labels"]["kuota.dev/queue"] == "urgent"


def test_labels_are_created_when_the_job_has_none(state: WebhookState) -> None:
    job = gpu_job(queue=None)
    del job["metadata"]["labels"]
    patch = decode_patch(call("mutate", state, review(job)))
    assert patch[0] == {
        "op": "add",
        "path": "/metadata/labels",
        "value": {"kuota.dev/queue": "eidf018ns-user-queue", "kuota.dev/priority-class": "research"},
    }


def test_managed_namespace_without_default_is_still_suspended(state: WebhookState) -> None:
    result = mutated(state, gpu_job(namespace="strict", queue=None))
    assert result["spec"]["suspend"] is True
    assert "kuota.dev/queue" not in result["metadata"]["labels"]  # the validating webhook denies it, with a message


def test_jobs_kuota_does_not_manage_are_left_alone(state: WebhookState) -> None:
    job = gpu_job(namespace="elsewhere", queue=None)
    response = call("mutate", state, review(job))
    assert response == {"uid": response["uid"], "allowed": True}


@pytest.mark.parametrize(
    ("labels", "template_class", "stamped"),
    [
        ({"kuota.dev/priority-class": "production"}, None, "production"),
        ({"kueue.x-k8s.io/priority-class": "high-priority"}, None, "high-priority"),
        (
            {"kuota.dev/priority-class": "production", "kueue.x-k8s.io/priority-class": "high-priority"},
            None,
            "production",
        ),
        ({}, "system-critical", "system-critical"),
        ({}, "cluster-wide-class-kuota-does-not-know", "research"),
        ({"kuota.dev/priority-class": "no-such-class"}, None, "no-such-class"),  # left for validation to deny
    ],
)
def test_priority_class_stamped(
    state: WebhookState, labels: dict[str, str], template_class: str | None, stamped: str
) -> None:
    job = gpu_job()
    job["metadata"]["labels"].update(labels)
    if template_class:
        job["spec"]["template"]["spec"]["priorityClassName"] = template_class
    assert mutated(state, job)["metadata"]["labels"]["kuota.dev/priority-class"] == stamped


def test_no_default_class_stamps_nothing() -> None:
    config = load_config_file(QUOTA_FILE)
    state = WebhookState(config.model_copy(update={"priority_classes": ()}))
    assert "kuota.dev/priority-class" not in mutated(state, gpu_job())["metadata"]["labels"]


def test_disagreeing_queue_labels_warn_and_kuota_wins(state: WebhookState) -> None:
    job = gpu_job()
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "urgent"
    response = call("mutate", state, review(job))
    assert "kuota.dev/queue" in response["warnings"][0]
    assert all(op["path"] != "/metadata/labels/kuota.dev~1queue" for op in decode_patch(response))


def test_placeholder_queue_label_is_denied_cleanly(state: WebhookState) -> None:
    job = manifest("eidf-gpu-service/training__L1_getting_started__block0.yaml", "eidf018ns")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "<project-namespace>-user-queue"
    response = call("mutate", state, review(job))
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert "<project-namespace>-user-queue" in status["message"] and "placeholder" in status["message"]
    assert "eidf018ns-user-queue" in status["message"]  # what to put there instead
    assert status["details"]["causes"][0]["field"] == "metadata.labels[kueue.x-k8s.io/queue-name]"


def test_update_and_status_requests_pass_untouched(state: WebhookState) -> None:
    job = gpu_job()
    for body in (review(job, operation="UPDATE", old=job), review(job, operation="DELETE")):
        assert call("mutate", state, body) == {"uid": body["request"]["uid"], "allowed": True}
    body = review(job)
    body["request"]["subResource"] = "status"
    assert "patch" not in call("mutate", state, body)


def test_dry_run_gets_the_same_answer(state: WebhookState) -> None:
    job = manifest("kueue/jobs__sample-job.yaml")
    wet = call("mutate", state, review(job, uid="u"))
    dry = call("mutate", state, review(job, uid="u", dry_run=True))
    assert wet == dry
