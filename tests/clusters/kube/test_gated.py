"""The Kubernetes adapter's half for kinds held back pod by pod, driven as the watches drive it, with the real
controller deciding and an in-memory API server that stores pods, applies kuota's JSON patches with `jsonpatch`
(refusing what kube-apiserver refuses of a gated pod) and deletes with the uid precondition.

The LeaderWorkerSet is LWS's vLLM example and the pods are Kueue's pod-group sample (see tests/workloads/examples.py
for their provenance), with pods built as their controllers create them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import jsonpatch
import pytest

from admission.labels import (
    ADMITTED_FLAVOR,
    CHECKPOINT_COMPLETED_AT,
    CHECKPOINT_REQUESTED_AT,
    QUEUE_LABEL,
    SCHEDULING_GATE,
    WORKLOAD_ID,
)
from clusters.kube.api import Forbidden, Invalid, NotFound
from clusters.kube.cluster import KubeCluster
from queues.controller import Controller
from queues.journal import RecordingJournal
from queues.loop import LoopTimers
from queues.manager import State
from quota.loader import load_config_text
from workloads.gates import is_gated
from workloads.kind import JobKind
from workloads.kinds.leaderworkerset import LEADERWORKERSET
from workloads.kinds.pod import POD
from workloads.registry import REGISTRY

from ...workloads.examples import crd_example, kueue_pods, lws_pods, refused_update, submitted

Obj = dict[str, Any]

CONFIG = load_config_text(
    """
flavors:
  - name: default
  - name: h100
    nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
    tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]
priorityClasses:
  - {name: serving, value: 100, default: true, checkpointTimeout: 0s}
teams:
  - name: ml
    queues: [ml/ml]
    resourceGroups:
      - coveredResources: [cpu, memory, ephemeral-storage]
        flavors:
          - flavor: default
            resources: {cpu: {nominal: 1000}, memory: {nominal: 10Ti}, ephemeral-storage: {nominal: 10Ti}}
      - coveredResources: [nvidia.com/gpu]
        flavors:
          - flavor: h100
            resources: {nvidia.com/gpu: {nominal: 16}}
