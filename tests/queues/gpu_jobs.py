"""Simulated one-pod GPU jobs of a quota file's teams and classes, for the controller's tests."""

from __future__ import annotations

from admission.workload import Workload
from clusters.sim.cluster import SimJob
from quota.config import QuotaConfig
from quota.pod_set import PodSet

MIN = 60_000


def gpu_job(
    config: QuotaConfig, name: str, team: str, gpus: int, at: int, minutes: int, klass: str, **kw: object
) -> SimJob:
    """`name` of `team` asks for `gpus` A100-style GPUs at `at` (ms), runs `minutes`, in priority class `klass`."""
    pc = config.priority_class(klass)
    assert pc is not None
    workload = Workload(
        name=name,
        team=team,
        priority=pc.value,
        pod_sets=(PodSet("main", 1, {"nvidia.com/gpu": gpus * 1000}),),
        created_at=at,
        queue=f"{team}/default",
        priority_class=klass,
        preemptible=pc.preemptible,
    )
    return SimJob(workload, at, minutes * MIN, **kw)  # type: ignore[arg-type]
