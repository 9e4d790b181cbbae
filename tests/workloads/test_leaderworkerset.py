"""LeaderWorkerSet: each group of a set is one gang workload, read from the set and the pods of the group.

The sets are LWS's own examples in ../shared/data/crds/leaderworkerset (docs/examples/sample/lws.yaml and
docs/examples/vllm/GPU/lws.yaml at the commit in its PROVENANCE.md); the pods are built from their templates as the
LeaderWorkerSet controller and its pod webhook label them (`lws_pods`). Requests are exact milli-units.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from admission.labels import PRIORITY_LABEL, QUEUE_LABEL, SCHEDULING_GATE
from workloads.gates import Group, holds_resources
from workloads.kinds.leaderworkerset import LEADERWORKERSET
from workloads.reading import convert_group, read, split_key
from workloads.registry import REGISTRY
from workloads.rules import config_index

from .examples import CONFIG, GI, LWS_GROUP_INDEX, NAMESPACE, crd_example, lws_pods, submitted

VLLM_POD = {"nvidia.com/gpu": 8000, "cpu": 125_000, "memory": 1124 * GI, "ephemeral-storage": 800 * GI}

Obj = dict[str, Any]


def lws(relative: str) -> Obj:
    kind, obj = crd_example(f"leaderworkerset/examples/{relative}")
    assert kind is LEADERWORKERSET
    return submitted(obj)


def group(obj: Obj, index: int, pods: list[Obj] | None = None) -> Group:
    name = f"{obj['metadata']['name']}-{index}"
    return Group("LeaderWorkerSet", NAMESPACE, name, obj, tuple(lws_pods(obj, index) if pods is None else pods))


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        # Without a leader template all four pods of a group come from the worker template: one pod set.
        ("lws.yaml", [("main", 4, {"cpu": 50})]),
        # The vLLM leader and its one worker each ask for 8 GPUs (a limit), 125 CPUs, 1124Gi and 800Gi of disk.
        ("vllm-GPU-lws.yaml", [("leader", 1, VLLM_POD), ("worker", 1, VLLM_POD)]),
    ],
)
def test_each_group_of_an_example_is_a_workload_of_its_pods(relative: str, expected: list[Any]) -> None:
    obj = lws(relative)
    names = LEADERWORKERSET.workloads_of(obj)
    assert len(names) == obj["spec"]["replicas"]
    for index, name in enumerate(names):
        pods = lws_pods(obj, index)
        conversion = convert_group(LEADERWORKERSET, group(obj, index, pods), CONFIG)
        workload = conversion.workload
        assert workload is not None and conversion.problems == ()
        assert name == pods[0]["metadata"]["name"]  # the group is named as its leader pod
        assert workload.name == f"LeaderWorkerSet/{NAMESPACE}/{name}"
        assert [(p.name, p.count, dict(p.requests)) for p in workload.pod_sets] == expected
        assert (workload.team, workload.queue) == ("ml", "ml/ml")
        assert workload.created_at == 1772352000000  # its first pod's creation, 2026-03-01T08:00:00Z
        # Every pod is in a pod set, and each pod set holds its count of pods.
        counts: dict[str, int] = {}
        for pod_set in conversion.pod_set_of.values():
            counts[pod_set] = counts.get(pod_set, 0) + 1
        assert counts == {pod_set: count for pod_set, count, _ in expected}


def test_the_webhooks_reading_of_the_set_is_one_groups_pod_sets() -> None:
    reading = read(LEADERWORKERSET, lws("vllm-GPU-lws.yaml"), config_index(CONFIG))
    assert reading.problems == ()
    assert reading.pod_sets is not None
    pod_sets = [(p.name, p.count, p.requests) for p in reading.pod_sets]
    assert pod_sets == [("leader", 1, VLLM_POD), ("worker", 1, VLLM_POD)]


def test_the_group_key_splits_back_and_names_the_leader_pod() -> None:
    obj = lws("lws.yaml")
    obj["metadata"]["name"] = "a-1"  # a set whose own name ends in what looks like an index
    pods = lws_pods(obj, 0)
    member = LEADERWORKERSET.member(pods[0])
    assert member == ("LeaderWorkerSet", "a-1-0")
    assert [LEADERWORKERSET.member(p) for p in pods[1:]] == [member] * 3
    kind, _, name = split_key(f"{member.kind}/{NAMESPACE}/{member.name}")
    assert REGISTRY.for_workload(kind) is LEADERWORKERSET
    assert name.rpartition("-") == ("a-1", "-", "0")


def test_a_leader_not_yet_labelled_by_lws_is_placed_by_its_ordinal() -> None:
    leader = lws_pods(lws("lws.yaml"), 2)[0]
    del leader["metadata"]["labels"][LWS_GROUP_INDEX]
    assert LEADERWORKERSET.member(leader) == ("LeaderWorkerSet", "leaderworkerset-sample-2")
    worker = lws_pods(lws("lws.yaml"), 2)[1]
    del worker["metadata"]["labels"][LWS_GROUP_INDEX]
    assert LEADERWORKERSET.member(worker) is None  # a worker's own name does not say its group reliably
    assert LEADERWORKERSET.claims(worker) and not LEADERWORKERSET.claims({"metadata": {"labels": {}}})


def test_scaling_the_set_adds_and_removes_workloads() -> None:
    obj = lws("vllm-GPU-lws.yaml")
    assert LEADERWORKERSET.workloads_of(obj) == ["vllm-0", "vllm-1"]
    obj["spec"]["replicas"] = 3
    assert LEADERWORKERSET.workloads_of(obj) == ["vllm-0", "vllm-1", "vllm-2"]
    obj["spec"]["replicas"] = 0
    assert LEADERWORKERSET.workloads_of(obj) == []
    del obj["spec"]["replicas"]
    assert LEADERWORKERSET.workloads_of(obj) == ["vllm-0"]  # the CRD's default: one group


def test_a_group_waits_for_its_set() -> None:
    obj = lws("lws.yaml")
    orphan = Group("LeaderWorkerSet", NAMESPACE, "leaderworkerset-sample-0", None, tuple(lws_pods(obj, 0)))
    conversion = convert_group(LEADERWORKERSET, orphan, CONFIG)
    assert conversion.workload is None and not conversion.complete and conversion.problems == ()


def test_a_group_is_admittable_before_its_workers_exist() -> None:
    """A set with `startupPolicy: LeaderReady` creates the workers once the leader runs: the group's pod sets come
    from the set, so waiting for every pod would never end."""
    obj = lws("vllm-GPU-lws.yaml")
    conversion = convert_group(LEADERWORKERSET, group(obj, 0, lws_pods(obj, 0)[:1]), CONFIG)
    assert conversion.complete and conversion.workload is not None
    assert [p.count for p in conversion.workload.pod_sets] == [1, 1]


def test_the_mutating_webhooks_patch_puts_kuotas_labels_on_both_templates() -> None:
    for relative in ("lws.yaml", "vllm-GPU-lws.yaml"):
        obj = lws(relative)
        labels = {QUEUE_LABEL: "ml", PRIORITY_LABEL: "research"}
        patched = jsonpatch.apply_patch(obj, LEADERWORKERSET.pod_labels_patch(obj, labels))
        template = patched["spec"]["leaderWorkerTemplate"]
        for name in ("leaderTemplate", "workerTemplate"):
            if name in template:
                assert labels.items() <= template[name]["metadata"]["labels"].items()
        if relative.startswith("vllm"):
            assert template["leaderTemplate"]["metadata"]["labels"]["role"] == "leader"  # the template's own stays
        # Applied twice, nothing more to do; and the pods now carry the queue.
        assert LEADERWORKERSET.pod_labels_patch(patched, labels) == []
        assert all(p["metadata"]["labels"][QUEUE_LABEL] == "ml" for p in lws_pods(patched, 0))


def test_what_would_let_pods_past_kuota_is_named() -> None:
    obj = lws("vllm-GPU-lws.yaml")
    obj["metadata"]["labels"][PRIORITY_LABEL] = "research"
    held = jsonpatch.apply_patch(obj, LEADERWORKERSET.pod_labels_patch(obj, obj["metadata"]["labels"]))
    assert LEADERWORKERSET.hold_problem(held, None) is None
    assert LEADERWORKERSET.hold_problem(held, held) is None
    scaled = copy.deepcopy(held)
    scaled["spec"]["replicas"] = 5
    assert LEADERWORKERSET.hold_problem(scaled, held) is None  # scaling adds workloads: fine
    unlabelled = copy.deepcopy(held)
    del unlabelled["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"][QUEUE_LABEL]
    message = LEADERWORKERSET.hold_problem(unlabelled, held)
    assert message is not None and "spec.leaderWorkerTemplate.workerTemplate.metadata.labels" in message
    moved = copy.deepcopy(held)
    moved["metadata"]["labels"][QUEUE_LABEL] = "other"
    moved = jsonpatch.apply_patch(moved, LEADERWORKERSET.pod_labels_patch(moved, moved["metadata"]["labels"]))
    assert "cannot change" in (LEADERWORKERSET.hold_problem(moved, held) or "")
    bigger = copy.deepcopy(held)
    bigger["spec"]["leaderWorkerTemplate"]["size"] = 3
    assert "spec.leaderWorkerTemplate.size" in (LEADERWORKERSET.hold_problem(bigger, held) or "")
    hungrier = copy.deepcopy(held)
    hungrier["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"
    ] = "16"
    assert LEADERWORKERSET.hold_problem(hungrier, held) is not None
    renamed = copy.deepcopy(held)
    renamed["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v1"
    assert LEADERWORKERSET.hold_problem(renamed, held) is None  # a rolling update that asks for the same is fine


def test_a_group_never_finishes_and_is_stopped_once_no_pod_holds_resources() -> None:
    obj = lws("vllm-GPU-lws.yaml")
    gated = lws_pods(obj, 0, gate=SCHEDULING_GATE)
    assert not any(holds_resources(p) for p in gated)
    status = LEADERWORKERSET.group_status(group(obj, 0, gated))
    assert (status.finished, status.stopped) == (None, True)
    running = lws_pods(obj, 0)
    for pod in running:
        pod["status"]["phase"] = "Running"
    status = LEADERWORKERSET.group_status(group(obj, 0, running))
    assert (status.finished, status.stopped) == (None, False)
    for pod in running:
        pod["status"]["phase"] = "Succeeded"  # a serving pod that exits is restarted by its StatefulSet
    assert LEADERWORKERSET.group_status(group(obj, 0, running)).finished is None
    assert LEADERWORKERSET.group_status(group(obj, 0, [])).stopped


def test_the_set_itself_is_never_started_or_stopped_by_a_patch() -> None:
    obj = lws("lws.yaml")
    assert LEADERWORKERSET.is_suspended(obj)
    assert LEADERWORKERSET.suspend_patch(obj) == LEADERWORKERSET.stop_patch(obj) == []
    assert "scheduling gate" in LEADERWORKERSET.held_by


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("spec", "leaderWorkerTemplate"), "x", "spec.leaderWorkerTemplate"),
        (("spec", "leaderWorkerTemplate", "workerTemplate"), None, "spec.leaderWorkerTemplate.workerTemplate"),
        (("spec", "leaderWorkerTemplate", "size"), 0, "spec.leaderWorkerTemplate.size"),
        (("spec", "leaderWorkerTemplate", "size"), "4", "spec.leaderWorkerTemplate.size"),
    ],
)
def test_a_wrong_part_of_the_set_is_named(path: tuple[str, ...], value: Any, field: str) -> None:
    obj = lws("lws.yaml")
    parent = obj
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    reading = read(LEADERWORKERSET, obj, config_index(CONFIG))
    assert [p.field for p in reading.problems] == [field]
    assert reading.pod_sets is None
