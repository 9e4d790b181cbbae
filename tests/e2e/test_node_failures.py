"""Nodes and node failures on the real control plane, with kwok playing the kubelet of four GPU nodes.

kuota's inventory follows the real Nodes and the pods the scheduler binds (free GPUs per node as the API says). A
node is failed the way a dead kubelet fails it: kwok stops playing it (its `kwok.x-k8s.io/node` annotation taken
off, so nothing renews its Lease or status any more) and its Ready condition goes False in the status subresource
(what the node lifecycle controller would write after its grace period, written at once so the test does not
wait 40 s for it; patching the condition alone does not hold: kwok sets a node it plays Ready again within a
second). After the quota file's short `nodeFailure.gracePeriod` the Job with a pod there is evicted for
NodeFailure without a checkpoint request, requeued, readmitted with `kuota.dev/resume-from` its last reported
checkpoint, and runs on another node; the ledger has the node and the GPU time lost. A node Ready again within the
grace period evicts nothing; a cordoned node keeps its pods.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from sqlalchemy import text

from admin.metrics import REGISTRY
from admission.labels import CHECKPOINT_COMPLETED_AT, CHECKPOINT_ID, RESUME_FROM, WORKLOAD_LABEL
from clusters.kube.cluster import KubeCluster
from tests.e2e.conftest import Rig, checkpoint_hook, eventually, own_control_plane, rig_on, running, suspended
from tests.kube.controlplane import ControlPlane

GPU = "nvidia.com/gpu"
GRACE_S = 4
KWOK = "kwok.x-k8s.io/node"

QUOTA = f"""apiVersion: kuota.dev/v1
kind: QuotaConfig
flavors:
  - name: pool-a
    nodeLabels: {{kuota.dev/pool: a}}
    tolerations: [{{key: dedicated, operator: Exists, effect: NoSchedule}}]
priorityClasses:
  - {{name: low, value: 100, default: true, checkpointTimeout: 30s}}
nodeFailure: {{gracePeriod: {GRACE_S}s}}
teams:
  - name: ml
    queues: [NAMESPACE/ml]
    quotas:
      - flavor: pool-a
        resources: {{cpu: {{nominal: 4}}, {GPU}: {{nominal: 16}}}}
"""


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own: its tests fail nodes."""
    yield from own_control_plane(tmp_path_factory.mktemp("nodes-cluster"))


@pytest.fixture
async def rig(plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Rig]:
    template = tmp_path / "quota-template.yaml"
    template.write_text(QUOTA)
    async for value in rig_on(plane, tmp_path, template=template):
        yield value


def _kubectl(plane: ControlPlane, *args: str) -> None:
    plane.kubectl(*args)


def _ready(status: str) -> str:
    # With its transition time, as the node lifecycle controller writes it: kuota counts the grace period from it.
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "Ready",
        "status": status,
        "reason": "KuotaTest",
        "message": "set by the test",
        "lastTransitionTime": now,
        "lastHeartbeatTime": now,
    }
    return json.dumps({"status": {"conditions": [condition]}})


async def fail_node(plane: ControlPlane, node: str) -> None:
    """The node's kubelet dies: kwok stops playing it, and it reports NotReady."""
    await asyncio.to_thread(_kubectl, plane, "annotate", "node", node, f"{KWOK}-")
    await asyncio.sleep(1.0)  # kwok forgets the node before its Ready condition changes (or it would set it back)
    await asyncio.to_thread(
        _kubectl, plane, "patch", "node", node, "--subresource=status", "--type=strategic", "-p", _ready("False")
    )


async def revive_node(plane: ControlPlane, node: str) -> None:
    """The kubelet is back: Ready again, and kwok plays it again."""
    await asyncio.to_thread(
        _kubectl, plane, "patch", "node", node, "--subresource=status", "--type=strategic", "-p", _ready("True")
    )
    await asyncio.to_thread(_kubectl, plane, "annotate", "--overwrite", "node", node, f"{KWOK}=fake")


async def node_ready(rig: Rig, node: str) -> bool:
    found = await client.CoreV1Api(rig.admin).read_node(node)
    return any(c.type == "Ready" and c.status == "True" for c in found.status.conditions or [])


async def bound_pods(rig: Rig, job: str) -> list[dict[str, Any]]:
    """The Job's pods bound to a node and not being deleted."""
    return [
        p
        for p in await rig.pods(job)
        if p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
        and p["status"].get("phase") == "Running"
    ]


