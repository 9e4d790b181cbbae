"""The live inventory counts every pod once: pods that are not kuota's (or belong to a stopped run) one by one, an
admitted workload placed on nodes by its placement, whatever order the watch, relists and the queue manager's
placements come in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.nodes import NodeState
from clusters.kube.inventory import LiveInventory
from clusters.kube.nodes import NodeWatch
from tests.clusters.kube.test_nodes import GPU, node, pod


def test_a_placed_workloads_pods_step_aside_and_count_again_once_the_placement_is_taken_back() -> None:
    rooms: list[None] = []
    watch = NodeWatch(on_room=lambda: rooms.append(None))
    watch.nodes_listed([node("gpu-1"), node("gpu-2")])
    inventory = watch.inventory
    # A tenant's pod, and the pods of kuota's Job/nlp/train (seen before the placement: a new leader's list).
    watch.pods_listed(
        [
            pod("other", "gpu-1", gpus=2),
            pod("t-0", "gpu-1", gpus=4, workload="Job/nlp/train"),
            pod("t-1", "gpu-2", gpus=4, workload="Job/nlp/train"),
        ]
    )
    assert inventory.free("gpu-1")[GPU] == 2_000 and inventory.free("gpu-2")[GPU] == 4_000
    # The queue manager binds the workload's placement (engine's counts: both pods on gpu-2): the pods step aside.
    inventory.bind("Job/nlp/train", "gpu-2", {GPU: 8_000})
    assert inventory.free("gpu-1")[GPU] == 6_000, "only the tenant's pod counts on gpu-1"
    assert inventory.free("gpu-2")[GPU] == 0, "the placement, not the pod, counts on gpu-2"
    assert inventory.owners_on("gpu-2") == {"Job/nlp/train"}
    # A replay of its pods changes nothing while it is placed.
    watch.pod_event("MODIFIED", pod("t-0", "gpu-1", gpus=4, workload="Job/nlp/train"))
    assert inventory.free("gpu-1")[GPU] == 6_000
    # Preempted: the pods are being deleted (no workload any more) and count by themselves until gone.
    watch.pod_event("MODIFIED", pod("t-0", "gpu-1", gpus=4, workload="Job/nlp/train", deleting=True))
    assert inventory.free("gpu-1")[GPU] == 2_000
    inventory.unbind("Job/nlp/train")
    assert inventory.free("gpu-2")[GPU] == 4_000, "t-1, still there, counts by itself again"
    rooms.clear()
    watch.pod_event("DELETED", pod("t-1", "gpu-2"))
    assert inventory.free("gpu-2")[GPU] == 8_000 and rooms == [None], "room freed is told"
    watch.pod_event("DELETED", pod("t-0", "gpu-1"))
    assert inventory.free("gpu-1")[GPU] == 6_000


def test_pods_of_a_workload_that_is_not_placed_count_one_by_one() -> None:
    watch = NodeWatch()
    watch.nodes_listed([node("gpu-1")])
    # Admitted on a flavor without a topology: nobody binds a placement, its pods count as any pod.
    watch.pods_listed([pod("a", "gpu-1", gpus=3, workload="Job/nlp/plain")])
    assert watch.inventory.free("gpu-1")[GPU] == 5_000
    watch.inventory.unbind("Job/nlp/plain")  # the manager stops it (it never bound anything): nothing changes
    assert watch.inventory.free("gpu-1")[GPU] == 5_000


def test_room_is_told_when_a_node_comes_or_becomes_schedulable_and_not_on_a_heartbeat() -> None:
    rooms: list[None] = []
    watch = NodeWatch(on_room=lambda: rooms.append(None))
    watch.nodes_listed([node("gpu-1", unschedulable=True)])
    assert rooms == [], "a cordoned node takes nothing"
    watch.node_event("MODIFIED", node("gpu-1", unschedulable=True))
    watch.node_event("MODIFIED", node("gpu-1"))
    assert len(rooms) == 1, "uncordoned"
    watch.node_event("MODIFIED", node("gpu-1"))
    assert len(rooms) == 1, "a heartbeat says nothing new"
    watch.node_event("ADDED", node("gpu-2"))
    assert len(rooms) == 2
    watch.node_event("MODIFIED", node("gpu-2", gpus="16"))
    assert len(rooms) == 3, "more allocatable"
    # A pod the placement counts for leaving frees nothing the inventory counted: not told.
    watch.pods_listed([pod("t", "gpu-2", gpus=8, workload="Job/nlp/t")])
    watch.inventory.bind("Job/nlp/t", "gpu-2", {GPU: 8_000})
    watch.pod_event("DELETED", pod("t", "gpu-2"))
    assert len(rooms) == 3 and watch.inventory.free("gpu-2")[GPU] == 8_000


def test_a_cycle_copy_is_a_plain_inventory_with_the_same_usage() -> None:
    watch = NodeWatch()
    watch.nodes_listed([node("gpu-1")])
    watch.pods_listed([pod("a", "gpu-1", gpus=2), pod("t", "gpu-1", gpus=4, workload="Job/nlp/t")])
    watch.inventory.bind("Job/nlp/t", "gpu-1", {GPU: 4_000})
    copy = watch.inventory.copy()
    assert type(copy) is not LiveInventory
    copy.bind("Job/nlp/head", "gpu-1", {GPU: 2_000})
    assert copy.free("gpu-1")[GPU] == 0 and watch.inventory.free("gpu-1")[GPU] == 2_000


WORKLOADS = ["Job/nlp/a", "Job/nlp/b"]


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(
                st.sampled_from(["pod", "delete", "deleting"]),
                st.sampled_from(["p1", "p2", "p3", "p4"]),
                st.sampled_from(["gpu-1", "gpu-2"]),
                st.sampled_from([None, *WORKLOADS]),
            ),
            st.tuples(
                st.sampled_from(["place", "unplace"]),
                st.sampled_from(WORKLOADS),
                st.sampled_from(["gpu-1", "gpu-2"]),
                st.none(),
            ),
            st.tuples(st.sampled_from(["relist", "node-gone", "node-back"]), st.none(), st.none(), st.none()),
        ),
        max_size=40,
    )
)
def test_every_pod_is_counted_once_whatever_the_order(
    steps: list[tuple[str, str | None, str | None, str | None]],
) -> None:
    """Per node: the placements bound, plus the pods whose workload is not placed (or which are being deleted),
    never a placed workload's live pod, after any sequence of pod events, relists, placements and node loss."""
    watch = NodeWatch()
    watch.nodes_listed([node("gpu-1", gpus="64"), node("gpu-2", gpus="64")])
    inventory = watch.inventory
    pods: dict[str, tuple[str, str | None, bool]] = {}
    """pod → (node, workload, being deleted)."""
    placed: dict[str, dict[str, int]] = {}
    """workload → node → GPUs."""
    gone: set[str] = set()
    for action, name, where, workload in steps:
        if action == "pod" and name is not None and where is not None:
            before = pods.get(name)
            node_name = before[0] if before is not None else where  # a bound pod never moves
            pods[name] = (node_name, workload, False)
            watch.pod_event("MODIFIED", pod(name, node_name, gpus=1, workload=workload))
        elif action == "deleting" and name in pods:
            node_name, owner, _ = pods[name]
            pods[name] = (node_name, owner, True)
            watch.pod_event("MODIFIED", pod(name, node_name, gpus=1, workload=owner, deleting=True))
        elif action == "delete" and name is not None:
            pods.pop(name, None)
            watch.pod_event("DELETED", pod(name, where, gpus=1))
        elif action == "place" and name is not None and where is not None:
            held = placed.setdefault(name, {})
            held[where] = 2
            inventory.bind(name, where, {GPU: 2_000})
        elif action == "unplace" and name is not None:
            placed.pop(name, None)
            inventory.unbind(name)
        elif action == "relist":
            watch.pods_listed([pod(n, w, gpus=1, workload=o, deleting=d) for n, (w, o, d) in pods.items()])
        elif action == "node-gone" and "gpu-2" not in gone:  # a watch reports a deletion once
            watch.node_event("DELETED", node("gpu-2", gpus="64"))
            gone.add("gpu-2")
            for held in placed.values():
                held.pop("gpu-2", None)  # a deleted node takes every binding on it with it
        elif action == "node-back" and "gpu-2" in gone:
            watch.node_event("ADDED", node("gpu-2", gpus="64"))
            gone.discard("gpu-2")
    placed_names = set(placed)  # placed until taken back, even when the node it was bound on went
    for name in ("gpu-1", "gpu-2"):
        if name in gone:
            assert inventory.node(name) is None
            continue
        alone = sum(1 for w, o, d in pods.values() if w == name and (d or o is None or o not in placed_names))
        by_placement = sum(held.get(name, 0) for held in placed.values())
        assert inventory.used(name).get(GPU, 0) == (alone + by_placement) * 1000, (name, pods, placed)


def test_a_node_seen_after_its_pods_counts_them() -> None:
    inventory = LiveInventory()
    inventory.bind_pod("nlp/a", "gpu-1", {GPU: 2_000}, None)
    assert inventory.used("gpu-1") == {}, "no such node yet"
    inventory.set_node(NodeState("gpu-1", allocatable={GPU: 8_000}))
    assert inventory.free("gpu-1")[GPU] == 6_000
