"""Topology placement on the real control plane: eight kwok GPU nodes (8 GPUs each) in two racks of four
(`topology.kuota.dev/rack` rack-000: gpu-node-000..003, rack-001: gpu-node-004..007, one block), a flavor placed
by the topology block → rack → host, and gangs of whole-node pods that ask for one rack.

What is checked is what kube-apiserver and the scheduler did: the rack of the node each pod is bound to, the
Job's pod template (its nodeSelector pins the rack), the `kuota.dev/topology-assignment` annotation, which Jobs
were suspended, and the ledger. A pod that is not kuota's (another tenant's, bound by name) takes a node that
kuota must count.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from sqlalchemy import create_engine, text

from admission.labels import TOPOLOGY_ASSIGNMENT, TOPOLOGY_REQUIRED, WORKLOAD_LABEL, workload_label_value
from clusters.kube.cluster import KubeCluster
from clusters.kube.inventory import LiveInventory
from clusters.kube.topology_assignment import decode
from kuota.kind_manifests import widen_rbac
from tests.e2e.conftest import DEPLOY, Rig, eventually, own_control_plane, rig_on, running, suspended
from tests.kube.controlplane import ControlPlane
from workloads.registry import REGISTRY

GPU = "nvidia.com/gpu"
RACK = "topology.kuota.dev/rack"
RACK_OF = {f"gpu-node-{i:03d}": f"rack-{i // 4:03d}" for i in range(8)}

QUOTA = f"""apiVersion: kuota.dev/v1
kind: QuotaConfig
topologies:
  - name: fabric
    levels: [topology.kuota.dev/block, {RACK}, kubernetes.io/hostname]
flavors:
  - name: pool-a
    nodeLabels: {{kuota.dev/pool: a}}
    tolerations: [{{key: dedicated, operator: Exists, effect: NoSchedule}}]
    topology: fabric
priorityClasses:
  - {{name: low, value: 100, default: true, checkpointTimeout: 1500ms}}
  - {{name: high, value: 1000}}
teams:
  - name: ml
    queues: [NAMESPACE/ml]
    preemption: {{withinTeam: LowerPriority}}
    quotas:
      - flavor: pool-a
        resources: {{cpu: {{nominal: 16}}, {GPU}: {{nominal: 80}}}}
"""


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """Eight nodes, two racks: more than the shared control plane's four."""
    yield from own_control_plane(tmp_path_factory.mktemp("topology-cluster"), nodes=8)


@pytest.fixture
async def rig(plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Rig]:
    template = tmp_path / "quota-template.yaml"
    template.write_text(QUOTA)
    async for value in rig_on(plane, tmp_path, template=template):
        yield value


@pytest.fixture
async def pods_rig(plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Rig]:
    """The same, with plain pods and pod groups enabled: kuota's pod webhooks registered and its ClusterRole widened
    as `kuota manifests --kinds Job,Pod` makes them (config/deploy's role put back afterwards)."""
    shipped = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    await asyncio.to_thread(plane.apply, widen_rbac(shipped, REGISTRY.enabled(["Job", "Pod"])))
    template = tmp_path / "quota-template.yaml"
    template.write_text(QUOTA)
    try:
        async for value in rig_on(plane, tmp_path, template=template, kinds=["Job", "Pod"]):
            yield value
    finally:
        await asyncio.to_thread(plane.apply, shipped)


async def gang(rig: Rig, name: str, pods: int, *, priority: str | None = None, rack: bool = True) -> None:
    """A Job of `pods` whole-node pods (8 GPUs each), all at once; with `rack`, every pod inside one rack."""
    labels = {"kuota.dev/priority-class": priority} if priority else {}
    annotations = {TOPOLOGY_REQUIRED: RACK} if rack else {}
    await rig.create_job(name, gpus=8, parallelism=pods, completions=pods, labels=labels, annotations=annotations)


async def tenant_pod(rig: Rig, node: str) -> None:
    """Another tenant's pod, bound to `node` by name (kuota never sees it queued): it holds all 8 GPUs."""
    body = {
        "metadata": {"name": f"tenant-{node}", "namespace": rig.namespace},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/serve:1",
                    "resources": {"requests": {GPU: "8", "cpu": "1"}, "limits": {GPU: "8"}},
                }
            ],
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    await client.CoreV1Api(rig.admin).create_namespaced_pod(rig.namespace, body)
    await eventually(lambda: _pod_running(rig, f"tenant-{node}"), timeout_s=30, what=f"the tenant's pod on {node}")