jobKinds: [Job, LeaderWorkerSet, Pod]
"""
)
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


class Server:
    """Pods as kube-apiserver keeps them, for the calls the gated half makes."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], Obj] = {}
        self.changed: list[tuple[str, Obj]] = []
        """Watch events not yet delivered."""
        self.refuse: set[str] = set()
        """Pods whose patches are refused for good (403)."""
        self.patches: list[str] = []
        self.deletes: list[str] = []

    def add(self, *pods: Obj) -> list[Obj]:
        for pod in pods:
            self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = copy.deepcopy(pod)
            self.changed.append(("ADDED", copy.deepcopy(pod)))
        return list(pods)

    async def patch_object(
        self,
        kind: JobKind,
        namespace: str,
        name: str,
        patch: Obj | Callable[[Obj | None], list[Obj]],
        *,
        reread: bool = True,
    ) -> None:
        assert kind.plural == "pods"
        stored = self.pods.get((namespace, name))
        if stored is None:
            raise NotFound(404, f"pods {name} not found")
        if name in self.refuse:
            raise Forbidden(403, "forbidden")
        if not callable(patch):  # a merge patch of annotations
            new = copy.deepcopy(stored)
            new["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
        else:
            try:
                new = jsonpatch.apply_patch(stored, patch(None))
            except jsonpatch.JsonPatchException:  # 422: made again from the pod as it is (or raised)
                if not reread:
                    raise Invalid(422, "the patch's test failed") from None
                new = jsonpatch.apply_patch(stored, patch(copy.deepcopy(stored)))
            if stored["spec"].get("schedulingGates"):
                assert refused_update(stored, new) == []
        self.pods[(namespace, name)] = new
        self.patches.append(name)
        self.changed.append(("MODIFIED", copy.deepcopy(new)))

    async def delete_object(self, kind: JobKind, namespace: str, name: str, uid: str | None = None) -> None:
        stored = self.pods.get((namespace, name))
        if stored is None or (uid and stored["metadata"]["uid"] != uid):
            return
        del self.pods[(namespace, name)]
        self.deletes.append(name)
        self.changed.append(("DELETED", stored))

    def pod(self, name: str, namespace: str = "ml") -> Obj:
        return self.pods[(namespace, name)]


class Rig:
    def __init__(self, kinds: tuple[str, ...] = ("Job", "LeaderWorkerSet", "Pod")) -> None:
        self.server = Server()
        self.now = 1_000_000
        self.cluster = KubeCluster(
            self.server,  # type: ignore[arg-type]
            lambda: CONFIG,
            kinds=REGISTRY.enabled(kinds),
            clock=lambda: self.now,
        )
        self.journal = RecordingJournal()
        # A requeued workload waits out its backoff (time stands still here), so the other one gets the quota.
        self.controller = Controller(CONFIG, self.cluster, LoopTimers(), self.journal, backoff_base_ms=60_000)
        self.cluster.attach(self.controller, None)

    async def settle(self) -> None:
        """Let the calls in flight finish and deliver what they changed, as the watch would, until quiet."""
        for _ in range(20):
            await self.cluster.settle()
            self.controller.tick(self.now)
            self.controller.schedule(self.now)
            await self.cluster.settle()
            if not self.server.changed:
                return
            changed, self.server.changed = self.server.changed, []
            for event, pod in changed:
                self.cluster.gated.pod_event(event, pod)
        raise AssertionError("the rig did not settle")

    def state(self, key: str) -> State | None:
        return self.controller.manager.state.get(key)


def vllm(replicas: int = 2) -> Obj:
    _, obj = crd_example("leaderworkerset/examples/vllm-GPU-lws.yaml")
    obj = submitted(obj)
    obj["metadata"]["uid"] = "uid-vllm"
    obj["spec"]["replicas"] = replicas
    for template in ("leaderTemplate", "workerTemplate"):  # as the mutating webhook leaves them
        obj["spec"]["leaderWorkerTemplate"][template].setdefault("metadata", {}).setdefault("labels", {})[
            QUEUE_LABEL
        ] = "ml"
    return obj


def gated_group(lws: Obj, group: int) -> list[Obj]:
    return lws_pods(lws, group, gate=SCHEDULING_GATE)


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield Rig()


async def test_each_group_is_a_workload_admitted_by_ungating_its_pods(rig: Rig) -> None:
    lws = vllm()
    rig.cluster.on_list(LEADERWORKERSET, [lws])
    rig.cluster.gated.pods_listed(rig.server.add(*gated_group(lws, 0), *gated_group(lws, 1)))
    await rig.settle()
    # 16 GPUs of quota, 16 per group: the first group runs, the second waits, its pods gated.
    assert rig.state("LeaderWorkerSet/ml/vllm-0") is State.ADMITTED
    assert rig.state("LeaderWorkerSet/ml/vllm-1") is State.PENDING
    for name in ("vllm-0", "vllm-0-1"):
        pod = rig.server.pod(name)
        assert not is_gated(pod)
        assert pod["spec"]["nodeSelector"] == H100 and pod["spec"]["tolerations"] == [TOLERATION]
        flavors = "cpu=default,ephemeral-storage=default,memory=default,nvidia.com/gpu=h100"
        assert pod["metadata"]["annotations"][ADMITTED_FLAVOR] == f"leader:{flavors};worker:{flavors}"
        assert pod["metadata"]["annotations"][WORKLOAD_ID] == "LeaderWorkerSet/ml/vllm-0"
    assert all(is_gated(rig.server.pod(n)) for n in ("vllm-1", "vllm-1-1"))
    assert sorted(rig.server.patches) == ["vllm-0", "vllm-0-1"]
    # Events about a group go on its set.
    assert rig.cluster.involved("LeaderWorkerSet/ml/vllm-1") == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "namespace": "ml",
        "name": "vllm",
        "uid": "uid-vllm",
    }


async def test_a_pod_created_again_for_an_admitted_group_is_let_go_as_well(rig: Rig) -> None:
    lws = vllm(replicas=1)
    rig.cluster.on_list(LEADERWORKERSET, [lws])
    rig.cluster.gated.pods_listed(rig.server.add(*gated_group(lws, 0)))
    await rig.settle()
    await rig.server.delete_object(POD, "ml", "vllm-0-1", "uid-vllm-0-1")  # the worker's node went away
    again = gated_group(lws, 0)[1]
    again["metadata"]["uid"] = "uid-vllm-0-1-again"
    rig.server.add(again)
    await rig.settle()
    assert rig.state("LeaderWorkerSet/ml/vllm-0") is State.ADMITTED
    assert not is_gated(rig.server.pod("vllm-0-1")) and rig.server.pod("vllm-0-1")["metadata"]["uid"].endswith("again")


