"""Plain Pods and pod groups: a pod that names a queue is a workload of one pod; pods sharing a group are one gang,
queued once all of them exist, with one pod set per role.

The pods are Kueue's own samples (site/static/examples/pods-kueue/kueue-pod.yaml and kueue-pod-group.yaml, in
../shared/data/manifests/kueue at the commit its README gives), which use Kueue's labels, and variations of them.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from admission.labels import (
    KUEUE_POD_GROUP_LABEL,
    KUEUE_POD_GROUP_TOTAL_COUNT,
    POD_GROUP_LABEL,
    POD_GROUP_TOTAL_COUNT,
    POD_SET,
    QUEUE_LABEL,
    SCHEDULING_GATE,
)
from workloads.gates import Group, ungate_patch
from workloads.kind import Placement
from workloads.kinds.leaderworkerset import LEADERWORKERSET
from workloads.kinds.pod import MAX_GROUP_PODS, POD, role
from workloads.reading import convert_group, read
from workloads.registry import REGISTRY
from workloads.rules import config_index

from .examples import CONFIG, NAMESPACE, QUEUE, crd_example, kueue_pods, lws_pods, submitted

Obj = dict[str, Any]

GROUP = "kueue/pods-kueue__kueue-pod-group.yaml"


def queued(pods: list[Obj]) -> list[Obj]:
    """Kueue's samples name Kueue's `user-queue`; the test quota file's queue is `ml`."""
    for pod in pods:
        pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = QUEUE
    return pods


def stamped(pod: Obj) -> Obj:
    """The pod as the mutating webhook leaves it: gated, with its pod set written on it."""
    return jsonpatch.apply_patch(pod, POD.suspend_patch(pod))  # type: ignore[no-any-return]


def sample_group() -> list[Obj]:
    return [stamped(p) for p in queued(kueue_pods(GROUP))]


def as_group(pods: list[Obj], kind: str = "PodGroup", name: str = "sample-group") -> Group:
    return Group(kind, NAMESPACE, name, None, tuple(pods))


def test_a_pod_that_names_a_queue_is_a_workload_of_one_pod() -> None:
    (pod,) = queued(kueue_pods("kueue/pods-kueue__kueue-pod.yaml"))
    member = POD.member(pod)
    assert member == ("Pod", "kueue-sleep-x7k2p")
    conversion = convert_group(POD, as_group([pod], "Pod", member.name), CONFIG)
    workload = conversion.workload
    assert workload is not None
    assert workload.name == f"Pod/{NAMESPACE}/kueue-sleep-x7k2p"
    assert [(p.name, p.count, dict(p.requests)) for p in workload.pod_sets] == [("main", 1, {"cpu": 3000})]
    assert (workload.team, workload.queue) == ("ml", "ml/ml")


def test_kueues_pod_group_is_one_gang_of_its_two_pods() -> None:
    pods = sample_group()
    assert {POD.member(p) for p in pods} == {("PodGroup", "sample-group")}
    # The leader and the worker ask for the same (cpu 3) and select no nodes: one role, two pods.
    workload = convert_group(POD, as_group(pods), CONFIG).workload
    assert workload is not None
    assert workload.name == f"PodGroup/{NAMESPACE}/sample-group"
    assert [(p.name, p.count, dict(p.requests)) for p in workload.pod_sets] == [(role(pods[0]), 2, {"cpu": 3000})]


def test_a_group_is_not_admittable_until_all_its_pods_exist() -> None:
    leader, worker = sample_group()
    early = convert_group(POD, as_group([leader]), CONFIG)
    assert early.workload is None and not early.complete and early.problems == ()
    complete = convert_group(POD, as_group([leader, worker]), CONFIG)
    assert complete.complete and complete.workload is not None
    # A member that failed no longer counts: the group waits for its replacement.
    failed = copy.deepcopy(worker)
    failed["status"]["phase"] = "Failed"
    assert convert_group(POD, as_group([leader, failed]), CONFIG).workload is None
    replacement = copy.deepcopy(worker)
    replacement["metadata"]["name"] = "sample-worker-r2d2"
    assert convert_group(POD, as_group([leader, failed, replacement]), CONFIG).workload is not None


def test_roles_are_pod_sets_by_requests_and_node_selector() -> None:
    leader, worker = queued(kueue_pods(GROUP))
    for pod in (leader, worker):
        pod["metadata"]["annotations"][KUEUE_POD_GROUP_TOTAL_COUNT] = "3"
    second = copy.deepcopy(worker)
    second["metadata"]["name"] = "sample-worker-2"
    leader["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    worker["spec"]["nodeSelector"] = second["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "z1"}
    pods = [stamped(p) for p in (leader, worker, second)]
    workload = convert_group(POD, as_group(pods), CONFIG).workload
    assert workload is not None
    by_name = {p.name: (p.count, dict(p.requests), dict(p.node_selector)) for p in workload.pod_sets}
    assert by_name == {
        role(leader): (1, {"cpu": 500}, {}),
        role(worker): (2, {"cpu": 3000}, {"topology.kubernetes.io/zone": "z1"}),
    }


