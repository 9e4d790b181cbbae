"""What is wrong with an object is said at the exact dotted path of the part that is wrong, then what to do.

The objects are examples from ../shared/data/crds (see its README for upstream commits) and Kueue's sample Jobs from
../shared/data/manifests, each broken at one structural level.
"""

from __future__ import annotations

from typing import Any

import pytest

from admission.labels import EXPECTED_RUNTIME, KUEUE_MIN_PARALLELISM, MIN_PARALLELISM
from workloads.kind import JobKind
from workloads.problems import JobProblemKind
from workloads.reading import convert, read, structure_problems
from workloads.registry import ALL, REGISTRY
from workloads.rules import config_index

from .examples import CONFIG, crd_example, drop, ends_with_remedy, manifest, put, submitted

DELETE = object()

NOT_A = JobProblemKind.NOT_A_JOB
INVALID = JobProblemKind.INVALID_FIELD

EXAMPLE = {
    "Job": "manifests/kueue/jobs__sample-job.yaml",
    "JobSet": "crds/jobset/examples/paralleljobs.yaml",
    "PyTorchJob": "crds/pytorchjob/examples/simple.yaml",
    "TFJob": "crds/tfjob/examples/simple.yaml",
    "XGBoostJob": "crds/xgboostjob/examples/xgboostjob_v1_rabit_test.yaml",
    "PaddleJob": "crds/paddlejob/examples/simple-cpu.yaml",
    "JAXJob": "crds/jaxjob/examples/demo.yaml",
    "MPIJob": "crds/mpijob/examples/pi.yaml",
    "TrainJob": "crds/trainjob/examples/03-kueue-integration.yaml",
    "RayJob": "crds/rayjob/examples/ray-job.sample.yaml",
    "RayCluster": "crds/raycluster/examples/ray-cluster.sample.yaml",
    "LeaderWorkerSet": "crds/leaderworkerset/examples/lws.yaml",
}
#: Kinds read from an example object (a Pod is read as the workload its pods form: test_pods.py).
WITH_EXAMPLES = [k for k in REGISTRY.names() if k in EXAMPLE]


def example(kind: str) -> tuple[JobKind, dict[str, Any]]:
    where, _, relative = EXAMPLE[kind].partition("/")
    found, obj = crd_example(relative) if where == "crds" else manifest(relative)
    return found, submitted(obj)


def broken(kind: str, path: tuple[Any, ...], value: Any) -> tuple[JobKind, dict[str, Any]]:
    found, obj = example(kind)
    if value is DELETE:
        drop(obj, path)
    else:
        put(obj, path, value)
    return found, obj


JS = ("spec", "replicatedJobs", 0)
JS_JOB = (*JS, "template", "spec")
JS_POD = (*JS_JOB, "template", "spec")
PT = ("spec", "pytorchReplicaSpecs", "Worker")
RC_WORKER = ("spec", "workerGroupSpecs", 0)
RJ_CLUSTER = ("spec", "rayClusterSpec")