async def test_a_preempted_group_is_deleted_comes_back_gated_and_waits_again(rig: Rig) -> None:
    lws = vllm()
    rig.cluster.on_list(LEADERWORKERSET, [lws])
    rig.cluster.gated.pods_listed(rig.server.add(*gated_group(lws, 0), *gated_group(lws, 1)))
    await rig.settle()
    rig.controller.preempt("LeaderWorkerSet/ml/vllm-0", "ops", rig.now)
    await rig.settle()
    assert sorted(rig.server.deletes) == ["vllm-0", "vllm-0-1"]
    # Asked first (each running pod stamped), then stopped at once: the class's checkpointTimeout is 0.
    assert rig.journal.named("requeued") and rig.journal.named("requeued")[0]["args"][0].name.endswith("vllm-0")
    assert rig.state("LeaderWorkerSet/ml/vllm-1") is State.ADMITTED  # the quota went to the other group
    assert rig.state("LeaderWorkerSet/ml/vllm-0") is State.PENDING
    # The LeaderWorkerSet controller creates the group again: gated, it waits for quota.
    rig.server.add(*gated_group(lws, 0))
    await rig.settle()
    assert is_gated(rig.server.pod("vllm-0")) and rig.state("LeaderWorkerSet/ml/vllm-0") is State.PENDING


async def test_scaling_a_set_down_removes_its_last_groups_workload(rig: Rig) -> None:
    lws = vllm()
    rig.cluster.on_list(LEADERWORKERSET, [lws])
    rig.cluster.gated.pods_listed(rig.server.add(*gated_group(lws, 0), *gated_group(lws, 1)))
    await rig.settle()
    smaller = copy.deepcopy(lws)
    smaller["spec"]["replicas"] = 1
    rig.cluster.on_event(LEADERWORKERSET, "MODIFIED", smaller)
    assert rig.state("LeaderWorkerSet/ml/vllm-1") is None
    assert rig.state("LeaderWorkerSet/ml/vllm-0") is State.ADMITTED
    rig.cluster.on_event(LEADERWORKERSET, "DELETED", smaller)
    assert rig.state("LeaderWorkerSet/ml/vllm-0") is None


async def test_a_checkpoint_is_asked_of_every_running_pod_and_any_pod_answers(rig: Rig) -> None:
    lws = vllm(replicas=1)
    rig.cluster.on_list(LEADERWORKERSET, [lws])
    rig.cluster.gated.pods_listed(rig.server.add(*gated_group(lws, 0)))
    await rig.settle()
    via = rig.cluster.request_checkpoint(rig.controller.manager.workloads["LeaderWorkerSet/ml/vllm-0"], 0, "x", None)
    await rig.settle()
    assert via == "annotation"
    assert all(CHECKPOINT_REQUESTED_AT in rig.server.pod(n)["metadata"]["annotations"] for n in ("vllm-0", "vllm-0-1"))
    worker = copy.deepcopy(rig.server.pod("vllm-0-1"))
    worker["metadata"]["annotations"][CHECKPOINT_COMPLETED_AT] = "2026-03-01T09:00:00Z"
    worker["metadata"]["annotations"]["kuota.dev/checkpoint-id"] = "step-42"
    rig.cluster.gated.pod_event("MODIFIED", worker)
    assert rig.cluster.last_checkpoint_at(rig.controller.manager.workloads["LeaderWorkerSet/ml/vllm-0"]) is not None


