"""Replaying a job trace against a quota file: trace jobs → simulated jobs → a Simulation → figures.

`kuota simulate` and the benchmarks call `replay`; the report and the JSON summary come from its result.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from admission.workload import Workload
from clusters.sim.cluster import DEFAULT_HOOK_DELAY_MS, SimJob, Simulation, SimulationStats
from queues.journal import Journal
from quota.config import QuotaConfig, Team
from quota.pod_set import PodSet
from sim.traces import TraceJob

GPU = "nvidia.com/gpu"


@dataclass
class ReplayResult:
    stats: SimulationStats
    wall_seconds: float
    simulation: Simulation

    def summary(self) -> dict[str, object]:
        figures = self.stats.summary()
        ordered: dict[str, object] = {
            "jobs": figures["jobs"],
            "finished": figures["finished"],
            "utilization": figures["utilization"],
            "jain_fairness": figures["jain_fairness"],
            "wall_seconds": round(self.wall_seconds, 2),
            "makespan_hours": figures["makespan_hours"],
            "teams": figures["teams"],
        }
        return ordered


def sim_jobs(
    config: QuotaConfig, trace: Sequence[TraceJob], hook_delay_ms: int | None = DEFAULT_HOOK_DELAY_MS
) -> list[SimJob]:
    """One single-pod workload per trace job, asking only for resources its team's quota manages.

    A trace that asks for memory when the quota file only governs GPUs would otherwise never fit anywhere;
    resources nobody has quota for are not what a quota simulation is about.
    """
    teams = {t.name: t for t in config.teams}
    classes = {p.name: p for p in config.priority_classes}
    default = config.default_priority_class()
    covered = {name: {r for g in team.groups() for r in g.covered_resources} for name, team in teams.items()}
    out = []
    for job in trace:
        team = teams[job.team]
        klass = classes.get(job.priority_class or "") or default
        requests = {_gpu_resource(team): job.gpus * 1000, "cpu": job.cpu_milli, "memory": job.memory_milli}
        requests = {r: q for r, q in requests.items() if q > 0 and r in covered[job.team]}
        workload = Workload(
            name=job.name,
            team=job.team,
            priority=klass.value if klass else 0,
            pod_sets=(PodSet("main", 1, requests),),
            created_at=job.submit_ms,
            queue=team.queues[0] if team.queues else None,
            priority_class=klass.name if klass else None,
            preemptible=klass.preemptible if klass else True,
        )
        # A job that checkpoints periodically can also checkpoint when asked; one that never does, cannot.
        delay = hook_delay_ms if job.checkpoint_interval_ms else None
        out.append(SimJob(workload, job.submit_ms, job.duration_ms, job.checkpoint_interval_ms, delay))
    return out


def _gpu_resource(team: Team) -> str:
    for group in team.groups():
        for resource in group.covered_resources:
            if resource.endswith("gpu"):
                return resource
    return GPU


def replay(
    config: QuotaConfig,
    trace: Sequence[TraceJob],
    *,
    journal: Journal | None = None,
    hook_delay_ms: int | None = DEFAULT_HOOK_DELAY_MS,
    on_progress: Callable[[int, int], None] | None = None,
) -> ReplayResult:
    started = time.perf_counter()
    simulation = Simulation(config, sim_jobs(config, trace, hook_delay_ms), journal, on_progress=on_progress)
    stats = simulation.run()
    return ReplayResult(stats, time.perf_counter() - started, simulation)
