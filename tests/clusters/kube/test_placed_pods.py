"""The gated pods of a Job's placed pod set (clusters/kube/placed_pods.py), each patch checked against what
kube-apiserver accepts of a gated pod: a new leader that finds the Job running lets its gated pods go onto the nodes
its recorded placement counts (none twice, a lost pod's replacement where it left room), never another workload's
pods, none once the Job is stopped; and a refused patch is made again."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from admission.labels import (
    ADMITTED_FLAVOR,
    PLACED_POD_SET,
    QUEUE_LABEL,
    SCHEDULING_GATE,
    TOPOLOGY_ASSIGNMENT,
    WORKLOAD_LABEL,
    workload_label_value,
)
from admission.placement import PodSetPlacement
from clusters.kube import placed_pods
from clusters.kube.cluster import KubeCluster
from clusters.kube.topology_assignment import Assigned, encode
from queues.controller import Controller
from queues.journal import RecordingJournal
from queues.loop import LoopTimers
from tests.clusters.kube.test_gated import Server
from tests.clusters.kube.test_gated_topology import CONFIG, HOST, RACK, rack_node
from workloads.gates import is_gated
from workloads.kinds.job import JOB
from workloads.registry import REGISTRY

GPU = "nvidia.com/gpu"
KEY = "Job/ml/train"
PLACEMENT = PodSetPlacement("fabric", {"n1": 2, "n2": 2}, RACK, "r1")


def running_job() -> dict[str, Any]:
    """The Job `train` as a new leader finds it: admitted onto two full nodes of rack r1, running."""
    template = {
        "metadata": {"labels": {WORKLOAD_LABEL: workload_label_value(KEY), PLACED_POD_SET: "main"}},
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "nodeSelector": {RACK: "r1"},
            "containers": [{"name": "main", "image": "train:1", "resources": {"requests": {"cpu": "1", GPU: "4"}}}],
        },
    }
    annotations = {ADMITTED_FLAVOR: "h100", TOPOLOGY_ASSIGNMENT: encode({"main": Assigned(PLACEMENT, True)})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "uid": "uid-job",
            "labels": {QUEUE_LABEL: "ml"},
            "annotations": annotations,
        },
        "spec": {"suspend": False, "parallelism": 4, "completions": 4, "template": template},
        "status": {"active": 4},
    }


def job_pod(index: int, *, key: str = KEY, uid: str | None = None) -> dict[str, Any]:
    """A pod the Job controller made from the admitted template: gated, labelled."""
    name = f"{key.rsplit('/', 1)[1]}-{index}"
    template = running_job()["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": uid or f"uid-{name}",
            "labels": {**template["metadata"]["labels"], WORKLOAD_LABEL: workload_label_value(key)},
        },
        "spec": copy.deepcopy(template["spec"]),
        "status": {"phase": "Pending"},
    }


class Rig:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.cluster = KubeCluster(server, lambda: CONFIG, kinds=REGISTRY.enabled(("Job",)), clock=lambda: 0)  # type: ignore[arg-type]
        self.controller = Controller(CONFIG, self.cluster, LoopTimers(), RecordingJournal())
        self.cluster.attach(self.controller, None)
        assert self.cluster.nodes is not None and self.cluster.placed_pods is not None
        self.placed = self.cluster.placed_pods
        self.cluster.nodes.nodes_listed([rack_node("n1", "r1"), rack_node("n2", "r1"), rack_node("n3", "r1")])

    async def settle(self) -> None:
        for _ in range(20):
            await self.cluster.settle()
            if not self.server.changed:
                return
            changed, self.server.changed = self.server.changed, []
            for event, pod in changed:
                self.placed.pod_event(event, pod)
        raise AssertionError("the rig did not settle")


def hosts(server: Server, prefix: str = "train-") -> dict[str, str | None]:
    return {
        name: pod["spec"]["nodeSelector"].get(HOST)
        for (_, name), pod in sorted(server.pods.items())
        if name.startswith(prefix) and not is_gated(pod)
    }


async def test_a_new_leader_lets_the_gated_pods_go_onto_the_recorded_nodes_and_a_replacement_where_room_is() -> None:
    server = Server()
    rig = Rig(server)
    # The pods are listed before the Job (the watches run side by side): nothing is let go until the Job is known.
    other = job_pod(0, key="Job/ml/other")
    rig.placed.pods_listed(server.add(*(job_pod(i) for i in range(4)), other))
    server.changed.clear()
    await rig.settle()
    assert not hosts(server), "no placement known yet"
    rig.cluster.on_list(JOB, [running_job()])
    await rig.settle()
    placed = hosts(server)
    assert sorted(placed.values()) == ["n1", "n1", "n2", "n2"], placed
    for name in placed:
        pod = server.pod(name)
        assert pod["spec"]["nodeSelector"][RACK] == "r1", "the domain pin stays"
    assert is_gated(server.pod("other-0")), "another workload's pod is not let go"
    assert sorted(server.patches) == ["train-0", "train-1", "train-2", "train-3"], "each let go once"

    # train-1 fails and the Job controller makes another: it goes where train-1 was, not to n3.
    gone_from = placed["train-1"]
    failed = copy.deepcopy(server.pod("train-1"))
    failed["status"]["phase"] = "Failed"
    server.pods[("ml", "train-1")] = failed
    server.changed.append(("MODIFIED", copy.deepcopy(failed)))
    server.add(job_pod(4))
    await rig.settle()
    assert hosts(server)["train-4"] == gone_from


async def test_a_stopped_job_lets_no_pod_go_and_a_refused_patch_is_made_again() -> None:
    server = Server()
    rig = Rig(server)
    rig.cluster.on_list(JOB, [running_job()])
    server.refuse.add("train-0")  # 403 for now (say, `patch` on pods taken away)
    rig.placed.pods_listed(server.add(job_pod(0), job_pod(1)))
    server.changed.clear()
    await rig.settle()
    assert set(hosts(server)) == {"train-1"} and is_gated(server.pod("train-0"))
    server.refuse.clear()
    await asyncio.sleep(placed_pods.RETRY_S + 0.3)
    await rig.settle()
    assert set(hosts(server)) == {"train-0", "train-1"}, "made again from what the watch shows"

    # Stopped (a preemption): pods made afterwards stay gated.
    workload = rig.controller.manager.workloads[KEY]
    rig.cluster.suspend(workload)
    server.add(job_pod(2))
    await rig.settle()
    assert is_gated(server.pod("train-2"))
