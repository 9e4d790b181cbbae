"""A batch/v1 Job whose outcome the Job controller has decided (`SuccessCriteriaMet`, `FailureTarget`) and whose pods
are all gone gives its quota back then, not at `Complete` a second or more later (workloads/kinds/job.py says why);
the terminal condition that follows changes nothing. A Job suspended in that state (an eviction crossed its last pod's
success) has ended too, and kuota lets it go once, since only a running Job is completed by the Job controller."""

from __future__ import annotations

import copy
from typing import Any

from clusters.kube.cluster import KubeCluster
from queues.controller import Controller
from queues.journal import RecordingJournal
from queues.loop import LoopTimers
from queues.manager import State
from workloads.kinds.job import JOB
from workloads.registry import REGISTRY

from .test_admit_after_end import queued_job
from .test_pods_ready import CONFIG

NAME = "Job/ml/decided"


class Patches:
    """The API's patch call: JSON patches (functions of the object as the watch saw it) are recorded as sent."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def patch_object(self, kind: Any, namespace: str, name: str, patch: Any) -> None:
        self.sent.append(patch(None) if callable(patch) else patch)


def rig() -> tuple[KubeCluster, Controller, RecordingJournal]:
    cluster = KubeCluster(Patches(), lambda: CONFIG, kinds=REGISTRY.enabled(["Job"]), clock=lambda: 1_000_000)  # type: ignore[arg-type]
    journal = RecordingJournal()
    controller = Controller(CONFIG, cluster, LoopTimers(), journal)
    cluster.attach(controller, None)
    return cluster, controller, journal


def version(obj: dict[str, Any], *, suspend: bool, status: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"]["suspend"] = suspend
    changed["status"] = status
    return changed


def true(kind: str) -> dict[str, str]:
    return {"type": kind, "status": "True", "lastTransitionTime": "2026-03-01T09:30:00Z"}


# What 1.37's Job controller writes, in order, for a Job whose pods all succeed (seen on the real control plane).
RUNNING = {"active": 3, "ready": 3, "terminating": 0}
DECIDED = {"ready": 0, "terminating": 0, "uncountedTerminatedPods": {"succeeded": ["a", "b", "c"]}}
DECIDED["conditions"] = [true("SuccessCriteriaMet")]
COMPLETE = {"ready": 0, "terminating": 0, "succeeded": 3, "conditions": [true("SuccessCriteriaMet"), true("Complete")]}


async def admitted(cluster: KubeCluster, controller: Controller) -> dict[str, Any]:
    job = queued_job("decided")
    cluster.observe(JOB, job)
    controller.schedule(1_000_000)
    await cluster.settle()
    assert controller.manager.state[NAME] is State.ADMITTED
    return job


async def test_decided_job_without_pods_gives_its_quota_back_before_complete() -> None:
    cluster, controller, journal = rig()
    job = await admitted(cluster, controller)
    cluster.observe(JOB, version(job, suspend=False, status=RUNNING))
    assert controller.manager.state[NAME] is State.ADMITTED

    cluster.observe(JOB, version(job, suspend=False, status=DECIDED))
    assert NAME not in controller.manager.workloads and not any(controller.manager.usage.values())
    assert [entry["args"][2] for entry in journal.named("finished")] == [True]

    cluster.observe(JOB, version(job, suspend=False, status=COMPLETE))  # the terminal condition: already ended
    assert len(journal.named("finished")) == 1 and NAME not in cluster.submitted


async def test_decided_job_keeps_its_quota_while_a_pod_is_still_terminating() -> None:
    cluster, controller, journal = rig()
    job = await admitted(cluster, controller)
    cluster.observe(JOB, version(job, suspend=False, status={**DECIDED, "terminating": 1}))
    assert controller.manager.state[NAME] is State.ADMITTED and any(controller.manager.usage.values())
    cluster.observe(JOB, version(job, suspend=False, status=COMPLETE))
    assert NAME not in controller.manager.workloads and len(journal.named("finished")) == 1


async def test_job_suspended_after_its_success_was_decided_has_ended_and_is_let_go_once() -> None:
    cluster, controller, journal = rig()
    job = await admitted(cluster, controller)
    controller.preempt(NAME, "admin", 1_000_000)  # an eviction that crosses its pods' success
    controller.tick(1_000_000 + 60 * 60_000)  # past its checkpoint deadline: kuota suspends it
    await cluster.settle()
    api: Patches = cluster.api  # type: ignore[assignment]
    sent = len(api.sent)
    held = {**DECIDED, "conditions": [true("Suspended"), true("SuccessCriteriaMet")]}
    cluster.observe(JOB, version(job, suspend=True, status=held))
    cluster.observe(JOB, version(job, suspend=True, status=held))  # seen again before the patch's echo
    await cluster.settle()
    assert NAME not in controller.manager.workloads and [e["args"][2] for e in journal.named("finished")] == [True]
    assert api.sent[sent:] == [[{"op": "replace", "path": "/spec/suspend", "value": False}]]

    cluster.observe(JOB, version(job, suspend=False, status=held))  # let go: the Job controller completes it
    cluster.observe(JOB, version(job, suspend=False, status=COMPLETE))
    await cluster.settle()
    assert len(api.sent) == sent + 1 and len(journal.named("finished")) == 1
