"""The upstream objects the workload tests read, the quota file they read them with, and small path helpers.

Examples from ../shared/data/crds (see its README for upstream commits); Kueue, JobSet and Kubeflow sample manifests
from ../shared/data/manifests (see its README for the commits).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from admission.labels import QUEUE_LABEL
from quota.loader import load_config_text
from workloads.kind import JobKind, Reference, ReferencedKind
from workloads.registry import REGISTRY

SHARED = Path(__file__).parents[2].parent / "shared"
CRDS = SHARED / "data" / "crds"
MANIFESTS = SHARED / "data" / "manifests"
#: The manifest folders of Kueue, JobSet and the Kubeflow training operator (the others are not those projects').
MANIFEST_FOLDERS = ("jobset", "kubeflow-training-operator", "kueue")

NAMESPACE = "ml"
QUEUE = "ml"

CONFIG = load_config_text(
    """
apiVersion: kuota.dev/v1
kind: QuotaConfig
flavors:
  - name: default-flavor
teams:
  - name: ml
    queues: [ml/ml]
    quotas:
      - flavor: default-flavor
        resources: {cpu: {nominal: 512}, memory: {nominal: 2Ti}, nvidia.com/gpu: {nominal: 64}}
"""
)

MI = 1024**2 * 1000
"""One mebibyte in milli-units."""
GI = 1024**3 * 1000

Obj = dict[str, Any]
Where = tuple[str | int, ...]


@functools.cache
def _documents(path: Path) -> tuple[Any, ...]:
    # Comment-only documents load as None.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(doc for doc in yaml.load_all(path.read_text(), Loader=loader) if isinstance(doc, dict))


def kind_of(doc: Any) -> JobKind | None:
    """The registered kind of a parsed document, by its apiVersion and kind; None for a Pod, which has no pod
    templates of its own to read: pods are read as the workloads they form (tests/workloads/test_pods.py)."""
    group, _, version = str(doc.get("apiVersion", "")).rpartition("/")
    found = REGISTRY.by_gvk(group, version, str(doc.get("kind", "")))
    return None if found is None or found.plural == "pods" else found


def registered(path: Path) -> tuple[JobKind, Obj]:
    """The one object of a registered kind in the file at `path`, as a fresh copy."""
    found = [(kind, doc) for doc in _documents(path) if (kind := kind_of(doc)) is not None]
    assert len(found) == 1, f"{path} holds {len(found)} objects of registered kinds"
    kind, doc = found[0]
    return kind, copy.deepcopy(doc)


def crd_example(relative: str) -> tuple[JobKind, Obj]:
    return registered(CRDS / relative)


def manifest(relative: str) -> tuple[JobKind, Obj]:
    return registered(MANIFESTS / relative)


def all_documents(paths: list[Path]) -> list[tuple[Path, Any]]:
    return [(path, doc) for path in paths for doc in _documents(path)]


def crd_example_files() -> list[Path]:
    return sorted(CRDS.glob("*/examples/*.yaml"))


def manifest_files() -> list[Path]:
    return sorted(path for folder in MANIFEST_FOLDERS for path in (MANIFESTS / folder).glob("*.yaml"))


def with_registered_objects(paths: list[Path], base: Path) -> list[str]:
    """The files among `paths` that hold an object of a registered kind, relative to `base`."""
    return [str(path.relative_to(base)) for path in paths if any(kind_of(doc) for doc in _documents(path))]


#: Every kind some registered kind refers to (a TrainJob's training runtimes), by group and kind.
REFERENCED_KINDS: dict[tuple[str, str], ReferencedKind] = {
    (r.group, r.kind): r for kind in REGISTRY for r in kind.referenced_kinds
}


@functools.cache
def _referenced() -> dict[Reference, Obj]:
    """Every object in the examples of a kind that registered kinds refer to (the ClusterTrainingRuntimes the trainer
    installs, and the TrainingRuntime of 05-multi-step.yaml), namespaced ones in NAMESPACE as `kubectl apply -n`
    would put them."""
    out: dict[Reference, Obj] = {}
    for _, doc in all_documents(crd_example_files()):
        group, _, _ = str(doc.get("apiVersion", "")).rpartition("/")
        found = REFERENCED_KINDS.get((group, str(doc.get("kind"))))
        if found is None:
            continue
        doc = copy.deepcopy(doc)
        if found.namespaced:
            doc["metadata"].setdefault("namespace", NAMESPACE)
        reference = found.reference(doc)
        assert reference is not None and reference not in out
        out[reference] = doc
    return out


def referenced() -> dict[Reference, Obj]:
    """What `resolve` finds, as fresh copies to change."""
    return copy.deepcopy(_referenced())


def resolve(reference: Reference) -> Mapping[str, Any] | None:
    """The objects of the examples that registered kinds refer to, looked up as the cluster adapter would."""
    return _referenced().get(reference)


def submitted(obj: Obj, namespace: str = NAMESPACE, queue: str | None = QUEUE) -> Obj:
    """`obj` in `namespace`, with the queue label added (the object's own queue label, if any, stays)."""
    out = copy.deepcopy(obj)
    metadata = out.setdefault("metadata", {})
    metadata["namespace"] = namespace
    if queue is not None:
        metadata.setdefault("labels", {})[QUEUE_LABEL] = queue
    return out


def get(obj: Any, path: Where) -> Any:
    for part in path:
        obj = obj[part]
    return obj


def put(obj: Any, path: Where, value: Any) -> None:
    """Set `path` to `value`, making the maps on the way that `obj` lacks."""
    for part in path[:-1]:
        if isinstance(part, str) and obj.get(part) is None:
            obj[part] = {}
        obj = obj[part]
    obj[path[-1]] = value


def drop(obj: Any, path: Where) -> None:
    del get(obj, path[:-1])[path[-1]]


#: Each kind's own suspend switch, as the CRDs' README gives it.
SUSPEND_PATH: dict[str, Where] = {
    "Job": ("spec", "suspend"),
    "JobSet": ("spec", "suspend"),
    "PyTorchJob": ("spec", "runPolicy", "suspend"),
    "TFJob": ("spec", "runPolicy", "suspend"),
    "XGBoostJob": ("spec", "runPolicy", "suspend"),
    "PaddleJob": ("spec", "runPolicy", "suspend"),
    "JAXJob": ("spec", "runPolicy", "suspend"),
    "MPIJob": ("spec", "runPolicy", "suspend"),
    "TrainJob": ("spec", "suspend"),
    "RayJob": ("spec", "suspend"),
    "RayCluster": ("spec", "suspend"),
}

REPLICA_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
}


