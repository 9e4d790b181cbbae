"""A TrainJob reads into the pod sets of the training runtime it names, as the trainer builds them; kuota admits it
with a runtime patch of its own.

Objects from ../shared/data/crds (kubeflow/trainer at 8c0f5059, see the folders' PROVENANCE.md): the TrainJob
examples trainjob/examples/01-multi-node.yaml and 03-kueue-integration.yaml, the TrainingRuntime and TrainJob of
trainingruntime/examples/05-multi-step.yaml, and the ClusterTrainingRuntimes the trainer installs,
clustertrainingruntime/examples/torch_distributed.yaml and deepspeed_distributed.yaml. The expected pod sets are
written out by hand from those files and the trainer's rules (its pkg/runtime/core/trainingruntime.go, the torch,
MPI and plain-ML plugins, and the JobSet builder); patches are applied with `jsonpatch` and the results checked
against the TrainJob CRD's schema.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.labels import PLACED_POD_SET, SCHEDULING_GATE, WORKLOAD_LABEL
from workloads.kind import Placement, Reference, Resolve, Status
from workloads.kinds.trainjob import CLUSTER_TRAINING_RUNTIME, MANAGER, TRAINING_RUNTIME, TRAINJOB
from workloads.problems import JobProblemKind
from workloads.reading import convert, read, structure_problems
from workloads.rules import config_index

from .crd_schema import crd_schema, schema_errors
from .examples import CONFIG, CRDS, GI, MI, NAMESPACE, crd_example, ends_with_remedy, referenced, resolve, submitted

Obj = dict[str, Any]
PodSets = list[tuple[str, int, dict[str, int]]]

MULTI_NODE = "trainjob/examples/01-multi-node.yaml"
KUEUE = "trainjob/examples/03-kueue-integration.yaml"
MULTI_STEP = "trainingruntime/examples/05-multi-step.yaml"
TORCH = Reference("trainer.kubeflow.org", "ClusterTrainingRuntime", None, "torch-distributed")
DEEPSPEED = Reference("trainer.kubeflow.org", "ClusterTrainingRuntime", None, "deepspeed-distributed")
WITH_DATASET = Reference("trainer.kubeflow.org", "TrainingRuntime", NAMESPACE, "torch-with-dataset-init")

#: 03's and 05's spec.trainer.resourcesPerNode: requests cpu 2 / memory 4Gi (limits 4 / 8Gi, not what is counted).
PER_NODE = {"cpu": 2000, "memory": 4 * GI}

SELECTOR = {"kuota.dev/flavor": "a100"}
TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def trainjob(relative: str = MULTI_NODE, runtime: str | None = None) -> Obj:
    """A TrainJob example in namespace ml with the queue label, naming another runtime if asked (`NAME` of the
    example's kind of runtime, or `KIND/NAME`)."""
    obj = submitted(crd_example(relative)[1])
    if runtime is not None:
        kind, _, name = runtime.rpartition("/")
        obj["spec"]["runtimeRef"]["name"] = name
        if kind:
            obj["spec"]["runtimeRef"]["kind"] = kind
    return obj


def looked_up(objects: Mapping[Reference, Obj]) -> Resolve:
    return lambda reference: objects.get(reference)


def pod_sets(obj: Obj, found: Resolve = resolve) -> PodSets:
    conversion = convert(TRAINJOB, obj, CONFIG, resolve=found)
    assert conversion.problems == ()
    assert conversion.workload is not None
    return [(p.name, p.count, dict(p.requests)) for p in conversion.workload.pod_sets]


def runtime_job(runtime: Obj, name: str) -> Obj:
    found: Obj = next(j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == name)
    return found


def pod_of(runtime: Obj, name: str) -> Obj:
    pod: Obj = runtime_job(runtime, name)["template"]["spec"]["template"]["spec"]
    return pod


# -- the examples ------------------------------------------------------------------------------------------------

EXAMPLES: list[tuple[str, str | None, PodSets]] = [
    # torch-distributed: one replicated job, `node`, the trainer step; numNodes 3, no resources in either file.
    (MULTI_NODE, None, [("node", 3, {})]),
    (KUEUE, None, [("node", 3, PER_NODE)]),
    # 05's own TrainingRuntime: a dataset initializer of one pod (no resources), then 2 trainer nodes.
    (MULTI_STEP, None, [("dataset-initializer", 1, {}), ("node", 2, PER_NODE)]),
    # deepspeed-distributed, MPI with runLauncherAsNode: the launcher (the trainer step, mlPolicy.numNodes 1) is one
    # of the 3 nodes, so the `node` job runs 2; resourcesPerNode goes to the `node` container of both.
    (MULTI_NODE, "deepspeed-distributed", [("node", 2, {}), ("launcher", 1, {})]),
    (KUEUE, "deepspeed-distributed", [("node", 2, PER_NODE), ("launcher", 1, PER_NODE)]),
    # 05's TrainJob on the installed runtimes: its spec.initializer has no initializer step to go to there.
    (MULTI_STEP, "ClusterTrainingRuntime/torch-distributed", [("node", 2, PER_NODE)]),
    (MULTI_STEP, "ClusterTrainingRuntime/deepspeed-distributed", [("node", 1, PER_NODE), ("launcher", 1, PER_NODE)]),
]


@pytest.mark.parametrize(("relative", "runtime", "expected"), EXAMPLES)
def test_examples_read_into_their_runtimes_pod_sets(relative: str, runtime: str | None, expected: PodSets) -> None:
    before = referenced()
    obj = trainjob(relative, runtime)
    assert pod_sets(obj) == expected
    # The webhooks' reading (with the lookup) finds the same, and the pod count agrees.
    reading = read(TRAINJOB, obj, config_index(CONFIG), resolve=resolve)
    assert reading.problems == ()
    assert reading.pod_sets is not None
    assert [(p.name, p.count, p.requests) for p in reading.pod_sets] == expected
    assert TRAINJOB.pod_count(obj, resolve) == sum(count for _, count, _ in expected)
    # Reading copies what it changes: the runtimes are as they were.
    assert referenced() == before


def test_each_pod_set_names_the_runtime_it_was_read_from() -> None:
    templates = TRAINJOB.read_templates(trainjob(MULTI_STEP), resolve)
    assert [(t.name, t.source) for t in templates] == [("dataset-initializer", WITH_DATASET), ("node", WITH_DATASET)]
    assert templates[1].where == (
        "TrainingRuntime ml/torch-with-dataset-init spec.template.spec.replicatedJobs[1].template.spec.template.spec"
    )


def test_the_references_are_the_runtime_named_in_the_trainjobs_namespace() -> None:
    assert TRAINJOB.references(trainjob(MULTI_NODE)) == (TORCH,)
    assert TRAINJOB.references(trainjob(MULTI_STEP)) == (WITH_DATASET,)
    create = trainjob(MULTI_STEP)
    del create["metadata"]["namespace"]  # a CREATE review may carry the namespace beside the body only
    assert TRAINJOB.references(create) == ()
    assert TRAINJOB.references(create, "team-b") == (
        Reference(WITH_DATASET.group, WITH_DATASET.kind, "team-b", WITH_DATASET.name),
    )
    assert TRAINJOB.referenced_kinds == (TRAINING_RUNTIME, CLUSTER_TRAINING_RUNTIME)


def test_runtime_ref_kind_left_out_is_a_cluster_training_runtime() -> None:
    # The CRD defaults spec.runtimeRef.kind to ClusterTrainingRuntime and apiGroup to trainer.kubeflow.org.
    obj = trainjob(MULTI_NODE)
    del obj["spec"]["runtimeRef"]["kind"], obj["spec"]["runtimeRef"]["apiGroup"]
    assert TRAINJOB.references(obj) == (TORCH,)
    assert pod_sets(obj) == [("node", 3, {})]


# -- numNodes and the trainer's counts -------------------------------------------------------------------------


def runtimes_with(reference: Reference, change: Any) -> Resolve:
    objects = referenced()
    change(objects[reference])
    return looked_up(objects)


def test_without_num_nodes_the_trainer_step_runs_the_runtimes_ml_policy_nodes() -> None:
    obj = trainjob(MULTI_NODE)
    del obj["spec"]["trainer"]["numNodes"]
    assert pod_sets(obj) == [("node", 1, {})]  # torch-distributed's mlPolicy.numNodes
    four = runtimes_with(TORCH, lambda r: r["spec"]["mlPolicy"].update(numNodes=4))
    assert pod_sets(obj, four) == [("node", 4, {})]
    obj["spec"]["trainer"]["numNodes"] = 6
    assert pod_sets(obj, four) == [("node", 6, {})]


@pytest.mark.parametrize(("nodes", "expected"), [(1, 1), (2, 1), (3, 2), (8, 7)])
def test_an_mpi_launcher_that_is_a_node_takes_one_of_the_nodes(nodes: int, expected: int) -> None:
    obj = trainjob(MULTI_NODE, "deepspeed-distributed")
    obj["spec"]["trainer"]["numNodes"] = nodes
    assert pod_sets(obj) == [("node", expected, {}), ("launcher", 1, {})]


def test_an_mpi_runtime_without_launcher_as_node_runs_num_nodes_nodes_and_sizes_the_launcher_only() -> None:
    found = runtimes_with(DEEPSPEED, lambda r: r["spec"]["mlPolicy"]["mpi"].update(runLauncherAsNode=False))
    # resourcesPerNode goes to the trainer step only: here the launcher.
    assert pod_sets(trainjob(KUEUE, "deepspeed-distributed"), found) == [("node", 3, {}), ("launcher", 1, PER_NODE)]


def test_a_runtime_without_ml_policy_runs_its_parallelism_unless_num_nodes_says() -> None:
    def plain(runtime: Obj) -> None:
        del runtime["spec"]["mlPolicy"]
        runtime_job(runtime, "node")["template"]["spec"]["parallelism"] = 2

    found = runtimes_with(TORCH, plain)
    obj = trainjob(KUEUE)
    del obj["spec"]["trainer"]["numNodes"]
    # No ML policy: resourcesPerNode is not laid over (the trainer does so only under one).
    assert pod_sets(obj, found) == [("node", 2, {})]
    obj["spec"]["trainer"]["numNodes"] = 5
    assert pod_sets(obj, found) == [("node", 5, {})]


def test_replicas_multiply_parallelism_except_for_the_trainer_and_initializer_steps() -> None:
    def shaped(runtime: Obj) -> None:
        jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        runtime_job(runtime, "dataset-initializer")["replicas"] = 4
        runtime_job(runtime, "node")["replicas"] = 3
        jobs.append(
            {
                "name": "evaluator",
                "replicas": 2,
                "template": {
                    "spec": {
                        "parallelism": 3,
                        "template": {
                            "spec": {
                                "containers": [{"name": "eval", "resources": {"requests": {"cpu": "500m"}}}],
                            }
                        },
                    }
                },
            }
        )

    found = runtimes_with(WITH_DATASET, shaped)
    assert pod_sets(trainjob(MULTI_STEP), found) == [
        ("dataset-initializer", 1, {}),
        ("node", 2, PER_NODE),
        ("evaluator", 6, {"cpu": 500}),
    ]


def test_only_the_first_trainer_step_takes_num_nodes() -> None:
    def two_steps(runtime: Obj) -> None:
        second = copy.deepcopy(runtime_job(runtime, "node"))
        second["name"] = "node-b"
        runtime["spec"]["template"]["spec"]["replicatedJobs"].append(second)

    found = runtimes_with(TORCH, two_steps)
    assert pod_sets(trainjob(MULTI_NODE), found) == [("node", 3, {}), ("node-b", 1, {})]


# -- resourcesPerNode ----------------------------------------------------------------------------------------------


def test_resources_per_node_are_laid_over_the_node_container_resource_by_resource() -> None:
    def sized(runtime: Obj) -> None:
        pod = pod_of(runtime, "node")
        pod["containers"][0]["resources"] = {
            "requests": {"cpu": "1", "memory": "2Gi"},
            "limits": {"nvidia.com/gpu": "1"},
        }
        pod["containers"].append({"name": "logger", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}})

    obj = trainjob(MULTI_NODE)
    obj["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"cpu": "4"}, "limits": {"nvidia.com/gpu": 8}}
    # cpu: 4 from the TrainJob + the logger's 100m; memory: the runtime's 2Gi + 64Mi; GPUs: the TrainJob's limit.
    assert pod_sets(obj, runtimes_with(TORCH, sized)) == [
        ("node", 3, {"cpu": 4100, "memory": 2 * GI + 64 * MI, "nvidia.com/gpu": 8000}),
    ]


def test_resources_per_node_need_a_container_named_node() -> None:
    renamed = runtimes_with(TORCH, lambda r: pod_of(r, "node")["containers"][0].update(name="trainer"))
    assert pod_sets(trainjob(KUEUE), renamed) == [("node", 3, {})]


@pytest.mark.parametrize(
    ("value", "says"),
    [("two", "which is not a Kubernetes quantity"), ("-2", "which is negative"), ("10Pi", "ask for less")],
)
def test_a_bad_resources_per_node_quantity_is_a_problem_with_or_without_the_runtime(value: str, says: str) -> None:
    obj = trainjob(KUEUE)
    obj["spec"]["trainer"]["resourcesPerNode"]["requests"]["memory"] = value
    (problem,) = structure_problems(TRAINJOB, obj)
    assert (problem.kind, problem.field) == (
        JobProblemKind.BAD_QUANTITY,
        "spec.trainer.resourcesPerNode.requests[memory]",
    )
    assert says in problem.message
    assert convert(TRAINJOB, obj, CONFIG, resolve=resolve).problems == (problem,)


def test_pods_times_requests_beyond_what_kuota_accounts_is_a_problem() -> None:
    obj = trainjob(KUEUE)
    obj["spec"]["trainer"]["numNodes"] = 2**40  # 2**40 nodes of 4Gi: past 2**63 milli-units of memory
    (problem,) = convert(TRAINJOB, obj, CONFIG, resolve=resolve).problems
    assert problem.kind is JobProblemKind.BAD_QUANTITY
    assert problem.field == (
        "ClusterTrainingRuntime torch-distributed spec.template.spec.replicatedJobs[0].template.spec.template.spec"
    )
    assert f"this TrainJob asks for {2**40} pods of 4Gi memory each, more than kuota accounts" in problem.message


# -- runtimePatches --------------------------------------------------------------------------------------------------


def patch_entry(manager: str, jobs: list[Obj]) -> Obj:
    return {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}}}


