"""Objects the end-to-end tests create: Jobs whose pods kwok runs for a set time (testing/cluster/kwok-stages.yaml
reads the pod annotations below), and conditions read off them."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

RUNTIME_ANNOTATION = "testing.kuota.dev/runtime"  # a Go duration: the pod runs that long, then exits
EXIT_CODE_ANNOTATION = "testing.kuota.dev/exit-code"  # non-zero: the pod fails when its runtime is up


def job_manifest(
    name: str,
    *,
    namespace: str,
    runtime_s: float | None = None,
    exit_code: int = 0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    parallelism: int | None = None,
    completions: int | None = None,
    suspend: bool | None = None,
    cpu: str = "100m",
    gpus: int = 0,
) -> Obj:
    """A batch/v1 Job of one container; its pods run for runtime_s (forever when None) on a kwok node."""
    pod_annotations: dict[str, str] = {}
    if runtime_s is not None:
        pod_annotations[RUNTIME_ANNOTATION] = f"{int(runtime_s * 1000)}ms"
    if exit_code:
        pod_annotations[EXIT_CODE_ANNOTATION] = str(exit_code)
    requests: dict[str, str] = {"cpu": cpu}
    limits: dict[str, str] = {}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    resources: Obj = {"requests": requests}
    if limits:
        resources["limits"] = limits
    meta: Obj = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    spec: Obj = {
        "backoffLimit": 0,
        "template": {
            "metadata": {"annotations": pod_annotations},
            "spec": {
                "containers": [{"name": "main", "image": "registry.invalid/train:1", "resources": resources}],
                "restartPolicy": "Never",
            },
        },
    }
    if suspend is not None:
        spec["suspend"] = suspend
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def condition(job: Obj, kind: str) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def complete(job: Obj) -> bool:
    return condition(job, "Complete")