CASES: list[tuple[str, tuple[Any, ...], Any, str, JobProblemKind]] = [
    # batch/v1 Job
    ("Job", ("spec", "template"), DELETE, "spec.template", NOT_A),
    ("Job", ("spec", "template"), "pod", "spec.template", NOT_A),
    ("Job", ("spec", "template", "spec"), ["containers"], "spec.template.spec", NOT_A),
    ("Job", ("spec", "template", "spec", "nodeSelector"), {"pool": 1}, "spec.template.spec.nodeSelector", NOT_A),
    ("Job", ("spec", "template", "spec", "nodeSelector"), ["pool=a"], "spec.template.spec.nodeSelector", NOT_A),
    ("Job", ("spec", "parallelism"), -1, "spec.parallelism", INVALID),
    ("Job", ("spec", "parallelism"), "3", "spec.parallelism", INVALID),
    ("Job", ("spec", "completions"), -3, "spec.completions", INVALID),
    # JobSet
    ("JobSet", ("spec", "replicatedJobs"), {"name": "workers"}, "spec.replicatedJobs", NOT_A),
    ("JobSet", ("spec", "replicatedJobs"), DELETE, "spec.replicatedJobs", NOT_A),
    ("JobSet", ("spec", "replicatedJobs", 1), "driver", "spec.replicatedJobs[1]", NOT_A),
    ("JobSet", (*JS, "name"), DELETE, "spec.replicatedJobs[0].name", NOT_A),
    ("JobSet", (*JS, "name"), 7, "spec.replicatedJobs[0].name", NOT_A),
    ("JobSet", (*JS_JOB,), "job", "spec.replicatedJobs[0].template.spec", NOT_A),
    ("JobSet", (*JS_JOB, "template"), DELETE, "spec.replicatedJobs[0].template.spec.template", NOT_A),
    ("JobSet", JS_POD, [], "spec.replicatedJobs[0].template.spec.template.spec", NOT_A),
    (
        "JobSet",
        (*JS_POD, "nodeSelector"),
        {"pool": True},
        "spec.replicatedJobs[0].template.spec.template.spec.nodeSelector",
        NOT_A,
    ),
    ("JobSet", (*JS, "replicas"), -1, "spec.replicatedJobs[0].replicas", INVALID),
    ("JobSet", (*JS_JOB, "parallelism"), -2, "spec.replicatedJobs[0].template.spec.parallelism", INVALID),
    ("JobSet", (*JS_JOB, "completions"), 1.5, "spec.replicatedJobs[0].template.spec.completions", INVALID),
    # Kubeflow v1 (PyTorchJob) and MPIJob
    ("PyTorchJob", ("spec", "pytorchReplicaSpecs"), [], "spec.pytorchReplicaSpecs", NOT_A),
    ("PyTorchJob", ("spec", "pytorchReplicaSpecs"), DELETE, "spec.pytorchReplicaSpecs", NOT_A),
    ("PyTorchJob", PT, 2, "spec.pytorchReplicaSpecs.Worker", NOT_A),
    ("PyTorchJob", (*PT, "template"), DELETE, "spec.pytorchReplicaSpecs.Worker.template", NOT_A),
    ("PyTorchJob", (*PT, "template", "spec"), "pod", "spec.pytorchReplicaSpecs.Worker.template.spec", NOT_A),
    (
        "PyTorchJob",
        (*PT, "template", "spec", "nodeSelector"),
        {"gpu": ["a100"]},
        "spec.pytorchReplicaSpecs.Worker.template.spec.nodeSelector",
        NOT_A,
    ),
    ("PyTorchJob", (*PT, "replicas"), -1, "spec.pytorchReplicaSpecs.Worker.replicas", INVALID),
    ("PyTorchJob", (*PT, "replicas"), True, "spec.pytorchReplicaSpecs.Worker.replicas", INVALID),
    ("TFJob", ("spec", "tfReplicaSpecs"), "Worker", "spec.tfReplicaSpecs", NOT_A),
    ("XGBoostJob", ("spec", "xgbReplicaSpecs", "Master"), None, "spec.xgbReplicaSpecs.Master", NOT_A),
    (
        "PaddleJob",
        ("spec", "paddleReplicaSpecs", "Worker", "replicas"),
        -2,
        "spec.paddleReplicaSpecs.Worker.replicas",
        INVALID,
    ),
    ("JAXJob", ("spec", "jaxReplicaSpecs", "Worker", "template"), [], "spec.jaxReplicaSpecs.Worker.template", NOT_A),
    ("MPIJob", ("spec", "mpiReplicaSpecs", "Launcher"), "launcher", "spec.mpiReplicaSpecs.Launcher", NOT_A),
    ("MPIJob", ("spec", "mpiReplicaSpecs", "Worker", "replicas"), -2, "spec.mpiReplicaSpecs.Worker.replicas", INVALID),
    # TrainJob: what it says itself (its pod templates are its runtime's: tests/workloads/test_trainjob.py)
    ("TrainJob", ("spec", "runtimeRef"), DELETE, "spec.runtimeRef", NOT_A),
    ("TrainJob", ("spec", "runtimeRef"), "torch-distributed", "spec.runtimeRef", NOT_A),
    ("TrainJob", ("spec", "runtimeRef", "name"), DELETE, "spec.runtimeRef.name", NOT_A),
    ("TrainJob", ("spec", "runtimeRef", "name"), 7, "spec.runtimeRef.name", NOT_A),
    ("TrainJob", ("spec", "runtimeRef", "kind"), ["TrainingRuntime"], "spec.runtimeRef.kind", NOT_A),
    ("TrainJob", ("spec", "trainer"), "trainer", "spec.trainer", NOT_A),
    ("TrainJob", ("spec", "trainer", "numNodes"), -1, "spec.trainer.numNodes", INVALID),
    ("TrainJob", ("spec", "trainer", "numNodes"), "3", "spec.trainer.numNodes", INVALID),
    ("TrainJob", ("spec", "trainer", "resourcesPerNode"), [], "spec.trainer.resourcesPerNode", NOT_A),
    (
        "TrainJob",
        ("spec", "trainer", "resourcesPerNode", "requests"),
        "cpu=2",
        "spec.trainer.resourcesPerNode.requests",
        NOT_A,
    ),
    ("TrainJob", ("spec", "runtimePatches"), {"manager": "x.io/m"}, "spec.runtimePatches", NOT_A),
    ("TrainJob", ("spec", "runtimePatches"), ["x.io/m"], "spec.runtimePatches[0]", NOT_A),
    # RayCluster
    ("RayCluster", ("spec", "headGroupSpec"), [], "spec.headGroupSpec", NOT_A),
    ("RayCluster", ("spec", "headGroupSpec", "template"), DELETE, "spec.headGroupSpec.template", NOT_A),
    ("RayCluster", ("spec", "workerGroupSpecs"), {"groupName": "w"}, "spec.workerGroupSpecs", NOT_A),
    ("RayCluster", RC_WORKER, "workergroup", "spec.workerGroupSpecs[0]", NOT_A),
    ("RayCluster", (*RC_WORKER, "groupName"), "head", "spec.workerGroupSpecs[0].groupName", NOT_A),
    ("RayCluster", (*RC_WORKER, "groupName"), DELETE, "spec.workerGroupSpecs[0].groupName", NOT_A),
    ("RayCluster", (*RC_WORKER, "template"), DELETE, "spec.workerGroupSpecs[0].template", NOT_A),
    (
        "RayCluster",
        (*RC_WORKER, "template", "spec", "nodeSelector"),
        "pool=a",
        "spec.workerGroupSpecs[0].template.spec.nodeSelector",
        NOT_A,
    ),
    ("RayCluster", (*RC_WORKER, "replicas"), -1, "spec.workerGroupSpecs[0].replicas", INVALID),
    ("RayCluster", (*RC_WORKER, "numOfHosts"), -4, "spec.workerGroupSpecs[0].numOfHosts", INVALID),
    # RayJob
    ("RayJob", RJ_CLUSTER, "cluster", "spec.rayClusterSpec", NOT_A),
    ("RayJob", RJ_CLUSTER, DELETE, "spec.rayClusterSpec", NOT_A),
    (
        "RayJob",
        (*RJ_CLUSTER, "headGroupSpec", "template", "spec"),
        1,
        "spec.rayClusterSpec.headGroupSpec.template.spec",
        NOT_A,
    ),
    (
        "RayJob",
        (*RJ_CLUSTER, "workerGroupSpecs", 0, "groupName"),
        "head",
        "spec.rayClusterSpec.workerGroupSpecs[0].groupName",
        NOT_A,
    ),
    (
        "RayJob",
        (*RJ_CLUSTER, "workerGroupSpecs", 0, "replicas"),
        -1,
        "spec.rayClusterSpec.workerGroupSpecs[0].replicas",
        INVALID,
    ),
]