def internal_suspend_paths(kind: str, obj: Obj) -> list[Where]:
    """The nested `suspend` fields that are NOT the kind's switch (the CRDs' README): child Job templates in a
    JobSet, the Ray cluster spec of a RayJob and the worker groups of either Ray kind."""
    spec = obj["spec"]
    if kind == "JobSet":
        return [
            ("spec", "replicatedJobs", i, "template", "spec", "suspend") for i in range(len(spec["replicatedJobs"]))
        ]
    if kind == "RayJob":
        groups = spec["rayClusterSpec"].get("workerGroupSpecs", [])
        return [("spec", "rayClusterSpec", "suspend")] + [
            ("spec", "rayClusterSpec", "workerGroupSpecs", i, "suspend") for i in range(len(groups))
        ]
    if kind == "RayCluster":
        return [("spec", "workerGroupSpecs", i, "suspend") for i in range(len(spec.get("workerGroupSpecs", [])))]
    return []


def pod_spec_paths(kind: str, obj: Obj) -> list[Where]:
    """Where each PodSpec of `obj` is, spelled out from the CRDs' README (not from the kinds' code)."""
    spec = obj["spec"]
    if kind == "Job":
        return [("spec", "template", "spec")]
    if kind == "JobSet":
        return [
            ("spec", "replicatedJobs", i, "template", "spec", "template", "spec")
            for i in range(len(spec["replicatedJobs"]))
        ]
    if kind in REPLICA_SPECS:
        field = REPLICA_SPECS[kind]
        return [("spec", field, replica_type, "template", "spec") for replica_type in spec[field]]
    if kind == "RayJob":
        cluster = spec["rayClusterSpec"]
        paths: list[Where] = [("spec", "rayClusterSpec", "headGroupSpec", "template", "spec")]
        paths += [
            ("spec", "rayClusterSpec", "workerGroupSpecs", i, "template", "spec")
            for i in range(len(cluster.get("workerGroupSpecs", [])))
        ]
        if "submitterPodTemplate" in spec and spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
            paths.append(("spec", "submitterPodTemplate", "spec"))
        return paths
    if kind == "RayCluster":
        return [("spec", "headGroupSpec", "template", "spec")] + [
            ("spec", "workerGroupSpecs", i, "template", "spec") for i in range(len(spec.get("workerGroupSpecs", [])))
        ]
    raise AssertionError(f"no pod template paths written down for {kind}")


REMEDY_VERBS = frozenset({"send", "set", "remove", "add", "use", "ask", "give"})


def ends_with_remedy(message: str) -> bool:
    """Every problem message says what is wrong, then `; <what to do>`."""
    if "; " not in message:
        return False
    remedy = message.rsplit("; ", 1)[1]
    return remedy.split(" ", 1)[0] in REMEDY_VERBS


