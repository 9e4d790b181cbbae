"""`status()`: finished or not (and when) from each kind's own status shape, and stopped once the operator says so.

The objects are examples from ../shared/data/crds (see its README for upstream commits) and Kueue's sample Job
from ../shared/data/manifests, with the status their operators write: batch/v1 Job conditions and completionTime;
JobSet's Completed / Failed / Suspended conditions and replicatedJobsStatus; the Kubeflow operators' Succeeded /
Failed / Suspended conditions and replicaStatuses; KubeRay's jobDeploymentStatus and endTime for a RayJob, and its
RayClusterSuspended condition or state for a RayCluster.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from workloads.kind import JobKind, Status

from .examples import SUSPEND_PATH, crd_example, manifest, put

T0 = "2026-03-01T08:00:00Z"
T1 = "2026-03-01T09:30:00Z"
T2 = "2026-03-01T09:30:07Z"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def condition(kind: str, status: str = "True", when: str = T1) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": kind, "lastTransitionTime": when}


def with_status(source: tuple[JobKind, dict[str, Any]], status: Any, suspended: bool | None = None) -> Any:
    kind, obj = source
    obj["status"] = status
    if suspended is not None:
        put(obj, SUSPEND_PATH[kind.kind], suspended)
    return kind.status(obj)


def job() -> tuple[JobKind, dict[str, Any]]:
    return manifest("kueue/jobs__sample-job.yaml")


def jobset() -> tuple[JobKind, dict[str, Any]]:
    return crd_example("jobset/examples/paralleljobs.yaml")


def rayjob() -> tuple[JobKind, dict[str, Any]]:
    return crd_example("rayjob/examples/ray-job.sample.yaml")


def raycluster() -> tuple[JobKind, dict[str, Any]]:
    return crd_example("raycluster/examples/ray-cluster.sample.yaml")


REPLICA_KINDS = [
    "pytorchjob/examples/simple.yaml",
    "tfjob/examples/simple.yaml",
    "xgboostjob/examples/xgboostjob_v1_rabit_test.yaml",
    "paddlejob/examples/simple-cpu.yaml",
    "jaxjob/examples/demo.yaml",
    "mpijob/examples/pi.yaml",
]

# -- batch/v1 Job ------------------------------------------------------------------------------------------------


def test_job_complete_finished_at_its_completion_time() -> None:
    status = {
        "startTime": T0,
        "completionTime": T1,
        "succeeded": 3,
        "conditions": [condition("SuccessCriteriaMet", when=T1), condition("Complete", when=T2)],
    }
    assert with_status(job(), status) == Status(True, at(T1), stopped=True)


def test_job_failed_finished_when_its_failed_condition_was_set() -> None:
    # A failed Job has no completionTime.
    status = {
        "startTime": T0,
        "failed": 1,
        "conditions": [condition("FailureTarget", when=T1), condition("Failed", when=T2)],
    }
    assert with_status(job(), status) == Status(False, at(T2), stopped=True)


def test_job_whose_success_is_decided_and_whose_pods_are_gone_has_finished() -> None:
    # Kubernetes 1.31+: SuccessCriteriaMet first, Complete once the pods' accounting is done (see job.py).
    status = {"startTime": T0, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {"succeeded": ["u1"]}}
    status["conditions"] = [condition("SuccessCriteriaMet", when=T1)]
    assert with_status(job(), status, suspended=False) == Status(True, at(T1), stopped=True)


def test_job_whose_failure_is_decided_and_whose_pods_are_gone_has_failed() -> None:
    status = {"startTime": T0, "terminating": 0, "failed": 2, "conditions": [condition("FailureTarget", when=T1)]}
    assert with_status(job(), status, suspended=False) == Status(False, at(T1), stopped=True)


@pytest.mark.parametrize(
    "left",
    [
        {"active": 1, "terminating": 0},  # a lingering pod still runs
        {"terminating": 2},  # pods being deleted still hold their nodes
        {},  # a control plane that does not report terminating pods: wait for Complete
        {"terminating": "0"},
    ],
)
def test_job_whose_outcome_is_decided_is_not_finished_while_pods_may_be_left(left: dict[str, Any]) -> None:
    status = {"startTime": T0, **left, "conditions": [condition("SuccessCriteriaMet"), condition("FailureTarget")]}
    assert with_status(job(), status, suspended=False).finished is None


def test_suspended_job_whose_success_is_decided_has_ended_and_is_let_go() -> None:
    # An eviction crossed its last pod's success: the Job controller completes it only once it runs again.
    status = {"terminating": 0, "conditions": [condition("Suspended"), condition("SuccessCriteriaMet", when=T2)]}
    kind, obj = job()
    obj["status"] = status
    put(obj, SUSPEND_PATH[kind.kind], True)
    assert kind.status(obj) == Status(True, at(T2), stopped=True)
    assert kind.end_patch(obj) == [{"op": "replace", "path": "/spec/suspend", "value": False}]


@pytest.mark.parametrize(
    ("suspended", "status"),
    [
        (False, {"terminating": 0, "conditions": [condition("SuccessCriteriaMet")]}),  # running: it will complete
        (True, {"terminating": 0, "conditions": [condition("SuccessCriteriaMet"), condition("Complete")]}),
        (True, {"terminating": 1, "conditions": [condition("SuccessCriteriaMet")]}),  # a pod is still leaving
        (True, {"conditions": [condition("Suspended")]}),  # preempted: it waits for its next admission
    ],
)
def test_job_is_let_go_only_when_it_has_ended_but_is_held(suspended: bool, status: dict[str, Any]) -> None:
    kind, obj = job()
    obj["status"] = status
    put(obj, SUSPEND_PATH[kind.kind], suspended)
    assert kind.end_patch(obj) == []


def test_job_interim_condition_that_is_not_true_does_not_finish_it() -> None:
    status = {"terminating": 0, "conditions": [condition("SuccessCriteriaMet", "False")]}
    assert with_status(job(), status, suspended=False).finished is None


def test_job_running_has_not_finished() -> None:
    assert with_status(job(), {"startTime": T0, "active": 3}, suspended=False) == Status(None, None, stopped=False)


def test_job_condition_that_is_not_true_does_not_finish_it() -> None:
    status = {"active": 3, "conditions": [condition("Complete", "False"), condition("Failed", "Unknown")]}
    assert with_status(job(), status).finished is None


def test_job_finished_at_an_unreadable_time_is_none() -> None:
    status = {"completionTime": "yesterday", "conditions": [condition("Complete", when="")]}
    assert with_status(job(), status) == Status(True, None, stopped=True)


def test_suspended_job_is_stopped_once_the_job_controller_says_so() -> None:
    status = {"startTime": T0, "conditions": [condition("Suspended")]}
    assert with_status(job(), status, suspended=True) == Status(None, None, stopped=True)


def test_suspended_job_with_active_pods_is_not_stopped_yet() -> None:
    assert with_status(job(), {"startTime": T0, "active": 3}, suspended=True).stopped is False


def test_running_job_with_a_stale_suspended_condition_is_not_stopped() -> None:
    status = {"active": 3, "conditions": [condition("Suspended")]}
    assert with_status(job(), status, suspended=False).stopped is False


# -- JobSet ------------------------------------------------------------------------------------------------------


def test_jobset_completed() -> None:
    status = {"conditions": [condition("StartupPolicyCompleted", when=T0), condition("Completed", when=T1)]}
    assert with_status(jobset(), status) == Status(True, at(T1), stopped=True)


def test_jobset_failed() -> None:
    status = {"restarts": 3, "conditions": [condition("Failed", when=T2)]}
    assert with_status(jobset(), status) == Status(False, at(T2), stopped=True)


def test_jobset_running_has_not_finished() -> None:
    status = {"replicatedJobsStatus": [{"name": "workers", "active": 1, "ready": 1}, {"name": "driver", "active": 1}]}
    assert with_status(jobset(), status, suspended=False) == Status(None, None, stopped=False)


def test_suspended_jobset_is_stopped_once_its_controller_says_so() -> None:
    status = {
        "conditions": [condition("Suspended")],
        "replicatedJobsStatus": [{"name": "workers", "suspended": 1}, {"name": "driver", "suspended": 1}],
    }
    assert with_status(jobset(), status, suspended=True) == Status(None, None, stopped=True)


def test_suspended_jobset_with_active_child_jobs_is_not_stopped_yet() -> None:
    status = {
        "conditions": [condition("Suspended", "False")],
        "replicatedJobsStatus": [{"name": "workers", "active": 1}, {"name": "driver", "active": 0}],
    }
    assert with_status(jobset(), status, suspended=True).stopped is False


# -- Kubeflow v1 jobs and MPIJob ---------------------------------------------------------------------------------


@pytest.mark.parametrize("relative", REPLICA_KINDS)
def test_kubeflow_job_succeeded(relative: str) -> None:
    status = {
        "completionTime": T2,
        "conditions": [
            condition("Created", when=T0),
            condition("Running", "False", when=T1),
            condition("Succeeded", when=T1),
        ],
        "replicaStatuses": {"Worker": {"succeeded": 2}},
    }
    assert with_status(crd_example(relative), status) == Status(True, at(T1), stopped=True)


@pytest.mark.parametrize("relative", REPLICA_KINDS)
def test_kubeflow_job_failed(relative: str) -> None:
    status = {"conditions": [condition("Created", when=T0), condition("Failed", when=T2)]}
    assert with_status(crd_example(relative), status) == Status(False, at(T2), stopped=True)


@pytest.mark.parametrize("relative", REPLICA_KINDS)
def test_kubeflow_job_running_has_not_finished(relative: str) -> None:
    status = {
        "conditions": [condition("Created", when=T0), condition("Running")],
        "replicaStatuses": {"Worker": {"active": 2}},
    }
    assert with_status(crd_example(relative), status, suspended=False) == Status(None, None, stopped=False)


@pytest.mark.parametrize("relative", REPLICA_KINDS)
def test_suspended_kubeflow_job_is_stopped_once_its_operator_says_so(relative: str) -> None:
    status = {"conditions": [condition("Created", when=T0), condition("Suspended")], "replicaStatuses": {"Worker": {}}}
    assert with_status(crd_example(relative), status, suspended=True) == Status(None, None, stopped=True)


@pytest.mark.parametrize("relative", REPLICA_KINDS)
def test_suspended_kubeflow_job_with_active_pods_is_not_stopped_yet(relative: str) -> None:
    status = {
        "conditions": [condition("Running")],
        "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}},
    }
    assert with_status(crd_example(relative), status, suspended=True).stopped is False


# -- RayJob ------------------------------------------------------------------------------------------------------


def test_rayjob_complete() -> None:
    status = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "startTime": T0, "endTime": T1}
    assert with_status(rayjob(), status) == Status(True, at(T1), stopped=True)


@pytest.mark.parametrize("deployment", ["Failed", "ValidationFailed"])
def test_rayjob_failed(deployment: str) -> None:
    status = {"jobDeploymentStatus": deployment, "jobStatus": "FAILED", "startTime": T0, "endTime": T2}
    assert with_status(rayjob(), status) == Status(False, at(T2), stopped=True)


def test_rayjob_conditions_are_not_read() -> None:
    # KubeRay reports a RayJob's end in jobDeploymentStatus only; a condition named like another kind's says nothing.
    status = {"jobDeploymentStatus": "Running", "conditions": [condition("Complete"), condition("Failed")]}
    assert with_status(rayjob(), status, suspended=False) == Status(None, None, stopped=False)


@pytest.mark.parametrize("deployment", ["Initializing", "Running", "Suspending"])
def test_suspended_rayjob_whose_cluster_is_still_up_is_not_stopped(deployment: str) -> None:
    assert with_status(rayjob(), {"jobDeploymentStatus": deployment}, suspended=True).stopped is False


def test_suspended_rayjob_is_stopped_once_kuberay_says_so() -> None:
    assert with_status(rayjob(), {"jobDeploymentStatus": "Suspended"}, suspended=True) == Status(stopped=True)


def test_suspended_rayjob_kuberay_never_started_is_stopped() -> None:
    assert with_status(rayjob(), {"jobDeploymentStatus": "New"}, suspended=True).stopped is True
    assert with_status(rayjob(), None, suspended=True).stopped is True


def test_rayjob_that_is_not_suspended_is_not_stopped() -> None:
    assert with_status(rayjob(), {"jobDeploymentStatus": "Suspended"}, suspended=False).stopped is False


# -- RayCluster --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status",
    [
        {"state": "ready", "conditions": [condition("HeadPodReady"), condition("RayClusterProvisioned")]},
        {"state": "failed", "conditions": [condition("Failed"), condition("Complete"), condition("Succeeded")]},
        None,
    ],
)
def test_raycluster_never_finishes(status: Any) -> None:
    found = with_status(raycluster(), status, suspended=False)
    assert (found.finished, found.finished_at, found.stopped) == (None, None, False)


def test_suspended_raycluster_is_stopped_once_kuberay_says_so() -> None:
    status = {"state": "ready", "conditions": [condition("RayClusterSuspended"), condition("HeadPodReady", "False")]}
    assert with_status(raycluster(), status, suspended=True) == Status(stopped=True)


def test_suspended_raycluster_of_an_older_kuberay_is_stopped_by_its_state() -> None:
    assert with_status(raycluster(), {"state": "suspended"}, suspended=True).stopped is True


def test_suspended_raycluster_still_ready_is_not_stopped() -> None:
    status = {"state": "ready", "readyWorkerReplicas": 1, "conditions": [condition("HeadPodReady")]}
    assert with_status(raycluster(), status, suspended=True).stopped is False


def test_raycluster_that_is_not_suspended_is_not_stopped() -> None:
    status = {"state": "suspended", "conditions": [condition("RayClusterSuspended")]}
    assert with_status(raycluster(), status, suspended=False).stopped is False


@pytest.mark.parametrize(
    "status",
    [
        # Admitted, head up, worker still pending: KubeRay writes `state: ready` only once every pod runs.
        {
            "desiredWorkerReplicas": 1,
            "readyWorkerReplicas": 0,
            "conditions": [condition("HeadPodReady"), condition("RayClusterProvisioned", "False")],
        },
        # KubeRay is deleting the pods of that cluster after the stop patch.
        {
            "desiredWorkerReplicas": 1,
            "conditions": [condition("RayClusterSuspending"), condition("HeadPodReady")],
        },
    ],
    ids=["provisioning", "suspending"],
)
def test_suspended_raycluster_with_pods_and_no_state_is_not_stopped(status: dict[str, Any]) -> None:
    # Only RayClusterSuspended (or state: suspended) says the pods are gone; an empty state does not.
    assert with_status(raycluster(), status, suspended=True).stopped is False