def pod_patch(name: str, pod: Obj, labels: Obj | None = None) -> Obj:
    template: Obj = {"spec": {"template": {"spec": pod}}}
    if labels is not None:
        template["metadata"] = {"labels": labels}
    return {"name": name, "template": template}


def test_other_managers_patches_place_the_pods_in_list_order() -> None:
    selecting = runtimes_with(TORCH, lambda r: pod_of(r, "node").update(nodeSelector={"zone": "a", "pool": "x"}))
    obj = trainjob(MULTI_NODE)
    obj["spec"]["runtimePatches"] = [
        patch_entry(
            "example.com/first", [pod_patch("node", {"nodeSelector": {"pool": "y"}, "tolerations": [{"key": "a"}]})]
        ),
        patch_entry(
            "example.com/second", [pod_patch("node", {"nodeSelector": {"rack": "r1"}, "tolerations": [{"key": "b"}]})]
        ),
        patch_entry("example.com/elsewhere", [pod_patch("no-such-job", {"nodeSelector": {"pool": "z"}})]),
    ]
    (template,) = TRAINJOB.read_templates(obj, selecting)
    # The node selector merges key by key (later patches win); tolerations are replaced whole.
    assert template.spec["nodeSelector"] == {"zone": "a", "pool": "y", "rack": "r1"}
    assert template.spec["tolerations"] == [{"key": "b"}]
    workload = convert(TRAINJOB, obj, CONFIG, resolve=selecting).workload
    assert workload is not None and workload.pod_sets[0].node_selector == {"zone": "a", "pool": "y", "rack": "r1"}