async def test_a_pod_group_is_queued_once_complete_and_ends_when_preempted(rig: Rig) -> None:
    leader, worker = kueue_pods("kueue/pods-kueue__kueue-pod-group.yaml", "ml", gate=SCHEDULING_GATE)
    for pod in (leader, worker):
        pod["metadata"]["labels"][QUEUE_LABEL] = "ml"
        pod["metadata"]["annotations"]["kuota.dev/pod-set"] = "r"
    rig.cluster.gated.pods_listed(rig.server.add(leader))
    await rig.settle()
    assert rig.state("PodGroup/ml/sample-group") is None  # one of two: not queued yet
    rig.server.add(worker)
    await rig.settle()
    assert rig.state("PodGroup/ml/sample-group") is State.ADMITTED
    assert not any(is_gated(p) for p in rig.server.pods.values())
    involved = rig.cluster.involved("PodGroup/ml/sample-group")  # Events go on the group's first pod
    assert involved is not None and (involved["kind"], involved["name"]) == ("Pod", "sample-leader-x7k2p")
    rig.controller.preempt("PodGroup/ml/sample-group", "ops", rig.now)
    await rig.settle()
    assert sorted(rig.server.deletes) == sorted(p["metadata"]["name"] for p in (leader, worker))
    (finished,) = rig.journal.named("finished")
    assert finished["args"][0].name == "PodGroup/ml/sample-group" and finished["args"][2] is False
    assert rig.state("PodGroup/ml/sample-group") is None


async def admitted_plain_pod(rig: Rig) -> str:
    """Kueue's sample pod, created gated under queue ml and admitted; its workload's key."""
    (pod,) = kueue_pods("kueue/pods-kueue__kueue-pod.yaml", "ml", gate=SCHEDULING_GATE)
    pod["metadata"]["labels"][QUEUE_LABEL] = "ml"
    rig.cluster.gated.pods_listed(rig.server.add(pod))
    await rig.settle()
    key = "Pod/ml/kueue-sleep-x7k2p"
    assert rig.state(key) is State.ADMITTED
    return key


async def test_a_plain_pod_that_succeeds_finishes_its_workload(rig: Rig) -> None:
    key = await admitted_plain_pod(rig)
    done = copy.deepcopy(rig.server.pod("kueue-sleep-x7k2p"))
    done["status"]["phase"] = "Succeeded"
    rig.cluster.gated.pod_event("MODIFIED", done)
    (finished,) = rig.journal.named("finished")
    assert finished["args"][0].name == key and finished["args"][2] is True
    rig.cluster.gated.pod_event("MODIFIED", done)  # later updates of the finished pod change nothing
    assert len(rig.journal.named("finished")) == 1 and rig.state(key) is None


async def test_after_a_restart_running_pods_are_admitted_already_and_nothing_is_patched(rig: Rig) -> None:
    lws = vllm(replicas=1)
    first = Rig()
    first.cluster.on_list(LEADERWORKERSET, [lws])
    first.cluster.gated.pods_listed(first.server.add(*gated_group(lws, 0)))
    await first.settle()
    running = [copy.deepcopy(first.server.pod(n)) for n in ("vllm-0", "vllm-0-1")]
    # A new leader: it lists the set and the pods, one of which its controller just created again, gated.
    running[1] = gated_group(lws, 0)[1]
    rig.server.add(*running)
    rig.server.changed.clear()
    rig.cluster.gated.pods_listed(running)
    assert rig.cluster.gated.running() == set()  # the set is not listed yet: no group is defined
    rig.cluster.on_list(LEADERWORKERSET, [lws])
    assert rig.cluster.gated.running() == {"LeaderWorkerSet/ml/vllm-0"}
    assert rig.state("LeaderWorkerSet/ml/vllm-0") is State.ADMITTED
    await rig.settle()
    assert rig.server.patches == ["vllm-0-1"]  # only the new pod, let go under the admission found
    assert not is_gated(rig.server.pod("vllm-0-1"))
    assert not rig.journal.named("admitted")  # not admitted a second time


async def test_a_pod_the_api_server_will_not_let_go_gives_the_quota_back(rig: Rig) -> None:
    lws = vllm(replicas=1)
    rig.server.refuse.add("vllm-0-1")
    rig.cluster.on_list(LEADERWORKERSET, [lws])
    rig.cluster.gated.pods_listed(rig.server.add(*gated_group(lws, 0)))
    await rig.cluster.settle()
    rig.controller.schedule(rig.now)
    await rig.cluster.settle()
    # The leader was let go, the worker refused: both are stopped and the group is queued again.
    assert rig.state("LeaderWorkerSet/ml/vllm-0") is State.PENDING
    assert "vllm-0" in rig.server.deletes
