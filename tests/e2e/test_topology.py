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
import copy
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from sqlalchemy import create_engine, text

from admission.labels import (
    PLACED_POD_SET,
    SCHEDULING_GATE,
    TOPOLOGY_ASSIGNMENT,
    TOPOLOGY_REQUIRED,
    WORKLOAD_LABEL,
    workload_label_value,
)
from clusters.kube.cluster import KubeCluster
from clusters.kube.inventory import LiveInventory
from clusters.kube.topology_assignment import decode
from kuota.kind_manifests import widen_rbac
from tests.e2e.conftest import (
    DEPLOY,
    Rig,
    alice_may_use_the_kinds,
    eventually,
    own_control_plane,
    rig_on,
    running,
    suspended,
)
from tests.kube.controlplane import ControlPlane
from tests.kube.kinds import CRD_FILES, CRDS, Operator
from tests.kube.manifests import Obj
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


async def kinds_rig(plane: ControlPlane, tmp_path: Path, kinds: list[str], *extra: Obj) -> AsyncIterator[Rig]:
    """The rig with `kinds` enabled: kuota's webhooks registered for them and its ClusterRole widened as `kuota
    manifests --kinds` makes it, with `extra` objects applied too (config/deploy's role put back afterwards)."""
    shipped = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    await asyncio.to_thread(plane.apply, [*extra, *widen_rbac(shipped, REGISTRY.enabled(kinds))])
    template = tmp_path / "quota-template.yaml"
    template.write_text(QUOTA)
    try:
        async for value in rig_on(plane, tmp_path, template=template, kinds=kinds):
            yield value
    finally:
        await asyncio.to_thread(plane.apply, shipped)


@pytest.fixture
async def pods_rig(plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Rig]:
    """The same, with plain pods and pod groups enabled (and so kuota's pod webhooks)."""
    async for value in kinds_rig(plane, tmp_path, ["Job", "Pod"]):
        yield value


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

    component, cluster = await leading_beside_a_tenant(
        rig, "gpu-node-004"
    )  # rack-001 keeps 3 free nodes; rack-000 has 4
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


# -- kinds with pod templates, placed pod by pod ----------------------------------------------------------------------


async def cluster_empty(rig: Rig) -> None:
    """Wait until no pod or Job of an earlier test is left: earlier tests' namespaces are deleted asynchronously, and
    their pods would change which rack is tightest (a new leader would also bind an earlier Job's placement)."""

    async def empty() -> bool:
        bound = await client.CoreV1Api(rig.admin).list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
        jobs = await client.BatchV1Api(rig.admin).list_job_for_all_namespaces()
        return not [p for p in bound.items if p.metadata.namespace != "kube-system"] and not jobs.items

    await eventually(empty, timeout_s=120, what="no pod or Job of an earlier test left on the cluster")


async def leading_beside_a_tenant(rig: Rig, node: str) -> tuple[Any, KubeCluster]:
    """On a cluster left empty by earlier tests, kuota leading and another tenant's pod on `node`, counted in kuota's
    inventory (the rack choice depends on it)."""
    await cluster_empty(rig)
    component = await rig.controller()
    cluster = await kube_cluster(component)
    await tenant_pod(rig, node)

    def counted() -> bool:
        inventory = cluster.node_inventory()
        return inventory is not None and inventory.free(node).get(GPU) == 0

    await eventually(counted, timeout_s=30, what=f"kuota's inventory counting the tenant's pod on {node}")
    return component, cluster


def per_node(pods: list[Obj]) -> dict[str, int]:
    out: dict[str, int] = {}
    for pod in pods:
        out[pod["spec"]["nodeName"]] = out.get(pod["spec"]["nodeName"], 0) + 1
    return out


async def running_pods(list_pods: Any, count: int, what: str) -> list[Obj]:
    """The `count` pods `list_pods()` returns once all are bound, running and not being deleted."""

    async def found() -> list[Obj] | None:
        pods = [
            p
            for p in await list_pods()
            if p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") == "Running"
        ]
        return pods if len(pods) == count else None

    pods: list[Obj] = await eventually(found, timeout_s=60, what=what)
    return pods


