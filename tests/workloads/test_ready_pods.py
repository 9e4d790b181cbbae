"""`ready_pods()`: how many of a running object's pods are ready (or done) as each kind's status reports them, the
count gang readiness compares with the admitted pod count; None for a kind whose status does not say."""

from __future__ import annotations

from typing import Any

import pytest

from workloads.kind import JobKind
from workloads.kinds.leaderworkerset import LEADERWORKERSET
from workloads.kinds.pod import POD
from workloads.kinds.trainjob import TRAINJOB

from .examples import crd_example, manifest, put


def with_status(source: tuple[JobKind, dict[str, Any]], status: Any) -> int | None:
    kind, obj = source
    obj["status"] = status
    return kind.ready_pods(obj)


def test_job_counts_ready_and_succeeded_pods() -> None:
    job = manifest("kueue/jobs__sample-job.yaml")  # parallelism 3
    assert with_status(job, {}) == 0
    assert with_status(job, {"active": 3, "ready": 2}) == 2
    assert with_status(job, {"active": 2, "ready": 2, "succeeded": 1}) == 3, "a pod that succeeded stays counted"
    assert with_status(job, {"ready": "3", "succeeded": -1}) == 0


def test_jobset_counts_the_pods_of_ready_child_jobs() -> None:
    jobset = crd_example("jobset/examples/paralleljobs.yaml")  # workers: 1 Job of 4 pods; driver: 1 Job of 1 pod
    assert with_status(jobset, {}) == 0
    statuses = [{"name": "workers", "ready": 0, "active": 1}, {"name": "driver", "ready": 1, "active": 1}]
    assert with_status(jobset, {"replicatedJobsStatus": statuses}) == 1
    statuses[0]["ready"] = 1
    assert with_status(jobset, {"replicatedJobsStatus": statuses}) == 5


def test_jobset_child_jobs_stand_for_their_share_of_the_replicated_jobs_pods() -> None:
    kind, obj = crd_example("jobset/examples/paralleljobs.yaml")
    put(obj, ["spec", "replicatedJobs", 0, "replicas"], 3)  # 3 Jobs × 4 pods
    statuses = [{"name": "workers", "ready": 2, "succeeded": 0}, {"name": "driver", "succeeded": 1}]
    assert with_status((kind, obj), {"replicatedJobsStatus": statuses}) == 2 * 4 + 1
    statuses[0]["ready"] = 9  # never more than the replicated job has
    assert with_status((kind, obj), {"replicatedJobsStatus": statuses}) == 3 * 4 + 1


@pytest.mark.parametrize("example", ["pytorchjob/examples/simple.yaml", "mpijob/examples/pi.yaml"])
def test_replica_kinds_count_active_and_succeeded_replicas(example: str) -> None:
    source = crd_example(example)
    assert with_status(source, {}) == 0
    assert with_status(source, {"replicaStatuses": {"Master": {"active": 1}, "Worker": {"succeeded": 1}}}) == 2


def test_ray_kinds_are_ready_when_kuberay_says_the_cluster_is() -> None:
    cluster = crd_example("raycluster/examples/ray-cluster.sample.yaml")
    pods = cluster[0].pod_count(cluster[1])
    assert pods > 1
    assert with_status(cluster, {}) == 0
    assert with_status(cluster, {"state": "ready"}) == pods
    job = crd_example("rayjob/examples/ray-job.sample.yaml")
    assert with_status(job, {"rayClusterStatus": {"state": ""}}) == 0
    assert with_status(job, {"rayClusterStatus": {"state": "ready"}}) == job[0].pod_count(job[1])


@pytest.mark.parametrize("kind", [TRAINJOB, LEADERWORKERSET, POD], ids=lambda k: k.kind)
def test_kinds_whose_status_does_not_say_answer_none(kind: JobKind) -> None:
    assert kind.ready_pods({"status": {"ready": 4, "active": 4}}) is None