def _id(case: tuple[Any, ...]) -> str:
    kind, path, value, _, _ = case
    return f"{kind}-{'.'.join(map(str, path))}={'DELETE' if value is DELETE else repr(value)}"


@pytest.mark.parametrize(("kind", "path", "value", "field", "problem"), CASES, ids=[_id(c) for c in CASES])
def test_a_wrong_part_is_one_problem_at_its_path(
    kind: str, path: tuple[Any, ...], value: Any, field: str, problem: JobProblemKind
) -> None:
    found, obj = broken(kind, path, value)
    problems = structure_problems(found, obj)
    assert [(p.kind, p.field) for p in problems] == [(problem, field)]
    (only,) = problems
    assert only.message.startswith(field + " ")
    assert ends_with_remedy(only.message), only.message
    if problem is NOT_A:
        assert only.message.endswith(f"; send a valid {found.noun}")
    else:
        assert only.message.endswith("; set it to a whole number of pods (0 or more)")
    # The reading and the conversion refuse the object with the same problem.
    conversion = convert(found, obj, CONFIG)
    assert conversion.workload is None
    assert conversion.problems == tuple(problems)
    reading = read(found, obj, config_index(CONFIG))
    assert reading.pod_sets is None and reading.problems == tuple(problems)


@pytest.mark.parametrize("kind", WITH_EXAMPLES)
@pytest.mark.parametrize("spec", ["job", 3, ["replicatedJobs"], True])
def test_spec_that_is_not_an_object(kind: str, spec: Any) -> None:
    found, obj = broken(kind, ("spec",), spec)
    problems = structure_problems(found, obj)
    assert [(p.kind, p.field, p.message) for p in problems] == [
        (NOT_A, "spec", f"spec must be an object; send a valid {found.noun}")
    ]


