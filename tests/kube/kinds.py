"""Training jobs of every kind for the end-to-end tests, and the part of their operators that the tests play.

The objects are the upstream examples of ../shared/data/crds (its README gives each file's repository and commit)
with a name, the test's namespace, kuota's queue label and small CPU requests in place of their own resources, so
that a team of one or two CPUs can run them. The operators themselves (JobSet, the Kubeflow training operator, the
MPI Operator, KubeRay) do not run here: as Kueue's integration tests do, the tests do the operator's part that
kuota depends on — make a started object's pods from its pod templates as kuota admitted them (so the scheduler and
kwok run them on the admitted flavor's nodes), report them active in the status, and report the end, or the stop
once kuota suspended the object, the way each operator writes it.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.kube.manifests import Obj
from workloads.kind import JobKind, PodTemplate, Reference, Resolve, SuspendFieldKind, value_at
from workloads.registry import REGISTRY

CRDS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "crds"

#: The CRD file of each kind, and the upstream example each test object is made from.
CRD_FILES = {
    "JobSet": "jobset/jobset.x-k8s.io_jobsets.yaml",
    "PyTorchJob": "pytorchjob/kubeflow.org_pytorchjobs.yaml",
    "TFJob": "tfjob/kubeflow.org_tfjobs.yaml",
    "XGBoostJob": "xgboostjob/kubeflow.org_xgboostjobs.yaml",
    "PaddleJob": "paddlejob/kubeflow.org_paddlejobs.yaml",
    "JAXJob": "jaxjob/kubeflow.org_jaxjobs.yaml",
    "MPIJob": "mpijob/kubeflow.org_mpijobs.yaml",
    "TrainJob": "trainjob/trainer.kubeflow.org_trainjobs.yaml",
    "RayJob": "rayjob/ray.io_rayjobs.yaml",
    "RayCluster": "raycluster/ray.io_rayclusters.yaml",
    "LeaderWorkerSet": "leaderworkerset/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
}
EXAMPLES = {
    "JobSet": "jobset/examples/paralleljobs.yaml",  # workers: 4 pods, driver: 1
    "PyTorchJob": "pytorchjob/examples/simple.yaml",  # Master 1, Worker 1
    "TFJob": "tfjob/examples/simple.yaml",  # Worker 2
    "XGBoostJob": "xgboostjob/examples/xgboostjob_v1_rabit_test.yaml",  # Master 1, Worker 2
    "PaddleJob": "paddlejob/examples/simple-cpu.yaml",  # Worker 2
    "JAXJob": "jaxjob/examples/demo.yaml",  # Worker 2
    "MPIJob": "mpijob/examples/pi.yaml",  # Launcher 1, Worker 2
    "RayJob": "rayjob/examples/ray-job.kueue-toy-sample.yaml",  # head 1, small-group 1
    "RayCluster": "raycluster/examples/ray-cluster.sample.yaml",  # head 1, workergroup 1
}
KINDS = tuple(EXAMPLES)
#: Every kind the end-to-end rig queues: the suspend-switch kinds above, TrainJob, whose pod sets are its
#: runtime's (tests/e2e/test_kinds_trainjob.py), and the kinds held pod by pod by a scheduling gate
#: (tests/e2e/test_kinds_gated.py).
QUEUED = ("Job", *KINDS, "TrainJob", "LeaderWorkerSet", "Pod")
#: CRDs the rig installs: the kinds', and the training runtimes TrainJobs refer to.
RIG_CRDS = (
    *(CRD_FILES[k] for k in QUEUED if k in CRD_FILES),
    "trainingruntime/trainer.kubeflow.org_trainingruntimes.yaml",
    "clustertrainingruntime/trainer.kubeflow.org_clustertrainingruntimes.yaml",
)
QUEUE_LABEL = "kuota.dev/queue"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Kueue's sample jobs (../shared/data/manifests/kueue, its README gives the commit), labelled for Kueue's queues.
KUEUE_SAMPLES = CRDS.parent / "manifests" / "kueue"
OWNER_LABEL = "testing.kuota.dev/owner"


def kind(name: str) -> JobKind:
    found = REGISTRY.get(name)
    assert found is not None, name
    return found


def crd_paths() -> list[Path]:
    return [CRDS / relative for relative in RIG_CRDS]


def example(
    kind_name: str,
    name: str,
    *,
    namespace: str,
    queue: str = "ml",
    cpu: str = "100m",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """The upstream example of a kind, renamed into `namespace`, queued on `queue` with kuota's label, every
    container asking for `cpu` and nothing else (the examples ask for whole CPUs and gibibytes, or for nothing)."""
    obj = from_file(CRDS / EXAMPLES[kind_name], kind_name, name, namespace=namespace, cpu=cpu)
    obj["metadata"]["labels"] = {QUEUE_LABEL: queue, **(labels or {})}
    obj["metadata"]["annotations"] = dict(annotations or {})
    return obj


def kueue_sample(path: Path, name: str, *, namespace: str, queue: str = "ml", cpu: str = "100m") -> Obj:
    """One of Kueue's own sample jobs, as its users write them: Kueue's queue-name label (pointed at `queue`),
    renamed into `namespace`, every container asking for `cpu`."""
    documents = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    kind_name = next(d["kind"] for d in documents if REGISTRY.get(d.get("kind", "")) is not None)
    obj = from_file(path, kind_name, name, namespace=namespace, cpu=cpu)
    labels = dict(next(d for d in documents if d["kind"] == kind_name)["metadata"].get("labels") or {})
    assert KUEUE_QUEUE_LABEL in labels, path
    obj["metadata"]["labels"] = {**labels, KUEUE_QUEUE_LABEL: queue}
    return obj


def from_file(path: Path, kind_name: str, name: str, *, namespace: str, cpu: str) -> Obj:
    """The one object of `kind_name` in a file, with only its name and namespace as metadata, and every container
    of its pod templates asking for `cpu` alone."""
    job_kind = kind(kind_name)
    documents = yaml.safe_load_all(path.read_text())
    obj = copy.deepcopy(next(d for d in documents if isinstance(d, dict) and d.get("kind") == kind_name))
    obj["metadata"] = {"name": name, "namespace": namespace}
    for template in job_kind.read_templates(obj):
        pod = value_at(obj, template.path)
        for container in pod.get("containers") or []:
            container["resources"] = {"requests": {"cpu": cpu}}
    return obj


def suspend_body(kind_name: str, value: bool) -> Obj:
    """The merge patch that sets a kind's own suspend switch."""
    job_kind = kind(kind_name)
    assert isinstance(job_kind, SuspendFieldKind)
    body: Any = value
    for key in reversed(job_kind.suspend_path):
        body = {key: body}
    return body  # type: ignore[no-any-return]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind_of_condition: str) -> Obj:
    """A condition in the shape every one of these operators writes (metav1.Condition's required fields)."""
    now = _now()
    return {
        "type": kind_of_condition,
        "status": "True",
        "reason": kind_of_condition,
        "message": f"{kind_of_condition} (the test playing the operator)",
        "lastTransitionTime": now,
        "lastUpdateTime": now,
    }


