"""A workload is named `KIND/NAMESPACE/NAME`, so that objects of different kinds and the same name never collide."""

from __future__ import annotations

import pytest

from workloads.reading import convert, qualified, split_key, workload_key
from workloads.registry import REGISTRY

from .examples import CONFIG, crd_example, manifest, submitted


def test_workload_key_is_kind_namespace_name() -> None:
    assert workload_key("JobSet", "ml", "paralleljobs") == "JobSet/ml/paralleljobs"
    assert workload_key("Job", "default", "sample-job") == "Job/default/sample-job"


def test_objects_of_two_kinds_with_one_name_are_two_workloads() -> None:
    # Kueue's sample PyTorchJob and the training operator's simple.yaml are both `pytorch-simple`; a Job of that name
    # is another workload again.
    pytorch_kind, pytorch = manifest("kueue/jobs__sample-pytorchjob.yaml")
    job_kind, job = manifest("kueue/getting-started__quick-start-job.yaml")
    job["metadata"]["name"] = pytorch["metadata"]["name"]
    names = {
        convert(pytorch_kind, submitted(pytorch), CONFIG).workload.name,  # type: ignore[union-attr]
        convert(job_kind, submitted(job), CONFIG).workload.name,  # type: ignore[union-attr]
    }
    assert names == {"PyTorchJob/ml/pytorch-simple", "Job/ml/pytorch-simple"}


def test_a_workload_of_a_generated_name_is_named_by_its_prefix() -> None:
    kind, obj = crd_example("rayjob/examples/ray-job.kueue-toy-sample.yaml")
    assert "name" not in obj["metadata"]
    workload = convert(kind, submitted(obj), CONFIG).workload
    assert workload is not None and workload.name == "RayJob/ml/rayjob-sample-"


@pytest.mark.parametrize("kind", REGISTRY.names())
def test_split_key_reverses_workload_key(kind: str) -> None:
    assert split_key(workload_key(kind, "team-a", "train-7")) == (kind, "team-a", "train-7")


def test_namespace_and_name_alone_is_a_job() -> None:
    assert split_key("ns/name") == ("Job", "ns", "name")
    assert qualified("ns/name") == "Job/ns/name"
    assert qualified("JobSet/ns/name") == "JobSet/ns/name"


@pytest.mark.parametrize("key", ["", "name", "a/b/c/d", "JobSet/ns/name/extra"])
def test_a_key_of_the_wrong_number_of_parts_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="is not KIND/NAMESPACE/NAME or NAMESPACE/NAME"):
        split_key(key)


@pytest.mark.parametrize("key", ["ns/", "/name", "JobSet//name"])
def test_a_key_with_an_empty_part_is_refused(key: str) -> None:
    # No object has an empty kind, namespace or name: such a key names no workload.
    with pytest.raises(ValueError):
        split_key(key)
