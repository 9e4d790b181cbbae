"""The Kubernetes adapter with a kind that reads its pod sets from other objects: TrainJobs and their runtimes.

kuota's own KubeApi, Reflectors, KubeCluster and LeaderTerm run against a stand-in for the API server's
custom-objects endpoints over loopback HTTP (lists served from memory, watches that never report, patches and
Events recorded), so what is under test is the adapter: the runtimes listed before the TrainJobs, a TrainJob whose
runtime is missing held out of the queue with a NotQueued Event and queued once the runtime appears, the runtime a
queued TrainJob was read with kept for its admission, and an admission that cannot place every pod set failed
rather than sent. Objects from
../shared/data/crds (kubeflow/trainer at 8c0f5059, see the folders' PROVENANCE.md): the TrainJob examples
01-multi-node.yaml and 05-multi-step.yaml (with its TrainingRuntime) and the ClusterTrainingRuntimes
torch_distributed.yaml and deepspeed_distributed.yaml.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import jsonpatch
import pytest
from aiohttp import web
from kubernetes_asyncio import client

from admission.labels import ADMITTED_FLAVOR, WORKLOAD_LABEL, workload_label_value
from clusters.kube.api import KubeApi
from clusters.kube.cluster import KubeCluster
from clusters.kube.term import LeaderTerm
from queues.controller import Controller
from queues.journal import RecordingJournal
from queues.loop import LoopTimers
from quota.loader import load_config_text
from workloads.kinds.trainjob import CLUSTER_TRAINING_RUNTIME, MANAGER, TRAINING_RUNTIME, TRAINJOB
from workloads.registry import enabled_kinds

from ..workloads.crd_schema import crd_schema, schema_errors
from ..workloads.examples import CRDS, crd_example, referenced, submitted

Obj = dict[str, Any]

CONFIG = load_config_text(
    """
jobKinds: [TrainJob]
flavors:
  - name: a100
    nodeLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
teams:
  - name: ml
    queues: [ml/ml]
    quotas:
      - flavor: a100
        resources: {cpu: {nominal: 64}, memory: {nominal: 512Gi}, nvidia.com/gpu: {nominal: 8}}
"""
)
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
MISSING = "TrainJob ml/kueue-example: its runtime ClusterTrainingRuntime torch-distributed is not known (yet)"


class Objects:
    """The custom-objects endpoints, over objects kept by plural: lists and patches answered, watches silent."""

    def __init__(self, stored: dict[str, list[Obj]]) -> None:
        self.stored = stored
        self.lists: list[str] = []
        self.patches: list[tuple[str, str, Any]] = []
        self.patched = asyncio.Event()

    async def list(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") in ("true", "True", "1"):
            response = web.StreamResponse()
            await response.prepare(request)
            await asyncio.Event().wait()  # nothing changes: the watch waits until the test stops it
        plural = request.match_info["plural"]
        self.lists.append(plural)
        items = copy.deepcopy(self.stored.get(plural, []))
        return web.json_response({"items": items, "metadata": {"resourceVersion": "100"}})

    async def patch(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/json-patch+json"
        where = f"{request.match_info['namespace']}/{request.match_info['name']}"
        self.patches.append((request.match_info["plural"], where, json.loads(await request.read())))
        self.patched.set()
        return web.json_response({})

    async def until_patched(self, count: int, timeout_s: float = 5.0) -> None:
        async with asyncio.timeout(timeout_s):
            while len(self.patches) < count:
                self.patched.clear()
                await self.patched.wait()


class Core:
    """The Events endpoint: every Event created, recorded."""

    def __init__(self) -> None:
        self.events: list[Obj] = []

    async def create_event(self, request: web.Request) -> web.Response:
        self.events.append(json.loads(await request.read()))
        return web.json_response({}, status=201)


_RUNNERS: list[web.AppRunner] = []


@pytest.fixture(autouse=True)
async def _servers_stop() -> AsyncIterator[None]:
    yield
    while _RUNNERS:
        await _RUNNERS.pop().cleanup()


async def api(stored: dict[str, list[Obj]]) -> tuple[KubeApi, Objects, Core]:
    """kuota's KubeApi talking HTTP to a loopback server that plays the API server's endpoints it uses."""
    objects, core = Objects(stored), Core()
    app = web.Application()
    app.router.add_get("/apis/{group}/{version}/{plural}", objects.list)
    app.router.add_patch("/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}", objects.patch)
    app.router.add_post("/api/v1/namespaces/{namespace}/events", core.create_event)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    _RUNNERS.append(runner)
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    kube = KubeApi(client.ApiClient(configuration), qps=1000, burst=1000)
    return kube, objects, core


#: 03-kueue-integration.yaml: 3 nodes of cpu 2 and memory 4Gi, on a flavor since they ask for something.
KUEUE = "trainjob/examples/03-kueue-integration.yaml"


def trainjob(relative: str = KUEUE, runtime: str | None = None) -> Obj:
    """A TrainJob example as stored once kuota's mutating webhook let it in: queued in ml/ml and suspended."""
    obj = submitted(crd_example(relative)[1])
    obj["metadata"].update(uid=f"uid-{obj['metadata']['name']}", creationTimestamp="2026-03-01T08:00:00Z")
    obj["spec"]["suspend"] = True
    if runtime is not None:
        obj["spec"]["runtimeRef"]["name"] = runtime
    return obj


