"""The webhooks for the kinds held back pod by pod, over real HTTPS on 127.0.0.1: a LeaderWorkerSet is stamped and
its templates carry its queue, its pods and labelled plain pods are created behind kuota's gate, and only kuota
lets them go.

Objects: LWS's vLLM example (../shared/data/crds/leaderworkerset) and Kueue's pod samples
(../shared/data/manifests/kueue), with pods built as their controllers create them (tests/workloads/examples.py).
"""

from __future__ import annotations

import copy
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest
import trustme

from admission.labels import (
    ADMITTED_FLAVOR,
    KUEUE_POD_GROUP_TOTAL_COUNT,
    POD_SET,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    SCHEDULING_GATE,
)
from webhooks.server import WebhookServer
from webhooks.state import WebhookState
from webhooks.tls import ReloadingTLS
from workloads.registry import REGISTRY

from ..workloads.examples import crd_example, kueue_pods, lws_pods
from .helpers import KUOTA, decode_patch, encode, quota_config, review

Obj = dict[str, Any]

NAMESPACE = "eidf019ns"
QUEUE = "eidf019ns-user-queue"
LWS = {"group": "leaderworkerset.x-k8s.io", "version": "v1", "kind": "LeaderWorkerSet"}
POD = {"group": "", "version": "v1", "kind": "Pod"}
LWS_PATHS = tuple(f"/{e}/leaderworkerset.x-k8s.io/v1/leaderworkersets" for e in ("mutate", "validate"))
POD_PATHS = ("/mutate/core/v1/pods", "/validate/core/v1/pods")


class Webhooks:
    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url, self.session = url, session

    async def post(self, path: str, obj: Obj, kind: dict[str, str], **kwargs: Any) -> Obj:
        body = review(obj, **kwargs)
        body["request"]["kind"] = body["request"]["requestKind"] = kind
        async with self.session.post(self.url + path, data=encode(body)) as response:
            assert response.status == 200
            answer: Obj = json.loads(await response.read())["response"]
            return answer

    async def mutated(self, path: str, obj: Obj, kind: dict[str, str]) -> Obj:
        answer = await self.post(path, obj, kind)
        assert answer["allowed"], answer
        patched: Obj = jsonpatch.apply_patch(obj, decode_patch(answer))
        return patched


@pytest.fixture
async def webhooks(tmp_path: Path) -> AsyncIterator[Webhooks]:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    state = WebhookState(quota_config(), kinds=REGISTRY.enabled(["Job", "LeaderWorkerSet", "Pod"]))
    server = WebhookServer(state, ReloadingTLS(cert, key), host="127.0.0.1", port=0)
    await server.start()
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(context)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))
    try:
        yield Webhooks(f"https://127.0.0.1:{server.port}", session)
    finally:
        await session.close()
        await server.stop()


def vllm(gpus: str = "8") -> Obj:
    """LWS's vLLM set in a namespace of the test quota file, without the disk it asks for (no team has any), and
    with 100 CPUs and 1Ti of memory per pod instead of 125 and 1124Gi: a group (a leader and a worker) is one gang,
    and the team can never hold more than 200 CPUs and 2Ti."""
    _, obj = crd_example("leaderworkerset/examples/vllm-GPU-lws.yaml")
    obj["metadata"].update(namespace=NAMESPACE, labels={"kueue.x-k8s.io/queue-name": QUEUE})
    for template in ("leaderTemplate", "workerTemplate"):
        resources = obj["spec"]["leaderWorkerTemplate"][template]["spec"]["containers"][0]["resources"]
        for part in resources.values():
            part.pop("ephemeral-storage", None)
        resources["requests"]["cpu"] = "100"
        resources["limits"]["memory"] = "1Ti"
        resources["limits"]["nvidia.com/gpu"] = gpus
    return obj


