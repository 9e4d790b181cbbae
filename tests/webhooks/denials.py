"""Every way the webhooks deny, as (id, endpoint, review body, HTTP-status-in-response, words the message must hold).

Shared by the rule tests and by the test that every message tells the user what to do.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webhooks.state import WebhookState

from .helpers import KUOTA, USER, Job, gpu_job, manifest, mutated, review


@dataclass(frozen=True)
class Denial:
    id: str
    endpoint: str
    build: Callable[[WebhookState], dict[str, Any]]
    code: int
    words: tuple[str, ...]


def queued(state: WebhookState, job: Job) -> Job:
    """The Job as the validating webhook sees it on CREATE: after kuota's mutation."""
    return mutated(state, job)


def admitted(state: WebhookState, job: Job | None = None) -> Job:
    """A Job kuota has admitted: suspended at creation, then started by kuota with its flavor recorded."""
    result = copy.deepcopy(queued(state, job or gpu_job(parallelism=2)))
    result["metadata"].setdefault("annotations", {}).update(
        {"kuota.dev/admitted-flavor": "gpu-a100", "kuota.dev/workload-id": "wl-1"}
    )
    result["spec"]["suspend"] = False
    return result


def update(old: Job, change: Callable[[Job], Any], username: str = USER) -> dict[str, Any]:
    new = copy.deepcopy(old)
    change(new)
    return review(new, operation="UPDATE", old=old, username=username)


def _set_label(key: str, value: str) -> Callable[[Job], None]:
    return lambda job: job["metadata"]["labels"].__setitem__(key, value)


def _create(
    change: Callable[[Job], Any], base: Callable[[], Job] = gpu_job
) -> Callable[[WebhookState], dict[str, Any]]:
    def build(state: WebhookState) -> dict[str, Any]:
        job = queued(state, base())
        change(job)
        return review(job)

    return build


def _annotate(key: str, value: str) -> Callable[[Job], None]:
    return lambda job: job["metadata"].setdefault("annotations", {}).__setitem__(key, value)


def _spec(**values: Any) -> Callable[[Job], None]:
    return lambda job: job["spec"].update(values)


def _resources(job: Job) -> dict[str, Any]:
    resources: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    return resources


def _kueue_priority_job() -> Job:
    job = gpu_job()
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "low-priority"
    return job


def _placeholder(state: WebhookState) -> dict[str, Any]:
    job = manifest("eidf-gpu-service/training__L1_getting_started__block0.yaml", "eidf018ns")
    job["spec"]["suspend"] = True
    return review(job)


def _wrong_kind(state: WebhookState) -> dict[str, Any]:
    body = review(queued(state, gpu_job()))
    body["request"]["kind"] = {"group": "", "version": "v1", "kind": "Pod"}
    return body


def _bad_operation(state: WebhookState) -> dict[str, Any]:
    return review(queued(state, gpu_job()), operation="PATCH")


def _update_without_old(state: WebhookState) -> dict[str, Any]:
    return review(queued(state, gpu_job()), operation="UPDATE", old=None)


def _removed_label(state: WebhookState) -> dict[str, Any]:
    old = queued(state, manifest("kueue/jobs__sample-job.yaml"))

    def drop(job: Job) -> None:
        job["metadata"]["labels"].clear()
        job["spec"]["suspend"] = False

    return update(old, drop)


def _unsuspend(state: WebhookState) -> dict[str, Any]:
    return update(queued(state, gpu_job()), _spec(suspend=False))


def _admitted_change(change: Callable[[Job], Any]) -> Callable[[WebhookState], dict[str, Any]]:
    return lambda state: update(admitted(state), change)


def _cpu_only_gpu(state: WebhookState) -> dict[str, Any]:
    return review(queued(state, gpu_job(namespace="batch", queue="cpu")))