def test_kuotas_own_patch_is_not_read_back() -> None:
    obj = trainjob(MULTI_NODE)
    obj["spec"]["runtimePatches"] = [patch_entry(MANAGER, [pod_patch("node", {"nodeSelector": SELECTOR})])]
    (template,) = TRAINJOB.read_templates(obj, resolve)
    assert "nodeSelector" not in template.spec


def test_a_patch_can_make_a_replicated_job_the_trainer_step() -> None:
    unlabelled = runtimes_with(TORCH, lambda r: runtime_job(r, "node")["template"].pop("metadata"))
    obj = trainjob(MULTI_NODE)
    assert pod_sets(obj, unlabelled) == [("node", 1, {})]  # no trainer step: numNodes has nothing to size
    step = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    obj["spec"]["runtimePatches"] = [patch_entry("example.com/m", [pod_patch("node", {}, labels=step)])]
    assert pod_sets(obj, unlabelled) == [("node", 3, {})]


def test_a_patch_of_the_wrong_shape_is_a_problem_at_its_path() -> None:
    obj = trainjob(MULTI_NODE)
    obj["spec"]["runtimePatches"] = [patch_entry("example.com/m", [pod_patch("node", {"nodeSelector": ["a=b"]})])]
    (problem,) = structure_problems(TRAINJOB, obj)
    assert problem.kind is JobProblemKind.NOT_A_JOB
    assert problem.field == (
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
        ".nodeSelector"
    )


