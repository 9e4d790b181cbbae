"""The JSON patches each kind writes: hold a new object back, let an admitted one run where it was placed, stop it.

Every patch is applied with `jsonpatch`, as the API server applies it, to the upstream examples (examples from
../shared/data/crds, see its README for upstream commits; Kueue's sample Jobs from ../shared/data/manifests). The
result must differ from the example exactly where the CRDs' README says the kind's switch and pod templates are:
the nested `suspend` fields it lists (child Job templates, KubeRay's internal ones) are planted and must stay as
they were.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from admission.labels import PLACED_POD_SET, SCHEDULING_GATE, WORKLOAD_LABEL
from workloads.kind import JobKind, Placement

from .examples import (
    CRDS,
    SUSPEND_PATH,
    crd_example,
    crd_example_files,
    get,
    internal_suspend_paths,
    manifest,
    pod_spec_paths,
    put,
    with_registered_objects,
)

#: Kueue's TrainJob example is created suspended already (tested below, as Kueue's suspended sample Job is).
CREATED_SUSPENDED = "crds/trainjob/examples/03-kueue-integration.yaml"

# The kinds held back by their own switch; those held back pod by pod have their patches in test_gates.py.
SWITCHED = [r for r in with_registered_objects(crd_example_files(), CRDS) if not r.startswith("leaderworkerset/")]
CASES = [case for r in SWITCHED if (case := f"crds/{r}") != CREATED_SUSPENDED] + [
    "manifests/kueue/jobs__sample-job.yaml",
    "manifests/kueue/jobs__sample-jobset.yaml",
    "manifests/kueue/jobs__ray-job-sample.yaml",
]

TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
SELECTOR = {"kuota.dev/flavor": "a100"}


def load(case: str) -> tuple[JobKind, dict[str, Any]]:
    """The example with the nested suspend fields planted as False, so that any write to them shows."""
    where, _, relative = case.partition("/")
    kind, obj = crd_example(relative) if where == "crds" else manifest(relative)
    for path in internal_suspend_paths(kind.kind, obj):
        put(obj, path, False)
    return kind, obj


def apply(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    patched: dict[str, Any] = jsonpatch.apply_patch(obj, patch)
    return patched


def with_switch(kind: JobKind, obj: dict[str, Any], value: bool) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    put(out, SUSPEND_PATH[kind.kind], value)
    return out


def test_cases_cover_every_kind() -> None:
    kinds = {load(case)[0].kind for case in CASES}
    assert kinds == set(SUSPEND_PATH)


@pytest.mark.parametrize("case", CASES)
def test_suspend_patch_sets_exactly_the_kinds_switch(case: str) -> None:
    kind, obj = load(case)
    before = copy.deepcopy(obj)
    assert not kind.is_suspended(obj)
    patched = apply(obj, kind.suspend_patch(obj))
    assert patched == with_switch(kind, obj, True)
    assert kind.is_suspended(patched)
    for path in internal_suspend_paths(kind.kind, obj):
        assert get(patched, path) is False, path
    assert obj == before  # the patch is computed, never applied to the object it reads


@pytest.mark.parametrize("case", CASES)
def test_suspend_patch_of_a_waiting_object_is_empty(case: str) -> None:
    kind, obj = load(case)
    waiting = with_switch(kind, obj, True)
    assert kind.is_suspended(waiting)
    assert kind.suspend_patch(waiting) == []


@pytest.mark.parametrize(
    "source", [("manifest", "kueue/admin__shared-quota-sample-job.yaml"), ("crd", CREATED_SUSPENDED.partition("/")[2])]
)
def test_kueue_samples_created_suspended_need_no_patch(source: tuple[str, str]) -> None:
    where, relative = source
    kind, obj = manifest(relative) if where == "manifest" else crd_example(relative)
    assert obj["spec"]["suspend"] is True
    assert kind.is_suspended(obj)
    assert kind.suspend_patch(obj) == []


@pytest.mark.parametrize("case", CASES)
def test_only_the_kinds_own_switch_holds_it_back(case: str) -> None:
    kind, obj = load(case)
    for path in internal_suspend_paths(kind.kind, obj):
        put(obj, path, True)
    assert not kind.is_suspended(obj)
    assert not kind.is_suspended(with_switch(kind, obj, False))
    put(obj, SUSPEND_PATH[kind.kind], "true")  # a string is not the boolean the operators read
    assert not kind.is_suspended(obj)


@pytest.mark.parametrize("case", [c for c in CASES if not load(c)[0].referenced_kinds])
def test_run_patch_places_every_pod_template_and_unsuspends(case: str) -> None:
    # A TrainJob's pod templates are its runtime's: its run patch is a runtime patch (tests/workloads/test_trainjob.py).
    kind, obj = load(case)
    waiting = apply(obj, kind.suspend_patch(obj))
    # count=1 is below every pod set's count: only a Job may be lowered (its parallelism); other kinds ignore it.
    placements = {t.name: Placement(SELECTOR, TOLERATIONS, count=1) for t in kind.read_templates(waiting)}
    patched = apply(waiting, kind.run_patch(waiting, placements))
    expected = with_switch(kind, waiting, False)
    for path in pod_spec_paths(kind.kind, waiting):
        get(expected, path).update(nodeSelector=SELECTOR, tolerations=TOLERATIONS)
    if kind.kind == "Job":
        expected["spec"]["parallelism"] = 1
    assert patched == expected
    assert not kind.is_suspended(patched)
    for path in internal_suspend_paths(kind.kind, obj):
        assert get(patched, path) is False, path


@pytest.mark.parametrize("case", CASES)
def test_stop_patch_suspends_a_running_object(case: str) -> None:
    kind, obj = load(case)
    running = with_switch(kind, obj, False)
    patched = apply(running, kind.stop_patch(running))
    assert patched == with_switch(kind, obj, True)
    assert kind.is_suspended(patched)


@pytest.mark.parametrize(
    ("case", "placed"),
    [
        # Each pod set's placement lands on its own template.
        (
            "crds/jobset/examples/paralleljobs.yaml",
            {
                "workers": ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec"),
                "driver": ("spec", "replicatedJobs", 1, "template", "spec", "template", "spec"),
            },
        ),
        (
            "crds/mpijob/examples/tensorflow-benchmarks.yaml",
            {
                "launcher": ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec"),
                "worker": ("spec", "mpiReplicaSpecs", "Worker", "template", "spec"),
            },
        ),
        (
            "crds/tfjob/examples/simple.yaml",
            {"worker": ("spec", "tfReplicaSpecs", "Worker", "template", "spec")},
        ),
        (
            "crds/rayjob/examples/ray-job.sample.yaml",
            {
                "head": ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec"),
                "small-group": ("spec", "rayClusterSpec", "workerGroupSpecs", 0, "template", "spec"),
            },
        ),
        (
            "crds/raycluster/examples/ray-cluster.sample.yaml",
            {
                "head": ("spec", "headGroupSpec", "template", "spec"),
                "workergroup": ("spec", "workerGroupSpecs", 0, "template", "spec"),
            },
        ),
        ("manifests/kueue/jobs__sample-job.yaml", {"main": ("spec", "template", "spec")}),
    ],
)
def test_each_pod_set_is_placed_on_its_own_template(case: str, placed: dict[str, tuple[Any, ...]]) -> None:
    kind, obj = load(case)
    placements = {name: Placement({"pool": name}, [{"key": name, "operator": "Exists"}]) for name in placed}
    patched = apply(obj, kind.run_patch(obj, placements))
    for name, path in placed.items():
        assert get(patched, path)["nodeSelector"] == {"pool": name}
        assert get(patched, path)["tolerations"] == [{"key": name, "operator": "Exists"}]


def test_a_pod_set_without_a_placement_is_left_as_it_is() -> None:
    # Only the GPU workers are placed: the launcher, which asks for no GPU, stays off the GPU pool.
    kind, obj = load("crds/mpijob/examples/tensorflow-benchmarks.yaml")
    patched = apply(obj, kind.run_patch(obj, {"worker": Placement(SELECTOR, TOLERATIONS)}))
    launcher = patched["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert "nodeSelector" not in launcher and "tolerations" not in launcher
    assert patched["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == SELECTOR
    assert patched["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "suspend": False}


def test_no_tolerations_leave_the_templates_own() -> None:
    kind, obj = manifest("kueue/provisioning__sample-job.yaml")
    own = copy.deepcopy(obj["spec"]["template"]["spec"]["tolerations"])
    patched = apply(obj, kind.run_patch(obj, {"main": Placement(SELECTOR, [])}))
    assert patched["spec"]["template"]["spec"]["tolerations"] == own
    assert patched["spec"]["template"]["spec"]["nodeSelector"] == SELECTOR


def test_partial_admission_lowers_a_jobs_parallelism() -> None:
    # Kueue's sample: parallelism 20, completions 20, min-parallelism 5.
    kind, obj = manifest("kueue/jobs__sample-job-partial-admission.yaml")
    patched = apply(obj, kind.run_patch(obj, {"main": Placement(SELECTOR, TOLERATIONS, count=5)}))
    assert (patched["spec"]["parallelism"], patched["spec"]["completions"]) == (5, 20)
    assert patched["spec"]["suspend"] is False


def test_admitting_a_job_whole_keeps_its_parallelism() -> None:
    kind, obj = manifest("kueue/jobs__sample-job-partial-admission.yaml")
    patch = kind.run_patch(obj, {"main": Placement(SELECTOR, TOLERATIONS, count=20)})
    assert all(op["path"] != "/spec/parallelism" for op in patch)


@pytest.mark.parametrize(
    "relative", ["pytorchjob/examples/simple.yaml", "tfjob/examples/simple.yaml", "jaxjob/examples/demo.yaml"]
)
def test_a_missing_run_policy_is_added(relative: str) -> None:
    kind, obj = crd_example(relative)
    assert "runPolicy" not in obj["spec"]
    assert kind.suspend_patch(obj) == [{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}]
    assert apply(obj, kind.suspend_patch(obj))["spec"]["runPolicy"] == {"suspend": True}
    assert apply(obj, kind.stop_patch(obj))["spec"]["runPolicy"] == {"suspend": True}
    assert apply(obj, kind.run_patch(obj, {}))["spec"]["runPolicy"] == {"suspend": False}


def test_an_existing_run_policy_keeps_its_other_fields() -> None:
    kind, obj = crd_example("mpijob/examples/pi.yaml")
    assert kind.suspend_patch(obj) == [{"op": "add", "path": "/spec/runPolicy/suspend", "value": True}]
    assert apply(obj, kind.suspend_patch(obj))["spec"]["runPolicy"] == {
        "cleanPodPolicy": "Running",
        "ttlSecondsAfterFinished": 60,
        "suspend": True,
    }


def test_a_run_policy_of_the_wrong_type_is_replaced() -> None:
    kind, obj = crd_example("pytorchjob/examples/simple.yaml")
    obj["spec"]["runPolicy"] = None
    assert apply(obj, kind.suspend_patch(obj))["spec"]["runPolicy"] == {"suspend": True}


def test_pod_spec_paths_with_special_characters_are_escaped() -> None:
    # A replica type is a map key; RFC 6901 escapes "~" and "/" in pointers.
    kind, obj = crd_example("tfjob/examples/simple.yaml")
    obj["spec"]["tfReplicaSpecs"]["a/b~c"] = obj["spec"]["tfReplicaSpecs"].pop("Worker")
    patched = apply(obj, kind.run_patch(obj, {"a/b~c": Placement(SELECTOR, [])}))
    assert patched["spec"]["tfReplicaSpecs"]["a/b~c"]["template"]["spec"]["nodeSelector"] == SELECTOR


def test_rayjob_submitter_is_placed_with_the_cluster() -> None:
    # ray-job.sample.yaml's commented-out submitterPodTemplate, uncommented.
    kind, obj = load("crds/rayjob/examples/ray-job.sample.yaml")
    obj["spec"]["submitterPodTemplate"] = {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "submitter", "image": "rayproject/ray:2.52.0"}]}
    }
    names = [t.name for t in kind.read_templates(obj)]
    assert names == ["head", "small-group", "submitter"]
    patched = apply(obj, kind.run_patch(obj, {name: Placement(SELECTOR, TOLERATIONS) for name in names}))
    assert patched["spec"]["submitterPodTemplate"]["spec"]["nodeSelector"] == SELECTOR


@pytest.mark.parametrize("case", [c for c in CASES if not load(c)[0].referenced_kinds])
def test_run_patch_labels_every_pod_template_with_its_workload(case: str) -> None:
    """The `kuota.dev/workload` label goes on the metadata of every pod template (the PodSpec's parent), added to
    labels already there, so that every pod the operator makes says which workload it is."""
    kind, obj = load(case)
    waiting = apply(obj, kind.suspend_patch(obj))
    labels = {"kuota.dev/workload": "0123abcd"}
    placements = {t.name: Placement(SELECTOR, TOLERATIONS, labels=labels) for t in kind.read_templates(waiting)}
    patched = apply(waiting, kind.run_patch(waiting, placements))
    paths = pod_spec_paths(kind.kind, waiting)
    assert paths
    for path in paths:
        template = path[:-1]
        before = (get(waiting, template).get("metadata") or {}).get("labels") or {}
        assert get(patched, template)["metadata"]["labels"] == {**before, **labels}, template


def test_a_pod_set_placed_node_by_node_is_admitted_gated_and_readmitted_without_kuotas_gate() -> None:
    kind, obj = load("manifests/kueue/jobs__sample-job.yaml")
    own_gate = {"name": "example.com/quota-check"}
    obj["spec"]["template"]["spec"]["schedulingGates"] = [own_gate]  # another controller's gate is never touched
    labels = {WORKLOAD_LABEL: "0" * 40}
    gated = apply(obj, kind.run_patch(obj, {"main": Placement(SELECTOR, [], labels=labels, gated=True)}))
    template = gated["spec"]["template"]
    assert template["spec"]["schedulingGates"] == [own_gate, {"name": SCHEDULING_GATE}]
    assert template["metadata"]["labels"] == {**labels, PLACED_POD_SET: "main"}
    # Admitted again (after a requeue) onto a flavor without a topology: kuota's gate and pod-set label go.
    stopped = apply(gated, kind.stop_patch(gated))
    again = apply(stopped, kind.run_patch(stopped, {"main": Placement(SELECTOR, [], labels=labels)}))
    assert again["spec"]["template"]["spec"]["schedulingGates"] == [own_gate]
    assert again["spec"]["template"]["metadata"]["labels"] == labels
    # A template with no gate of its own loses the list kuota added.
    del obj["spec"]["template"]["spec"]["schedulingGates"]
    gated = apply(obj, kind.run_patch(obj, {"main": Placement(SELECTOR, [], gated=True)}))
    again = apply(gated, kind.run_patch(gated, {"main": Placement(SELECTOR, [])}))
    assert "schedulingGates" not in again["spec"]["template"]["spec"]
    assert PLACED_POD_SET not in again["spec"]["template"]["metadata"].get("labels", {})
    ops = kind.run_patch(again, {"main": Placement(SELECTOR, [])})
    assert not [op for op in ops if "schedulingGates" in op["path"] or "placed-pod-set" in op["path"]], "nothing left"
