"""Kubeflow Trainer's TrainJob on the real control plane: its pod sets come from the runtime it names.

The TrainJob, TrainingRuntime and ClusterTrainingRuntime CRDs are the trainer's (../shared/data/crds); the runtime
is its upstream `torch-distributed` example, the TrainJob its `01-multi-node` example (3 nodes) asking for 200m CPU
per node. kube-apiserver calls kuota's webhook, which suspends it; kuota reads its pod sets from the runtime it
watches, and a TrainJob whose runtime does not exist yet waits out of the queue, with a warning Event, until the
runtime appears. kuota admits it with its own `runtimePatches` entry (the flavor's node selector and toleration
for the `node` job) and `spec.suspend: false`; the test plays the trainer (pods from the runtime's template with
kuota's entry applied), the scheduler binds them, and the trainer's `Complete` releases the quota.
"""

from __future__ import annotations

from typing import Any

import yaml
from kubernetes_asyncio import client

from admission.labels import WORKLOAD_LABEL, workload_label_value
from tests.e2e.conftest import Rig, eventually
from tests.kube.kinds import CRDS, Operator, from_file, kind

RUNTIME = CRDS / "clustertrainingruntime" / "examples" / "torch_distributed.yaml"
TRAINJOB = CRDS / "trainjob" / "examples" / "01-multi-node.yaml"
POOL_A = {"kuota.dev/pool": "a"}
TOLERATION = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}


def trainjob(namespace: str, name: str, runtime: str) -> dict[str, Any]:
    obj = from_file(TRAINJOB, "TrainJob", name, namespace=namespace, cpu="100m")
    obj["metadata"]["labels"] = {"kuota.dev/queue": "ml"}
    obj["spec"]["runtimeRef"]["name"] = runtime
    obj["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"cpu": "200m"}}
    return obj


async def create_runtime(rig: Rig, name: str) -> None:
    runtime = yaml.safe_load(RUNTIME.read_text())
    runtime["metadata"]["name"] = name
    await client.CustomObjectsApi(rig.admin).create_cluster_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", runtime
    )


async def delete_runtime(rig: Rig, name: str) -> None:
    await client.CustomObjectsApi(rig.admin).delete_cluster_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", name
    )


async def _reasons(rig: Rig, name: str) -> set[str]:
    events = await client.CoreV1Api(rig.admin).list_namespaced_event(rig.namespace)
    return {e.reason for e in events.items if (e.involved_object.kind, e.involved_object.name) == ("TrainJob", name)}


async def _all_bound(operator: Operator, name: str, count: int) -> bool:
    pods = await operator.pods(name)
    return len(pods) == count and all(p["spec"].get("nodeName") for p in pods)


async def test_trainjob_waits_for_its_runtime_then_runs_on_the_admitted_flavor(krig: Rig) -> None:
    job_kind = kind("TrainJob")
    runtime = f"torch-{krig.namespace}"  # cluster-scoped: one per test
    key = f"TrainJob/{krig.namespace}/mnist"
    controller = await krig.controller()
    created = await krig.create(trainjob(krig.namespace, "mnist", runtime))
    assert job_kind.is_suspended(created)

    # Its runtime does not exist: kuota cannot know its pods, so it is not queued, and says why.
    await eventually(lambda: _has(krig, "mnist", "NotQueued"), what="a NotQueued event")
    assert job_kind.is_suspended(await krig.get("TrainJob", "mnist"))
    try:
        await create_runtime(krig, runtime)
        admitted = await krig.wait("TrainJob", "mnist", lambda o: not job_kind.is_suspended(o), "admitted")
        (entry,) = [p for p in admitted["spec"]["runtimePatches"] if p["manager"] == "kuota.dev/manager"]
        (node,) = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        pod = node["template"]["spec"]["template"]["spec"]
        assert node["name"] == "node" and pod["nodeSelector"] == POOL_A and TOLERATION in pod["tolerations"]
        assert admitted["metadata"]["annotations"]["kuota.dev/workload-id"] == key
        runtime_state = controller.runtime
        assert runtime_state.controller is not None
        usage = runtime_state.controller.manager.usage[key]
        assert sum(usage.values()) == 600  # 3 nodes × 200m CPU, from resourcesPerNode

        operator = Operator(krig.admin, krig.namespace)
        made = await operator.start("TrainJob", admitted)
        assert len(made) == 3
        await eventually(lambda: _all_bound(operator, "mnist", 3), what="the scheduler bound the 3 nodes")
        # The pods carry kuota's workload label from its runtime patch: a failed node names the TrainJob.
        for bound in await operator.pods("mnist"):
            assert bound["metadata"]["labels"][WORKLOAD_LABEL] == workload_label_value(key)
        await operator.succeed("TrainJob", await krig.get("TrainJob", "mnist"))
        await eventually(lambda: key not in runtime_state.controller.manager.workloads, what="quota released")
        assert {"Admitted"} <= await _reasons(krig, "mnist")
    finally:
        await delete_runtime(krig, runtime)


async def _has(rig: Rig, name: str, reason: str) -> bool:
    return reason in await _reasons(rig, name)
