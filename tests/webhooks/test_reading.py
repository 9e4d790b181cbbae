"""The validating webhook reads a Job with `read_job` rather than `convert_job`: both must find the same problems
and the same pod set, and the never-fits rule must answer the same on either. Allowed responses are written as
bytes: they must be exactly what dumping the whole review writes."""

from __future__ import annotations

import base64
import copy
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhooks.review import API_VERSION, KIND, Decision, render_response
from webhooks.state import WebhookState

from .denials import DENIALS
from .helpers import convert_job, gpu_job, load_quota_state, manifest, read_job
from .test_fuzz import BASES, FUZZ, damaged_jobs

STATE = load_quota_state()
NAMESPACES = (None, "", "eidf018ns", "strict", "default", "mixed", "batch")


def assert_readings_agree(state: WebhookState, job: Any, namespace: str | None) -> None:
    view = state.view
    conversion = convert_job(job, view.config, namespace)
    reading = read_job(job, view.index, namespace)
    assert reading.problems == conversion.problems
    assert reading.names == conversion.names
    assert (reading.pod_sets is None) == (conversion.workload is None)
    if conversion.workload is None or reading.pod_sets is None:
        return
    (pod_set,) = conversion.workload.pod_sets
    (read_set,) = reading.pod_sets
    assert reading.team == conversion.workload.team and reading.queue == conversion.workload.queue
    assert (read_set.count, read_set.min_count) == (pod_set.count, pod_set.min_count)
    assert read_set.requests == pod_set.requests
    assert dict(read_set.node_selector) == pod_set.node_selector
    on_reading = view.capacity.pod_set_never_fits(reading.team, read_set)
    assert on_reading == view.capacity.never_fits(conversion.workload)


def _objects() -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = [(f"base-{i}", job) for i, job in enumerate(BASES)]
    for denial in DENIALS:
        request = denial.build(STATE)["request"]
        found.append((denial.id, request["object"]))
        if request.get("oldObject") is not None:
            found.append((f"{denial.id}-old", request["oldObject"]))
    found.append(("gpus-13", gpu_job(gpus=13)))
    found.append(("partial", manifest("kueue/jobs__sample-job-partial-admission.yaml")))
    return found


OBJECTS = _objects()


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("job", [job for _, job in OBJECTS], ids=[name for name, _ in OBJECTS])
def test_read_job_agrees_with_convert_job(job: Any, namespace: str | None) -> None:
    assert_readings_agree(STATE, job, namespace)


@FUZZ
@given(job=damaged_jobs(), namespace=st.sampled_from(NAMESPACES))
def test_read_job_agrees_with_convert_job_on_damaged_jobs(job: Any, namespace: str | None) -> None:
    assert_readings_agree(STATE, job, namespace)


def _dumped(uid: str, decision: Decision) -> bytes:
    """An allowing response as dumping the whole review writes it."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(decision.patch)).decode("ascii")
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


PATCH = [{"op": "add", "path": "/metadata/labels/kuota.dev~1queue", "value": 'q"\\\u00e9'}]


@pytest.mark.parametrize("uid", ["705ab4f5-6393-11e8-b7cc-42010a800002", 'we"ird\\uid\u2028\u00e9', ""])
@pytest.mark.parametrize(
    "decision",
    [
        Decision(allowed=True),
        Decision(allowed=True, patch=[]),
        Decision(allowed=True, patch=copy.deepcopy(PATCH)),
        Decision(allowed=True, warnings=['labels disagree; "quoted"']),
        Decision(allowed=True, patch=copy.deepcopy(PATCH), warnings=("a", "b")),
    ],
)
def test_allowed_responses_are_what_dumping_the_review_writes(uid: str, decision: Decision) -> None:
    assert render_response(uid, decision) == _dumped(uid, decision)