# -- a runtime that is missing or wrong ----------------------------------------------------------------------------


def test_a_missing_runtime_keeps_the_trainjob_out_of_the_queue_with_the_reason() -> None:
    obj = trainjob(MULTI_NODE)
    conversion = convert(TRAINJOB, obj, CONFIG, resolve=looked_up({}))
    assert conversion.workload is None
    (problem,) = conversion.problems
    assert (problem.kind, problem.field) == (JobProblemKind.UNKNOWN_REFERENCE, "spec.runtimeRef.name")
    assert problem.message.startswith(
        "TrainJob ml/multi-node-example: its runtime ClusterTrainingRuntime torch-distributed is not known (yet); "
    )
    assert ends_with_remedy(problem.message)
    reading = read(TRAINJOB, obj, config_index(CONFIG), resolve=looked_up({}))
    assert reading.pod_sets is None and reading.problems == (problem,)


def test_a_training_runtime_is_looked_up_in_the_trainjobs_own_namespace() -> None:
    obj = trainjob(MULTI_STEP)
    obj["metadata"]["namespace"] = "ml-two"
    problems = convert(TRAINJOB, obj, CONFIG, namespace="ml-two", resolve=resolve).problems
    # (Queue ml is not open to ml-two either.)
    (problem,) = [p for p in problems if p.kind is JobProblemKind.UNKNOWN_REFERENCE]
    assert "TrainJob ml-two/multi-step-example: its runtime TrainingRuntime torch-with-dataset-init is not" in (
        problem.message
    )