def two_full_nodes(component: Any, key: str, pod_set: str, rack: str) -> Mapping[str, int]:
    """The nodes kuota counted a pod set of four half-node pods on: two full nodes of `rack`, the tightest."""
    admission = component.runtime.controller.manager.workloads[key].admission
    assert admission is not None
    counted: Mapping[str, int] = admission.placement[pod_set]
    assert sorted(counted.values()) == [2, 2] and {RACK_OF[n] for n in counted} == {rack}, counted
    return counted


def assert_on_the_counted_nodes(pods: list[Obj], counted: Mapping[str, int], cluster: KubeCluster) -> None:
    """Each pod runs on the node kuota counted it on, pinned there by its hostname and to its rack; kuota's view of
    each node is what the scheduler did."""
    assert per_node(pods) == dict(counted), "every pod on a node kuota counted it on, as many as counted there"
    for pod in pods:
        selector = pod["spec"]["nodeSelector"]
        assert selector["kubernetes.io/hostname"] == pod["spec"]["nodeName"]
        assert selector[RACK] == RACK_OF[pod["spec"]["nodeName"]]
        assert not pod["spec"].get("schedulingGates"), "let go"
    inventory = cluster.node_inventory()
    assert inventory is not None
    for node, there in counted.items():
        assert inventory.free(node)[GPU] == 8_000 - 4_000 * there, "kuota's view is the scheduler's"


async def test_a_job_whose_pods_spread_over_hosts_lands_on_the_counted_nodes_and_a_replacement_where_room_is(
    rig: Rig,
) -> None:
    component, cluster = await leading_beside_a_tenant(
        rig, "gpu-node-004"
    )  # rack-001 keeps 3 free nodes; rack-000 has 4
    # Four half-node pods in one rack: kube-scheduler alone would spread them over the rack's emptiest nodes
    # (three or four of them); kuota counts two full nodes of the tightest rack, and its gate makes it so.
    body = rig.manifest("spread", gpus=4, parallelism=4, completions=4, annotations={TOPOLOGY_REQUIRED: RACK})
    body["spec"]["backoffLimit"] = 4  # a pod lost is made again
    await rig.batch.create_namespaced_job(rig.namespace, body)
    job = await rig.wait_job("spread", running, "admitted", timeout_s=40)
    template = job["spec"]["template"]
    assert {"name": SCHEDULING_GATE} in template["spec"]["schedulingGates"], "admitted behind kuota's gate"
    assert template["metadata"]["labels"][PLACED_POD_SET] == "main"

    pods = await running_pods(lambda: rig.pods("spread"), 4, "spread: four pods let go, bound and running")
    counted = two_full_nodes(component, f"Job/{rig.namespace}/spread", "main", "rack-001")
    assert "gpu-node-004" not in counted
    assert_on_the_counted_nodes(pods, counted, cluster)

    # A pod is lost: the Job controller makes another from the template (gated), and kuota lets it go where the
    # lost one left room, never onto a node of the rack the placement did not count.
    lost = next(p for p in pods if p["spec"]["nodeName"] == min(counted))
    await client.CoreV1Api(rig.admin).delete_namespaced_pod(
        lost["metadata"]["name"], rig.namespace, grace_period_seconds=0
    )
    again = await running_pods(lambda: rig.pods("spread"), 4, "spread: the lost pod made again, let go and running")
    [replacement] = [p for p in again if p["metadata"]["uid"] not in {q["metadata"]["uid"] for q in pods}]
    assert replacement["spec"]["nodeName"] == lost["spec"]["nodeName"]
    assert_on_the_counted_nodes(again, counted, cluster)


@pytest.fixture
async def jobset_rig(plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Rig]:
    """The same quota file with JobSets enabled: JobSet's upstream CRD and alice's rights on it."""
    await asyncio.to_thread(plane.install_crds, [CRDS / CRD_FILES["JobSet"]])
    async for value in kinds_rig(plane, tmp_path, ["Job", "JobSet"], alice_may_use_the_kinds()):
        yield value


