"""The node inventory from Node and pod objects as kube-apiserver sends them: exact allocatable, taints, Ready and
cordoned; pods bound with the scheduler's effective requests under their key, with the workload their label names;
a full list (start, 410 Gone) replaces what was known and never adds to it; readiness changes are reported."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.labels import WORKLOAD_LABEL, workload_label_value
from admission.nodes import Taint, TaintEffect
from clusters.kube.nodes import NodeWatch, bound_pod, node_state, not_ready_since

GPU = "nvidia.com/gpu"


def node(
    name: str,
    *,
    ready: str | None = "True",
    gpus: str = "8",
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool = False,
    since: str = "2026-12-01T06:00:00Z",
) -> dict[str, Any]:
    """A Node as kwok's nodes look (labels, allocatable, a Ready condition)."""
    conditions = [] if ready is None else [{"type": "Ready", "status": ready, "lastTransitionTime": since}]
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kuota.dev/rack": "r1"}},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": "95500m", "memory": "1Ti", GPU: gpus, "pods": "110"},
            "conditions": [{"type": "MemoryPressure", "status": "False"}, *conditions],
        },
    }


def pod(
    name: str,
    node_name: str | None,
    *,
    gpus: int = 8,
    phase: str = "Running",
    workload: str | None = None,
    deleting: bool = False,
    namespace: str = "nlp",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {}}
    if workload is not None:
        metadata["labels"][WORKLOAD_LABEL] = workload_label_value(workload)
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-01T06:10:00Z"
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "4", GPU: str(gpus)}}}],
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": phase}}