def test_without_a_lookup_every_rule_but_the_pod_sets_is_checked() -> None:
    # What the webhooks can do: the object alone is read, its pod sets are unknown, and no problem is made of that.
    obj = trainjob(MULTI_NODE)
    reading = read(TRAINJOB, obj, config_index(CONFIG))
    assert (reading.problems, reading.pod_sets, reading.team, reading.queue) == ((), None, "ml", "ml/ml")
    assert convert(TRAINJOB, obj, CONFIG).workload is None
    assert TRAINJOB.read_templates(obj) == [] and TRAINJOB.pod_count(obj) == 0
    obj["metadata"]["labels"]["kuota.dev/queue"] = "nowhere"
    (problem,) = read(TRAINJOB, obj, config_index(CONFIG)).problems
    assert problem.kind is JobProblemKind.UNKNOWN_QUEUE


def test_a_broken_runtime_is_named_in_the_problem() -> None:
    found = runtimes_with(TORCH, lambda r: r["spec"]["template"]["spec"].update(replicatedJobs={"name": "node"}))
    (problem,) = convert(TRAINJOB, trainjob(MULTI_NODE), CONFIG, resolve=found).problems
    assert problem.kind is JobProblemKind.NOT_A_JOB
    assert problem.field == "ClusterTrainingRuntime torch-distributed spec.template.spec.replicatedJobs"
    assert problem.message.endswith("; send a valid trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime")


def test_a_bad_quantity_in_the_runtime_is_said_where_it_is_in_the_runtime() -> None:
    found = runtimes_with(
        TORCH, lambda r: pod_of(r, "node")["containers"][0].update(resources={"requests": {"cpu": "lots"}})
    )
    (problem,) = convert(TRAINJOB, trainjob(MULTI_NODE), CONFIG, resolve=found).problems
    assert problem.field == (
        "ClusterTrainingRuntime torch-distributed "
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.requests[cpu]"
    )


