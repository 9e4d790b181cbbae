"""A Job that ends between kuota's decision to admit it and the run patch (a requeued Job whose last pod completed
as it was being suspended, seen in the Kueue mix on the real control plane) is not patched: the patch would be built
from an object kuota no longer holds, and the controller, told of the end, has already given the quota back."""

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

from ...workloads.examples import manifest, submitted
from .test_pods_ready import CONFIG


class Patches:
    """The API's patch call, recorded (what this test checks is that none is made)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def patch_object(self, kind: Any, namespace: str, name: str, patch: Any) -> None:
        self.sent.append((namespace, name))


def queued_job(name: str) -> dict[str, Any]:
    obj = submitted(copy.deepcopy(manifest("kueue/jobs__sample-job.yaml")[1]))
    obj["metadata"]["name"] = name
    obj["metadata"].pop("generateName", None)
    obj["spec"]["suspend"] = True  # as the webhook left it
    return obj


def completed(obj: dict[str, Any]) -> dict[str, Any]:
    done = copy.deepcopy(obj)
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 3}
    return done


async def test_a_job_that_ends_before_its_run_patch_is_not_patched() -> None:
    api = Patches()
    cluster = KubeCluster(api, lambda: CONFIG, kinds=REGISTRY.enabled(["Job"]), clock=lambda: 1_000_000)  # type: ignore[arg-type]
    controller = Controller(CONFIG, cluster, LoopTimers(), RecordingJournal())
    cluster.attach(controller, None)
    job = queued_job("late")
    cluster.observe(JOB, job)
    assert controller.schedule(1_000_000) is not None  # decides: admitted, the run patch spawned
    assert controller.manager.state["Job/ml/late"] is State.ADMITTED
    cluster.observe(JOB, completed(job))  # the end arrives before the spawned patch runs
    await cluster.settle()
    assert api.sent == [], "no run patch for a Job that has ended"
    assert "Job/ml/late" not in controller.manager.workloads and not any(controller.manager.usage.values())


async def test_a_job_still_queued_is_patched() -> None:
    api = Patches()
    cluster = KubeCluster(api, lambda: CONFIG, kinds=REGISTRY.enabled(["Job"]), clock=lambda: 1_000_000)  # type: ignore[arg-type]
    controller = Controller(CONFIG, cluster, LoopTimers(), RecordingJournal())
    cluster.attach(controller, None)
    cluster.observe(JOB, queued_job("prompt"))
    controller.schedule(1_000_000)
    await cluster.settle()
    assert api.sent == [("ml", "prompt")]