async def _pod_running(rig: Rig, name: str) -> bool:
    found = await client.CoreV1Api(rig.admin).read_namespaced_pod(name, rig.namespace)
    return bool(found.status.phase == "Running")


async def nodes_of(rig: Rig, job: str, count: int) -> list[str]:
    """The nodes of the Job's `count` pods once all are bound and running (not being deleted)."""

    async def bound() -> list[str] | None:
        pods = [
            p
            for p in await rig.pods(job)
            if p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") == "Running"
        ]
        return sorted(p["spec"]["nodeName"] for p in pods) if len(pods) == count else None

    found: list[str] = await eventually(bound, timeout_s=40, what=f"{job}: {count} pods bound and running")
    return found


async def kube_cluster(component: Any) -> KubeCluster:
    controller = await eventually(lambda: component.runtime.controller, what="kuota leads")
    cluster = controller.cluster
    assert isinstance(cluster, KubeCluster) and isinstance(cluster.node_inventory(), LiveInventory)
    return cluster


def pinned_rack(job: dict[str, Any]) -> str | None:
    selector = job["spec"]["template"]["spec"].get("nodeSelector") or {}
    return selector.get(RACK)  # type: ignore[no-any-return]


async def test_a_gang_lands_in_one_rack_and_one_that_fits_the_quota_but_no_rack_waits(rig: Rig) -> None:
    component = await rig.controller()
    cluster = await kube_cluster(component)
    await tenant_pod(rig, "gpu-node-001")  # rack-000 keeps 3 free nodes, rack-001 all 4

    await gang(rig, "first", 4)
    job = await rig.wait_job("first", running, "admitted")
    nodes = await nodes_of(rig, "first", 4)
    assert {RACK_OF[n] for n in nodes} == {"rack-001"}, f"every pod in one rack: {nodes}"
    assert pinned_rack(job) == "rack-001"
    assert job["spec"]["template"]["spec"]["nodeSelector"]["kuota.dev/pool"] == "a", "the flavor's label stays"
    [(pod_set, recorded)] = decode(job["metadata"]["annotations"][TOPOLOGY_ASSIGNMENT]).items()
    assert pod_set == "main" and recorded.pinned
    assert (recorded.placement.level, recorded.placement.domain) == (RACK, "rack-001")
    assert sum(recorded.placement.nodes.values()) == 4 and set(recorded.placement.nodes) <= set(RACK_OF)

    # 4 more whole nodes fit the quota (32 + 32 of 80 GPUs), and 4 nodes are free, but no rack has 4.
    await gang(rig, "second", 4)
    key = f"Job/{rig.namespace}/second"
    controller = component.runtime.controller
    message = await eventually(
        lambda: "rack" in controller.manager.messages.get(key, "") and controller.manager.messages[key],
        what="second: the reason it waits",
    )
    assert f"no {RACK} domain" in message and "room for 4 pods" in message, message
    await asyncio.sleep(2)
    assert suspended(await rig.job("second")), "it waits, suspended"

    # The tenant's pod goes: its node's room is told, the waiting gang looks again and takes rack-000.
    await client.CoreV1Api(rig.admin).delete_namespaced_pod(
        "tenant-gpu-node-001", rig.namespace, grace_period_seconds=0
    )
    await rig.wait_job("second", running, "admitted once rack-000 has room", timeout_s=40)
    assert {RACK_OF[n] for n in await nodes_of(rig, "second", 4)} == {"rack-000"}
    inventory = cluster.node_inventory()
    assert inventory is not None
    for name in RACK_OF:
        # Every node full, each counted once: by a placement, never by the pods of a placed workload too.
        assert inventory.free(name).get(GPU) == 0, (name, inventory.owners_on(name))
        assert inventory.owners_on(name) <= {f"Job/{rig.namespace}/first", key}, inventory.owners_on(name)