def test_spec_that_is_null_reads_as_no_spec() -> None:
    # `metadata: null` reads as no metadata; `spec: null` must read as no spec, whose pod templates are missing,
    # not as an object with no pod sets at all.
    differ = []
    for kind in ALL:
        without = submitted({"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": "x"}})
        null = {**without, "spec": None}
        assert structure_problems(kind, without) != []
        if structure_problems(kind, null) != structure_problems(kind, without) or convert(kind, null, CONFIG).workload:
            differ.append(kind.kind)
    assert differ == []


@pytest.mark.parametrize("template", [DELETE, "job-template"], ids=["missing", "a string"])
def test_jobset_child_job_template_that_is_not_an_object_is_named_at_template(template: Any) -> None:
    # The replicated job's `template` is what is missing or mistyped, as `spec.template` is a Job's.
    found, obj = broken("JobSet", (*JS, "template"), template)
    assert [p.field for p in structure_problems(found, obj)] == ["spec.replicatedJobs[0].template"]


def test_every_problem_of_a_badly_broken_object_is_found_in_order() -> None:
    found, obj = example("JobSet")
    obj["spec"]["replicatedJobs"][0]["replicas"] = -1
    obj["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {"a": 1}
    obj["metadata"]["labels"]["team"] = 5
    assert [p.field for p in structure_problems(found, obj)] == [
        "metadata.labels",
        "spec.replicatedJobs[0].replicas",
        "spec.replicatedJobs[1].template.spec.template.spec.nodeSelector",
    ]


def test_not_an_object_at_all() -> None:
    for kind in ALL:
        (problem,) = structure_problems(kind, ["kind", kind.kind])
        assert (problem.kind, problem.field) == (NOT_A, "the object")
        assert problem.message == f"the object must be an object; send a valid {kind.noun}"


# -- partial admission: only a Job can start with fewer pods ---------------------------------------------------


@pytest.mark.parametrize("kind", [k for k in WITH_EXAMPLES if k != "Job"])
@pytest.mark.parametrize("annotation", [MIN_PARALLELISM, KUEUE_MIN_PARALLELISM])
def test_min_parallelism_on_a_kind_without_partial_admission_is_a_problem(kind: str, annotation: str) -> None:
    found, obj = example(kind)
    assert not found.partial_admission
    obj["metadata"]["annotations"] = {annotation: "1"}
    conversion = convert(found, obj, CONFIG)
    assert conversion.workload is None
    (problem,) = conversion.problems
    assert (problem.kind, problem.field) == (
        JobProblemKind.BAD_MIN_PARALLELISM,
        f"metadata.annotations[{annotation}]",
    )
    assert problem.message.endswith("; remove the annotation")
    # Not a structural problem: the object is well formed, kuota only refuses the promise.
    assert structure_problems(found, obj) == []


@pytest.mark.parametrize(("value", "expected"), [("2", 2), ("3", 3), (" 1 ", 1)])
def test_min_parallelism_on_a_job_sets_its_min_count(value: str, expected: int) -> None:
    found, obj = example("Job")  # parallelism 3, completions 3
    assert found.partial_admission
    obj["metadata"]["annotations"] = {MIN_PARALLELISM: value}
    conversion = convert(found, obj, CONFIG)
    assert conversion.problems == ()
    assert conversion.workload is not None
    (pod_set,) = conversion.workload.pod_sets
    assert (pod_set.name, pod_set.count, pod_set.min_count) == ("main", 3, expected)


def test_kuota_min_parallelism_wins_over_kueues() -> None:
    found, obj = manifest("kueue/jobs__sample-job-partial-admission.yaml")  # Kueue's annotation says 5
    obj = submitted(obj)
    obj["metadata"]["annotations"][MIN_PARALLELISM] = "8"
    workload = convert(found, obj, CONFIG).workload
    assert workload is not None and workload.pod_sets[0].min_count == 8


@pytest.mark.parametrize("value", ["0", "4", "-1", "two", "", "1.5"])
def test_min_parallelism_out_of_range_on_a_job_is_a_problem(value: str) -> None:
    found, obj = example("Job")
    obj["metadata"]["annotations"] = {MIN_PARALLELISM: value}
    (problem,) = convert(found, obj, CONFIG).problems
    assert (problem.kind, problem.field) == (
        JobProblemKind.BAD_MIN_PARALLELISM,
        f"metadata.annotations[{MIN_PARALLELISM}]",
    )
    assert "from 1 to spec.parallelism (3)" in problem.message
    assert ends_with_remedy(problem.message)


def test_ray_worker_groups_need_names_of_their_own() -> None:
    """Pod sets are told apart by name: a second worker group of the same name, or one named `submitter` beside a
    RayJob's submitter pod set, would merge two pod sets' placements; each is a problem at its groupName."""
    kind, obj = crd_example("raycluster/examples/ray-cluster.sample.yaml")
    twice = obj["spec"]["workerGroupSpecs"][0]
    obj["spec"]["workerGroupSpecs"].append(dict(twice))
    (problem,) = structure_problems(kind, obj)
    assert problem.field == "spec.workerGroupSpecs[1].groupName"
    assert f"a name other than head, {twice['groupName']}" in problem.message

    rayjob = REGISTRY.get("RayJob")
    assert rayjob is not None
    job = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "r", "namespace": "ml"},
        "spec": {
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
                "workerGroupSpecs": [{"groupName": "submitter", "template": {"spec": {"containers": [{"name": "w"}]}}}],
            },
            "submitterPodTemplate": {"spec": {"containers": [{"name": "s"}], "restartPolicy": "Never"}},
        },
    }
    (clash,) = structure_problems(rayjob, job)
    assert clash.field == "spec.rayClusterSpec.workerGroupSpecs[0].groupName" and "submitter" in clash.message
    del job["spec"]["submitterPodTemplate"]  # without a submitter pod set the name is free
    assert structure_problems(rayjob, job) == []