def runtimes() -> dict[str, list[Obj]]:
    stored: dict[str, list[Obj]] = {}
    for reference, obj in referenced().items():
        kind = TRAINING_RUNTIME if reference.kind == TRAINING_RUNTIME.kind else CLUSTER_TRAINING_RUNTIME
        stored.setdefault(kind.plural, []).append(obj)
    return stored


def torch_distributed() -> Obj:
    (found,) = [o for o in runtimes()["clustertrainingruntimes"] if o["metadata"]["name"] == "torch-distributed"]
    return found


def cluster_with_controller(kube: KubeApi) -> tuple[KubeCluster, Controller, RecordingJournal]:
    cluster = KubeCluster(kube, lambda: CONFIG, clock=lambda: 1_000)
    journal = RecordingJournal()
    controller = Controller(CONFIG, cluster, LoopTimers(), journal)
    cluster.attach(controller, None)
    return cluster, controller, journal


async def test_trainjob_brings_the_runtime_kinds_along_and_other_kinds_bring_none() -> None:
    kube, _, _ = await api({})
    cluster = KubeCluster(kube, lambda: CONFIG)
    assert sorted(cluster.reflectors) == ["ClusterTrainingRuntime", "TrainJob", "TrainingRuntime"]
    assert cluster.reflectors["ClusterTrainingRuntime"].kind is CLUSTER_TRAINING_RUNTIME
    jobs_only = KubeCluster(kube, lambda: CONFIG, kinds=enabled_kinds(["Job", "JobSet"]))
    assert sorted(jobs_only.reflectors) == ["Job", "JobSet"] and jobs_only.referenced_kinds == {}
    await kube.close()
    await kube.api_client.close()