def test_a_pod_stays_in_its_pod_set_once_admission_adds_to_its_node_selector() -> None:
    pods = sample_group()
    placement = Placement({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, [])
    admitted = [jsonpatch.apply_patch(p, ungate_patch(p, placement)) for p in pods]
    assert role(admitted[0]) != role(pods[0])  # its shape changed...
    assert admitted[0]["metadata"]["annotations"][POD_SET] == role(pods[0])  # ...its pod set did not
    before = convert_group(POD, as_group(pods), CONFIG).workload
    after = convert_group(POD, as_group(admitted), CONFIG).workload
    assert before is not None and after is not None
    assert [p.name for p in after.pod_sets] == [p.name for p in before.pod_sets]


def test_the_webhook_stamps_the_gate_and_the_pod_set_once() -> None:
    (pod,) = queued(kueue_pods(GROUP))[:1]
    patched = stamped(pod)
    assert patched["spec"]["schedulingGates"] == [{"name": SCHEDULING_GATE}]
    assert patched["metadata"]["annotations"][POD_SET] == role(pod)
    assert POD.suspend_patch(patched) == []
    (lone,) = queued(kueue_pods("kueue/pods-kueue__kueue-pod.yaml"))
    assert POD_SET not in stamped(lone)["metadata"].get("annotations", {})  # a lone pod is one pod set


@pytest.mark.parametrize(
    ("labels", "annotations", "field"),
    [
        ({POD_GROUP_LABEL: "g"}, {}, f"metadata.annotations[{KUEUE_POD_GROUP_TOTAL_COUNT}]"),
        ({POD_GROUP_LABEL: "g"}, {POD_GROUP_TOTAL_COUNT: "0"}, f"metadata.annotations[{POD_GROUP_TOTAL_COUNT}]"),
        ({POD_GROUP_LABEL: "g"}, {POD_GROUP_TOTAL_COUNT: "two"}, f"metadata.annotations[{POD_GROUP_TOTAL_COUNT}]"),
        (
            {KUEUE_POD_GROUP_LABEL: "g"},
            {KUEUE_POD_GROUP_TOTAL_COUNT: str(MAX_GROUP_PODS + 1)},
            f"metadata.annotations[{KUEUE_POD_GROUP_TOTAL_COUNT}]",
        ),
        ({}, {POD_GROUP_TOTAL_COUNT: "2"}, f"metadata.annotations[{POD_GROUP_TOTAL_COUNT}]"),
    ],
)
def test_a_group_label_or_size_that_does_not_add_up_is_a_problem(
    labels: dict[str, str], annotations: dict[str, str], field: str
) -> None:
    (pod,) = kueue_pods("kueue/pods-kueue__kueue-pod.yaml")
    pod["metadata"]["labels"] = {QUEUE_LABEL: QUEUE, **labels}
    pod["metadata"]["annotations"] = annotations
    reading = read(POD, pod, config_index(CONFIG))
    assert [p.field for p in reading.problems] == [field]
    assert reading.problems[0].message.endswith(("on every pod of the group", "or remove the annotation"))


def test_a_group_with_more_pods_than_its_size_is_not_queued() -> None:
    leader, worker = sample_group()
    extra = copy.deepcopy(worker)
    extra["metadata"]["name"] = "sample-worker-3"
    conversion = convert_group(POD, as_group([leader, worker, extra]), CONFIG)
    assert conversion.workload is None
    assert [p.field for p in conversion.problems] == [f"metadata.annotations[{KUEUE_POD_GROUP_TOTAL_COUNT}]"]
    assert "has 3 pods" in conversion.problems[0].message


def test_a_group_has_finished_once_all_its_pods_have() -> None:
    leader, worker = sample_group()
    assert POD.group_status(as_group([leader, worker])).finished is None
    leader["status"]["phase"] = "Succeeded"
    assert POD.group_status(as_group([leader, worker])).finished is None
    worker["status"]["phase"] = "Failed"
    assert POD.group_status(as_group([leader, worker])).finished is False  # one of two succeeded
    worker["status"]["phase"] = "Succeeded"
    status = POD.group_status(as_group([leader, worker]))
    assert status.finished is True and status.stopped


def test_an_update_may_not_move_a_pod_between_groups_or_rewrite_its_pod_set() -> None:
    pod = sample_group()[0]
    assert POD.hold_problem(pod, None) is None and POD.hold_problem(pod, pod) is None
    moved = copy.deepcopy(pod)
    moved["metadata"]["labels"][KUEUE_POD_GROUP_LABEL] = "other"
    assert "another pod group" in (POD.hold_problem(moved, pod) or "")
    resized = copy.deepcopy(pod)
    resized["metadata"]["annotations"][KUEUE_POD_GROUP_TOTAL_COUNT] = "5"
    assert POD.hold_problem(resized, pod) is not None
    rewritten = copy.deepcopy(pod)
    rewritten["metadata"]["annotations"][POD_SET] = "cafe0000"
    assert POD_SET in (POD.hold_problem(rewritten, pod) or "")
    assert POD_SET in (POD.hold_problem(rewritten, None) or "")  # nor may a user write it on a new pod


def test_each_pod_belongs_to_the_first_enabled_kind_that_claims_it() -> None:
    _, vllm = crd_example("leaderworkerset/examples/vllm-GPU-lws.yaml")
    leader = lws_pods(submitted(vllm), 0)[0]
    leader["metadata"]["labels"][QUEUE_LABEL] = QUEUE
    (plain,) = queued(kueue_pods("kueue/pods-kueue__kueue-pod.yaml"))
    both = REGISTRY.enabled(["LeaderWorkerSet", "Pod"])
    assert both.claiming(leader) is LEADERWORKERSET
    assert both.claiming(plain) is POD
    assert REGISTRY.enabled(["Pod"]).claiming(leader) is POD  # LWS not queued here: the pod names a queue itself
    assert REGISTRY.enabled(["Job"]).claiming(plain) is None
    unlabelled = copy.deepcopy(plain)
    del unlabelled["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert both.claiming(unlabelled) is None
    # A Job's pod waits on the Job's own switch, even with the queue label copied into its template.
    owned = copy.deepcopy(plain)
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "controller": True}]
    assert both.claiming(owned) is None
