"""Building AdmissionReviews from real manifests, and reading the answers the way the API server does."""

from __future__ import annotations

import base64
import copy
import functools
import json
import uuid
from pathlib import Path
from typing import Any

import yaml

from admission.workload import Workload
from quota.config import PriorityClass, QuotaConfig
from quota.loader import load_config_file
from webhooks.app import answer
from webhooks.mutate import mutate
from webhooks.state import WebhookState
from webhooks.validate import validate
from workloads.kinds.job import JOB
from workloads.problems import JobError, JobProblem
from workloads.reading import (
    Conversion,
    Reading,
    convert,
    first_priority,
    read,
    structure,
    structure_problems,
    workload_of,
)
from workloads.rules import ConfigIndex, config_index, names_in_labels, priority_class_for

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
SHARED = (ROOT / ".." / "shared").resolve()
MANIFESTS = SHARED / "data" / "manifests"
K8S_API = SHARED / "data" / "k8s-api"
QUOTA_FILE = HERE / "quota.yaml"
KUOTA = "system:serviceaccount:kuota-system:kuota"
USER = "alice@example.org"

Job = dict[str, Any]


@functools.lru_cache
def quota_config() -> QuotaConfig:
    return load_config_file(QUOTA_FILE)


def load_quota_state(**kwargs: Any) -> WebhookState:
    return WebhookState(quota_config(), **kwargs)


@functools.lru_cache
def _parsed(relative: str) -> Any:
    return yaml.safe_load((MANIFESTS / relative).read_text())


def manifest(relative: str, namespace: str | None = None) -> Job:
    """A Job from ../shared/data/manifests as the API server would send it (name and namespace filled in)."""
    job: Job = copy.deepcopy(_parsed(relative))
    metadata = job.setdefault("metadata", {})
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata.setdefault("namespace", "default")
    if "name" not in metadata:
        metadata["name"] = metadata.get("generateName", "job-") + "x7k2p"
    metadata.setdefault("creationTimestamp", "2026-03-01T08:00:00Z")
    metadata.setdefault("uid", str(uuid.uuid4()))
    # The API server defaults suspend to false before admission, and writes every quantity as a string.
    job.setdefault("spec", {}).setdefault("suspend", False)
    pod = job["spec"]["template"]["spec"]
    for container in (*pod.get("containers", ()), *pod.get("initContainers", ())):
        for part in container.get("resources", {}).values():
            for resource, value in part.items():
                part[resource] = str(value)
    return job


def job_from_pod_template(template: dict[str, Any], name: str, namespace: str, labels: dict[str, str]) -> Job:
    """A batch/v1 Job around a pod template taken from another kind (a Kubeflow PyTorchJob's replica spec)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"parallelism": 1, "completions": 1, "suspend": False, "template": copy.deepcopy(template)},
    }


def gpu_job(
    namespace: str = "eidf018ns",
    queue: str | None = "eidf018ns-user-queue",
    gpus: int = 1,
    parallelism: int = 1,
    node_selector: dict[str, str] | None = None,
) -> Job:
    """The EIDF getting-started GPU Job (GPU in limits only) in the given queue."""
    job = manifest("eidf-gpu-service/training__L1_getting_started__block1.yaml", namespace)
    labels = job["metadata"]["labels"]
    labels.pop("kueue.x-k8s.io/queue-name")
    if queue is not None:
        labels["kuota.dev/queue"] = queue
    job["spec"]["parallelism"] = parallelism
    job["spec"]["completions"] = parallelism
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    if node_selector is None:
        job["spec"]["template"]["spec"].pop("nodeSelector", None)
    else:
        job["spec"]["template"]["spec"]["nodeSelector"] = node_selector
    return job


def review(
    job: Any,
    operation: str = "CREATE",
    old: Any = None,
    username: str = USER,
    namespace: str | None = None,
    dry_run: bool = False,
    uid: str | None = None,
) -> dict[str, Any]:
    metadata = job.get("metadata") if isinstance(job, dict) else None
    metadata = metadata if isinstance(metadata, dict) else {}
    if namespace is None:
        namespace = metadata.get("namespace")
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": "batch", "version": "v1", "kind": "Job"},
        "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
        "requestKind": {"group": "batch", "version": "v1", "kind": "Job"},
        "requestResource": {"group": "batch", "version": "v1", "resource": "jobs"},
        "name": metadata.get("name", ""),
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": username, "uid": "u-1", "groups": ["system:authenticated"]},
        "object": job,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def call(endpoint: str, state: WebhookState, body: dict[str, Any] | bytes) -> dict[str, Any]:
    """The answer of one endpoint, through the same function the HTTP handler uses; asserts HTTP 200."""
    rule = mutate if endpoint == "mutate" else validate
    status, out = answer(endpoint, rule, state, body if isinstance(body, bytes) else encode(body))
    assert status == 200, out
    response: dict[str, Any] = json.loads(out)["response"]
    return response


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return patch


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(document: Any, patch: list[dict[str, Any]]) -> Any:
    """RFC 6902 add/replace/remove/test, enough for the patches under test; raises on a path that does not exist."""
    document = copy.deepcopy(document)
    for op in patch:
        tokens = [_unescape(t) for t in op["path"].split("/")[1:]]
        parent = document
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        if op["op"] == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            else:
                parent[last] = op["value"]
        elif op["op"] == "replace":
            if isinstance(parent, list):
                parent[int(last)] = op["value"]
            else:
                assert last in parent, f"replace of missing {op['path']}"
                parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif op["op"] == "test":
            assert (parent[int(last)] if isinstance(parent, list) else parent[last]) == op["value"]
        else:
            raise AssertionError(f"unexpected op {op['op']}")
    return document


def mutated(state: WebhookState, job: Job, **kwargs: Any) -> Job:
    response = call("mutate", state, review(job, **kwargs))
    assert response["allowed"], response
    result: Job = apply_patch(job, decode_patch(response))
    return result


# -- the job framework read as a batch/v1 Job, the one kind these tests send -------------------------------------


def convert_job(job: Any, config: QuotaConfig, namespace: str | None = None) -> Conversion:
    return convert(JOB, job, config, namespace)


def read_job(job: Any, index: ConfigIndex, namespace: str | None = None) -> Reading:
    return read(JOB, job, index, namespace)


def workload_from_job(job: Any, config: QuotaConfig, namespace: str | None = None) -> Workload:
    return workload_of(JOB, job, config, namespace)


def job_structure_problems(job: Any) -> list[JobProblem]:
    return structure_problems(JOB, job)


def resolve_priority_class(job: Any, config: QuotaConfig) -> PriorityClass | None:
    """The class a Job gets; raises JobError for a label naming a class the file does not have."""
    (_, labels, _, _, _), templates = structure(JOB, job)
    found, problem = priority_class_for(first_priority(templates), names_in_labels(labels), config_index(config))
    if problem is not None:
        raise JobError([problem])
    return found
