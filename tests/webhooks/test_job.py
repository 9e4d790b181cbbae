"""The job framework on batch/v1 Jobs: a Job body reduced to the workload the engine admits."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from admission.labels import KUEUE_MIN_PARALLELISM, MIN_PARALLELISM
from quota.loader import load_config_file
from workloads.kinds.job import POD_SET_NAME
from workloads.problems import JobError, JobProblemKind
from workloads.quantities import pod_requests
from workloads.rules import is_managed, requested_names

from .helpers import (
    MANIFESTS,
    QUOTA_FILE,
    convert_job,
    gpu_job,
    job_from_pod_template,
    manifest,
    resolve_priority_class,
    workload_from_job,
)

CONFIG = load_config_file(QUOTA_FILE)
GI = 2**30 * 1000


def container(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "image": "busybox", "resources": resources, **extra}


def test_eidf_gpu_job_counts_gpus_given_as_limits_only() -> None:
    job = manifest("eidf-gpu-service/training__L3_running_a_pytorch_task__block3.yaml", "eidf018ns")
    job["metadata"]["labels"] = {"kuota.dev/queue": "eidf018ns-user-queue"}
    workload = workload_from_job(job, CONFIG)
    assert workload.name == "Job/eidf018ns/pytorch-job-x7k2p"
    assert workload.team == "eidf018"
    assert workload.queue == "eidf018ns/eidf018ns-user-queue"
    (pod_set,) = workload.pod_sets
    assert pod_set.name == POD_SET_NAME
    # completions 3, parallelism defaults to 1: one pod at a time.
    assert pod_set.count == 1
    # requests win over limits (cpu 2 requested, 4 limit); the GPU appears in limits only.
    assert pod_set.requests == {"cpu": 2000, "memory": 1 * GI, "nvidia.com/gpu": 1000}
    assert pod_set.node_selector == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}
    assert workload.priority_class == "research" and workload.priority == 1000 and workload.preemptible
    assert workload.created_at == 1772352000000  # 2026-03-01T08:00:00Z


def test_kueue_sample_job_and_its_queue_label() -> None:
    job = manifest("kueue/jobs__sample-job.yaml")
    names = requested_names(job)
    assert (names.queue, names.queue_label) == ("user-queue", "kueue.x-k8s.io/queue-name")
    workload = workload_from_job(job, CONFIG)
    assert workload.team == "kueue-sample"
    assert workload.pod_sets[0].count == 3
    assert workload.pod_sets[0].requests == {"cpu": 1000, "memory": 200 * 2**20 * 1000}


def test_kueue_partial_admission_annotation_sets_min_count() -> None:
    job = manifest("kueue/jobs__sample-job-partial-admission.yaml")
    assert job["metadata"]["annotations"] == {KUEUE_MIN_PARALLELISM: "5"}
    pod_set = workload_from_job(job, CONFIG).pod_sets[0]
    assert (pod_set.count, pod_set.min_count) == (20, 5)
    job["metadata"]["annotations"][MIN_PARALLELISM] = "8"  # kuota's own annotation wins
    assert workload_from_job(job, CONFIG).pod_sets[0].min_count == 8


def test_kubeflow_worker_template_with_gpu_limit_only() -> None:
    pytorch = yaml.safe_load((MANIFESTS / "kubeflow-training-operator/pytorch_job_mnist_nccl.yaml").read_text())
    template = pytorch["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    job = job_from_pod_template(template, "mnist", "eidf019ns", {"kuota.dev/queue": "eidf019ns-user-queue"})
    workload = workload_from_job(job, CONFIG)
    assert workload.team == "eidf019"
    assert workload.pod_sets[0].requests == {"nvidia.com/gpu": 1000}


def test_completions_cap_parallelism() -> None:
    job = gpu_job(parallelism=4)
    job["spec"]["completions"] = 2
    assert workload_from_job(job, CONFIG).pod_sets[0].count == 2


def test_effective_requests_follow_kubernetes_with_init_containers_and_sidecars() -> None:
    pod = {
        "containers": [container({"cpu": "1", "memory": "1Gi"}), container({"cpu": "500m"}, {"nvidia.com/gpu": 2})],
        "initContainers": [
            # a plain init container larger than the app containers: the pod needs it while it runs
            container({"cpu": "4"}),
            # a sidecar runs all along: it adds to the containers and to every later init container
            container({"memory": "2Gi"}, restartPolicy="Always"),
            container({"memory": "1Gi"}),
        ],
        "overhead": {"cpu": "100m"},
    }
    requests, problems = pod_requests(pod)
    assert problems == []
    # cpu: max(1 + 0.5, 4) + 0.1 overhead; memory: max(1 + 2, 2 + 1) = 3Gi; gpu from limits.
    assert requests == {"cpu": 4100, "memory": 3 * GI, "nvidia.com/gpu": 2000}


def test_sidecar_before_an_init_container_counts_during_it() -> None:
    pod = {
        "containers": [container({"memory": "1Gi"})],
        "initContainers": [container({"memory": "2Gi"}, restartPolicy="Always"), container({"memory": "3Gi"})],
    }
    assert pod_requests(pod)[0] == {"memory": 5 * GI}  # 2Gi sidecar + 3Gi init beats 2Gi + 1Gi


def test_pod_level_resources_replace_the_containers_sum_for_cpu_and_memory() -> None:
    pod = {
        "containers": [container({"cpu": "1", "memory": "1Gi"}, {"nvidia.com/gpu": 1}), container({"cpu": "1"})],
        "resources": {"limits": {"cpu": "3", "memory": "4Gi"}, "requests": {"memory": "2Gi"}},
    }
    assert pod_requests(pod)[0] == {"cpu": 3000, "memory": 2 * GI, "nvidia.com/gpu": 1000}


def test_priority_resolution_order() -> None:
    job = gpu_job()
    assert resolve_priority_class(job, CONFIG).name == "research"  # type: ignore[union-attr]
    job["spec"]["template"]["spec"]["priorityClassName"] = "production"
    assert resolve_priority_class(job, CONFIG).name == "production"  # type: ignore[union-attr]
    job["spec"]["template"]["spec"]["priorityClassName"] = "not-a-kuota-class"
    assert resolve_priority_class(job, CONFIG).name == "research"  # type: ignore[union-attr]
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high-priority"
    assert resolve_priority_class(job, CONFIG).name == "high-priority"  # type: ignore[union-attr]
    job["metadata"]["labels"]["kuota.dev/priority-class"] = "system-critical"
    workload = workload_from_job(job, CONFIG)
    assert (workload.priority_class, workload.priority, workload.preemptible) == ("system-critical", 1000000, False)


def test_no_priority_classes_configured_means_priority_zero() -> None:
    config = CONFIG.model_copy(update={"priority_classes": ()})
    workload = workload_from_job(gpu_job(), config)
    assert (workload.priority_class, workload.priority) == (None, 0)


def test_managed_namespace_default_queue() -> None:
    job = gpu_job(queue=None)
    assert is_managed(job, CONFIG)
    assert workload_from_job(job, CONFIG).queue == "eidf018ns/eidf018ns-user-queue"
    unmanaged = gpu_job(namespace="elsewhere", queue=None)
    assert not is_managed(unmanaged, CONFIG)
    conversion = convert_job(unmanaged, CONFIG)
    assert conversion.workload is None and conversion.problems == ()
    with pytest.raises(JobError):
        workload_from_job(unmanaged, CONFIG)


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        (lambda j: j["metadata"]["labels"].update({"kuota.dev/queue": "nope"}), JobProblemKind.UNKNOWN_QUEUE),
        (lambda j: j["metadata"]["labels"].update({"kuota.dev/queue": "cpu"}), JobProblemKind.QUEUE_NOT_OPEN),
        (lambda j: j["metadata"]["labels"].update({"kuota.dev/queue": "a b"}), JobProblemKind.INVALID_QUEUE_NAME),
        (
            lambda j: j["metadata"]["labels"].update({"kuota.dev/priority-class": "x"}),
            JobProblemKind.UNKNOWN_PRIORITY_CLASS,
        ),
        (lambda j: j["metadata"].update(annotations={MIN_PARALLELISM: "0"}), JobProblemKind.BAD_MIN_PARALLELISM),
        (lambda j: j["metadata"].update(annotations={MIN_PARALLELISM: "2"}), JobProblemKind.BAD_MIN_PARALLELISM),
        (lambda j: j["metadata"].update(annotations={MIN_PARALLELISM: "one"}), JobProblemKind.BAD_MIN_PARALLELISM),
        (
            lambda j: j["metadata"].update(annotations={"kuota.dev/checkpoint-url": "ftp://x/y"}),
            JobProblemKind.BAD_CHECKPOINT_URL,
        ),
        (lambda j: j["spec"].update(parallelism=-1), JobProblemKind.INVALID_FIELD),
        (lambda j: j["spec"].update(parallelism="3"), JobProblemKind.INVALID_FIELD),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(cpu="lots"),
            JobProblemKind.BAD_QUANTITY,
        ),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"].update(cpu="-1"),
            JobProblemKind.BAD_QUANTITY,
        ),
        (lambda j: j["spec"]["template"]["spec"].update(containers={}), JobProblemKind.NOT_A_JOB),
        (lambda j: j["spec"].update(template=[]), JobProblemKind.NOT_A_JOB),
    ],
)
def test_problems(change: Any, kind: JobProblemKind) -> None:
    job = gpu_job()
    change(job)
    conversion = convert_job(job, CONFIG)
    assert conversion.workload is None
    assert [p.kind for p in conversion.problems] == [kind]
    with pytest.raises(JobError) as error:
        workload_from_job(job, CONFIG)
    assert error.value.problems == conversion.problems


def test_every_problem_is_reported_at_once() -> None:
    job = gpu_job()
    job["metadata"]["labels"]["kuota.dev/queue"] = "nope"
    job["metadata"]["annotations"] = {"kuota.dev/checkpoint-url": "file:///tmp/x"}
    kinds = {p.kind for p in convert_job(job, CONFIG).problems}
    assert kinds == {JobProblemKind.UNKNOWN_QUEUE, JobProblemKind.BAD_CHECKPOINT_URL}


def test_request_namespace_is_used_when_the_body_has_none() -> None:
    job = gpu_job()
    del job["metadata"]["namespace"]
    assert convert_job(job, CONFIG).problems[0].kind is JobProblemKind.NO_NAMESPACE
    assert workload_from_job(job, CONFIG, namespace="eidf018ns").team == "eidf018"


def test_conversion_is_pure_and_repeatable() -> None:
    job = gpu_job(parallelism=2)
    before = copy.deepcopy(job)
    assert workload_from_job(job, CONFIG) == workload_from_job(job, CONFIG)
    assert job == before  # the body is not modified