@pytest.mark.parametrize(
    ("field", "value", "remedy"),
    [
        ("kind", "JobSetRuntime", "; set it to ClusterTrainingRuntime or TrainingRuntime"),
        ("apiGroup", "kubeflow.org", "; set it to trainer.kubeflow.org"),
    ],
)
def test_a_runtime_that_is_not_a_training_runtime_is_refused(field: str, value: str, remedy: str) -> None:
    obj = trainjob(MULTI_NODE)
    obj["spec"]["runtimeRef"][field] = value
    (problem,) = structure_problems(TRAINJOB, obj)
    assert (problem.kind, problem.field) == (JobProblemKind.INVALID_FIELD, f"spec.runtimeRef.{field}")
    assert remedy in problem.message
    assert TRAINJOB.references(obj) == ()


# -- admitting: kuota's runtime patch ---------------------------------------------------------------------------


def schema() -> dict[str, Any]:
    return crd_schema(CRDS / "trainjob" / "trainer.kubeflow.org_trainjobs.yaml", "v1alpha1")


def waiting(relative: str = MULTI_NODE) -> Obj:
    """The example as kuota's mutating webhook leaves it: suspended (the API server defaulted suspend to false)."""
    obj = trainjob(relative)
    obj["spec"].setdefault("suspend", False)
    patched: Obj = jsonpatch.apply_patch(obj, TRAINJOB.suspend_patch(obj))
    return patched


def run(obj: Obj, placements: Mapping[str, Placement]) -> Obj:
    patched: Obj = jsonpatch.apply_patch(obj, TRAINJOB.run_patch(obj, placements))
    assert schema_errors(patched, schema()) == []
    return patched


def kuota_entry(jobs: list[Obj]) -> Obj:
    return {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}}}


def test_run_patch_writes_kuotas_runtime_patch_and_unsuspends() -> None:
    before = waiting()
    assert TRAINJOB.is_suspended(before) and "runtimePatches" not in before["spec"]
    patched = run(before, {"node": Placement(SELECTOR, TOLERATIONS)})
    expected = copy.deepcopy(before)
    expected["spec"]["suspend"] = False
    expected["spec"]["runtimePatches"] = [
        kuota_entry([pod_patch("node", {"nodeSelector": SELECTOR, "tolerations": TOLERATIONS})])
    ]
    assert patched == expected
    assert not TRAINJOB.is_suspended(patched)


def test_run_patch_places_each_pod_set_after_the_other_managers_patches() -> None:
    before = waiting(MULTI_STEP)
    other = patch_entry("example.com/m", [pod_patch("node", {"nodeSelector": {"zone": "a"}})])
    before["spec"]["runtimePatches"] = [other]
    cpu_only = Placement({"pool": "cpu"}, [])
    patched = run(before, {"dataset-initializer": cpu_only, "node": Placement(SELECTOR, TOLERATIONS)})
    assert patched["spec"]["runtimePatches"] == [
        other,
        kuota_entry(
            [
                pod_patch("dataset-initializer", {"nodeSelector": {"pool": "cpu"}}),
                pod_patch("node", {"nodeSelector": SELECTOR, "tolerations": TOLERATIONS}),
            ]
        ),
    ]


def test_readmission_replaces_kuotas_patch_and_moves_it_last() -> None:
    before = waiting()
    stale = kuota_entry([pod_patch("node", {"nodeSelector": {"kuota.dev/flavor": "v100"}})])
    other = patch_entry("example.com/m", [pod_patch("node", {"tolerations": [{"key": "spot"}]})])
    before["spec"]["runtimePatches"] = [stale, other]
    patched = run(before, {"node": Placement(SELECTOR, [])})
    assert patched["spec"]["runtimePatches"] == [other, kuota_entry([pod_patch("node", {"nodeSelector": SELECTOR})])]


