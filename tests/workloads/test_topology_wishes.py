"""A pod set's topology wish and tolerations, read from the pod template (and Kueue's spellings of the wish)."""

from __future__ import annotations

from typing import Any

import pytest

from quota.loader import load_config_text
from quota.pod_set import TopologyRequest
from quota.taints import Toleration
from workloads.reading import convert
from workloads.registry import REGISTRY

from .examples import crd_example, submitted

CONFIG = load_config_text(
    """
topologies:
  - {name: fabric, levels: [topology.kuota.dev/block, topology.kuota.dev/rack, kubernetes.io/hostname]}
flavors: [{name: h100, topology: fabric}]
teams:
  - name: ml
    queues: [ml/ml]
    quotas: [{flavor: h100, resources: {cpu: {nominal: 512}, memory: {nominal: 2Ti}, nvidia.com/gpu: {nominal: 64}}}]
"""
)

RACK = "topology.kuota.dev/rack"


def _job(template_annotations: dict[str, str], job_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "8"}}}],
        "restartPolicy": "Never",
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "training"},
            "not a toleration",
        ],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "annotations": job_annotations or {}},
        "spec": {
            "parallelism": 4,
            "suspend": True,
            "template": {"metadata": {"annotations": template_annotations}, "spec": pod},
        },
    }
    return submitted(job, namespace="ml", queue="ml")


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"kuota.dev/topology-required": RACK}, TopologyRequest(RACK, True)),
        ({"kuota.dev/topology-preferred": RACK}, TopologyRequest(RACK, False)),
        ({"kueue.x-k8s.io/podset-required-topology": RACK}, TopologyRequest(RACK, True)),
        (
            {"kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname"},
            TopologyRequest("kubernetes.io/hostname", False),
        ),
        ({}, None),
    ],
)
def test_the_template_says_where_its_pods_go(annotations: dict[str, str], expected: TopologyRequest | None) -> None:
    converted = convert(REGISTRY.get("Job"), _job(annotations), CONFIG)
    assert converted.problems == ()
    assert converted.workload is not None
    (pod_set,) = converted.workload.pod_sets
    assert pod_set.topology == expected
    assert pod_set.tolerations == (
        Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),
        Toleration("dedicated", "Equal", "training", ""),
    )


def test_the_object_s_annotation_applies_to_templates_that_say_nothing() -> None:
    converted = convert(REGISTRY.get("Job"), _job({}, {"kuota.dev/topology-required": RACK}), CONFIG)
    assert converted.workload is not None
    assert converted.workload.pod_sets[0].topology == TopologyRequest(RACK, True)


def test_an_unknown_level_is_a_problem_at_its_annotation() -> None:
    converted = convert(REGISTRY.get("Job"), _job({"kuota.dev/topology-required": "example.com/row"}), CONFIG)
    assert converted.workload is None
    (problem,) = converted.problems
    assert problem.field == "spec.template.spec metadata.annotations[kuota.dev/topology-required]"
    assert "'example.com/row', a level of no topology in the quota file" in problem.message
    assert "topology.kuota.dev/rack" in problem.message


def test_two_wishes_on_one_template_are_a_problem() -> None:
    both = {"kuota.dev/topology-required": RACK, "kuota.dev/topology-preferred": RACK}
    converted = convert(REGISTRY.get("Job"), _job(both), CONFIG)
    assert converted.workload is None
    assert "asks for more than one topology" in converted.problems[0].message


def test_a_jobset_s_replicated_job_template_carries_its_own_wish() -> None:
    kind, obj = crd_example("jobset/examples/paralleljobs.yaml")
    obj = submitted(obj, namespace="ml", queue="ml")
    template = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})["kuota.dev/topology-required"] = RACK
    converted = convert(kind, obj, CONFIG)
    assert converted.workload is not None, converted.problems
    wishes = [ps.topology for ps in converted.workload.pod_sets]
    assert wishes[0] == TopologyRequest(RACK, True)
    assert all(w is None for w in wishes[1:])


def test_without_topologies_in_the_quota_file_a_wish_is_ignored() -> None:
    plain = load_config_text(
        "flavors: [{name: h100}]\n"
        "teams: [{name: ml, queues: [ml/ml], quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 64}}}]}]\n"
    )
    converted = convert(REGISTRY.get("Job"), _job({"kuota.dev/topology-required": RACK}), plain)
    assert converted.problems == ()
    assert converted.workload is not None and converted.workload.pod_sets[0].topology is None