async def kube_cluster(component: Any) -> KubeCluster:
    """The leader's Kubernetes cluster, once this controller leads."""
    controller = await eventually(lambda: component.runtime.controller, what="kuota leads")
    cluster = controller.cluster
    assert isinstance(cluster, KubeCluster) and cluster.nodes is not None
    return cluster


async def test_the_inventory_follows_the_real_nodes_and_the_pods_bound_to_them(rig: Rig) -> None:
    component = await rig.controller()
    cluster = await kube_cluster(component)
    await rig.create_job("train", gpus=1, parallelism=3, completions=3)
    await rig.wait_job("train", running, "admitted")
    pods = await eventually(lambda: _all_bound(rig, "train", 3), timeout_s=30, what="three pods bound and running")
    # Every pod kuota let run carries its workload's label.
    assert {p["metadata"]["labels"][WORKLOAD_LABEL] for p in pods} == {_label(f"Job/{rig.namespace}/train")}
    inventory = cluster.node_inventory()
    assert inventory is not None
    nodes = await client.CoreV1Api(rig.admin).list_node()
    assert sorted(n.name for n in inventory) == sorted(n.metadata.name for n in nodes.items)
    everywhere = await client.CoreV1Api(rig.admin).list_pod_for_all_namespaces(field_selector="spec.nodeName!=")

    async def as_the_api_says() -> bool:
        for item in nodes.items:
            name = item.metadata.name
            gpus = sum(
                int((c.resources.requests or {}).get(GPU, 0))
                for p in everywhere.items
                if p.spec.node_name == name and p.status.phase not in ("Succeeded", "Failed")
                for c in p.spec.containers
            )
            state = inventory.node(name)
            if state is None or inventory.free(name).get(GPU) != (8 - gpus) * 1000 or not state.schedulable:
                return False
        return True

    await eventually(as_the_api_says, what="free GPUs per node as the API server's pods say")
    state = inventory.node(pods[0]["spec"]["nodeName"])
    assert state is not None
    assert state.allocatable[GPU] == 8_000 and state.allocatable["cpu"] == 96_000
    assert state.labels["kuota.dev/pool"] == "a" and "topology.kuota.dev/rack" in state.labels
    assert [t.key for t in state.taints] == ["dedicated"]


async def test_a_failed_node_evicts_its_job_which_resumes_from_its_checkpoint_on_another_node(
    rig: Rig, plane: ControlPlane
) -> None:
    before = _evictions()
    async with checkpoint_hook("never-asked") as (url, calls):
        component = await rig.controller()
        cluster = await kube_cluster(component)
        controller = component.runtime.controller
        assert controller is not None
        await rig.create_job("train", gpus=2, annotations={"kuota.dev/checkpoint-url": url})
        await rig.wait_job("train", running, "admitted")
        [pod] = await eventually(lambda: _all_bound(rig, "train", 1), timeout_s=30, what="its pod bound, running")
        node = pod["spec"]["nodeName"]
        key = f"Job/{rig.namespace}/train"
        assert cluster.workloads_on(node) == {key}

        # The job checkpoints on its own (as a training loop does every N steps) and says so on the Job.
        await rig.batch.patch_namespaced_job(
            "train",
            rig.namespace,
            {"metadata": {"annotations": {CHECKPOINT_COMPLETED_AT: "2026-12-01T06:00:00Z", CHECKPOINT_ID: "ckpt-7"}}},
        )
        await eventually(lambda: controller.tracking[key].resume_from == "ckpt-7", what="the checkpoint reported")

        await asyncio.to_thread(_kubectl, plane, "annotate", "node", node, f"{KWOK}-")
        failed_at = asyncio.get_running_loop().time()
        await fail_node(plane, node)
        inventory = cluster.node_inventory()
        assert inventory is not None
        await eventually(lambda: not inventory.node(node).schedulable, what="the node out of placement")  # type: ignore[union-attr]
        # Evicted after the grace period, stopped without a checkpoint request, requeued and admitted again to
        # resume from its checkpoint, on another node.
        await rig.wait_job(
            "train",
            lambda j: j["metadata"]["annotations"].get(RESUME_FROM) == "ckpt-7",
            "readmitted from its checkpoint",
            timeout_s=40,
        )
        # Not before the grace period (the transition time has whole seconds: up to one second early).
        assert asyncio.get_running_loop().time() - failed_at >= GRACE_S - 1

        assert calls == [], "no checkpoint is asked of a node that is gone"
        assert running(await rig.job("train"))
        [moved] = await eventually(lambda: _all_bound(rig, "train", 1), timeout_s=40, what="its new pod running")
        assert moved["spec"]["nodeName"] != node
        assert controller.tracking[key].attempt == 2
        await eventually(lambda: _told(rig, "train", node), what="an Evicted Event naming the node")
        assert _evictions() == before + 1, "the metric counts it"

    runtime = component.runtime
    assert runtime.ledger is not None
    await runtime.ledger.flush()
    async with runtime.ledger.engine.connect() as connection:
        rows = (
            await connection.execute(
                text(
                    "SELECT victim, preemptor, reason, node, lost_gpu_milliseconds, checkpoint_requested_at "
                    "FROM preemptions"
                )
            )
        ).all()
    [(victim, preemptor, reason, lost_on, lost, asked)] = rows
    assert (victim, preemptor, reason, lost_on, asked) == (key, None, "NodeFailure", node, None)
    # 2 GPUs from the reported checkpoint to the suspension, which came at least a grace period after the failure.
    assert lost >= 2 * GRACE_S * 1000
    await revive_node(plane, node)
    await eventually(lambda: node_ready(rig, node), what=f"{node} back")