def test_a_node_is_read_exactly_with_its_taints_readiness_and_cordon() -> None:
    taints = [
        {"key": GPU, "value": "present", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
        {"key": "odd", "effect": "Sometimes"},  # not an effect Kubernetes has: left out, never raised
    ]
    state = node_state(node("gpu-1", taints=taints, unschedulable=True))
    assert state.name == "gpu-1" and state.labels["topology.kuota.dev/rack"] == "r1"
    assert state.allocatable == {"cpu": 95_500, "memory": 2**40 * 1000, GPU: 8_000, "pods": 110_000}
    assert state.taints == (
        Taint(GPU, "present", TaintEffect.NO_SCHEDULE),
        Taint("node.kubernetes.io/not-ready", "", TaintEffect.NO_EXECUTE),
    )
    assert state.ready and state.unschedulable and not state.schedulable
    assert not node_state(node("x", ready="False")).ready
    assert not node_state(node("x", ready="Unknown")).ready
    assert not node_state(node("x", ready=None)).ready, "a node that never reported Ready is not ready"
    assert node_state(node("x")).schedulable
    assert not_ready_since(node("x", ready="Unknown", since="2026-12-01T06:00:00Z")) == 1_796_104_800_000


def test_a_bad_quantity_is_left_out_and_the_rest_kept() -> None:
    obj = node("gpu-1")
    obj["status"]["allocatable"]["example.com/odd"] = "lots"
    state = node_state(obj)
    assert "example.com/odd" not in state.allocatable and state.allocatable[GPU] == 8_000


def test_a_pod_counts_as_the_scheduler_counts_it() -> None:
    obj = pod("p", "gpu-1", gpus=2, workload="Job/nlp/train")
    obj["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"requests": {"cpu": "16"}}},  # larger than the containers' 4 CPUs
        {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},  # a sidecar
    ]
    obj["spec"]["overhead"] = {"cpu": "250m"}
    found = bound_pod(obj)
    assert found is not None and found.node == "gpu-1"
    # max(4 + 0.5 sidecar, 16 init) + 0.25 overhead CPUs; 2 GPUs.
    assert found.requests == {"cpu": 16_250, GPU: 2_000}
    assert found.workload == workload_label_value("Job/nlp/train")
    assert bound_pod(pod("p", None)) is None, "not bound: not on any node"
    assert bound_pod(pod("p", "gpu-1", phase="Succeeded")) is None
    assert bound_pod(pod("p", "gpu-1", phase="Failed")) is None
    deleting = bound_pod(pod("p", "gpu-1", workload="Job/nlp/train", deleting=True))
    assert deleting is not None and deleting.requests[GPU] == 8_000 and deleting.workload is None


def test_pods_fill_nodes_and_the_free_gpus_follow() -> None:
    watch = NodeWatch()
    watch.nodes_listed([node("gpu-1"), node("gpu-2")])
    watch.pods_listed([pod("a", "gpu-1", gpus=4, workload="Job/nlp/a"), pod("b", "gpu-1", gpus=2)])
    assert watch.inventory.free("gpu-1")[GPU] == 2_000 and watch.inventory.free("gpu-2")[GPU] == 8_000
    assert watch.workload_labels_on("gpu-1") == {workload_label_value("Job/nlp/a")}
    # The same pod seen again (a watch replay) counts once; it moving on is impossible, but would move its usage.
    watch.pod_event("MODIFIED", pod("a", "gpu-1", gpus=4, workload="Job/nlp/a"))
    assert watch.inventory.free("gpu-1")[GPU] == 2_000
    watch.pod_event("MODIFIED", pod("b", "gpu-1", phase="Succeeded"))
    assert watch.inventory.free("gpu-1")[GPU] == 4_000
    watch.pod_event("DELETED", pod("a", "gpu-1"))
    assert watch.inventory.free("gpu-1")[GPU] == 8_000 and watch.workload_labels_on("gpu-1") == set()


def test_a_relist_replaces_what_was_known_and_never_adds_to_it() -> None:
    reports: list[tuple[str, bool, int | None]] = []
    watch = NodeWatch(lambda name, ready, since: reports.append((name, ready, since)))
    watch.nodes_listed([node("gpu-1"), node("gpu-2")])
    watch.pods_listed([pod("a", "gpu-1", gpus=4), pod("b", "gpu-2", gpus=8)])
    reports.clear()
    # After 410 Gone: gpu-2 and pod b were deleted meanwhile, pod c appeared, a is listed again.
    watch.nodes_listed([node("gpu-1")])
    watch.pods_listed([pod("a", "gpu-1", gpus=4), pod("c", "gpu-1", gpus=2)])
    assert [n.name for n in watch.inventory] == ["gpu-1"]
    assert watch.inventory.free("gpu-1")[GPU] == 2_000
    assert watch.inventory.owners_on("gpu-1") == {"nlp/a", "nlp/c"}
    assert ("gpu-2", False, None) in reports, "a node missing from the list is reported gone"
    # Listing the same again changes nothing.
    watch.nodes_listed([node("gpu-1")])
    watch.pods_listed([pod("a", "gpu-1", gpus=4), pod("c", "gpu-1", gpus=2)])
    assert watch.inventory.free("gpu-1")[GPU] == 2_000 and len(watch.pods) == 2


def test_readiness_changes_are_reported_once_each_and_a_node_back_gets_its_pods_again() -> None:
    reports: list[tuple[str, bool, int | None]] = []
    watch = NodeWatch(lambda name, ready, since: reports.append((name, ready, since)))
    watch.nodes_listed([node("gpu-1")])
    watch.pods_listed([pod("a", "gpu-1", gpus=4, workload="Job/nlp/a")])
    assert reports == [("gpu-1", True, None)]
    watch.node_event("MODIFIED", node("gpu-1"))  # a heartbeat: nothing to say
    watch.node_event("MODIFIED", node("gpu-1", ready="Unknown", since="2026-12-01T06:00:00Z"))
    watch.node_event("MODIFIED", node("gpu-1", ready="Unknown", since="2026-12-01T06:00:00Z"))
    assert reports[1:] == [("gpu-1", False, 1_796_104_800_000)]
    assert not watch.inventory.node("gpu-1").schedulable  # type: ignore[union-attr]
    watch.node_event("DELETED", node("gpu-1"))
    assert reports[-1] == ("gpu-1", False, None) and watch.inventory.node("gpu-1") is None
    assert watch.workload_labels_on("gpu-1") == {workload_label_value("Job/nlp/a")}, "its pods still say where"
    watch.node_event("ADDED", node("gpu-1"))
    assert reports[-1] == ("gpu-1", True, None)
    assert watch.inventory.free("gpu-1")[GPU] == 4_000, "the pods still bound to it count again"


@settings(max_examples=50, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["event", "delete", "finish", "relist"]),
            st.sampled_from(["a", "b", "c", "d"]),
            st.sampled_from(["gpu-1", "gpu-2"]),
            st.integers(min_value=1, max_value=4),
        ),
        max_size=30,
    )
)
def test_free_gpus_always_equal_allocatable_less_the_live_pods(steps: list[tuple[str, str, str, int]]) -> None:
    """Whatever order events and relists come in, each node's free GPUs are its allocatable less the GPUs of the
    pods last seen bound to it and not terminated."""
    watch = NodeWatch()
    watch.nodes_listed([node("gpu-1", gpus="16"), node("gpu-2", gpus="16")])
    live: dict[str, tuple[str, int]] = {}
    for action, name, where, gpus in steps:
        if action == "event":
            watch.pod_event("MODIFIED", pod(name, where, gpus=gpus))
            live[name] = (where, gpus)
        elif action == "delete":
            watch.pod_event("DELETED", pod(name, where, gpus=gpus))
            live.pop(name, None)
        elif action == "finish":
            watch.pod_event("MODIFIED", pod(name, where, gpus=gpus, phase="Succeeded"))
            live.pop(name, None)
        else:
            watch.pods_listed([pod(n, w, gpus=g) for n, (w, g) in live.items()])
    for name in ("gpu-1", "gpu-2"):
        used = sum(g for w, g in live.values() if w == name)
        assert watch.inventory.free(name)[GPU] == max(0, 16 - used) * 1000
