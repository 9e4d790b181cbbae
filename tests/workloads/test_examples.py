"""Every upstream example of a kind kuota queues reads into exactly the pod sets its YAML describes.

Examples from ../shared/data/crds (see its README for upstream commits); Kueue, JobSet and Kubeflow sample manifests
from ../shared/data/manifests (see its README for the commits). The expected pod sets are written out by hand from
each file: names, pods each, and per-pod requests in milli-units (a limit with no request counts as the request).
A TrainJob's are those of the training runtime it names, from the same folder (tests/workloads/test_trainjob.py
spells them out).
"""

from __future__ import annotations

from typing import Any

import pytest

from admission.labels import KUEUE_QUEUE_LABEL, QUEUE_LABEL
from workloads.reading import convert, read, workload_key, workload_of
from workloads.registry import REGISTRY
from workloads.rules import config_index

from .examples import (
    CONFIG,
    CRDS,
    GI,
    MANIFESTS,
    MI,
    NAMESPACE,
    all_documents,
    crd_example,
    crd_example_files,
    kind_of,
    manifest,
    manifest_files,
    resolve,
    submitted,
    with_registered_objects,
)

PodSets = list[tuple[str, int, dict[str, int]]]

EXPECTED_CRD_EXAMPLES: dict[str, PodSets] = {
    "jobset/examples/paralleljobs.yaml": [("workers", 4, {}), ("driver", 1, {})],
    "jobset/examples/success-policy.yaml": [("leader", 1, {}), ("workers", 2, {})],
    "pytorchjob/examples/simple.yaml": [("master", 1, {}), ("worker", 1, {})],
    "pytorchjob/examples/pytorch_job_mnist_nccl.yaml": [
        ("master", 1, {"nvidia.com/gpu": 1000}),
        ("worker", 1, {"nvidia.com/gpu": 1000}),
    ],
    "tfjob/examples/simple.yaml": [("worker", 2, {})],
    "xgboostjob/examples/xgboostjob_v1_rabit_test.yaml": [("master", 1, {}), ("worker", 2, {})],
    "paddlejob/examples/simple-cpu.yaml": [("worker", 2, {})],
    "paddlejob/examples/simple-gpu.yaml": [("worker", 2, {"nvidia.com/gpu": 2000})],
    "jaxjob/examples/demo.yaml": [("worker", 2, {})],
    "mpijob/examples/pi.yaml": [
        ("launcher", 1, {"cpu": 1000, "memory": GI}),
        ("worker", 2, {"cpu": 1000, "memory": GI}),
    ],
    "mpijob/examples/tensorflow-benchmarks.yaml": [("launcher", 1, {}), ("worker", 2, {"nvidia.com/gpu": 1000})],
    # Requests win over limits resource by resource: the head asks for 2Gi (limit 5Gi), the worker for 200m (limit 1).
    # The trainer step of ClusterTrainingRuntime torch-distributed at spec.trainer.numNodes; 03 asks for 2 CPUs and
    # 4Gi per node (limits 4 and 8Gi); 05's TrainingRuntime adds a dataset initializer of one pod.
    "trainjob/examples/01-multi-node.yaml": [("node", 3, {})],
    "trainjob/examples/03-kueue-integration.yaml": [("node", 3, {"cpu": 2000, "memory": 4 * GI})],
    "trainingruntime/examples/05-multi-step.yaml": [
        ("dataset-initializer", 1, {}),
        ("node", 2, {"cpu": 2000, "memory": 4 * GI}),
    ],
    "rayjob/examples/ray-job.sample.yaml": [
        ("head", 1, {"cpu": 1000, "memory": 2 * GI}),
        ("small-group", 1, {"cpu": 200}),
    ],
    "rayjob/examples/ray-job.kueue-toy-sample.yaml": [
        ("head", 1, {"cpu": 1000, "memory": 2 * GI}),
        ("small-group", 1, {"cpu": 1000, "memory": GI}),
    ],
    # One group of each LeaderWorkerSet: `main` (size pods) without a leader template, else a leader and size - 1
    # workers; the vLLM pods ask for 8 GPUs, 125 CPUs, 1124Gi of memory (a limit) and 800Gi of ephemeral storage.
    "leaderworkerset/examples/lws.yaml": [("main", 4, {"cpu": 50})],
    "leaderworkerset/examples/vllm-GPU-lws.yaml": [
        ("leader", 1, {"nvidia.com/gpu": 8000, "cpu": 125_000, "memory": 1124 * GI, "ephemeral-storage": 800 * GI}),
        ("worker", 1, {"nvidia.com/gpu": 8000, "cpu": 125_000, "memory": 1124 * GI, "ephemeral-storage": 800 * GI}),
    ],
    "raycluster/examples/ray-cluster.sample.yaml": [
        ("head", 1, {"cpu": 1000, "memory": 5 * GI}),
        ("workergroup", 1, {"cpu": 1000, "memory": GI}),
    ],
}

_KUEUE_JOB = [("main", 3, {"cpu": 1000, "memory": 200 * MI})]