# -- the expected run time a job declares (for wait-time estimates) ------------------------------------------------


@pytest.mark.parametrize("kind", WITH_EXAMPLES)
@pytest.mark.parametrize(("value", "expected"), [("6h", 6 * 3_600_000), ("1h30m", 5_400_000), ("90s", 90_000)])
def test_expected_runtime_is_read_into_the_workload(kind: str, value: str, expected: int) -> None:
    found, obj = example(kind)
    obj["metadata"].setdefault("annotations", {})[EXPECTED_RUNTIME] = value
    conversion = convert(found, obj, CONFIG)
    if conversion.workload is None:  # a kind whose example reads its pod sets from another object
        assert not conversion.problems
        return
    assert conversion.workload.expected_runtime_ms == expected


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("soon", "'soon' is not a duration"),
        ("1000000h", "longer than 100 years"),
        ("-5m", "is not a duration"),
        ("9" * 80, "characters long, not a duration"),
    ],
)
def test_a_bad_expected_runtime_is_a_problem(value: Any, says: str) -> None:
    found, obj = example("Job")
    obj["metadata"]["annotations"] = {EXPECTED_RUNTIME: value}
    conversion = convert(found, obj, CONFIG)
    assert conversion.workload is None
    (problem,) = conversion.problems
    assert (problem.kind, problem.field) == (
        JobProblemKind.BAD_EXPECTED_RUNTIME,
        f"metadata.annotations[{EXPECTED_RUNTIME}]",
    )
    assert says in problem.message and problem.message.endswith("or remove it")


def test_no_expected_runtime_declared_is_none() -> None:
    found, obj = example("Job")
    workload = convert(found, obj, CONFIG).workload
    assert workload is not None and workload.expected_runtime_ms is None
