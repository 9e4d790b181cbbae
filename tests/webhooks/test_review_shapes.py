"""Requests and responses against the Kubernetes wire fixtures in ../shared/data/k8s-api (v1.36.0).

The fixtures hold generated values but the true field names, nesting and JSON types: everything kuota writes must
appear there with the same type, and the fixture's own (nonsense) review must be answered, not crash.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from webhooks.app import answer
from webhooks.mutate import mutate
from webhooks.state import WebhookState
from webhooks.validate import validate

from .denials import DENIALS
from .helpers import K8S_API, call, encode, manifest, review

REVIEW = json.loads((K8S_API / "admission.k8s.io.v1.AdmissionReview.json").read_text())
STATUS = json.loads((K8S_API / "core.v1.Status.json").read_text())
JOB = json.loads((K8S_API / "batch.v1.Job.json").read_text())


def assert_conforms(value: Any, fixture: Any, path: str = "") -> None:
    """Every key of `value` exists at the same place in `fixture`, with a value of the same JSON type."""
    if isinstance(fixture, dict):
        assert isinstance(value, dict), f"{path}: expected an object, got {value!r}"
        if len(fixture) == 1 and next(iter(fixture)).endswith("Key"):
            # A map (labels, limits…): the fixture shows one generated "<field>Key" entry.
            for key, item in value.items():
                assert_conforms(item, next(iter(fixture.values())), f"{path}[{key}]")
            return
        for key, item in value.items():
            assert key in fixture, f"{path}.{key} is not a field of the fixture"
            assert_conforms(item, fixture[key], f"{path}.{key}")
    elif isinstance(fixture, list):
        assert isinstance(value, list), f"{path}: expected a list"
        for i, item in enumerate(value):
            assert_conforms(item, fixture[0], f"{path}[{i}]")
    else:
        assert type(value) is type(fixture), f"{path}: {type(value).__name__} where the fixture has {fixture!r}"


def full_response(endpoint: str, state: WebhookState, body: dict[str, Any]) -> dict[str, Any]:
    rule = mutate if endpoint == "mutate" else validate
    status, out = answer(endpoint, rule, state, encode(body))
    assert status == 200
    document: dict[str, Any] = json.loads(out)
    return document


def test_the_reviews_the_tests_send_conform_to_the_fixture() -> None:
    body = review(
        manifest("kueue/jobs__sample-job.yaml"), operation="UPDATE", old=manifest("kueue/jobs__sample-job.yaml")
    )
    request = copy.deepcopy(body["request"])
    # RawExtension fields are free-form in the fixture (a CustomType); the Job is checked against the Job fixture.
    for raw in ("object", "oldObject", "options"):
        request.pop(raw)
    assert_conforms({**body, "request": request}, REVIEW)
    job = manifest("eidf-gpu-service/training__L3_running_a_pytorch_task__block2.yaml", "eidf018ns")
    assert_conforms(job, JOB)


def test_allowed_with_patch_conforms(state: WebhookState) -> None:
    document = full_response("mutate", state, review(manifest("kueue/jobs__sample-job.yaml"), uid="abc-123"))
    assert_conforms(document, REVIEW)
    assert document["apiVersion"] == "admission.k8s.io/v1" and document["kind"] == "AdmissionReview"
    response = document["response"]
    assert response["uid"] == "abc-123" and response["patchType"] == "JSONPatch"


@pytest.mark.parametrize("denial", DENIALS, ids=[d.id for d in DENIALS])
def test_denials_conform(state: WebhookState, denial: Any) -> None:
    body = denial.build(state)
    document = full_response(denial.endpoint, state, body)
    assert_conforms(document, REVIEW)
    response = document["response"]
    assert response["uid"] == body["request"]["uid"]
    assert "patch" not in response and "patchType" not in response
    status = response["status"]
    assert_conforms(status, {k: v for k, v in STATUS.items() if k not in ("kind", "apiVersion")})
    assert status["status"] == "Failure" and status["code"] >= 400 and status["message"] and status["reason"]


def test_bad_request_body_is_a_status(state: WebhookState) -> None:
    status, out = answer("validate", validate, state, b"not json")
    assert status == 400
    document = json.loads(out)
    assert_conforms(document, STATUS)
    assert document["kind"] == "Status" and document["code"] == 400 and document["status"] == "Failure"


def test_the_fixture_review_itself_is_answered(state: WebhookState) -> None:
    # It reviews subresource "subResourceValue" of kind groupValue/versionValue kindValue: nothing kuota checks.
    for endpoint in ("mutate", "validate"):
        document = full_response(endpoint, state, REVIEW)
        assert_conforms(document, REVIEW)
        assert document["response"] == {"uid": "uidValue", "allowed": True}
    # Without the subresource its kind and operation are wrong for a Job webhook: a well-formed denial.
    body = copy.deepcopy(REVIEW)
    del body["request"]["subResource"]
    document = full_response("validate", state, body)
    assert_conforms(document, REVIEW)
    assert document["response"]["allowed"] is False and document["response"]["status"]["code"] == 400


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_the_fixture_job_in_a_real_review_is_answered(state: WebhookState, operation: str) -> None:
    body = copy.deepcopy(REVIEW)
    body["request"].update(
        kind={"group": "batch", "version": "v1", "kind": "Job"},
        subResource="",
        operation=operation,
        object=JOB,
        oldObject=JOB if operation == "UPDATE" else None,
    )
    for endpoint in ("mutate", "validate"):
        document = full_response(endpoint, state, body)
        assert_conforms(document, REVIEW)
        assert document["response"]["allowed"] is True  # no queue label, namespace not managed: not kuota's
    labelled = copy.deepcopy(JOB)
    labelled["metadata"]["labels"]["kuota.dev/queue"] = "labelsValue"
    body["request"]["object"] = labelled
    response = call("validate", state, body)
    assert response["allowed"] is False and "does not exist" in response["status"]["message"]