def test_a_list_that_changed_since_it_was_read_fails_the_patch() -> None:
    before = waiting()
    before["spec"]["runtimePatches"] = [kuota_entry([]), patch_entry("example.com/m", [])]
    ops = TRAINJOB.run_patch(before, {"node": Placement(SELECTOR, [])})
    moved = copy.deepcopy(before)
    moved["spec"]["runtimePatches"].reverse()
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(moved, ops)


def test_a_placement_with_nothing_to_say_still_leaves_a_valid_entry() -> None:
    patched = run(waiting(), {"node": Placement({}, [])})
    assert patched["spec"]["runtimePatches"] == [
        {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}}
    ]


def test_the_pods_get_kuotas_labels_and_a_placed_pod_set_its_gate_through_the_runtime_patch() -> None:
    # The TrainJob has no pod template of its own: the workload label (which a node failure names the TrainJob by)
    # and, for a pod set placed node by node, kuota's gate and the pod set's label go in kuota's entry, in the
    # places the CRD's schema has for them (run checks the patched object against it).
    labels = {WORKLOAD_LABEL: "0" * 40}
    patched = run(waiting(MULTI_STEP), {
        "dataset-initializer": Placement({"pool": "cpu"}, [], labels=labels),
        "node": Placement(SELECTOR, [], labels=labels, gated=True),
    })  # fmt: skip
    [entry] = patched["spec"]["runtimePatches"]
    initializer, node = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert initializer["template"]["spec"]["template"] == {
        "metadata": {"labels": labels},
        "spec": {"nodeSelector": {"pool": "cpu"}},
    }
    assert node["template"]["spec"]["template"] == {
        "metadata": {"labels": {**labels, PLACED_POD_SET: "node"}},
        "spec": {"nodeSelector": SELECTOR, "schedulingGates": [{"name": SCHEDULING_GATE}]},
    }


def test_stop_patch_suspends_and_leaves_the_patches() -> None:
    running = run(waiting(), {"node": Placement(SELECTOR, TOLERATIONS)})
    stopped: Obj = jsonpatch.apply_patch(running, TRAINJOB.stop_patch(running))
    assert TRAINJOB.is_suspended(stopped)
    assert stopped["spec"]["runtimePatches"] == running["spec"]["runtimePatches"]


# -- status ------------------------------------------------------------------------------------------------------

T1 = "2026-03-01T09:30:00Z"


def with_status(status: Any, suspended: bool) -> Status:
    obj = trainjob()
    obj["spec"]["suspend"] = suspended
    obj["status"] = status
    return TRAINJOB.status(obj)


@pytest.mark.parametrize(("condition", "succeeded"), [("Complete", True), ("Failed", False)])
def test_complete_and_failed_finish_it(condition: str, succeeded: bool) -> None:
    status = {"conditions": [{"type": condition, "status": "True", "lastTransitionTime": T1}]}
    found = with_status(status, suspended=False)
    assert (found.finished, found.stopped) == (succeeded, True)
    assert found.finished_at is not None and found.finished_at.isoformat() == "2026-03-01T09:30:00+00:00"


def test_suspended_counts_as_stopped_once_no_child_job_is_active() -> None:
    suspended = {"type": "Suspended", "status": "True", "reason": "Suspended", "lastTransitionTime": T1}
    draining = {"conditions": [suspended], "jobsStatus": [{"name": "node", "active": 1, "ready": 1}]}
    # The trainer sets Suspended as soon as spec.suspend is, pods or no pods.
    assert with_status(draining, suspended=True) == Status(stopped=False)
    gone = {"conditions": [suspended], "jobsStatus": [{"name": "node", "active": 0, "suspended": 1}]}
    assert with_status(gone, suspended=True) == Status(stopped=True)
    assert with_status(gone, suspended=False) == Status(stopped=False)
    assert with_status({"jobsStatus": "node"}, suspended=True) == Status(stopped=True)


# -- properties ------------------------------------------------------------------------------------------------------

quantities = st.integers(min_value=1, max_value=10**6)


