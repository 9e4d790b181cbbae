"""The validating webhook: every denial rule, and what it must let through."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from quota.loader import load_config_text
from webhooks.state import WebhookState

from .denials import DENIALS, KUOTA, Denial, admitted, queued, update
from .helpers import QUOTA_FILE, call, gpu_job, manifest, review


@pytest.mark.parametrize("denial", DENIALS, ids=[d.id for d in DENIALS])
def test_denial(state: WebhookState, denial: Denial) -> None:
    body = denial.build(state)
    response = call(denial.endpoint, state, body)
    assert response["uid"] == body["request"]["uid"]
    assert response["allowed"] is False
    status = response["status"]
    assert status["status"] == "Failure"
    assert status["code"] == denial.code, status
    for words in denial.words:
        assert words in status["message"], (words, status["message"])
    # A dry run is answered the same.
    body["request"]["dryRun"] = True
    assert call(denial.endpoint, state, body) == response


def allowed(state: WebhookState, body: dict[str, Any]) -> bool:
    response = call("validate", state, body)
    assert response["uid"] == body["request"]["uid"]
    assert "patch" not in response
    return bool(response["allowed"])


@pytest.mark.parametrize(
    "path",
    [
        "eidf-gpu-service/training__L1_getting_started__block1.yaml",
        "eidf-gpu-service/training__L1_getting_started__block2.yaml",
        "eidf-gpu-service/training__L2_requesting_persistent_volumes__block1.yaml",
        "eidf-gpu-service/training__L3_running_a_pytorch_task__block1.yaml",
        "eidf-gpu-service/training__L3_running_a_pytorch_task__block2.yaml",
        "eidf-gpu-service/training__L3_running_a_pytorch_task__block3.yaml",
        "eidf-gpu-service/shared-cephfs__block0.yaml",
    ],
)
def test_eidf_jobs_with_their_queue_filled_in_are_admitted(state: WebhookState, path: str) -> None:
    job = manifest(path, "eidf018ns")
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "eidf018ns-user-queue"
    assert allowed(state, review(queued(state, job)))


@pytest.mark.parametrize(
    "path",
    [
        "kueue/jobs__sample-job.yaml",
        "kueue/jobs__sample-job-partial-admission.yaml",
        "kueue/getting-started__quick-start-job.yaml",
        "kueue/admin__shared-quota-sample-job.yaml",
    ],
)
def test_kueue_jobs_are_admitted(state: WebhookState, path: str) -> None:
    assert allowed(state, review(queued(state, manifest(path))))


def test_partial_admission_fits_at_min_parallelism(state: WebhookState) -> None:
    job = gpu_job(parallelism=20)  # 20 GPUs never fit in 12, 12 do
    job["metadata"]["annotations"] = {"kuota.dev/min-parallelism": "12"}
    assert allowed(state, review(queued(state, job)))


def test_borrowing_counts_towards_what_a_team_could_reach(state: WebhookState) -> None:
    # eidf018 has 8 A100 of its own and may borrow 4 from eidf019 through the cohort.
    assert allowed(state, review(queued(state, gpu_job(gpus=12))))
    # eidf019 has no borrowing limit: its 8 plus eidf018's 8 lent through the cohort.
    assert allowed(state, review(queued(state, gpu_job("eidf019ns", "eidf019ns-user-queue", gpus=16))))


def test_jobs_kuota_does_not_manage_pass(state: WebhookState) -> None:
    job = gpu_job(namespace="elsewhere", queue=None)
    assert allowed(state, review(job))  # not suspended, no queue: not kuota's business
    assert allowed(state, review(job, operation="UPDATE", old=job))


def test_kuota_itself_may_start_and_annotate(state: WebhookState) -> None:
    old = queued(state, gpu_job())

    def admit(job: dict[str, Any]) -> None:
        job["spec"]["suspend"] = False
        job["metadata"]["annotations"] = {"kuota.dev/admitted-flavor": "gpu-a100", "kuota.dev/workload-id": "w"}
        job["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}

    assert allowed(state, update(old, admit, username=KUOTA))
    assert not allowed(state, update(old, admit))
    other = WebhookState(state.view.config, service_account="system:serviceaccount:ops:kuota")
    assert allowed(other, update(old, admit, username="system:serviceaccount:ops:kuota"))
    assert not allowed(other, update(old, admit, username=KUOTA))


def test_anyone_may_suspend_scale_down_or_relabel(state: WebhookState) -> None:
    running = admitted(state)
    assert allowed(state, update(running, lambda j: j["spec"].update(suspend=True)))
    assert allowed(state, update(running, lambda j: j["spec"].update(parallelism=1)))
    assert allowed(state, update(running, lambda j: j["metadata"]["labels"].update(team="nlp")))
    # growing a suspended admitted Job is for kuota to re-admit, not a way around the queue
    suspended = copy.deepcopy(running)
    suspended["spec"]["suspend"] = True
    assert allowed(state, update(suspended, lambda j: j["spec"].update(parallelism=3)))


def test_pending_jobs_may_change_queue_and_priority(state: WebhookState) -> None:
    pending = queued(state, gpu_job())
    assert allowed(state, update(pending, lambda j: j["metadata"]["labels"].update({"kuota.dev/queue": "urgent"})))
    assert allowed(
        state, update(pending, lambda j: j["metadata"]["labels"].update({"kuota.dev/priority-class": "production"}))
    )
    # ...but only to a queue that exists
    assert not allowed(state, update(pending, lambda j: j["metadata"]["labels"].update({"kuota.dev/queue": "x"})))


def test_update_does_not_refuse_problems_it_did_not_introduce(state: WebhookState) -> None:
    running = admitted(state)
    # The admin removes the queue from the quota file while the Job runs.
    text = QUOTA_FILE.read_text().replace("eidf018ns/eidf018ns-user-queue, ", "")
    text = text.replace("defaultQueue: eidf018ns-user-queue", "defaultQueue: urgent")
    shrunk = WebhookState(load_config_text(text))
    assert allowed(shrunk, update(running, lambda j: j["metadata"]["labels"].update(team="nlp")))
    assert allowed(shrunk, update(running, lambda j: j["spec"].update(suspend=True), username=KUOTA))
    # A new problem on the same update is still refused.
    assert not allowed(
        shrunk, update(running, lambda j: j["metadata"]["annotations"].update({"kuota.dev/checkpoint-url": "x"}))
    )


def test_managed_namespace_label_removal_falls_back_to_the_default_queue(state: WebhookState) -> None:
    pending = queued(state, gpu_job(queue="urgent"))
    assert allowed(state, update(pending, lambda j: j["metadata"]["labels"].pop("kuota.dev/queue")))


def test_delete_connect_and_subresources_pass(state: WebhookState) -> None:
    job = gpu_job()
    assert allowed(state, review(job, operation="DELETE"))
    body = review(job, operation="UPDATE", old=queued(state, gpu_job()))
    body["request"]["subResource"] = "status"
    assert allowed(state, body)


def test_checkpoint_url_accepts_http_and_https(state: WebhookState) -> None:
    for url in ("http://ckpt.svc:8080/hook", "https://ckpt.example.org/v1/checkpoint"):
        job = gpu_job()
        job["metadata"]["annotations"] = {"kuota.dev/checkpoint-url": url}
        assert allowed(state, review(queued(state, job)))


def test_several_problems_are_reported_together(state: WebhookState) -> None:
    job = queued(state, gpu_job())
    job["metadata"]["labels"]["kuota.dev/priority-class"] = "nope"
    job["metadata"]["annotations"] = {"kuota.dev/min-parallelism": "x"}
    status = call("validate", state, review(job))["status"]
    assert "nope" in status["message"] and "'x'" in status["message"]
    assert [c["field"] for c in status["details"]["causes"]] == [
        "metadata.labels[kuota.dev/priority-class]",
        "metadata.annotations[kuota.dev/min-parallelism]",
    ]


def test_the_workload_label_on_pod_templates_is_kuotas_only(state: WebhookState) -> None:
    """Which workload a node's pods are (for node failures) is kuota's to say: nobody else may set, change or take
    off `kuota.dev/workload` on a pod template; kuota may, and other labels stay anyone's."""
    old = queued(state, gpu_job())

    def stamp(value: str) -> Any:
        return lambda j: (
            j["spec"]["template"]
            .setdefault("metadata", {})
            .setdefault("labels", {})
            .update({"kuota.dev/workload": value})
        )

    created = queued(state, gpu_job())
    stamp("someone-elses")(created)
    response = call("validate", state, review(created))
    assert not response["allowed"] and "kuota.dev/workload" in response["status"]["message"]
    assert "remove it from the pod templates" in response["status"]["message"]
    assert not allowed(state, update(old, stamp("someone-elses")))
    assert allowed(state, update(old, stamp("abc"), username=KUOTA))
    labelled = update(old, stamp("abc"), username=KUOTA)["request"]["object"]
    assert not allowed(state, update(labelled, stamp("changed")))
    assert allowed(state, update(labelled, lambda j: j["spec"]["template"]["metadata"]["labels"].update(app="x")))