class Operator:
    """What each kind's operator does that kuota relies on, played against the real API server."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace

    async def _status(self, kind_name: str, name: str, status: Obj) -> None:
        job_kind = kind(kind_name)
        await client.CustomObjectsApi(self.api).patch_namespaced_custom_object_status(
            job_kind.group,
            job_kind.version,
            self.namespace,
            job_kind.plural,
            name,
            {"status": status},
            _content_type="application/merge-patch+json",
        )

    async def _resolver(self, job_kind: JobKind, obj: Obj) -> Resolve:
        """The objects `obj` refers to (a TrainJob's runtime), read now, for reading its pod templates."""
        found: dict[Reference, Obj] = {}
        custom = client.CustomObjectsApi(self.api)
        for ref in job_kind.references(obj, self.namespace):
            kinds = {k.kind: k for k in job_kind.referenced_kinds}
            version = kinds[ref.kind].version
            plural = kinds[ref.kind].plural
            if ref.namespace is None:
                found[ref] = await custom.get_cluster_custom_object(ref.group, version, plural, ref.name)
            else:
                found[ref] = await custom.get_namespaced_custom_object(
                    ref.group, version, ref.namespace, plural, ref.name
                )
        return found.get

    async def start(self, kind_name: str, obj: Obj) -> list[str]:
        """The pods of a started object, made from its pod templates as admitted, and its running status."""
        job_kind = kind(kind_name)
        name, owner = obj["metadata"]["name"], self.owner(kind_name, obj)
        core = client.CoreV1Api(self.api)
        made: list[str] = []
        active: dict[str, int] = {}
        for template in job_kind.read_templates(obj, await self._resolver(job_kind, obj)):
            for index in range(template.count):
                await core.create_namespaced_pod(self.namespace, self.pod(obj, template, index, owner))
                made.append(self.pod_name(name, template.name, index))
            active[template.name] = template.count
        await self._status(kind_name, name, _running_status(kind_name, obj, active))
        return made

    @staticmethod
    def pod_name(name: str, pod_set: str, index: int) -> str:
        return f"{name}-{pod_set}-{index}".lower().replace("_", "-")

    @staticmethod
    def owner(kind_name: str, obj: Obj) -> Obj:
        job_kind = kind(kind_name)
        name, uid = obj["metadata"]["name"], obj["metadata"]["uid"]
        return {"apiVersion": job_kind.api_version, "kind": kind_name, "name": name, "uid": uid, "controller": True}

    def pod(self, obj: Obj, template: PodTemplate, index: int, owner: Obj) -> Obj:
        """Pod `index` of a pod set, as the operator makes it from the pod template as admitted: the template's
        spec, labels and annotations (for a TrainJob, with what kuota's runtime patch adds)."""
        name = obj["metadata"]["name"]
        spec = copy.deepcopy(dict(template.spec))
        patched = _trainer_runtime_patch(obj, template.name)
        spec.update(patched.get("spec") or {})
        spec.setdefault("restartPolicy", "Never")
        metadata = value_at(obj, (*template.path[:-1], "metadata")) if template.source is None else None
        metadata = metadata if isinstance(metadata, dict) else {}
        labels = {**(metadata.get("labels") or {}), **((patched.get("metadata") or {}).get("labels") or {})}
        return {
            "metadata": {
                "name": self.pod_name(name, template.name, index),
                "labels": {**labels, OWNER_LABEL: name},
                "annotations": dict(metadata.get("annotations") or {}),
                "ownerReferences": [owner],
            },
            "spec": spec,
        }

    async def pods(self, name: str) -> list[Obj]:
        found = await client.CoreV1Api(self.api).list_namespaced_pod(
            self.namespace, label_selector=f"{OWNER_LABEL}={name}"
        )
        return [self.api.sanitize_for_serialization(p) for p in found.items]

    async def _delete_pods(self, name: str) -> None:
        await client.CoreV1Api(self.api).delete_collection_namespaced_pod(
            self.namespace, label_selector=f"{OWNER_LABEL}={name}", grace_period_seconds=0
        )

    async def stop(self, kind_name: str, obj: Obj) -> None:
        """What the operator does once kuota suspended the object: its pods go, its status says so."""
        await self._delete_pods(obj["metadata"]["name"])
        await self._status(kind_name, obj["metadata"]["name"], _stopped_status(kind_name, obj))

    async def play(self, watched: Mapping[str, str], interval_s: float = 0.1) -> None:
        """Until cancelled, the operators' control loops for the objects `watched` (name → kind): start what kuota
        started, stop what kuota suspended, leave alone what has finished."""
        running: set[str] = set()
        custom = client.CustomObjectsApi(self.api)
        while True:
            for name, kind_name in list(watched.items()):
                job_kind = kind(kind_name)
                try:
                    obj = await custom.get_namespaced_custom_object(
                        job_kind.group, job_kind.version, self.namespace, job_kind.plural, name
                    )
                except ApiException as exc:
                    if exc.status == 404:
                        continue
                    raise
                if job_kind.status(obj).finished is not None:
                    running.discard(name)
                elif not job_kind.is_suspended(obj) and name not in running:
                    await self.start(kind_name, obj)
                    running.add(name)
                elif job_kind.is_suspended(obj) and name in running:
                    await self.stop(kind_name, obj)
                    running.discard(name)
            await asyncio.sleep(interval_s)

    async def succeed(self, kind_name: str, obj: Obj) -> None:
        """The end of a run, as the operator reports it."""
        await self._delete_pods(obj["metadata"]["name"])
        await self._status(kind_name, obj["metadata"]["name"], _succeeded_status(kind_name, obj))


def _trainer_runtime_patch(obj: Obj, job: str) -> Obj:
    """What the trainer takes from kuota's entry in a TrainJob's runtimePatches for the pods of replicated job
    `job`, as a pod template (`metadata`, `spec`): the pods' labels, the flavor's node selector and tolerations (other
    kinds carry them in their templates already)."""
    for entry in (obj.get("spec") or {}).get("runtimePatches") or []:
        if entry.get("manager") != "kuota.dev/manager":
            continue
        for replicated in entry["trainingRuntimeSpec"]["template"]["spec"].get("replicatedJobs") or []:
            if replicated["name"] == job:
                return dict(replicated["template"]["spec"]["template"])
    return {}


def _replica_types(obj: Obj) -> dict[str, str]:
    """Pod-set name → the replica type's own spelling (Kubeflow keys replicaStatuses by `Worker`, not `worker`)."""
    specs = next((v for k, v in obj["spec"].items() if k.endswith("ReplicaSpecs")), {})
    return {str(t).lower(): str(t) for t in specs}


def _jobs_status(name: str, active: int, suspended: int = 0) -> Obj:
    return {"name": name, "active": active, "ready": active, "succeeded": 0, "failed": 0, "suspended": suspended}


def _running_status(kind_name: str, obj: Obj, active: Mapping[str, int]) -> Obj:
    if kind_name == "TrainJob":
        return {"jobsStatus": [_jobs_status(n, a) for n, a in active.items()]}
    if kind_name == "JobSet":
        return {
            "replicatedJobsStatus": [
                {"name": n, "active": a, "ready": a, "succeeded": 0, "failed": 0, "suspended": 0}
                for n, a in active.items()
            ]
        }
    if kind_name == "RayJob":
        return {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
    if kind_name == "RayCluster":
        return {"state": "ready"}
    types = _replica_types(obj)
    return {
        "conditions": [_condition("Running")],
        "replicaStatuses": {types[n]: {"active": a} for n, a in active.items()},
    }


def _stopped_status(kind_name: str, obj: Obj) -> Obj:
    if kind_name == "TrainJob":
        jobs = [j["name"] for j in (obj.get("status") or {}).get("jobsStatus") or []]
        return {"conditions": [_condition("Suspended")], "jobsStatus": [_jobs_status(n, 0, 1) for n in jobs]}
    if kind_name == "JobSet":
        jobs = [j["name"] for j in obj["spec"]["replicatedJobs"]]
        return {
            "conditions": [_condition("Suspended")],
            "replicatedJobsStatus": [
                {"name": n, "active": 0, "ready": 0, "succeeded": 0, "failed": 0, "suspended": 1} for n in jobs
            ],
        }
    if kind_name == "RayJob":
        return {"jobDeploymentStatus": "Suspended"}
    if kind_name == "RayCluster":
        return {"state": "suspended", "conditions": [_condition("RayClusterSuspended")]}
    types = _replica_types(obj)
    return {"conditions": [_condition("Suspended")], "replicaStatuses": {t: {"active": 0} for t in types.values()}}


def _succeeded_status(kind_name: str, obj: Obj) -> Obj:
    if kind_name == "TrainJob":
        return {"conditions": [_condition("Complete")]}
    if kind_name == "JobSet":
        return {"conditions": [_condition("Completed")]}
    if kind_name == "RayJob":
        return {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "endTime": _now()}
    assert kind_name != "RayCluster", "a RayCluster never finishes: delete it"
    types = _replica_types(obj)
    return {"conditions": [_condition("Succeeded")], "replicaStatuses": {t: {"active": 0} for t in types.values()}}