def _mixed(state: WebhookState) -> dict[str, Any]:
    job = gpu_job(namespace="mixed", queue="q", gpus=4)
    _resources(job)["requests"] = {"cpu": "16"}
    _resources(job)["limits"] = {"cpu": "16", "nvidia.com/gpu": "4"}
    return review(queued(state, job))


def _min_parallelism_too_big(state: WebhookState) -> dict[str, Any]:
    job = gpu_job(parallelism=20)
    job["metadata"]["annotations"] = {"kuota.dev/min-parallelism": "13"}
    return review(queued(state, job))


def _not_a_job(state: WebhookState) -> dict[str, Any]:
    job = queued(state, gpu_job())
    job["spec"]["template"]["spec"]["containers"] = "busybox"
    return review(job)


def _spec_not_an_object(state: WebhookState) -> dict[str, Any]:
    job = gpu_job()
    job["spec"] = ["not", "an", "object"]
    return review(job)


DENIALS: tuple[Denial, ...] = (
    Denial("unknown-queue", "validate", _create(_set_label("kuota.dev/queue", "nope")), 422, ("'nope'", "urgent")),
    Denial("queue-not-open", "validate", _create(_set_label("kuota.dev/queue", "cpu")), 422, ("not open", "batch")),
    Denial("no-queue", "validate", _create(lambda j: None, lambda: gpu_job("strict", None)), 422, ("strict",)),
    Denial("placeholder-queue-validate", "validate", _placeholder, 422, ("placeholder",)),
    Denial("placeholder-queue-mutate", "mutate", _placeholder, 422, ("placeholder",)),
    Denial(
        "too-many-gpus",
        "validate",
        _create(lambda j: None, lambda: gpu_job(gpus=13)),
        403,
        ("13 nvidia.com/gpu", "eidf018", "more than 12", "gpu-a100: 12", "gpu-a100-1g: 4"),
    ),
    Denial(
        "too-many-pods",
        "validate",
        _create(lambda j: None, lambda: gpu_job(gpus=4, parallelism=4)),
        403,
        ("16 nvidia.com/gpu", "4 pods × 4", "more than 12"),
    ),
    Denial("gpu-in-cpu-only-team", "validate", _cpu_only_gpu, 403, ("nvidia.com/gpu", "cpu-only", "never hold any")),
    Denial(
        "mig-selector-too-many",
        "validate",
        _create(
            lambda j: None,
            lambda: gpu_job(gpus=5, node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}),
        ),
        403,
        ("5 nvidia.com/gpu", "more than 4", "gpu-a100-1g: 4"),
    ),
    Denial(
        "selector-matches-no-flavor",
        "validate",
        _create(lambda j: None, lambda: gpu_job(node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})),
        403,
        ("NVIDIA-H100-80GB-HBM3", "gpu-a100-1g"),
    ),
    Denial("no-flavor-holds-all", "validate", _mixed, 403, ("from one flavor", "mixed")),
    Denial(
        "min-parallelism-too-big", "validate", _min_parallelism_too_big, 403, ("13 nvidia.com/gpu", "min-parallelism")
    ),
    Denial(
        "unknown-priority-class",
        "validate",
        _create(_set_label("kuota.dev/priority-class", "urgent-please")),
        422,
        ("urgent-please", "production"),
    ),
    Denial(
        "kueue-unknown-priority-class",
        "validate",
        _create(lambda j: None, _kueue_priority_job),
        422,
        ("low-priority", "kueue.x-k8s.io/priority-class"),
    ),
    Denial("bad-min-parallelism", "validate", _create(_annotate("kuota.dev/min-parallelism", "all")), 422, ("'all'",)),
    Denial("zero-min-parallelism", "validate", _create(_annotate("kuota.dev/min-parallelism", "0")), 422, ("'0'",)),
    Denial(
        "checkpoint-url-not-http",
        "validate",
        _create(_annotate("kuota.dev/checkpoint-url", "s3://bucket/ckpt")),
        422,
        ("s3://bucket/ckpt", "http"),
    ),
    Denial(
        "bad-quantity",
        "validate",
        _create(lambda j: _resources(j)["limits"].update({"nvidia.com/gpu": "one"})),
        422,
        ("'one'", "quantity"),
    ),
    Denial(
        # Accepted once: admitted inside kuota, never started (its usage did not fit the ledger's 64 bits).
        "absurd-memory",
        "validate",
        _create(lambda j: _resources(j)["requests"].update({"memory": "10Pi"})),
        422,
        ("'10Pi' is too large", "ask for less"),
    ),
    Denial(
        # Each quantity within bounds, their total per workload not: 4 pods of 4Pi.
        "absurd-total",
        "validate",
        _create(
            lambda j: (
                _resources(j)["requests"].update({"memory": "4Pi"}),
                j["spec"].update({"parallelism": 4, "completions": 4}),
            )
        ),
        422,
        ("4 pods of", "more than kuota accounts", "ask for less"),
    ),
    Denial(
        "quantity-of-100000-digits",
        "validate",
        _create(lambda j: _resources(j)["requests"].update({"cpu": "9" * 100_000})),
        422,
        ("which is not a Kubernetes quantity",),
    ),
    Denial("unsuspend-on-create", "validate", lambda s: review(gpu_job()), 403, ("only kuota", "spec.suspend")),
    Denial("unsuspend-on-update", "validate", _unsuspend, 403, ("only kuota", "spec.suspend")),
    Denial(
        "admitted-queue-change",
        "validate",
        _admitted_change(_set_label("kuota.dev/queue", "urgent")),
        403,
        ("admitted", "'urgent'"),
    ),
    Denial(
        "admitted-priority-change",
        "validate",
        _admitted_change(_set_label("kuota.dev/priority-class", "production")),
        403,
        ("admitted", "'production'"),
    ),
    Denial(
        "admitted-grows",
        "validate",
        _admitted_change(_spec(parallelism=3, completions=3)),
        403,
        ("2 pods", "3"),
    ),
    Denial(
        "forged-admission-on-create",
        "validate",
        _create(_annotate("kuota.dev/admitted-flavor", "gpu-a100")),
        403,
        ("kuota.dev/admitted-flavor",),
    ),
    Denial(
        "admission-annotation-removed",
        "validate",
        _admitted_change(lambda j: j["metadata"]["annotations"].pop("kuota.dev/admitted-flavor")),
        403,
        ("kuota.dev/admitted-flavor",),
    ),
    Denial(
        "resume-from-forged",
        "validate",
        lambda s: update(queued(s, gpu_job()), _annotate("kuota.dev/resume-from", "ckpt-9")),
        403,
        ("kuota.dev/resume-from",),
    ),
    Denial(
        "topology-assignment-forged",
        "validate",
        _admitted_change(
            _annotate("kuota.dev/topology-assignment", '{"main":{"nodes":{"gpu-node-004":2},"topology":"fabric"}}')
        ),
        403,
        ("kuota.dev/topology-assignment", "set by kuota only"),
    ),
    Denial("queue-label-removed", "validate", _removed_label, 403, ("kuota.dev/queue", "'user-queue'")),
    Denial("not-a-job", "validate", _not_a_job, 400, ("containers",)),
    Denial("not-a-job-mutate", "mutate", _spec_not_an_object, 400, ("spec",)),
    Denial("wrong-kind", "validate", _wrong_kind, 400, ("Pod",)),
    Denial("wrong-kind-mutate", "mutate", _wrong_kind, 400, ("Pod",)),
    Denial("bad-operation", "validate", _bad_operation, 400, ("PATCH",)),
    Denial("update-without-old-object", "validate", _update_without_old, 400, ("oldObject",)),
)

__all__ = ["DENIALS", "KUOTA", "Denial", "admitted", "queued", "update"]