def jobset(name: str, namespace: str) -> Obj:
    """alice's JobSet: two child Jobs of two half-node pods each, one pod set of four that must share a rack."""
    pod = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/train:1",
                "resources": {"requests": {"cpu": "1", GPU: "4"}, "limits": {GPU: "4"}},
            }
        ],
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kuota.dev/queue": "ml"},
            "annotations": {TOPOLOGY_REQUIRED: RACK},
        },
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 2, "completions": 2, "template": {"spec": pod}}},
                }
            ]
        },
    }


async def test_a_jobset_whose_pods_spread_over_hosts_lands_on_the_counted_nodes(jobset_rig: Rig) -> None:
    rig = jobset_rig
    component, cluster = await leading_beside_a_tenant(
        rig, "gpu-node-000"
    )  # rack-000 keeps 3 free nodes; rack-001 has 4
    job_kind = REGISTRY.get("JobSet")
    assert job_kind is not None
    await rig.create(jobset("train", rig.namespace))
    admitted = await rig.wait("JobSet", "train", lambda o: not job_kind.is_suspended(o), "admitted", timeout_s=40)
    [template] = job_kind.read_templates(admitted)
    assert {"name": SCHEDULING_GATE} in template.spec["schedulingGates"]

    # The test plays the JobSet controller: the pods made from the template as admitted, gated.
    operator = Operator(rig.admin, rig.namespace)
    await operator.start("JobSet", admitted)
    pods = await running_pods(lambda: operator.pods("train"), 4, "train: four pods let go, bound and running")
    counted = two_full_nodes(component, f"JobSet/{rig.namespace}/train", "workers", "rack-000")
    assert_on_the_counted_nodes(pods, counted, cluster)

    # One pod lost and made again by the operator: it goes where the lost one left room.
    lost = next(p for p in pods if p["spec"]["nodeName"] == max(counted))
    core = client.CoreV1Api(rig.admin)
    await core.delete_namespaced_pod(lost["metadata"]["name"], rig.namespace, grace_period_seconds=0)
    await eventually(lambda: _pod_gone(rig, lost["metadata"]["name"]), timeout_s=30, what="the lost pod gone")
    index = int(lost["metadata"]["name"].rsplit("-", 1)[1])
    await core.create_namespaced_pod(
        rig.namespace, operator.pod(admitted, template, index, operator.owner("JobSet", admitted))
    )
    again = await running_pods(lambda: operator.pods("train"), 4, "train: the lost pod made again and running")
    replacement = next(p for p in again if p["metadata"]["name"] == lost["metadata"]["name"])
    assert replacement["spec"]["nodeName"] == lost["spec"]["nodeName"]
    assert_on_the_counted_nodes(again, counted, cluster)


async def test_without_patch_on_pods_a_placed_gang_stays_gated_and_runs_once_it_is_back(rig: Rig) -> None:
    """The verb the shipped ClusterRole grants for this is used: taken away, kube-apiserver refuses kuota's ungate
    patches and the pods wait behind the gate; given back, the same process lets them go."""
    await cluster_empty(rig)
    shipped = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    bare = copy.deepcopy(shipped)
    for document in bare:
        if document.get("kind") == "ClusterRole":
            for rule in document["rules"]:
                if rule["resources"] == ["pods"]:
                    rule["verbs"] = [v for v in rule["verbs"] if v != "patch"]
    await asyncio.to_thread(rig.plane.apply, bare)
    try:
        await asyncio.sleep(1.0)  # the RBAC authorizer's caches follow the change
        proxy = await rig.proxy()
        await rig.controller(via=proxy)
        await gang(rig, "held", 2)
        await rig.wait_job("held", running, "admitted", timeout_s=40)
        await eventually(
            lambda: proxy.answered["patch", "pods", 403] > 0, timeout_s=30, what="kuota's ungate patch refused"
        )
        pods = await rig.pods("held")
        assert len(pods) == 2 and all(p["spec"].get("schedulingGates") and not p["spec"].get("nodeName") for p in pods)
    finally:
        await asyncio.to_thread(rig.plane.apply, shipped)
    await nodes_of(rig, "held", 2)