EXPECTED_MANIFESTS: dict[str, PodSets] = {
    "jobset/simple__paralleljobs.yaml": [("workers", 4, {}), ("driver", 1, {})],
    "jobset/simple__success-policy.yaml": [("leader", 1, {}), ("workers", 2, {})],
    "jobset/simple__failure-policy.yaml": [("leader", 2, {}), ("workers", 2, {})],
    "jobset/pytorch__resnet-cifar10__resnet.yaml": [("workers", 4, {})],
    # 2 slices of 4 pods, 4 TPU chips (a limit) per pod.
    "jobset/tpu-multislice__v6e-jax-workload.yaml": [("slice", 8, {"google.com/tpu": 4000})],
    "jobset/workload-aware-scheduling__preemption__high-priority-jobset.yaml": [("rj", 4, {"cpu": 3000})],
    "jobset/workload-aware-scheduling__preemption__low-priority-jobset.yaml": [("rj", 4, {"cpu": 3000})],
    "kubeflow-training-operator/pytorch_deepspeed_demo.yaml": [
        ("master", 1, {"nvidia.com/gpu": 1000}),
        ("worker", 1, {"nvidia.com/gpu": 1000}),
    ],
    "kubeflow-training-operator/pytorch_job_mnist_nccl.yaml": [
        ("master", 1, {"nvidia.com/gpu": 1000}),
        ("worker", 1, {"nvidia.com/gpu": 1000}),
    ],
    "kubeflow-training-operator/simple.yaml": [("master", 1, {}), ("worker", 1, {})],
    "kueue/admin__shared-quota-sample-job.yaml": [("main", 1, {"cpu": 3000})],
    "kueue/admission-fs__lq-a-simple-job.yaml": [("main", 1, {"cpu": 3000})],
    "kueue/admission-fs__lq-b-simple-job.yaml": [("main", 1, {"cpu": 3000})],
    "kueue/getting-started__quick-start-job.yaml": _KUEUE_JOB,
    "kueue/jobs__ray-job-sample.yaml": [("head", 1, {"cpu": 1000}), ("small-group", 1, {"cpu": 1000})],
    "kueue/jobs__sample-job-partial-admission.yaml": [("main", 20, {"cpu": 1000, "memory": 200 * MI})],
    "kueue/jobs__sample-job.yaml": _KUEUE_JOB,
    "kueue/jobs__sample-jobset.yaml": [
        ("workers", 1, {"cpu": 1000, "memory": 200 * MI}),
        ("driver", 1, {"cpu": 2000, "memory": 200 * MI}),
    ],
    "kueue/jobs__sample-mpijob.yaml": [
        ("launcher", 1, {"cpu": 1000, "memory": GI}),
        ("worker", 2, {"cpu": 1000, "memory": GI}),
    ],
    "kueue/jobs__sample-pytorchjob.yaml": [
        ("master", 1, {"cpu": 1000, "memory": 200 * MI}),
        ("worker", 1, {"cpu": 1000, "memory": 200 * MI}),
    ],
    # parallelism 3 of 100 completions: 3 pods at once.
    "kueue/jobs__sample-scalable-job.yaml": [("main", 3, {"cpu": 100, "memory": 100 * MI})],
    "kueue/jobs__sample-tfjob.yaml": [
        ("ps", 1, {"cpu": 1000, "memory": 200 * MI}),
        ("worker", 2, {"cpu": 1000, "memory": 200 * MI}),
    ],
    "kueue/provisioning__sample-job.yaml": [("main", 3, {"cpu": 100, "memory": 100 * MI, "nvidia.com/gpu": 1000})],
    "kueue/tas__sample-job-preferred.yaml": [("main", 40, {"cpu": 1000, "memory": 200 * MI})],
    "kueue/tas__sample-job-required.yaml": [("main", 10, {"cpu": 1000, "memory": 200 * MI})],
}

#: The min-parallelism annotation of Kueue's partial-admission sample (kueue.x-k8s.io/job-min-parallelism: "5").
EXPECTED_MIN_COUNT = {"kueue/jobs__sample-job-partial-admission.yaml": 5}


def _pod_sets(workload: Any) -> PodSets:
    return [(p.name, p.count, dict(p.requests)) for p in workload.pod_sets]


def test_every_crd_example_of_a_registered_kind_has_its_pod_sets_written_down() -> None:
    assert with_registered_objects(crd_example_files(), CRDS) == sorted(EXPECTED_CRD_EXAMPLES)


def test_every_sample_manifest_of_a_registered_kind_has_its_pod_sets_written_down() -> None:
    assert with_registered_objects(manifest_files(), MANIFESTS) == sorted(EXPECTED_MANIFESTS)


def test_every_registered_kind_but_job_has_a_crd_example() -> None:
    kinds = {kind.kind for _, doc in all_documents(crd_example_files()) if (kind := kind_of(doc)) is not None}
    assert kinds == set(REGISTRY.names()) - {"Job", "Pod"}