def plain_pod() -> Obj:
    (pod,) = kueue_pods("kueue/pods-kueue__kueue-pod.yaml", NAMESPACE)
    pod["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}
    return pod


async def test_a_leaderworkerset_names_its_queue_on_its_templates_so_its_pods_are_gated(webhooks: Webhooks) -> None:
    lws = await webhooks.mutated(LWS_PATHS[0], vllm(), LWS)
    labels = {QUEUE_LABEL: QUEUE, PRIORITY_LABEL: "research"}
    assert labels.items() <= lws["metadata"]["labels"].items()
    for template in ("leaderTemplate", "workerTemplate"):
        assert labels.items() <= lws["spec"]["leaderWorkerTemplate"][template]["metadata"]["labels"].items()
    assert (await webhooks.post(LWS_PATHS[1], lws, LWS))["allowed"]
    # The set's pods carry the queue from its templates: each is created gated.
    for pod in lws_pods(lws, 0):
        gated = await webhooks.mutated(POD_PATHS[0], pod, POD)
        assert gated["spec"]["schedulingGates"] == [{"name": SCHEDULING_GATE}]
        assert (await webhooks.post(POD_PATHS[1], gated, POD))["allowed"]


async def test_a_set_whose_templates_lose_the_queue_or_that_can_never_fit_is_denied(webhooks: Webhooks) -> None:
    lws = await webhooks.mutated(LWS_PATHS[0], vllm(), LWS)
    unlabelled = copy.deepcopy(lws)
    del unlabelled["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"][QUEUE_LABEL]
    denied = await webhooks.post(LWS_PATHS[1], unlabelled, LWS, operation="UPDATE", old=lws)
    assert not denied["allowed"] and denied["status"]["code"] == 403
    assert "workerTemplate.metadata.labels must carry kuota.dev/queue" in denied["status"]["message"]
    huge = await webhooks.mutated(LWS_PATHS[0], vllm(gpus="64"), LWS)
    denied = await webhooks.post(LWS_PATHS[1], huge, LWS)
    assert not denied["allowed"] and "nvidia.com/gpu" in denied["status"]["message"]


async def test_an_unlabelled_pod_and_a_jobs_pod_are_left_alone(webhooks: Webhooks) -> None:
    pod = plain_pod()
    del pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    for path in POD_PATHS:
        assert (await webhooks.post(path, pod, POD)).keys() == {"uid", "allowed"}  # allowed, untouched
    jobs = plain_pod()
    jobs["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "controller": True}]
    answer = await webhooks.post(POD_PATHS[0], jobs, POD)
    assert answer["allowed"] and "patch" not in answer


async def test_a_labelled_pod_is_gated_and_only_kuota_may_let_it_go(webhooks: Webhooks) -> None:
    gated = await webhooks.mutated(POD_PATHS[0], plain_pod(), POD)
    assert gated["spec"]["schedulingGates"] == [{"name": SCHEDULING_GATE}]
    assert gated["metadata"]["labels"][QUEUE_LABEL] == QUEUE
    let_go = copy.deepcopy(gated)
    let_go["spec"]["schedulingGates"] = []
    denied = await webhooks.post(POD_PATHS[1], let_go, POD, operation="UPDATE", old=gated)
    assert not denied["allowed"] and denied["status"]["code"] == 403
    assert "only kuota may start this Pod" in denied["status"]["message"]
    assert SCHEDULING_GATE in denied["status"]["message"]
    by_kuota = await webhooks.post(POD_PATHS[1], let_go, POD, operation="UPDATE", old=gated, username=KUOTA)
    assert by_kuota["allowed"]
    ungated = copy.deepcopy(plain_pod())
    denied = await webhooks.post(POD_PATHS[1], ungated, POD)  # created without the gate (another webhook took it)
    assert not denied["allowed"] and "only kuota may start" in denied["status"]["message"]


async def test_an_admitted_pod_keeps_its_queue_and_kuotas_annotations(webhooks: Webhooks) -> None:
    gated = await webhooks.mutated(POD_PATHS[0], plain_pod(), POD)
    admitted = copy.deepcopy(gated)
    admitted["spec"]["schedulingGates"] = []
    admitted["metadata"].setdefault("annotations", {})[ADMITTED_FLAVOR] = "gpu-a100"
    moved = copy.deepcopy(admitted)
    moved["metadata"]["labels"][QUEUE_LABEL] = "other"
    denied = await webhooks.post(POD_PATHS[1], moved, POD, operation="UPDATE", old=admitted)
    assert not denied["allowed"] and "cannot move" in denied["status"]["message"]
    reprioritised = copy.deepcopy(admitted)
    reprioritised["metadata"]["labels"][PRIORITY_LABEL] = "production"
    denied = await webhooks.post(POD_PATHS[1], reprioritised, POD, operation="UPDATE", old=admitted)
    assert not denied["allowed"] and "priority class" in denied["status"]["message"]
    forged = copy.deepcopy(gated)
    forged["metadata"].setdefault("annotations", {})[ADMITTED_FLAVOR] = "gpu-a100"
    denied = await webhooks.post(POD_PATHS[1], forged, POD, operation="UPDATE", old=gated)
    assert not denied["allowed"] and "set by kuota only" in denied["status"]["message"]


async def test_pods_of_a_group_name_their_pod_set_and_a_group_without_a_size_is_refused(webhooks: Webhooks) -> None:
    leader, worker = kueue_pods("kueue/pods-kueue__kueue-pod-group.yaml", NAMESPACE)
    for pod in (leader, worker):
        pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = QUEUE
        gated = await webhooks.mutated(POD_PATHS[0], pod, POD)
        assert gated["metadata"]["annotations"][POD_SET]
        assert (await webhooks.post(POD_PATHS[1], gated, POD))["allowed"]
    del leader["metadata"]["annotations"][KUEUE_POD_GROUP_TOTAL_COUNT]
    gated = await webhooks.mutated(POD_PATHS[0], leader, POD)
    denied = await webhooks.post(POD_PATHS[1], gated, POD)
    assert not denied["allowed"] and denied["status"]["code"] == 422
    assert KUEUE_POD_GROUP_TOTAL_COUNT in denied["status"]["message"]