async def test_a_node_back_within_the_grace_period_evicts_nothing(rig: Rig, plane: ControlPlane) -> None:
    component = await rig.controller()
    controller = (await kube_cluster(component)).controller
    assert controller is not None
    await rig.create_job("train", gpus=1)
    await rig.wait_job("train", running, "admitted")
    [pod] = await eventually(lambda: _all_bound(rig, "train", 1), timeout_s=30, what="its pod bound, running")
    node = pod["spec"]["nodeName"]
    await fail_node(plane, node)
    await eventually(lambda: node in controller.failing_nodes, what="kuota saw the node fail")
    await revive_node(plane, node)
    await eventually(lambda: node not in controller.failing_nodes, what="kuota saw it back")
    await asyncio.sleep(GRACE_S + 2)
    assert running(await rig.job("train"))
    [same] = await _all_bound(rig, "train", 1) or [None]
    assert same is not None and same["metadata"]["uid"] == pod["metadata"]["uid"]
    assert controller.tracking[f"Job/{rig.namespace}/train"].attempt == 1
    assert "Evicted" not in await rig.reasons("train")


async def test_a_cordoned_node_keeps_its_pods_and_takes_no_new_placement(rig: Rig, plane: ControlPlane) -> None:
    component = await rig.controller()
    cluster = await kube_cluster(component)
    await rig.create_job("train", gpus=1)
    await rig.wait_job("train", running, "admitted")
    [pod] = await eventually(lambda: _all_bound(rig, "train", 1), timeout_s=30, what="its pod bound, running")
    node = pod["spec"]["nodeName"]
    await asyncio.to_thread(_kubectl, plane, "cordon", node)
    try:
        inventory = cluster.node_inventory()
        assert inventory is not None
        await eventually(lambda: inventory.node(node).unschedulable, what="kuota saw the cordon")  # type: ignore[union-attr]
        state = inventory.node(node)
        assert state is not None and state.ready and not state.schedulable
        await asyncio.sleep(GRACE_S + 2)
        assert running(await rig.job("train")) and not suspended(await rig.job("train"))
        [same] = await _all_bound(rig, "train", 1) or [None]
        assert same is not None and same["metadata"]["uid"] == pod["metadata"]["uid"]
        assert "Evicted" not in await rig.reasons("train")
    finally:
        await asyncio.to_thread(_kubectl, plane, "uncordon", node)


async def _all_bound(rig: Rig, job: str, count: int) -> list[dict[str, Any]] | None:
    pods = await bound_pods(rig, job)
    return pods if len(pods) == count else None


async def _told(rig: Rig, job: str, node: str) -> bool:
    events = await client.CoreV1Api(rig.admin).list_namespaced_event(rig.namespace)
    return any(
        e.reason == "Evicted" and e.involved_object.name == job and node in (e.message or "") for e in events.items
    )


def _evictions() -> float:
    """kuota_node_failure_evictions_total for the team, as /metrics serves it."""
    return REGISTRY.get_sample_value("kuota_node_failure_evictions_total", {"team": "ml"}) or 0.0


def _label(key: str) -> str:
    from admission.labels import workload_label_value

    return workload_label_value(key)