def test_the_examples_kuota_does_not_queue_are_the_kinds_it_has_no_module_for() -> None:
    others = {doc["kind"] for _, doc in all_documents(crd_example_files()) if kind_of(doc) is None}
    assert others == {
        "AppWrapper",
        "ClusterTrainingRuntime",
        "ConfigMap",
        "RayService",
        "Service",
        "TrainingRuntime",
    }


def _check(kind: Any, obj: dict[str, Any], expected: PodSets, min_count: int | None) -> None:
    body = submitted(obj)
    conversion = convert(kind, body, CONFIG, resolve=resolve)
    assert conversion.problems == ()
    workload = conversion.workload
    assert workload is not None
    metadata = obj["metadata"]
    assert workload.name == workload_key(kind.kind, NAMESPACE, metadata.get("name") or metadata["generateName"])
    assert (workload.team, workload.queue) == ("ml", "ml/ml")
    assert _pod_sets(workload) == expected
    assert [p.min_count for p in workload.pod_sets] == [min_count if kind.kind == "Job" else None] * len(expected)
    assert workload.labels[QUEUE_LABEL] == "ml"
    # The webhooks' reading finds the same pod sets without building the workload.
    reading = read(kind, body, config_index(CONFIG), resolve=resolve)
    assert reading.problems == ()
    assert reading.pod_sets is not None
    assert [(p.name, p.count, p.requests) for p in reading.pod_sets] == expected
    assert workload_of(kind, body, CONFIG, resolve=resolve) == workload
    assert kind.pod_count(body, resolve) == sum(count for _, count, _ in expected)


@pytest.mark.parametrize("relative", sorted(EXPECTED_CRD_EXAMPLES))
def test_crd_example_reads_into_its_pod_sets(relative: str) -> None:
    kind, obj = crd_example(relative)
    _check(kind, obj, EXPECTED_CRD_EXAMPLES[relative], None)


@pytest.mark.parametrize("relative", sorted(EXPECTED_MANIFESTS))
def test_sample_manifest_reads_into_its_pod_sets(relative: str) -> None:
    kind, obj = manifest(relative)
    _check(kind, obj, EXPECTED_MANIFESTS[relative], EXPECTED_MIN_COUNT.get(relative))


def test_jobset_names_the_kueue_queue_but_the_kuota_label_wins() -> None:
    kind, obj = manifest("jobset/tpu-multislice__v6e-jax-workload.yaml")
    assert obj["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "multislice-queue"
    workload = workload_of(kind, submitted(obj), CONFIG)
    assert workload.queue == "ml/ml"
    # The slice's own node selector travels with its pod set.
    (pod_set,) = workload.pod_sets
    assert pod_set.node_selector == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }


def test_an_example_without_a_queue_in_an_unmanaged_namespace_is_not_kuotas() -> None:
    kind, obj = crd_example("jobset/examples/paralleljobs.yaml")
    conversion = convert(kind, submitted(obj, queue=None), CONFIG)
    assert conversion == (None, (), conversion.names)
    assert conversion.names.queue is None


# The submitterPodTemplate that ray-job.sample.yaml carries commented out, uncommented, with requests added.
SUBMITTER = {
    "spec": {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "my-custom-rayjob-submitter-pod",
                "image": "rayproject/ray:2.52.0",
                "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}},
            }
        ],
    }
}


def test_rayjob_submitter_pod_template_is_a_pod_set_of_one() -> None:
    # In the default K8sJobMode the submitter is a pod of its own, admitted with the cluster.
    kind, obj = crd_example("rayjob/examples/ray-job.sample.yaml")
    obj["spec"]["submitterPodTemplate"] = SUBMITTER
    conversion = convert(kind, submitted(obj), CONFIG)
    assert conversion.problems == ()
    assert conversion.workload is not None
    assert _pod_sets(conversion.workload) == [
        *EXPECTED_CRD_EXAMPLES["rayjob/examples/ray-job.sample.yaml"],
        ("submitter", 1, {"cpu": 500, "memory": 200 * MI}),
    ]


def test_rayjob_in_http_mode_has_no_submitter_pod() -> None:
    kind, obj = crd_example("rayjob/examples/ray-job.sample.yaml")
    obj["spec"]["submitterPodTemplate"] = SUBMITTER
    obj["spec"]["submissionMode"] = "HTTPMode"
    workload = workload_of(kind, submitted(obj), CONFIG)
    assert _pod_sets(workload) == EXPECTED_CRD_EXAMPLES["rayjob/examples/ray-job.sample.yaml"]


def test_ray_worker_group_pods_are_replicas_times_hosts() -> None:
    kind, obj = crd_example("raycluster/examples/ray-cluster.sample.yaml")
    obj["spec"]["workerGroupSpecs"][0].update(replicas=3, numOfHosts=4)
    workload = workload_of(kind, submitted(obj), CONFIG)
    assert [(p.name, p.count) for p in workload.pod_sets] == [("head", 1), ("workergroup", 12)]
