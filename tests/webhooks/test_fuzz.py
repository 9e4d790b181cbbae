"""Whatever arrives, the answer is a 400 with a message or a well-formed review response: never a 5xx, never a
traceback. The rules are called directly too, so that an exception inside one fails here instead of hiding behind
the handler's last-resort denial."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhooks.app import answer
from webhooks.mutate import mutate
from webhooks.review import ReviewError, parse_review
from webhooks.state import WebhookState
from webhooks.validate import validate
from workloads.kinds.job import JOB
from workloads.registry import REGISTRY

from .denials import admitted, queued
from .helpers import KUOTA, apply_patch, decode_patch, encode, gpu_job, load_quota_state, manifest, review

STATE = load_quota_state()
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=8,
)

BASES = [
    queued(STATE, gpu_job()),
    queued(STATE, manifest("kueue/jobs__sample-job-partial-admission.yaml")),
    admitted(STATE),
    manifest("eidf-gpu-service/training__L1_getting_started__block0.yaml", "eidf018ns"),
]

UPDATE_REVIEW = review(queued(STATE, gpu_job()), operation="UPDATE", old=admitted(STATE))


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    document = copy.deepcopy(document)
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return document


@st.composite
def damaged_jobs(draw: st.DrawFn) -> Any:
    job = draw(st.sampled_from(BASES))
    for _ in range(draw(st.integers(1, 2))):
        job = replaced(job, draw(st.sampled_from(paths(job)[1:])), draw(json_values))
    return job


def check_answer(status: int, body: bytes, uid: str | None = None) -> dict[str, Any] | None:
    document = json.loads(body)
    if status == 400:
        assert document["kind"] == "Status" and document["code"] == 400 and document["message"]
        return None
    assert status == 200
    response: dict[str, Any] = document["response"]
    if uid is not None:
        assert response["uid"] == uid
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["message"] and "Traceback" not in response["status"]["message"]
        assert response["status"]["code"] >= 400
        assert "internal error" not in response["status"]["message"]
    return response


def both_rules(body: dict[str, Any]) -> None:
    """Each rule directly (exceptions surface), then through the handler (answer well-formed), as a review of
    every registered kind: each kind reads the same damaged body its own way."""
    for kind in REGISTRY:
        as_kind = copy.deepcopy(body)
        if isinstance(as_kind.get("request"), dict) and isinstance(as_kind["request"].get("kind"), dict):
            as_kind["request"]["kind"] = {"group": kind.group, "version": kind.version, "kind": kind.kind}
        raw = encode(as_kind)
        try:
            request = parse_review(raw)
        except ReviewError:
            request = None
        for endpoint, rule in (("mutate", mutate), ("validate", validate)):
            if request is not None:
                rule(kind, request, STATE)
            status, out = answer(endpoint, rule, STATE, raw, kind)
            response = check_answer(status, out, request.uid if request is not None else None)
            if response is not None and endpoint == "mutate" and response.get("patch"):
                apply_patch(as_kind["request"]["object"], decode_patch(response))  # the patch applies as sent


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes(body: bytes) -> None:
    for endpoint, rule in (("mutate", mutate), ("validate", validate)):
        check_answer(*answer(endpoint, rule, STATE, body))


@FUZZ
@given(json_values)
def test_arbitrary_json_bodies(value: Any) -> None:
    for endpoint, rule in (("mutate", mutate), ("validate", validate)):
        check_answer(*answer(endpoint, rule, STATE, json.dumps(value).encode()))


@FUZZ
@given(
    obj=json_values,
    old=json_values,
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "", "create"]) | st.text(max_size=8),
    username=st.sampled_from([KUOTA, "alice", ""]),
    namespace=st.none() | st.sampled_from(["eidf018ns", "strict", "default", ""]),
)
def test_reviews_of_arbitrary_objects(obj: Any, old: Any, operation: str, username: str, namespace: Any) -> None:
    body = review(obj, operation=operation, old=old, username=username, namespace=namespace)
    both_rules(body)


@FUZZ
@given(job=damaged_jobs(), old=st.sampled_from(BASES) | damaged_jobs(), operation=st.sampled_from(["CREATE", "UPDATE"]))
def test_reviews_of_damaged_jobs(job: Any, old: Any, operation: str) -> None:
    both_rules(review(job, operation=operation, old=old if operation == "UPDATE" else None, namespace="eidf018ns"))


@FUZZ
@given(st.data())
def test_damaged_reviews(data: st.DataObject) -> None:
    body = copy.deepcopy(UPDATE_REVIEW)
    for _ in range(data.draw(st.integers(1, 2))):
        body = replaced(body, data.draw(st.sampled_from(paths(body))), data.draw(json_values))
    if not isinstance(body, dict):
        body = {"request": body}
    raw = encode(body)
    for endpoint, rule in (("mutate", mutate), ("validate", validate)):
        check_answer(*answer(endpoint, rule, STATE, raw))


def test_every_truncation_of_a_real_review_is_a_400() -> None:
    whole = encode(review(queued(STATE, gpu_job())))
    for cut in range(len(whole)):
        status, out = answer("validate", validate, STATE, whole[:cut])
        assert status == 400, cut
        check_answer(status, out)
    assert answer("validate", validate, STATE, whole)[0] == 200


def test_state_is_not_changed_by_reviews() -> None:
    state = load_quota_state()
    view = state.view
    for job in BASES:
        for rule in (mutate, validate):
            rule(JOB, parse_review(encode(review(job, dry_run=True))), state)
    assert state.view is view
    assert isinstance(state, WebhookState)