async def test_a_new_leader_lists_the_runtimes_first_and_admits_through_a_runtime_patch() -> None:
    stored = runtimes()
    waiting = trainjob(runtime="no-such-runtime")
    waiting["metadata"].update(name="waits", uid="uid-waits")
    stored["trainjobs"] = [trainjob(), trainjob("trainingruntime/examples/05-multi-step.yaml"), waiting]
    kube, objects, core = await api(stored)
    term = LeaderTerm(kube, CONFIG, None, events=True, clock=lambda: 1_000, coalesce_s=0)
    await term.start()
    try:
        assert objects.lists[:3] == ["trainingruntimes", "clustertrainingruntimes", "trainjobs"]
        assert term.cluster is not None and term.controller is not None
        assert set(term.controller.manager.workloads) == {
            "TrainJob/ml/kueue-example",
            "TrainJob/ml/multi-step-example",
        }
        assert list(term.cluster.waiting) == ["TrainJob/ml/waits"]
        assert term.recorder is not None
        await term.recorder.drain()
        (event,) = [e for e in core.events if e["reason"] == "NotQueued"]
        assert event["type"] == "Warning" and event["involvedObject"]["uid"] == "uid-waits"
        assert event["message"].startswith("TrainJob ml/waits: its runtime ClusterTrainingRuntime no-such-runtime")
        # Both queued TrainJobs fit: each is admitted with one JSON patch.
        await objects.until_patched(2)
    finally:
        await term.stop()
        await kube.close()
        await kube.api_client.close()
    schema = crd_schema(CRDS / "trainjob" / "trainer.kubeflow.org_trainjobs.yaml", "v1alpha1")
    by_name = {obj["metadata"]["name"]: obj for obj in stored["trainjobs"]}
    for plural, where, ops in objects.patches:
        assert plural == "trainjobs"
        admitted: Obj = jsonpatch.apply_patch(by_name[where.split("/")[1]], ops)
        assert schema_errors(admitted, schema) == []
        assert admitted["spec"]["suspend"] is False
        assert admitted["metadata"]["annotations"][ADMITTED_FLAVOR] == "a100"
        (entry,) = admitted["spec"]["runtimePatches"]
        assert entry["manager"] == MANAGER
        templates = {
            j["name"]: j["template"]["spec"]["template"]
            for j in entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        }
        pods = {name: template["spec"] for name, template in templates.items() if "spec" in template}
        # The dataset initializer asks for nothing, so it has no flavor to be placed on.
        assert pods == {"node": {"nodeSelector": A100, "tolerations": [GPU_TOLERATION]}}
        # Every pod gets kuota's workload label, so that a failed node names the TrainJob.
        key = f"TrainJob/ml/{where.split('/')[1]}"
        assert all(t["metadata"]["labels"] == {WORKLOAD_LABEL: workload_label_value(key)} for t in templates.values())


async def test_a_trainjob_waits_out_of_the_queue_until_its_runtime_reads() -> None:
    kube, _, _ = await api({})
    cluster, controller, _ = cluster_with_controller(kube)
    told: list[tuple[str, str]] = []
    cluster.not_queued = lambda key, reason: told.append((key, reason))
    key = "TrainJob/ml/kueue-example"
    cluster.on_event(TRAINJOB, "ADDED", trainjob())
    cluster.on_event(TRAINJOB, "MODIFIED", trainjob())  # the same reason is told once
    assert key in cluster.waiting and key not in controller.manager.workloads
    assert [(k, reason.split(";")[0]) for k, reason in told] == [(key, MISSING)]
    # It appears, but broken: another reason, still waiting.
    broken = torch_distributed()
    broken["spec"]["template"]["spec"]["replicatedJobs"] = "node"
    cluster.on_referenced_event(CLUSTER_TRAINING_RUNTIME, "ADDED", broken)
    assert key in cluster.waiting and len(told) == 2
    assert told[1][1].startswith("ClusterTrainingRuntime torch-distributed spec.template.spec.replicatedJobs must be")
    # Fixed: the TrainJob is read again and queued with the runtime's pod set.
    cluster.on_referenced_event(CLUSTER_TRAINING_RUNTIME, "MODIFIED", torch_distributed())
    assert cluster.waiting == {}
    workload = controller.manager.workloads[key]
    assert [(p.name, p.count) for p in workload.pod_sets] == [("node", 3)]
    await kube.close()
    await kube.api_client.close()


