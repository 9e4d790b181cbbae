"""The kinds with no suspend switch, held pod by pod behind kuota's scheduling gate, on the real control plane.

LeaderWorkerSet (its upstream CRD and `lws.yaml` example, ../shared/data/crds/leaderworkerset): kuota's webhook
writes the queue on the set's pod templates; the test plays the LeaderWorkerSet controller and creates each
group's pods from the template with the controller's labels; kube-apiserver sends those pods (they name a queue)
to kuota's pod webhook, which creates them gated; each group is one gang workload, and kuota lets a group's pods go
(gate removed, the flavor's node selector and toleration added) only when the whole group fits. Plain pods and pod
groups: alice's pods that name a queue are gated the same way; a group of N pods is admitted only once all N exist,
and when its pods have run and succeeded, the quota is released and the ledger interval closed.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from sqlalchemy import text

from tests.e2e.conftest import Rig, eventually
from tests.kube.kinds import CRDS, from_file
from tests.kube.manifests import RUNTIME_ANNOTATION

GATE = "kuota.dev/admission"
POOL_A = {"kuota.dev/pool": "a"}
TOLERATION = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
LWS_EXAMPLE = CRDS / "leaderworkerset" / "examples" / "lws.yaml"  # 3 groups of 4 pods, no leader template
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
MERGE = "application/merge-patch+json"


def gated(pod: Any) -> bool:
    return any(g.name == GATE for g in (pod.spec.scheduling_gates or []))


def placed(pod: Any) -> bool:
    spec = pod.spec
    tolerations = [{"key": t.key, "operator": t.operator, "effect": t.effect} for t in spec.tolerations or []]
    return not gated(pod) and spec.node_selector == POOL_A and TOLERATION in tolerations and bool(spec.node_name)


async def pods(rig: Rig, selector: str) -> list[Any]:
    return (await client.CoreV1Api(rig.admin).list_namespaced_pod(rig.namespace, label_selector=selector)).items


async def play_lws_controller(rig: Rig, lws: dict[str, Any]) -> list[str]:
    """Each group's pods, from the (webhook-stamped) worker template, named and labelled as the LWS controller
    does: the leader `NAME-G` (worker index 0), its workers `NAME-G-W`."""
    name, spec = lws["metadata"]["name"], lws["spec"]
    template = spec["leaderWorkerTemplate"]["workerTemplate"]
    owner = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": name}
    owner |= {"uid": lws["metadata"]["uid"], "controller": True}
    made = []
    for group in range(spec["replicas"]):
        for worker in range(spec["leaderWorkerTemplate"]["size"]):
            pod_name = f"{name}-{group}" if worker == 0 else f"{name}-{group}-{worker}"
            labels = {**(template.get("metadata") or {}).get("labels", {})}
            labels |= {NAME_LABEL: name, GROUP_LABEL: str(group), WORKER_LABEL: str(worker)}
            body = {
                "metadata": {"name": pod_name, "labels": labels, "ownerReferences": [owner]},
                "spec": template["spec"],
            }
            created = await client.CoreV1Api(rig.admin).create_namespaced_pod(rig.namespace, body)
            assert gated(created), f"{pod_name} was created without kuota's gate"
            made.append(pod_name)
    return made


async def test_leaderworkerset_groups_are_admitted_whole_one_at_a_time(krig: Rig) -> None:
    rig = krig
    lws = from_file(LWS_EXAMPLE, "LeaderWorkerSet", "serve", namespace=rig.namespace, cpu="200m")
    lws["metadata"]["labels"] = {"kuota.dev/queue": "ml"}
    created = await rig.create(lws)
    stamped = created["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
    assert stamped["kuota.dev/queue"] == "ml"  # so that every pod the controller makes names the queue
    controller = await rig.controller()
    made = await play_lws_controller(rig, created)
    assert len(made) == 12

    selector = f"{NAME_LABEL}=serve"

    async def one_group_running() -> bool:
        found = await pods(rig, selector)
        running = {p.metadata.labels[GROUP_LABEL] for p in found if placed(p)}
        return len(running) == 1 and sum(placed(p) for p in found) == 4

    # The team may hold 1 CPU: one group of 4 × 200m, never part of another.
    await eventually(one_group_running, timeout_s=30, what="one whole group let go and bound")
    waiting = [p for p in await pods(rig, selector) if gated(p)]
    assert len(waiting) == 8 and not any(p.spec.node_name for p in waiting)

    # Nobody but kuota removes the gate.
    with pytest.raises(ApiException) as caught:
        await client.CoreV1Api(rig.user).patch_namespaced_pod(
            waiting[0].metadata.name, rig.namespace, {"spec": {"schedulingGates": None}}, _content_type=MERGE
        )
    assert caught.value.status in (400, 403, 422), caught.value.body

    runtime = controller.runtime
    assert runtime.controller is not None
    manager = runtime.controller.manager
    keys = {f"LeaderWorkerSet/{rig.namespace}/serve-{g}" for g in range(3)}
    assert keys <= set(manager.workloads)
    admitted = [k for k in keys if str(manager.state[k]) == "admitted"]
    assert len(admitted) == 1

    # Deleting the set takes its pods (the garbage collector) and gives the quota back.
    await rig.delete("LeaderWorkerSet", "serve")
    await eventually(lambda: not keys & set(manager.workloads), timeout_s=60, what="groups gone with their pods")
    assert not any(manager.usage.values())


def pod_body(name: str, *, group: str | None = None, total: int = 0, runtime_s: float = 1.0) -> dict[str, Any]:
    labels = {"kuota.dev/queue": "ml"}
    annotations = {RUNTIME_ANNOTATION: f"{int(runtime_s * 1000)}ms"}
    if group is not None:
        labels["kuota.dev/pod-group"] = group
        annotations["kuota.dev/pod-group-total-count"] = str(total)
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "registry.invalid/train:1", "resources": {"requests": {"cpu": "300m"}}}
            ],
        },
    }


async def test_a_pod_group_waits_for_all_its_pods_then_runs_and_is_released(krig: Rig) -> None:
    rig = krig
    core = client.CoreV1Api(rig.user)
    controller = await rig.controller()
    first = await core.create_namespaced_pod(rig.namespace, pod_body("pg-a", group="train", total=2))
    assert gated(first)
    solo = await core.create_namespaced_pod(rig.namespace, pod_body("solo", runtime_s=1.0))
    assert gated(solo)

    # A lone pod is a workload of its own: let go and run. The group's one pod of two waits, gated.
    await eventually(lambda: _phase_is(rig, "solo", "Succeeded"), timeout_s=30, what="the lone pod ran")
    pod = await client.CoreV1Api(rig.admin).read_namespaced_pod("pg-a", rig.namespace)
    assert gated(pod) and not pod.spec.node_name

    await core.create_namespaced_pod(rig.namespace, pod_body("pg-b", group="train", total=2))
    for name in ("pg-a", "pg-b"):
        await eventually(lambda n=name: _phase_is(rig, n, "Succeeded"), timeout_s=30, what=f"{name} ran")
        ran = await client.CoreV1Api(rig.admin).read_namespaced_pod(name, rig.namespace)
        assert ran.spec.node_selector == POOL_A

    runtime = controller.runtime
    assert runtime.controller is not None
    group_key, solo_key = f"PodGroup/{rig.namespace}/train", f"Pod/{rig.namespace}/solo"
    manager = runtime.controller.manager
    await eventually(lambda: not {group_key, solo_key} & set(manager.workloads), what="both released")
    assert runtime.ledger is not None
    await runtime.ledger.flush()
    async with runtime.ledger.engine.connect() as connection:
        rows = (
            await connection.execute(
                text("SELECT DISTINCT workload_id FROM usage_intervals WHERE ended_at IS NOT NULL")
            )
        ).all()
    assert {group_key, solo_key} <= {workload for (workload,) in rows}


async def _phase_is(rig: Rig, name: str, wanted: str) -> bool:
    pod = await client.CoreV1Api(rig.admin).read_namespaced_pod(name, rig.namespace)
    return pod.status is not None and pod.status.phase == wanted
