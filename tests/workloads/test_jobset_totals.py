"""A JobSet asks for, per resource, the sum over its replicated jobs of replicas × min(parallelism, completions) ×
the per-pod request: checked on random JobSets against a count made here, independently of the kind's code."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.kinds.jobset import JOBSET
from workloads.reading import convert

from .examples import CONFIG, submitted

RESOURCES = ("cpu", "nvidia.com/gpu")

counts = st.none() | st.integers(min_value=0, max_value=8)
container_requests = st.fixed_dictionaries({}, optional={r: st.integers(min_value=0, max_value=96) for r in RESOURCES})
replicated_jobs = st.lists(
    st.fixed_dictionaries(
        {
            "replicas": counts,
            "parallelism": counts,
            "completions": counts,
            "containers": st.lists(container_requests, min_size=1, max_size=3),
        }
    ),
    min_size=1,
    max_size=5,
)


def jobset(drawn: list[dict[str, Any]]) -> dict[str, Any]:
    items = []
    for i, rj in enumerate(drawn):
        containers = [
            {
                "name": f"c{j}",
                "image": "busybox",
                "resources": {"requests": {r: str(q) for r, q in requests.items()}},
            }
            for j, requests in enumerate(rj["containers"])
        ]
        job_spec: dict[str, Any] = {"template": {"spec": {"containers": containers, "restartPolicy": "Never"}}}
        for field in ("parallelism", "completions"):
            if rj[field] is not None:
                job_spec[field] = rj[field]
        item: dict[str, Any] = {"name": f"rj-{i}", "template": {"spec": job_spec}}
        if rj["replicas"] is not None:
            item["replicas"] = rj["replicas"]
        items.append(item)
    obj = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "random"},
        "spec": {"replicatedJobs": items},
    }
    return submitted(obj)


def expected_totals(drawn: list[dict[str, Any]]) -> tuple[list[tuple[str, int]], dict[str, int]]:
    """Pods per replicated job and the total request per resource, by JobSet's and the Job controller's rules:
    replicas default to 1, parallelism to 1, completions to parallelism; requests are whole units (× 1000 milli)."""
    pods: list[tuple[str, int]] = []
    totals = dict.fromkeys(RESOURCES, 0)
    for i, rj in enumerate(drawn):
        replicas = 1 if rj["replicas"] is None else rj["replicas"]
        parallelism = 1 if rj["parallelism"] is None else rj["parallelism"]
        completions = parallelism if rj["completions"] is None else rj["completions"]
        count = replicas * min(parallelism, completions)
        pods.append((f"rj-{i}", count))
        for resource in RESOURCES:
            per_pod = sum(requests.get(resource, 0) for requests in rj["containers"]) * 1000
            totals[resource] += count * per_pod
    return pods, {r: q for r, q in totals.items() if q}


@settings(max_examples=200, deadline=None)
@given(replicated_jobs)
def test_jobset_total_is_replicas_times_pods_at_once_times_request(drawn: list[dict[str, Any]]) -> None:
    conversion = convert(JOBSET, jobset(drawn), CONFIG)
    assert conversion.problems == ()
    workload = conversion.workload
    assert workload is not None
    pods, totals = expected_totals(drawn)
    assert [(p.name, p.count) for p in workload.pod_sets] == pods
    found: dict[str, int] = {}
    for pod_set in workload.pod_sets:
        for resource, quantity in pod_set.total().items():
            found[resource] = found.get(resource, 0) + quantity
    assert {r: q for r, q in found.items() if q} == totals
