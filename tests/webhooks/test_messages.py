"""Every denial says what is wrong and then what to do about it."""

from __future__ import annotations

import re

import pytest

from webhooks.app import answer
from webhooks.review import AdmissionRequest, Decision
from webhooks.state import WebhookState

from .denials import DENIALS, Denial
from .helpers import call, encode, gpu_job, review

REMEDY = re.compile(
    r"; (?:[\w.,'()/-]+ ){0,3}?(set|use|remove|add|leave|keep|put|delete|lower|change|send|fix|list|try|ask|give)\b"
)


def tells_what_to_do(message: str) -> bool:
    """`<what is wrong>; <imperative: what to do>`, for each problem of a message that lists several."""
    return all(REMEDY.search(part) for part in message.split("; also, "))


@pytest.mark.parametrize("denial", DENIALS, ids=[d.id for d in DENIALS])
def test_every_denial_tells_what_to_do(state: WebhookState, denial: Denial) -> None:
    message = call(denial.endpoint, state, denial.build(state))["status"]["message"]
    assert tells_what_to_do(message), message
    assert len(message) < 600, message
    assert "Traceback" not in message


def test_combined_messages_keep_each_remedy(state: WebhookState) -> None:
    job = gpu_job()
    job["spec"]["suspend"] = True
    job["metadata"]["labels"]["kuota.dev/queue"] = "nope"
    job["metadata"]["annotations"] = {"kuota.dev/checkpoint-url": "x"}
    message = call("validate", state, review(job))["status"]["message"]
    assert "; also, " in message and tells_what_to_do(message)


def test_internal_errors_become_a_denial_with_a_remedy(state: WebhookState) -> None:
    def broken(request: AdmissionRequest, state: WebhookState) -> Decision:
        raise RuntimeError("a bug")

    status, body = answer("validate", broken, state, encode(review(gpu_job())))
    assert status == 200
    assert b'"allowed":false' in body and b"try again" in body and b"a bug" not in body


@pytest.mark.parametrize(
    "body", [b"", b"{", b"[]", b'{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}']
)
def test_bad_requests_say_what_to_send(state: WebhookState, body: bytes) -> None:
    from webhooks.validate import validate

    status, out = answer("validate", validate, state, body)
    assert status == 400
    assert re.search(rb"; (send|list)", out), out