async def test_a_high_priority_gang_frees_one_rack_and_lands_there(rig: Rig) -> None:
    component = await rig.controller()
    await kube_cluster(component)
    await tenant_pod(rig, "gpu-node-000")
    await gang(rig, "low-gang", 4)
    await rig.wait_job("low-gang", running, "admitted")
    low_nodes = await nodes_of(rig, "low-gang", 4)
    assert {RACK_OF[n] for n in low_nodes} == {"rack-001"}
    await gang(rig, "low-single", 1, rack=False)
    await rig.wait_job("low-single", running, "admitted")
    [single_node] = await nodes_of(rig, "low-single", 1)
    assert RACK_OF[single_node] == "rack-000", "the tightest room left"

    # Quota fits (40 + 32 of 80 GPUs); no rack has 4 free nodes. Evicting low-single leaves rack-000 with 3 (the
    # tenant's pod is no candidate): only rack-001 can be freed, by evicting low-gang, all of whose pods are there.
    await gang(rig, "urgent", 4, priority="high")
    await rig.wait_job("low-gang", suspended, "preempted (checkpoint timed out, then suspended)", timeout_s=30)
    job = await rig.wait_job("urgent", running, "admitted once rack-001 is free", timeout_s=60)
    assert {RACK_OF[n] for n in await nodes_of(rig, "urgent", 4)} == {"rack-001"}
    assert pinned_rack(job) == "rack-001"
    assert running(await rig.job("low-single")) and await nodes_of(rig, "low-single", 1) == [single_node]
    assert "Preempted" in await rig.reasons("low-gang") and "Preempted" not in await rig.reasons("low-single")
    # Requeued without the rack it was pinned to: it waits for any rack, not for rack-001.
    requeued = await rig.job("low-gang")
    assert pinned_rack(requeued) == "rack-001", "the template keeps the old pin while suspended"
    controller = component.runtime.controller
    workload = controller.manager.workloads[f"Job/{rig.namespace}/low-gang"]
    assert RACK not in workload.pod_sets[0].node_selector, "the engine no longer sees the stale pin"


def serve(rig: Rig, name: str) -> subprocess.Popen[bytes]:
    """`kuota serve` as a process of its own (the code under test: PYTHONPATH is passed on)."""
    kubeconfig = rig.kuota_kubeconfig(name=name)
    argv = [
        str(Path(sys.executable).with_name("kuota")), "serve", "--components", "controller",
        "--config", str(rig.quota), "--kubeconfig", str(kubeconfig), "--database-url", rig.database_url,
        "--lease-duration", "2", "--requeue-backoff", "1s",
    ]  # fmt: skip
    log = (rig.tmp / f"{name}.log").open("wb")
    env = {**os.environ, "POD_NAME": name, "POD_NAMESPACE": "kuota-system"}
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


async def test_the_placement_survives_a_restart_and_nothing_is_placed_twice(rig: Rig) -> None:
    first = serve(rig, "kuota-a")
    try:
        await gang(rig, "kept", 4)
        job = await rig.wait_job("kept", running, "admitted by the first process", timeout_s=40)
        nodes = await nodes_of(rig, "kept", 4)
        rack = pinned_rack(job)
        assert rack is not None and {RACK_OF[n] for n in nodes} == {rack}
        recorded = decode(job["metadata"]["annotations"][TOPOLOGY_ASSIGNMENT])["main"].placement
    finally:
        first.send_signal(signal.SIGKILL)  # no Lease release, no flush: a crash
        first.wait()
    pods_before = {p["metadata"]["uid"] for p in await rig.pods("kept")}

    # A second kuota takes the expired Lease and rebuilds everything from the cluster and the ledger.
    component = await rig.controller()
    cluster = await kube_cluster(component)
    controller = component.runtime.controller
    key = f"Job/{rig.namespace}/kept"
    admission = controller.manager.workloads[key].admission
    assert admission is not None and admission.placement == {"main": dict(recorded.nodes)}
    inventory = cluster.node_inventory()
    assert inventory is not None
    assert inventory.nodes_of(key) == set(recorded.nodes), "bound under its name where the annotation says"
    label = workload_label_value(key)
    alone = [k for k in cluster.nodes.pods if cluster.nodes.pods[k].workload == label]  # type: ignore[union-attr]
    assert len(alone) == 4 and not any(inventory.counted_alone(k) for k in alone), "its pods are not counted twice"

    # The other rack takes the next gang; the first one's pods never moved and it was admitted once.
    await gang(rig, "next", 4)
    await rig.wait_job("next", running, "admitted by the second process", timeout_s=40)
    other = {RACK_OF[n] for n in await nodes_of(rig, "next", 4)}
    assert other == {"rack-000", "rack-001"} - {rack}
    assert {p["metadata"]["uid"] for p in await rig.pods("kept")} == pods_before
    assert all(p["metadata"]["labels"][WORKLOAD_LABEL] == label for p in await rig.pods("kept"))
    assert running(await rig.job("kept"))
    engine = create_engine(rig.database_url.replace("+aiosqlite", ""))
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT attempt FROM admissions WHERE workload_id = :w"), {"w": key}).all()
    engine.dispose()
    assert [r.attempt for r in rows] == [1], "admitted once, by the first process"


