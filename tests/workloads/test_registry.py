"""The registry: every kind kuota queues, looked up by name, by API resource and by group/version/kind.

Each registered custom kind is checked against its CRD in ../shared/data/crds (see its README for upstream commits).
"""

from __future__ import annotations

import re

import pytest

from tests.kube.kinds import CRD_FILES
from workloads.kind import JobKind
from workloads.registry import ALL, DEFAULT_KINDS, REGISTRY, Registry, UnknownKind, enabled_kinds

from .examples import CRDS

ORDER = (
    "Job",
    "JobSet",
    "PyTorchJob",
    "TFJob",
    "XGBoostJob",
    "PaddleJob",
    "JAXJob",
    "MPIJob",
    "TrainJob",
    "RayJob",
    "RayCluster",
    "LeaderWorkerSet",
    "Pod",
)


def test_registry_holds_every_kind_in_listing_order() -> None:
    assert REGISTRY.names() == ORDER
    assert tuple(k.kind for k in REGISTRY) == ORDER
    assert len(REGISTRY) == len(ALL) == len(ORDER)


def test_kind_names_are_unique() -> None:
    names = [k.kind for k in ALL]
    assert len(set(names)) == len(names)
    assert len({(k.group, k.version, k.plural) for k in ALL}) == len(ALL)


@pytest.mark.parametrize("kind", ALL, ids=lambda k: k.kind)
def test_plural_is_lowercase(kind: JobKind) -> None:
    assert kind.plural == kind.plural.lower()
    assert kind.plural == kind.kind.lower() + "s"


@pytest.mark.parametrize("kind", ALL, ids=lambda k: k.kind)
def test_lookups_by_name_resource_and_gvk(kind: JobKind) -> None:
    assert kind.kind in REGISTRY
    assert REGISTRY.get(kind.kind) is kind
    assert REGISTRY.by_resource(kind.group, kind.version, kind.plural) is kind
    assert REGISTRY.by_gvk(kind.group, kind.version, kind.kind) is kind


def test_lookups_of_named_kinds() -> None:
    assert REGISTRY.by_resource("batch", "v1", "jobs") is REGISTRY.get("Job")
    assert REGISTRY.by_resource("jobset.x-k8s.io", "v1alpha2", "jobsets") is REGISTRY.get("JobSet")
    assert REGISTRY.by_gvk("kubeflow.org", "v2beta1", "MPIJob") is REGISTRY.get("MPIJob")
    assert REGISTRY.by_gvk("kubeflow.org", "v1", "PyTorchJob") is REGISTRY.get("PyTorchJob")
    assert REGISTRY.by_resource("ray.io", "v1", "rayclusters") is REGISTRY.get("RayCluster")
    assert REGISTRY.get("Job").api_version == "batch/v1"  # type: ignore[union-attr]
    assert REGISTRY.get("JobSet").noun == "jobset.x-k8s.io/v1alpha2 JobSet"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("how", "args"),
    [
        ("get", ("job",)),
        ("get", ("RayService",)),
        ("by_resource", ("batch", "v1", "Jobs")),
        ("by_resource", ("kubeflow.org", "v1", "mpijobs")),  # the training operator's v1 MPIJob is not kuota's
        ("by_resource", ("ray.io", "v1alpha1", "rayjobs")),
        ("by_gvk", ("jobset.x-k8s.io", "v1alpha1", "JobSet")),
        ("by_gvk", ("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime")),  # what a TrainJob refers to
        ("by_gvk", ("", "v1", "Pods")),
        ("by_resource", ("", "v1", "statefulsets")),
    ],
)
def test_lookups_of_unknown_kinds_find_none(how: str, args: tuple[str, ...]) -> None:
    assert getattr(REGISTRY, how)(*args) is None


def test_enabled_keeps_registry_order() -> None:
    enabled = REGISTRY.enabled(["JobSet", "Job"])
    assert enabled.names() == ("Job", "JobSet")
    assert isinstance(enabled, Registry)
    assert "PyTorchJob" not in enabled
    assert enabled.by_gvk("batch", "v1", "Job") is REGISTRY.get("Job")
    assert enabled.by_resource("kubeflow.org", "v1", "pytorchjobs") is None


def test_enabled_ignores_blanks_and_repeats() -> None:
    assert REGISTRY.enabled([" RayCluster ", "", "MPIJob", "MPIJob"]).names() == ("MPIJob", "RayCluster")
    assert REGISTRY.enabled([]).names() == ()


def test_an_unknown_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(UnknownKind) as raised:
        REGISTRY.enabled(["Job", "AppWrapper"])
    message = str(raised.value)
    assert "'AppWrapper'" in message
    assert message.endswith("kuota queues: " + ", ".join(ORDER))
    assert isinstance(raised.value, ValueError)


def test_unknown_kinds_are_all_named() -> None:
    with pytest.raises(UnknownKind, match=r"^unknown job kinds 'jobset', 'Deployment'; kuota queues: Job, "):
        REGISTRY.enabled(["jobset", "Deployment"])


def test_enabled_kinds_defaults_to_job() -> None:
    assert DEFAULT_KINDS == ("Job",)
    assert enabled_kinds(None).names() == ("Job",)
    assert enabled_kinds(["RayJob", "Job"]).names() == ("Job", "RayJob")


def _crd_names(text: str) -> tuple[str, str, str, list[tuple[str, bool]]]:
    """(group, kind, plural, [(version, storage)]) of a CRD file, read from its text (the files are up to 1.4 MB)."""
    group = re.search(r"^  group: (\S+)$", text, re.M)
    kind = re.search(r"^    kind: (\S+)$", text, re.M)
    plural = re.search(r"^    plural: (\S+)$", text, re.M)
    assert group and kind and plural
    versions = re.findall(r"^(?:  - |    )name: (v\w+)$", text, re.M)
    storage = re.findall(r"^    storage: (true|false)$", text, re.M)
    assert len(versions) == len(storage)
    return group[1], kind[1], plural[1], [(v, s == "true") for v, s in zip(versions, storage, strict=True)]


@pytest.mark.parametrize("name", sorted(CRD_FILES))
def test_custom_kinds_match_their_crds(name: str) -> None:
    kind = REGISTRY.get(name)
    assert kind is not None
    group, crd_kind, plural, versions = _crd_names((CRDS / CRD_FILES[name]).read_text())
    assert (kind.group, kind.kind, kind.plural) == (group, crd_kind, plural)
    # kuota watches the version the API server stores.
    assert (kind.version, True) in versions