async def test_a_full_list_of_runtimes_reads_the_waiting_trainjobs_again() -> None:
    kube, _, _ = await api({})
    cluster, controller, _ = cluster_with_controller(kube)
    cluster.on_referenced_list(CLUSTER_TRAINING_RUNTIME, [torch_distributed()])
    cluster.on_event(TRAINJOB, "ADDED", trainjob(runtime="deepspeed-distributed"))
    assert list(cluster.waiting) == ["TrainJob/ml/kueue-example"]
    deepspeed = [o for o in runtimes()["clustertrainingruntimes"] if o["metadata"]["name"] != "torch-distributed"]
    cluster.on_referenced_list(CLUSTER_TRAINING_RUNTIME, deepspeed)  # after a 410 Gone: torch-distributed went
    assert cluster.waiting == {} and [r.name for r in cluster.referenced] == ["deepspeed-distributed"]
    workload = controller.manager.workloads["TrainJob/ml/kueue-example"]
    assert [(p.name, p.count) for p in workload.pod_sets] == [("node", 2), ("launcher", 1)]
    await kube.close()
    await kube.api_client.close()


async def test_waiting_trainjobs_are_forgotten_when_deleted_or_left_out_of_a_list() -> None:
    kube, _, _ = await api({})
    cluster, _, _ = cluster_with_controller(kube)
    cluster.on_event(TRAINJOB, "ADDED", trainjob())
    cluster.on_event(TRAINJOB, "DELETED", trainjob())
    assert cluster.waiting == {} and cluster.unreadable == {}
    cluster.on_event(TRAINJOB, "ADDED", trainjob())
    cluster.on_list(TRAINJOB, [])
    assert cluster.waiting == {}
    await kube.close()
    await kube.api_client.close()


async def test_a_queued_trainjob_is_admitted_with_the_runtime_it_was_read_with() -> None:
    kube, objects, _ = await api({})
    cluster, controller, _ = cluster_with_controller(kube)
    cluster.on_referenced_list(CLUSTER_TRAINING_RUNTIME, [torch_distributed()])
    job = trainjob()
    cluster.on_event(TRAINJOB, "ADDED", job)
    # The runtime changes, then goes: the trainer runs the TrainJob from its snapshot, and kuota's reading stands.
    bigger = torch_distributed()
    bigger["spec"]["template"]["spec"]["replicatedJobs"][0]["name"] = "worker"
    cluster.on_referenced_event(CLUSTER_TRAINING_RUNTIME, "MODIFIED", bigger)
    cluster.on_referenced_event(CLUSTER_TRAINING_RUNTIME, "DELETED", bigger)
    workload = controller.manager.workloads["TrainJob/ml/kueue-example"]
    assert [p.name for p in workload.pod_sets] == ["node"]
    controller.schedule(1_000)
    await cluster.settle()
    ((_, _, ops),) = objects.patches
    admitted: Obj = jsonpatch.apply_patch(job, ops)
    (entry,) = admitted["spec"]["runtimePatches"]
    assert entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] == [
        {
            "name": "node",
            "template": {
                "spec": {
                    "template": {
                        "metadata": {"labels": {WORKLOAD_LABEL: workload_label_value("TrainJob/ml/kueue-example")}},
                        "spec": {"nodeSelector": A100, "tolerations": [GPU_TOLERATION]},
                    }
                }
            },
        }
    ]
    await kube.close()
    await kube.api_client.close()


async def test_an_admission_that_cannot_place_every_pod_set_fails_instead_of_starting_it() -> None:
    kube, objects, _ = await api({})
    cluster, controller, journal = cluster_with_controller(kube)
    cluster.on_referenced_list(CLUSTER_TRAINING_RUNTIME, [torch_distributed()])
    cluster.on_event(TRAINJOB, "ADDED", trainjob())
    # Read with a runtime that is gone and forgotten (a restart in between): nothing to place `node` by.
    cluster.on_referenced_list(CLUSTER_TRAINING_RUNTIME, [])
    cluster.read_with.clear()
    controller.schedule(1_000)
    await cluster.settle()
    assert objects.patches == []
    (requeued,) = journal.named("requeued")
    assert requeued["args"][0].name == "TrainJob/ml/kueue-example"
    await kube.close()
    await kube.api_client.close()