def group_pod(name: str, *, gpus: int) -> dict[str, Any]:
    """One pod of alice's pod group `train` of four, asking for one rack."""
    return {
        "metadata": {
            "name": name,
            "labels": {"kuota.dev/queue": "ml", "kuota.dev/pod-group": "train"},
            "annotations": {"kuota.dev/pod-group-total-count": "4", TOPOLOGY_REQUIRED: RACK},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/train:1",
                    "resources": {"requests": {"cpu": "1", GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
                }
            ],
        },
    }


async def test_a_pod_group_is_let_go_pod_by_pod_onto_the_nodes_kuota_counted(pods_rig: Rig) -> None:
    rig = pods_rig

    async def nodes_empty() -> bool:
        # Earlier tests' namespaces are deleted asynchronously; their pods would change which rack is tightest.
        # A new leader would also bind the placement recorded on an earlier test's Job that is still there.
        bound = await client.CoreV1Api(rig.admin).list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
        jobs = await client.BatchV1Api(rig.admin).list_job_for_all_namespaces()
        return not [p for p in bound.items if p.metadata.namespace != "kube-system"] and not jobs.items

    await eventually(nodes_empty, timeout_s=120, what="no pod or Job of an earlier test left on the cluster")
    component = await rig.controller()
    cluster = await kube_cluster(component)
    await tenant_pod(rig, "gpu-node-004")  # rack-001 keeps 3 free nodes; rack-000 has 4

    def tenant_counted() -> bool:
        inventory = cluster.node_inventory()
        return inventory is not None and inventory.free("gpu-node-004").get(GPU) == 0

    # The pod runs before kuota's watch may have delivered it on a loaded machine: the rack choice below needs it.
    await eventually(tenant_counted, timeout_s=30, what="kuota's inventory counting the tenant's pod")
    core = client.CoreV1Api(rig.user)
    # Half-node pods: the scheduler alone could spread them over four nodes of the rack; kuota counted two nodes.
    for index in range(4):
        await core.create_namespaced_pod(rig.namespace, group_pod(f"train-{index}", gpus=4))
    key = f"PodGroup/{rig.namespace}/train"

    async def all_running() -> list[Any] | None:
        found = (
            await client.CoreV1Api(rig.admin).list_namespaced_pod(
                rig.namespace, label_selector="kuota.dev/pod-group=train"
            )
        ).items
        return found if len(found) == 4 and all(p.status.phase == "Running" for p in found) else None

    pods = await eventually(all_running, timeout_s=40, what="the group's four pods let go and running")
    admission = component.runtime.controller.manager.workloads[key].admission
    assert admission is not None
    [counted] = admission.placement.values()
    ran_on: dict[str, int] = {}
    for pod in pods:
        ran_on[pod.spec.node_name] = ran_on.get(pod.spec.node_name, 0) + 1
    assert ran_on == dict(counted), "every pod on the node kuota counted it on"
    for pod in pods:
        # Pinned to the rack and to its node, as the placement counted it.
        assert pod.spec.node_selector.get("kubernetes.io/hostname") == pod.spec.node_name
        assert pod.spec.node_selector[RACK] == RACK_OF[pod.spec.node_name]
    # The tightest rack that holds them (rack-001: room for 6 such pods beside the tenant's, rack-000 for 8), two
    # nodes of it full rather than four half-used.
    assert {RACK_OF[n] for n in ran_on} == {"rack-001"} and "gpu-node-004" not in ran_on
    assert sorted(ran_on.values()) == [2, 2]
    inventory = cluster.node_inventory()
    assert inventory is not None
    for node, pods_there in ran_on.items():
        assert inventory.free(node)[GPU] == 8_000 - 4_000 * pods_there, "kuota's view is the scheduler's"
    # A pod of the group fails and is replaced (as a group's owner would): the new one goes where the old one was.
    gone = next(p for p in pods if p.metadata.name == "train-3")
    await client.CoreV1Api(rig.admin).delete_namespaced_pod("train-3", rig.namespace, grace_period_seconds=0)
    await eventually(lambda: _pod_gone(rig, "train-3"), timeout_s=30, what="train-3 gone")
    await core.create_namespaced_pod(rig.namespace, group_pod("train-3", gpus=4))
    await eventually(lambda: _pod_running(rig, "train-3"), timeout_s=30, what="the replacement let go and running")
    again = await client.CoreV1Api(rig.admin).read_namespaced_pod("train-3", rig.namespace)
    assert again.spec.node_name == gone.spec.node_name


async def _pod_gone(rig: Rig, name: str) -> bool:
    found = await client.CoreV1Api(rig.admin).list_namespaced_pod(rig.namespace, field_selector=f"metadata.name={name}")
    return not found.items
