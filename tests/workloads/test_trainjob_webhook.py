"""kuota's webhooks on a realistic TrainJob, found on its own path among the webhook's routes.

The body is Kueue's TrainJob example from ../shared/data/crds/trainjob/examples/03-kueue-integration.yaml
(kubeflow/trainer at 8c0f5059, see the folder's PROVENANCE.md) as the API server sends it: named, in a namespace,
with the CRD's defaults filled in (`suspend`, `managedBy`, the runtime's `apiGroup` and `kind`). The webhooks have no
Kubernetes client, so they never see the training runtime: they stamp and suspend the TrainJob and check what it
says itself, and leave what depends on the runtime (its pod sets, whether they could ever fit) to the controller.
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from typing import Any

import jsonpatch

from admission.labels import ADMITTED_FLAVOR, MIN_PARALLELISM, PRIORITY_LABEL, QUEUE_LABEL
from quota.loader import load_config_text
from webhooks.app import Routes, review_path
from webhooks.state import WebhookState
from workloads.kinds.trainjob import TRAINJOB
from workloads.reading import convert

from .examples import crd_example, resolve

KUOTA = "system:serviceaccount:kuota-system:kuota"
USER = "alice@example.org"

CONFIG = load_config_text(
    """
apiVersion: kuota.dev/v1
kind: QuotaConfig
jobKinds: [Job, TrainJob]
flavors:
  - name: a100
    nodeLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
priorityClasses:
  - {name: research, value: 1000, default: true}
teams:
  - name: ml
    queues: [ml/training-queue]
    quotas:
      - flavor: a100
        resources: {cpu: {nominal: 64}, memory: {nominal: 512Gi}, nvidia.com/gpu: {nominal: 8}}
"""
)

Obj = dict[str, Any]


def as_sent() -> Obj:
    """03-kueue-integration.yaml as the API server sends it on CREATE."""
    obj = crd_example("trainjob/examples/03-kueue-integration.yaml")[1]
    obj["metadata"].update(namespace="ml", uid=str(uuid.uuid4()), creationTimestamp="2026-03-01T08:00:00Z")
    obj["spec"]["managedBy"] = "trainer.kubeflow.org/trainjob-controller"
    return obj


def review(obj: Any, operation: str = "CREATE", old: Any = None, username: str = USER) -> Obj:
    kind = {"group": TRAINJOB.group, "version": TRAINJOB.version, "kind": TRAINJOB.kind}
    resource = {"group": TRAINJOB.group, "version": TRAINJOB.version, "resource": TRAINJOB.plural}
    request = {
        "uid": str(uuid.uuid4()),
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": obj["metadata"].get("name", ""),
        "namespace": "ml",
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


async def answer(endpoint: str, body: Obj) -> Obj:
    state = WebhookState(CONFIG, service_account=KUOTA)
    assert "TrainJob" in state.kinds  # from the quota file's jobKinds
    route = Routes(state).review(review_path(endpoint, TRAINJOB))  # the path its webhook configuration names
    assert route is not None and route.kind is TRAINJOB
    status, answered = route.answer(json.dumps(body).encode())
    assert status == 200
    found: Obj = json.loads(answered)["response"]
    return found


def patched(obj: Obj, response: Obj) -> Obj:
    assert response["allowed"], response
    if "patch" not in response:
        return obj
    ops = json.loads(base64.b64decode(response["patch"]))
    result: Obj = jsonpatch.apply_patch(obj, ops)
    return result


async def test_a_new_trainjob_is_stamped_and_suspended_without_its_runtime() -> None:
    obj = as_sent()
    obj["spec"]["suspend"] = False  # as a user would leave it (the CRD's default)
    result = patched(obj, await answer("mutate", review(obj)))
    assert result["spec"]["suspend"] is True
    assert result["metadata"]["labels"] == {
        "kueue.x-k8s.io/queue-name": "training-queue",
        QUEUE_LABEL: "training-queue",
        PRIORITY_LABEL: "research",
    }
    assert result["spec"]["trainer"] == obj["spec"]["trainer"] and "runtimePatches" not in result["spec"]
    # The validating webhook lets it in although it cannot look the runtime up.
    assert (await answer("validate", review(result)))["allowed"]
    # The controller, which can, queues it with the runtime's pod set.
    workload = convert(TRAINJOB, result, CONFIG, resolve=resolve).workload
    assert workload is not None and workload.name == "TrainJob/ml/kueue-example"
    assert [(p.name, p.count) for p in workload.pod_sets] == [("node", 3)]


async def test_kueues_example_created_suspended_is_stamped_only() -> None:
    response = await answer("mutate", review(as_sent()))
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "add", "path": "/metadata/labels/kuota.dev~1queue", "value": "training-queue"},
        {"op": "add", "path": "/metadata/labels/kuota.dev~1priority-class", "value": "research"},
    ]


async def test_what_the_trainjob_says_itself_is_checked() -> None:
    bad_quantity = as_sent()
    bad_quantity["spec"]["trainer"]["resourcesPerNode"]["requests"]["memory"] = "9Pi"
    unknown_queue = as_sent()
    unknown_queue["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "gpu-queue"
    partial = as_sent()
    partial["metadata"]["annotations"] = {MIN_PARALLELISM: "2"}
    for obj, field, says in (
        (bad_quantity, "spec.trainer.resourcesPerNode.requests[memory]", "ask for less"),
        (unknown_queue, "metadata.labels[kueue.x-k8s.io/queue-name]", "does not exist in namespace ml"),
        (partial, f"metadata.annotations[{MIN_PARALLELISM}]", "which this kind of job does not support"),
    ):
        response = await answer("validate", review(obj))
        assert not response["allowed"]
        assert response["status"]["code"] == 422
        assert [c["field"] for c in response["status"]["details"]["causes"]] == [field]
        assert says in response["status"]["message"]


async def test_a_trainjob_that_is_not_one_is_refused_by_the_mutating_webhook() -> None:
    obj = as_sent()
    obj["spec"]["runtimeRef"] = "torch-distributed"
    response = await answer("mutate", review(obj))
    assert not response["allowed"] and response["status"]["code"] == 400
    assert response["status"]["message"] == (
        "spec.runtimeRef must be an object; send a valid trainer.kubeflow.org/v1alpha1 TrainJob"
    )


async def test_only_kuota_starts_a_queued_trainjob() -> None:
    queued = patched(as_sent(), await answer("mutate", review(as_sent())))
    started = copy.deepcopy(queued)
    started["spec"]["suspend"] = False
    denied = await answer("validate", review(started, "UPDATE", queued))
    assert not denied["allowed"] and denied["status"]["code"] == 403
    assert "leave spec.suspend: true" in denied["status"]["message"]
    started["metadata"]["annotations"] = {ADMITTED_FLAVOR: "a100"}
    assert (await answer("validate", review(started, "UPDATE", queued, username=KUOTA)))["allowed"]


async def test_a_request_beyond_the_team_is_left_to_the_controller() -> None:
    # 64 GPUs a node is more than team ml could ever hold, but the webhook cannot see that the runtime's `node`
    # container gets them: the controller reads the pod set and reports that it never fits.
    greedy = as_sent()
    greedy["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] = 64
    assert (await answer("validate", review(greedy)))["allowed"]
    workload = convert(TRAINJOB, greedy, CONFIG, resolve=resolve).workload
    assert workload is not None and workload.pod_sets[0].requests["nvidia.com/gpu"] == 64_000
