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
    """The registered kind of a parsed document, by its apiVersion and kind."""
    group, _, version = str(doc.get("apiVersion", "")).rpartition("/")
    return REGISTRY.by_gvk(group, version, str(doc.get("kind", "")))


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
