"""Replaying a job trace against a quota file: trace jobs → simulated jobs → a Simulation → figures.

`kuota simulate` and the benchmarks call `replay`; the report and the JSON summary come from its result.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from accounting.events import workload_kind
from admission.workload import Workload
from clusters.sim.cluster import DEFAULT_HOOK_DELAY_MS, SimJob, Simulation, SimulationStats, TeamStats
from queues.journal import Journal, Journals, NullJournal
from quota.config import QuotaConfig, Team
from quota.credits import UsageInterval
from quota.pod_set import PodSet
from quota.tree import FlavorResource
from sim.nodes import RACK_LABEL
from sim.report import ReportData
from sim.topology import NodeSetup, node_shaped, topology_wish, with_nodes
from sim.traces import DEFAULT_KIND, TraceJob

GPU = "nvidia.com/gpu"


@dataclass
class KindFigures(TeamStats):
    """A team's figures, for the workloads of one kind (gpu_ms: cpu for a quota file without GPUs, as per team)."""

    pods: int = 0


class KindStats(NullJournal):
    """A Journal that keeps per-kind figures of a replay: what the per-team summary has, by the workload's kind."""

    def __init__(self) -> None:
        self.kinds: dict[str, KindFigures] = {}
        self.measured: Callable[[str], bool] = lambda resource: resource.endswith("gpu")
        self._submitted: dict[str, int] = {}
        self._running: dict[str, tuple[int, int]] = {}
        """Workload → (admitted at, measured milli-units held)."""

    def _of(self, workload: Workload) -> KindFigures:
        return self.kinds.setdefault(workload_kind(workload.name), KindFigures())

    def workload_seen(self, workload: Workload, at: int) -> None:
        figures = self._of(workload)
        figures.jobs += 1
        figures.pods += sum(pod_set.count for pod_set in workload.pod_sets)
        self._submitted[workload.name] = at

    def admitted(
        self, workload: Workload, attempt: int, usage: Mapping[FlavorResource, int], borrowed: object, at: int
    ) -> None:
        self._running[workload.name] = (at, sum(v for (_, r), v in usage.items() if self.measured(r)))
        submitted = self._submitted.pop(workload.name, None)
        if submitted is not None:  # the first admission
            self._of(workload).waits_ms.append(at - submitted)

    def _stop(self, workload: Workload, at: int) -> None:
        started, held = self._running.pop(workload.name, (at, 0))
        self._of(workload).gpu_ms += held * (at - started)

    def finished(self, workload: Workload, attempt: int, succeeded: bool, at: int) -> None:
        self._stop(workload, at)
        self._of(workload).finished += 1

    def requeued(self, workload: Workload, attempt: int, eligible_at: int, at: int) -> None:
        self._stop(workload, at)

    def preemption_issued(self, victim: Workload, attempt: int, preemptor: str | None, reason: object, at: int) -> None:
        self._of(victim).preemptions += 1

    def suspended(self, victim: Workload, attempt: int, lost_gpu_milliseconds: int, at: int) -> None:
        self._of(victim).lost_gpu_milliseconds += lost_gpu_milliseconds

    def summary(self) -> dict[str, dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        for kind, figures in sorted(self.kinds.items()):
            waits = figures.waits_ms
            out[kind] = {
                "jobs": figures.jobs,
                "pods": figures.pods,
                "finished": figures.finished,
                "gpu_hours": round(figures.gpu_ms / 1000 / 3_600_000, 2),
                "mean_wait_s": round(sum(waits) / len(waits) / 1000, 1) if waits else 0.0,
                "preemptions": figures.preemptions,
                "lost_gpu_seconds": round(figures.lost_gpu_milliseconds / 1000, 1),
            }
        return out


@dataclass
class ReplayResult:
    stats: SimulationStats
    wall_seconds: float
    simulation: Simulation
    kinds: KindStats = field(default_factory=KindStats)

    def budget_rows(self) -> list[dict[str, object]]:
        """Every budget in every window the replay overlapped (empty for a quota file without budgets)."""
        return [window.as_dict() for window in self.simulation.budget_spending()]

    def summary(self) -> dict[str, object]:
        figures = self.stats.summary()
        ordered: dict[str, object] = {
            "jobs": figures["jobs"],
            "finished": figures["finished"],
            "utilization": figures["utilization"],
            "jain_fairness": figures["jain_fairness"],
            "wall_seconds": round(self.wall_seconds, 2),
            "makespan_hours": figures["makespan_hours"],
            "lost_gpu_hours": figures["lost_gpu_hours"],
            "victims": "checkpoint-aware" if self.simulation.controller.manager.checkpoints is not None else "spec",
            "teams": figures["teams"],
            "kinds": self.kinds.summary(),
        }
        budgets = self.budget_rows()
        if budgets:  # only for quota files with budgets: every other summary stays as it was
            ordered["budgets"] = budgets
        node_stats = self.simulation.node_stats
        if node_stats is not None:
            ordered["nodes"] = node_stats.summary(failures=self.simulation.failures is not None)
        return ordered

    def report_data(self, title: str) -> ReportData:
        """What the HTML report draws of this run (`sim.report`)."""
        stats = self.stats
        summary = self.summary()
        teams, kinds, nodes = summary["teams"], summary["kinds"], summary.get("nodes")
        assert isinstance(teams, dict) and isinstance(kinds, dict) and (nodes is None or isinstance(nodes, dict))
        return ReportData(
            title=title,
            teams=list(stats.teams),
            gpu_quota={team: value // 1000 for team, value in stats.gpu_nominal.items()},
            samples=stats.samples,
            queue_depth=stats.queue_depth,
            waits_s={team: [w / 1000 for w in s.waits_ms] for team, s in stats.teams.items()},
            summary=[{"team": team, **figures} for team, figures in teams.items()],
            kinds=[{"kind": kind, **figures} for kind, figures in kinds.items()] if set(kinds) != {"Job"} else [],
            totals={k: v for k, v in summary.items() if k not in ("teams", "kinds", "budgets", "nodes")},
            budgets=self.budget_rows(),
            nodes=nodes,
            fragmentation=[
                (s.at, s.stranded_share, s.free_racks, s.nodes_down)
                for s in (self.simulation.node_stats.samples if self.simulation.node_stats is not None else [])
            ],
        )


def sim_jobs(
    config: QuotaConfig,
    trace: Sequence[TraceJob],
    hook_delay_ms: int | None = DEFAULT_HOOK_DELAY_MS,
    start_delay_ms: int = 0,
    nodes: NodeSetup | None = None,
) -> list[SimJob]:
    """One workload per trace job: a gang of `pods` identical pods (one pod set, admitted whole), each asking for its
    share of the job's totals and only for resources its team's quota manages.

    A trace that asks for memory when the quota file only governs GPUs would otherwise never fit anywhere;
    resources nobody has quota for are not what a quota simulation is about.

    A Job keeps the trace job's name; a job of any other kind is named `KIND/NAMESPACE/NAME`, as in a cluster, with
    the namespace of its team's first queue (the team's name when it has none), so the ledger records its kind.

    Every job's pods are ready `start_delay_ms` after each admission (what the quota file's waitForPodsReady
    times), and its work starts then.

    On nodes (`nodes`), a job with more GPUs than a node has becomes a gang of pods that each fit one, asking for
    a placement as the setup's topology mode says (sim/topology.py).
    """
    teams = {t.name: t for t in config.teams}
    classes = {p.name: p for p in config.priority_classes}
    default = config.default_priority_class()
    covered = {name: {r for g in team.groups() for r in g.covered_resources} for name, team in teams.items()}
    out = []
    for job in trace:
        wish = None
        if nodes is not None:
            job = node_shaped(job, nodes.layout.gpus_per_node)
            wish = topology_wish(job, nodes)
        team = teams[job.team]
        klass = classes.get(job.priority_class or "") or default
        gpu, cpu, memory = job.pod_requests()
        requests = {_gpu_resource(team): gpu, "cpu": cpu, "memory": memory}
        requests = {r: q for r, q in requests.items() if q > 0 and r in covered[job.team]}
        workload = Workload(
            name=workload_name(job, team),
            team=job.team,
            priority=klass.value if klass else 0,
            pod_sets=(PodSet("main", job.pods, requests, topology=wish),),
            created_at=job.submit_ms,
            queue=team.queues[0] if team.queues else None,
            priority_class=klass.name if klass else None,
            preemptible=klass.preemptible if klass else True,
        )
        # A job that checkpoints periodically can also checkpoint when asked; one that never does, cannot.
        delay = hook_delay_ms if job.checkpoint_interval_ms else None
        out.append(
            SimJob(
                workload,
                job.submit_ms,
                job.duration_ms,
                job.checkpoint_interval_ms,
                delay,
                start_delay_ms=start_delay_ms,
            )
        )
    return out


def workload_name(job: TraceJob, team: Team) -> str:
    """The trace job's name for a Job (as before kinds existed); `KIND/NAMESPACE/NAME` for any other kind."""
    if job.kind == DEFAULT_KIND:
        return job.name
    namespace = team.queues[0].partition("/")[0] if team.queues else team.name
    return f"{job.kind}/{namespace}/{job.name}"


def _gpu_resource(team: Team) -> str:
    for group in team.groups():
        for resource in group.covered_resources:
            if resource.endswith("gpu"):
                return resource
    return GPU


async def replay_streaming(
    config: QuotaConfig,
    trace: Sequence[TraceJob],
    *,
    journal: Journal,
    flush: Callable[[], Awaitable[None]],
    hook_delay_ms: int | None = DEFAULT_HOOK_DELAY_MS,
    start_delay_ms: int = 0,
    on_progress: Callable[[int, int], None] | None = None,
    instants: int = 2_000,
    checkpoint_aware_victims: bool = True,
    epoch_ms: int = 0,
    nodes: NodeSetup | None = None,
) -> ReplayResult:
    """`replay`, pausing every `instants` instants to `flush` what the journal has (the ledger's writer), so that a
    run stopped midway has written everything up to its last pause; the decisions are those of `replay`."""
    started = time.perf_counter()
    kinds = KindStats()
    jobs = sim_jobs(config, trace, hook_delay_ms, start_delay_ms, nodes)
    simulation = _simulation(
        config,
        jobs,
        Journals(kinds, journal),
        nodes,
        on_progress=on_progress,
        aware=checkpoint_aware_victims,
        epoch_ms=epoch_ms,
    )
    kinds.measured = simulation.stats.measured
    while simulation.step(instants):
        await flush()
    await flush()
    return ReplayResult(simulation.stats, time.perf_counter() - started, simulation, kinds)


def replay(
    config: QuotaConfig,
    trace: Sequence[TraceJob],
    *,
    journal: Journal | None = None,
    hook_delay_ms: int | None = DEFAULT_HOOK_DELAY_MS,
    start_delay_ms: int = 0,
    on_progress: Callable[[int, int], None] | None = None,
    checkpoint_aware_victims: bool = True,
    epoch_ms: int = 0,
    nodes: NodeSetup | None = None,
) -> ReplayResult:
    """`checkpoint_aware_victims`: victims the spec's order leaves equal go most recent checkpoint first (off:
    the spec's order alone); `epoch_ms`: the epoch instant the trace's time 0 stands for (budgets' calendar).
    `nodes`: run on generated nodes with a topology, and node failures (None: quota alone decides, as before)."""
    jobs = sim_jobs(config, trace, hook_delay_ms, start_delay_ms, nodes)
    return replay_jobs(
        config,
        jobs,
        journal=journal,
        on_progress=on_progress,
        checkpoint_aware_victims=checkpoint_aware_victims,
        epoch_ms=epoch_ms,
        nodes=nodes,
    )


def replay_jobs(
    config: QuotaConfig,
    jobs: Sequence[SimJob],
    *,
    journal: Journal | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    checkpoint_aware_victims: bool = True,
    epoch_ms: int = 0,
    spent_before: Sequence[UsageInterval] = (),
    nodes: NodeSetup | None = None,
) -> ReplayResult:
    """`replay` of jobs already made for the simulated cluster (a trace's, or the ledger's history); `epoch_ms` and
    `spent_before` as `Simulation` takes them."""
    started = time.perf_counter()
    kinds = KindStats()
    journals = Journals(kinds, journal) if journal is not None else kinds
    simulation = _simulation(
        config,
        jobs,
        journals,
        nodes,
        on_progress=on_progress,
        aware=checkpoint_aware_victims,
        epoch_ms=epoch_ms,
        spent_before=spent_before,
    )
    kinds.measured = simulation.stats.measured
    stats = simulation.run()
    return ReplayResult(stats, time.perf_counter() - started, simulation, kinds)


def _simulation(
    config: QuotaConfig,
    jobs: Sequence[SimJob],
    journal: Journal,
    nodes: NodeSetup | None,
    *,
    on_progress: Callable[[int, int], None] | None,
    aware: bool,
    epoch_ms: int = 0,
    spent_before: Sequence[UsageInterval] = (),
) -> Simulation:
    """The simulation, on nodes with the simulated topology when `nodes` says so (ValueError: see `with_nodes`)."""
    if nodes is None:
        return Simulation(
            config,
            jobs,
            journal,
            on_progress=on_progress,
            checkpoint_aware_victims=aware,
            epoch_ms=epoch_ms,
            spent_before=spent_before,
        )
    placed, node_list = with_nodes(config, nodes)
    return Simulation(
        placed,
        jobs,
        journal,
        on_progress=on_progress,
        checkpoint_aware_victims=aware,
        epoch_ms=epoch_ms,
        spent_before=spent_before,
        nodes=node_list,
        failures=nodes.failures,
        rack_label=RACK_LABEL,
    )
