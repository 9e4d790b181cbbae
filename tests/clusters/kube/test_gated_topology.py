"""Pods held back pod by pod, placed by a topology: each is let go onto the node the placement counted it on (the
patch checked against what kube-apiserver accepts of a gated pod); a new leader rebuilds the placement from the
pods' annotation, lets nothing go twice, and lets a replacement go where the placement has room left."""

from __future__ import annotations

import copy
from typing import Any

from admission.labels import QUEUE_LABEL, SCHEDULING_GATE, TOPOLOGY_ASSIGNMENT
from clusters.kube.cluster import KubeCluster
from clusters.kube.topology_assignment import decode
from queues.controller import Controller
from queues.journal import RecordingJournal
from queues.loop import LoopTimers
from queues.manager import State
from quota.loader import load_config_text
from tests.clusters.kube.test_gated import Server
from tests.clusters.kube.test_nodes import node
from workloads.gates import is_gated
from workloads.kinds.pod import POD
from workloads.registry import REGISTRY

RACK = "topology.kuota.dev/rack"
HOST = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
KEY = "PodGroup/ml/train"

CONFIG = load_config_text(
    f"""
topologies:
  - name: fabric
    levels: [{RACK}, {HOST}]
flavors:
  - {{name: h100, topology: fabric}}
priorityClasses:
  - {{name: batch, value: 100, default: true, checkpointTimeout: 0s}}
teams:
  - name: ml
    queues: [ml/ml]
    quotas:
      - flavor: h100
        resources: {{cpu: {{nominal: 1000}}, {GPU}: {{nominal: 64}}}}
jobKinds: [Job, Pod]
"""
)


def group_pod(index: int, uid: str | None = None) -> dict[str, Any]:
    """Pod `index` of the group `train` of four half-node pods, as kuota's webhook lets it be created: gated."""
    name = f"train-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": uid or f"uid-{name}",
            "creationTimestamp": "2026-12-01T06:00:00Z",
            "labels": {QUEUE_LABEL: "ml", "kuota.dev/pod-group": "train"},
            # The pod set as kuota's pod webhook names it at creation (what it is read as ever after).
            "annotations": {
                "kuota.dev/pod-group-total-count": "4",
                "kuota.dev/topology-required": RACK,
                "kuota.dev/pod-set": "worker",
            },
        },
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "containers": [{"name": "main", "image": "train:1", "resources": {"requests": {"cpu": "1", GPU: "4"}}}],
        },
        "status": {"phase": "Pending"},
    }


def rack_node(name: str, rack: str) -> dict[str, Any]:
    obj = node(name)
    obj["metadata"]["labels"] = {HOST: name, RACK: rack}
    return obj


class Rig:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.cluster = KubeCluster(server, lambda: CONFIG, kinds=REGISTRY.enabled(("Job", "Pod")), clock=lambda: 0)  # type: ignore[arg-type]
        self.controller = Controller(CONFIG, self.cluster, LoopTimers(), RecordingJournal())
        self.cluster.attach(self.controller, None)
        assert self.cluster.nodes is not None
        # rack r1: two nodes; rack r2: three (the tightest rack that holds four half-node pods is r1).
        self.cluster.nodes.nodes_listed(
            [rack_node("n1", "r1"), rack_node("n2", "r1"), *(rack_node(n, "r2") for n in ("n3", "n4", "n5"))]
        )

    async def settle(self) -> None:
        for _ in range(20):
            await self.cluster.settle()
            self.controller.schedule(0)
            await self.cluster.settle()
            if not self.server.changed:
                return
            changed, self.server.changed = self.server.changed, []
            for event, pod in changed:
                self.cluster.gated.pod_event(event, pod)
        raise AssertionError("the rig did not settle")


def hosts(server: Server) -> dict[str, str | None]:
    return {name: pod["spec"].get("nodeSelector", {}).get(HOST) for (_, name), pod in sorted(server.pods.items())}


async def test_gated_pods_go_to_the_counted_nodes_and_a_new_leader_keeps_to_them() -> None:
    server = Server()
    rig = Rig(server)
    rig.cluster.gated.pods_listed(server.add(*(group_pod(i) for i in range(4))))
    await rig.settle()
    assert rig.controller.manager.state[KEY] is State.ADMITTED
    admission = rig.controller.manager.workloads[KEY].admission
    assert admission is not None
    [(pod_set, counted)] = admission.placement.items()
    assert pod_set == "worker"
    assert counted == {"n1": 2, "n2": 2}, "two full nodes of the tightest rack"
    placed = hosts(server)
    assert sorted(placed.values()) == ["n1", "n1", "n2", "n2"] and not any(is_gated(p) for p in server.pods.values())
    for pod in server.pods.values():
        assert pod["spec"]["nodeSelector"][RACK] == "r1"
        recorded = decode(pod["metadata"]["annotations"][TOPOLOGY_ASSIGNMENT])
        assert dict(recorded[pod_set].placement.nodes) == counted

    # A new leader: the pods as they are now (let go, scheduled where pinned), read from scratch.
    for pod in server.pods.values():
        pod["spec"]["nodeName"] = pod["spec"]["nodeSelector"][HOST]
        pod["status"]["phase"] = "Running"
    server.changed.clear()
    second = Rig(server)
    second.cluster.gated.pods_listed(copy.deepcopy(list(server.pods.values())))
    await second.settle()
    assert second.controller.manager.state[KEY] is State.ADMITTED
    rebuilt = second.controller.manager.workloads[KEY].admission
    assert rebuilt is not None and rebuilt.placement == {pod_set: counted}
    inventory = second.cluster.node_inventory()
    assert inventory is not None and inventory.nodes_of(KEY) == {"n1", "n2"}
    assert server.patches.count("train-0") == 1, "nothing let go twice"

    # train-0 goes and is made again: the placement has room left only where train-0 was.
    gone_from = placed["train-0"]
    await server.delete_object(POD, "ml", "train-0", "uid-train-0")
    server.add(group_pod(0, uid="uid-train-0-again"))
    await second.settle()
    again = server.pod("train-0")
    assert not is_gated(again) and again["spec"]["nodeSelector"][HOST] == gone_from
