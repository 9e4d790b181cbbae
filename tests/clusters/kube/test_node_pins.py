"""The choice of node for each gated pod of a placed pod set (clusters/kube/node_pins.py), under any order of pods
arriving, being let go (in flight, then seen ungated), binding, finishing and going: never more of the pod set's
pods on or headed to a node than the placement counts there, and no pod left gated while its placement has room."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.labels import SCHEDULING_GATE
from clusters.kube.node_pins import NodePins, uid_of
from clusters.kube.topology_assignment import HOSTNAME_LABEL

Pod = dict[str, Any]


def gated_pod(index: int) -> Pod:
    return {
        "metadata": {"name": f"p-{index:03d}", "uid": f"uid-{index}"},
        "spec": {"schedulingGates": [{"name": SCHEDULING_GATE}]},
        "status": {"phase": "Pending"},
    }


class Model:
    """Pods as the watch shows them, and a NodePins choosing nodes for them as the adapters call it."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        self.pins = NodePins(lambda: None)  # no inventory: a node's hostname is its name
        self.pods: dict[str, Pod] = {}
        self.made = 0

    def add(self) -> None:
        pod = gated_pod(self.made)
        self.made += 1
        self.pods[uid_of(pod)] = pod

    def choose(self) -> None:
        """What a sync does: the gated pods not yet on their way get a node, and are sent (in flight)."""
        gated = [
            p for p in self.pods.values() if p["spec"].get("schedulingGates") and uid_of(p) not in self.pins.pinned
        ]
        for uid, node in self.pins.choose(self.counts, self.pods.values(), gated).items():
            self.pins.pin(self.pods[uid], node)

    def let_go(self, which: int) -> None:
        """One patch in flight lands: the watch shows the pod ungated, pinned to its node by hostname."""
        if not self.pins.pinned:
            return
        uid = sorted(self.pins.pinned)[which % len(self.pins.pinned)]
        node = self.pins.pinned[uid]
        pod = self.pods[uid]
        pod["spec"] = {"nodeSelector": {HOSTNAME_LABEL: node}}
        self.pins.forget(uid)

    def bind(self, which: int) -> None:
        ungated = sorted(
            u
            for u, p in self.pods.items()
            if "nodeSelector" in p["spec"] and "nodeName" not in p["spec"] and p["status"]["phase"] == "Pending"
        )
        if ungated:
            pod = self.pods[ungated[which % len(ungated)]]
            pod["spec"]["nodeName"] = pod["spec"]["nodeSelector"][HOSTNAME_LABEL]
            pod["status"]["phase"] = "Running"

    def end(self, which: int, how: str) -> None:
        """A pod fails (its operator makes another), is being deleted, or is gone."""
        live = sorted(u for u, p in self.pods.items() if not p["spec"].get("schedulingGates"))
        if not live:
            return
        uid = live[which % len(live)]
        if how == "failed":
            self.pods[uid]["status"]["phase"] = "Failed"
        elif how == "deleting":
            self.pods[uid]["metadata"]["deletionTimestamp"] = "2026-12-01T20:00:00Z"
        else:
            del self.pods[uid]
        self.add()

    def headed(self) -> dict[str, int]:
        """Per node, the pods that hold it or are on their way to it."""
        out: dict[str, int] = {}
        for uid, pod in self.pods.items():
            if pod["metadata"].get("deletionTimestamp") or pod["status"]["phase"] in ("Succeeded", "Failed"):
                continue
            node = self.pins.pinned.get(uid) or pod["spec"].get("nodeSelector", {}).get(HOSTNAME_LABEL)
            if node is not None:
                out[node] = out.get(node, 0) + 1
        return out


STEPS = st.lists(
    st.one_of(
        st.just(("add",)),
        st.just(("choose",)),
        st.tuples(st.just("let_go"), st.integers(0, 20)),
        st.tuples(st.just("bind"), st.integers(0, 20)),
        st.tuples(st.just("end"), st.integers(0, 20), st.sampled_from(["failed", "deleting", "gone"])),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(counts=st.dictionaries(st.sampled_from(["n1", "n2", "n3", "n4"]), st.integers(1, 3), min_size=1), steps=STEPS)
def test_no_node_gets_more_of_a_pod_sets_pods_than_the_placement_counts(
    counts: dict[str, int], steps: list[tuple[Any, ...]]
) -> None:
    model = Model(counts)
    for _ in range(sum(counts.values())):
        model.add()
    for step in steps:
        getattr(model, step[0])(*step[1:])
        for node, pods in model.headed().items():
            assert pods <= counts.get(node, 0), (node, pods, counts, step)
    model.choose()
    headed = model.headed()
    waiting = [p for u, p in model.pods.items() if p["spec"].get("schedulingGates") and u not in model.pins.pinned]
    room = sum(counts.values()) - sum(headed.values())
    assert len(waiting) == 0 or room == 0, "a gated pod waits only while its placement has no room left"


def test_a_pod_on_its_way_to_a_node_holds_its_place_there() -> None:
    # Two syncs before the watch shows the first pod let go: the second pod must not take the first one's slot.
    model = Model({"n1": 1, "n2": 1})
    model.add()
    model.choose()
    model.add()
    model.choose()
    assert sorted(model.pins.pinned.values()) == ["n1", "n2"]