@settings(max_examples=150, deadline=None)
@given(nodes=st.integers(min_value=1, max_value=10_000), cpu_milli=quantities, gpus=st.integers(0, 16))
def test_the_trainer_step_asks_for_num_nodes_pods_of_resources_per_node_exactly(
    nodes: int, cpu_milli: int, gpus: int
) -> None:
    obj = trainjob(MULTI_NODE)
    obj["spec"]["trainer"]["numNodes"] = nodes
    obj["spec"]["trainer"]["resourcesPerNode"] = {
        "requests": {"cpu": f"{cpu_milli}m"},
        "limits": {"nvidia.com/gpu": gpus},
    }
    requests = {"cpu": cpu_milli, **({"nvidia.com/gpu": 1000 * gpus} if gpus else {})}
    assert pod_sets(obj) == [("node", nodes, requests)]
    # With the launcher as a node, an MPI runtime runs the same nodes, counting the launcher (two at least).
    obj["spec"]["runtimeRef"]["name"] = "deepspeed-distributed"
    assert pod_sets(obj) == [("node", max(nodes - 1, 1), requests), ("launcher", 1, requests)]


managers = st.sampled_from(["example.com/a", "example.com/b", "example.com/c"])
other_patches = st.lists(
    st.builds(
        lambda manager, zone: patch_entry(manager, [pod_patch("node", {"nodeSelector": {"zone": zone}})]),
        managers,
        st.sampled_from(["a", "b"]),
    ),
    max_size=3,
    unique_by=lambda entry: entry["manager"],
)
placements = st.builds(
    Placement,
    st.dictionaries(st.sampled_from(["kuota.dev/flavor", "pool"]), st.sampled_from(["a100", "h100"]), max_size=2),
    st.lists(st.just(TOLERATIONS[0]), max_size=1),
)


@settings(max_examples=150, deadline=None)
@given(others=other_patches, first=placements, second=placements, kuota_at=st.integers(0, 3))
def test_admitting_never_changes_what_kuota_reads_and_keeps_one_patch_of_its_own_last(
    others: list[Obj], first: Placement, second: Placement, kuota_at: int
) -> None:
    before = waiting(MULTI_STEP)
    entries = copy.deepcopy(others)
    entries.insert(min(kuota_at, len(entries)), kuota_entry([pod_patch("node", {"nodeSelector": {"pool": "old"}})]))
    before["spec"]["runtimePatches"] = entries
    read_before = pod_sets(before)
    selectors_before = [t.spec.get("nodeSelector") for t in TRAINJOB.read_templates(before, resolve)]
    once = run(before, {"dataset-initializer": first, "node": second})
    preempted: Obj = jsonpatch.apply_patch(once, TRAINJOB.stop_patch(once))
    again = run(preempted, {"node": first})
    for patched in (once, again):
        assert pod_sets(patched) == read_before
        assert [t.spec.get("nodeSelector") for t in TRAINJOB.read_templates(patched, resolve)] == selectors_before
        mine = [i for i, e in enumerate(patched["spec"]["runtimePatches"]) if e["manager"] == MANAGER]
        assert mine == [len(patched["spec"]["runtimePatches"]) - 1]
        assert patched["spec"]["runtimePatches"][:-1] == others


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=6),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=10,
)
runtime_paths = st.sampled_from(
    [
        ("spec",),
        ("spec", "mlPolicy"),
        ("spec", "mlPolicy", "numNodes"),
        ("spec", "mlPolicy", "mpi"),
        ("spec", "template", "spec", "replicatedJobs"),
        ("spec", "template", "spec", "replicatedJobs", 0),
        ("spec", "template", "spec", "replicatedJobs", 0, "template", "metadata"),
        ("spec", "template", "spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "containers"),
    ]
)


@settings(max_examples=200, deadline=None)
@given(path=runtime_paths, value=json_values, name=st.sampled_from(["torch-distributed", "deepspeed-distributed"]))
def test_a_runtime_damaged_anywhere_reads_into_pod_sets_or_problems_never_an_error(
    path: tuple[Any, ...], value: Any, name: str
) -> None:
    reference = Reference(TORCH.group, TORCH.kind, None, name)
    objects = referenced()
    here: Any = objects[reference]
    for part in path[:-1]:
        here = here[part]
    here[path[-1]] = value
    conversion = convert(TRAINJOB, trainjob(KUEUE, name), CONFIG, resolve=looked_up(objects))
    assert (conversion.workload is None) == bool(conversion.problems)
    for problem in conversion.problems:
        assert problem.field.startswith(f"ClusterTrainingRuntime {name} "), problem