# -- pods as their controllers create them ---------------------------------------------------------------------

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def _as_api_server_writes(spec: Obj) -> Obj:
    """A pod spec as the API server returns it: every quantity a string (`cpu: 125` reads back as "125")."""
    out = copy.deepcopy(spec)
    for container in (*out.get("containers", ()), *out.get("initContainers", ())):
        for part in container.get("resources", {}).values():
            for resource, value in part.items():
                part[resource] = str(value)
    return out


def lws_pods(lws: Obj, group: int, gate: str | None = None, created: str = "2026-03-01T08:00:00Z") -> list[Obj]:
    """The pods the LeaderWorkerSet controller creates for one group, labelled as it and LWS's pod webhook label
    them (lws.sigs.k8s.io docs, "Labels, Annotations and Environment Variables", and pkg/webhooks/pod_webhook.go at
    the commit in ../shared/data/crds/leaderworkerset/PROVENANCE.md): the leader `NAME-GROUP` from the leader
    template (the worker template when there is none) owned by the leader StatefulSet `NAME`, the workers
    `NAME-GROUP-INDEX` owned by the group's StatefulSet `NAME-GROUP`; `gate` is put on each as a scheduling gate."""
    metadata, template = lws["metadata"], lws["spec"]["leaderWorkerTemplate"]
    name, namespace, size = metadata["name"], metadata.get("namespace", NAMESPACE), template.get("size", 1)
    leader_template = template.get("leaderTemplate") or template["workerTemplate"]
    pods = []
    for index in range(size):
        source = leader_template if index == 0 else template["workerTemplate"]
        pod_name = f"{name}-{group}" if index == 0 else f"{name}-{group}-{index}"
        owner = name if index == 0 else f"{name}-{group}"
        spec = _as_api_server_writes(source["spec"])
        if gate is not None:
            spec["schedulingGates"] = [{"name": gate}]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": namespace,
                    "uid": f"uid-{pod_name}",
                    "creationTimestamp": created,
                    "labels": {
                        **source.get("metadata", {}).get("labels", {}),
                        LWS_NAME: name,
                        LWS_GROUP_INDEX: str(group),
                        LWS_WORKER_INDEX: str(index),
                    },
                    "annotations": {"leaderworkerset.sigs.k8s.io/size": str(size)},
                    "ownerReferences": [
                        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner, "controller": True}
                    ],
                },
                "spec": spec,
                "status": {"phase": "Pending"},
            }
        )
    return pods


def kueue_pods(relative: str, namespace: str = NAMESPACE, gate: str | None = None) -> list[Obj]:
    """The Pods of a Kueue sample manifest, named from their generateName, as the API server stores them."""
    pods = []
    for doc in _documents(MANIFESTS / relative):
        if doc.get("kind") != "Pod":
            continue
        pod = copy.deepcopy(doc)
        metadata = pod["metadata"]
        metadata["name"] = metadata.pop("generateName", "pod-") + "x7k2p"
        metadata.update(namespace=namespace, uid=f"uid-{metadata['name']}", creationTimestamp="2026-03-01T08:00:00Z")
        pod["spec"] = _as_api_server_writes(pod["spec"])
        if gate is not None:
            pod["spec"]["schedulingGates"] = [{"name": gate}]
        pod["status"] = {"phase": "Pending"}
        pods.append(pod)
    return pods


def refused_update(old: Obj, new: Obj) -> list[str]:
    """What kube-apiserver refuses in an update of the gated pod `old` to `new` (empty: it accepts it).

    Pod Scheduling Readiness and KEP-3838 "Mutable Pod scheduling directives" (GA in Kubernetes 1.30;
    ValidatePodUpdate): a gated pod's spec may change only by losing scheduling gates, gaining nodeSelector entries
    (never changing one) and gaining tolerations (never losing one).
    """
    assert old["spec"].get("schedulingGates"), "the rules below are those of a gated pod"
    refused = []
    before, after = copy.deepcopy(old["spec"]), copy.deepcopy(new["spec"])
    gates_before = [g["name"] for g in before.pop("schedulingGates", [])]
    gates_after = [g["name"] for g in after.pop("schedulingGates", [])]
    if [g for g in gates_before if g in gates_after] != gates_after:
        refused.append("spec.schedulingGates: only removals")
    selector_before, selector_after = before.pop("nodeSelector", {}) or {}, after.pop("nodeSelector", {}) or {}
    if any(selector_after.get(k) != v for k, v in selector_before.items()):
        refused.append("spec.nodeSelector: only additions")
    tolerations_before, tolerations_after = before.pop("tolerations", []) or [], after.pop("tolerations", []) or []
    if any(t not in tolerations_after for t in tolerations_before):
        refused.append("spec.tolerations: only additions")
    if before != after:
        refused.append("spec: immutable fields changed")
    return refused
