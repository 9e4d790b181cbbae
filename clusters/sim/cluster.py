"""A simulated cluster on a virtual clock, and the discrete-event loop that replays jobs through the controller.

Nothing sleeps: events (submissions, completions, checkpoint answers, pods gone, controller timers) sit in a heap
ordered by virtual time, and the controller runs a cycle whenever something changed at the current instant.
Jobs run for their duration; a preempted job keeps the progress of its last checkpoint (the one it made when
asked, or its last periodic one) and runs the rest when readmitted. Checkpoint hooks answer after a configurable
delay, or never. Capacity is the quota tree's, unless the simulation is given nodes: then flavors with a topology
place admitted gangs node by node, and nodes may fail (NotReady, then repaired) as a seeded `FailureModel` says.
A gang with pods on a failed node stops making progress (no checkpoint can be made or asked for there); after the
quota file's `nodeFailure.gracePeriod` the controller evicts it and it requeues, keeping the work of its last
checkpoint. A node Ready again within the grace period restarts its gangs in place from their last checkpoint.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum

from typing_extensions import override

from admission.nodes import NodeInventory, NodeState
from admission.workload import Workload
from clusters.sim.failures import FailureModel, NodeFailures
from clusters.sim.node_stats import NodeStats
from queues.controller import Controller
from queues.journal import Journal, Journals, NullJournal
from queues.manager import State
from quota.budgets import WindowSpending, period_spending
from quota.config import QuotaConfig
from quota.credits import UsageInterval

DEFAULT_HOOK_DELAY_MS = 10_000


@dataclass
class SimJob:
    workload: Workload
    submit_ms: int
    duration_ms: int
    checkpoint_interval_ms: int | None = None
    hook_delay_ms: int | None = DEFAULT_HOOK_DELAY_MS
    """How long the job takes to answer a checkpoint request; None: it never answers."""
    checkpoint_url: str | None = None
    """Present: the request goes through the URL hook (an unreachable URL is a hook that never answers)."""
    grace_ms: int = 0
    """Pod termination grace after suspend."""
    start_delay_ms: int | None = 0
    """From admission until all its pods are running and ready (gang readiness); None: they never are, and the
    job never runs."""
    progress_ms: int = 0
    started_at: int | None = None
    generation: int = 0
    checkpoints: int = 0
    resumed_from: list[str | None] = field(default_factory=list)
    finished_at: int | None = None
    halted_at: int | None = None
    """When a node it had pods on failed: from then on it makes no progress and saves no checkpoint."""


#: The generation of a node event: drawn by the failure model (which then draws the next one), or scripted.
_DRAWN = 0
_SCRIPTED = 1


class Kind(IntEnum):
    # At one instant: work ends and answers arrive before new work is submitted, then timers fire.
    FINISH = 0
    SUSPENDED = 1
    ACK = 2
    SUBMIT = 3
    READY = 4
    TICK = 5
    NODE_DOWN = 6
    NODE_UP = 7


class SimulatedCluster:
    """The Cluster the controller drives in a simulation."""

    def __init__(self, simulation: Simulation) -> None:
        self.sim = simulation

    def admit(
        self,
        workload: Workload,
        flavors: Mapping[str, Mapping[str, str]],
        counts: Mapping[str, int],
        resume_from: str | None,
    ) -> None:
        job = self.sim.jobs[workload.name]
        job.resumed_from.append(resume_from)
        self._start(job)

    def _start(self, job: SimJob) -> None:
        job.generation += 1
        job.halted_at = None
        if job.start_delay_ms is None:
            job.started_at = None  # its pods never get ready: it runs nothing
            return
        job.started_at = self.sim.now + job.start_delay_ms
        self.sim.push(job.started_at, Kind.READY, job.workload.name, job.generation)
        remaining = max(0, job.duration_ms - job.progress_ms)
        self.sim.push(job.started_at + remaining, Kind.FINISH, job.workload.name, job.generation)

    def request_checkpoint(self, workload: Workload, deadline: int, reason: str, preemptor: str | None) -> str:
        job = self.sim.jobs[workload.name]
        if job.hook_delay_ms is not None and job.started_at is not None:
            self.sim.push(self.sim.now + job.hook_delay_ms, Kind.ACK, workload.name, job.generation)
        return "url" if job.checkpoint_url else "annotation"

    def suspend(self, workload: Workload) -> None:
        job = self.sim.jobs[workload.name]
        if job.started_at is not None and job.started_at <= self.sim.now:
            job.progress_ms = self.saved_progress(job, self.sim.now)
        job.started_at = job.halted_at = None
        job.generation += 1  # the pending FINISH of this run no longer counts
        self.sim.push(self.sim.now + job.grace_ms, Kind.SUSPENDED, workload.name, job.generation)

    def mark_deactivated(self, workload: Workload, message: str | None) -> None:
        return None  # the simulation ends with its controller

    def last_checkpoint_at(self, workload: Workload) -> int | None:
        job = self.sim.jobs.get(workload.name)
        if job is None or job.started_at is None or not job.checkpoint_interval_ms:
            return None
        end = self.sim.now if job.halted_at is None else job.halted_at  # a halted gang saves nothing more
        if job.started_at > end:
            return None
        ran = end - job.started_at
        return job.started_at + ran // job.checkpoint_interval_ms * job.checkpoint_interval_ms

    def workloads_on(self, node: str) -> frozenset[str]:
        """The workloads whose admitted placement binds pods to `node`, as the queue manager's inventory holds it
        (a workload's pods stay bound until its eviction completes, as pods stay until they are gone)."""
        inventory = self.sim.inventory
        if inventory is None:
            return frozenset()
        return frozenset(name for name in inventory.owners_on(node) if name in self.sim.jobs)

    def node_inventory(self) -> NodeInventory | None:
        return self.sim.inventory

    def node_down(self, node: str) -> None:
        """`node` fails: NotReady (no new placements), its gangs halt, the controller is told."""
        inventory = self.sim.inventory
        state = inventory.node(node) if inventory is not None else None
        if inventory is None or state is None or not state.ready:
            return
        now = self.sim.now
        inventory.set_node(replace(state, ready=False))
        if self.sim.node_stats is not None:
            self.sim.node_stats.node_down(node, now)
        for name in sorted(self.workloads_on(node)):
            job = self.sim.jobs[name]
            if job.started_at is not None and job.halted_at is None:
                job.halted_at = now
                job.generation += 1  # its FINISH, READY and any checkpoint answer no longer come
        self.sim.controller.node_changed(node, False, now)

    def node_up(self, node: str) -> None:
        """`node` is repaired: Ready again. Gangs halted by it that the controller has not evicted (it came back
        within the grace period) and whose nodes are all Ready restart in place from their last checkpoint."""
        inventory = self.sim.inventory
        state = inventory.node(node) if inventory is not None else None
        if inventory is None or state is None or state.ready:
            return
        now = self.sim.now
        inventory.set_node(replace(state, ready=True))
        if self.sim.node_stats is not None:
            self.sim.node_stats.node_up(node, now)
        controller = self.sim.controller
        controller.node_changed(node, True, now)
        for name in sorted(self.workloads_on(node)):
            job = self.sim.jobs[name]
            if job.halted_at is None or controller.manager.state.get(name) is not State.ADMITTED:
                continue
            if not all(_ready(inventory, other) for other in inventory.nodes_of(name)):
                continue
            saved = self.saved_progress(job, job.halted_at)
            if self.sim.node_stats is not None:
                assert job.started_at is not None
                done_before = job.progress_ms + max(0, job.halted_at - job.started_at)
                gpus = controller.manager.usage.get(name, {})
                held = sum(v for (_, r), v in gpus.items() if r.endswith("gpu"))
                # The work since the last checkpoint, and the time it stood still on the failed node.
                self.sim.node_stats.restarted_in_place(held, max(0, done_before - saved) + now - job.halted_at)
            job.progress_ms = saved
            self._start(job)
        # Parked heads may fit on the node again.
        for queue in controller.manager.queues.values():
            queue.unpark_all()
        controller.dirty = True

    def saved_progress(self, job: SimJob, now: int) -> int:
        """Work that survives a stop now: up to the last checkpoint (an acked request counts as one)."""
        assert job.started_at is not None
        last = self.last_checkpoint_at(job.workload)
        acked = self.sim.acked_at.get(job.workload.name)
        if acked is not None and acked >= job.started_at:
            last = max(last or acked, acked)
        if last is None:
            return job.progress_ms
        return min(job.duration_ms, job.progress_ms + max(0, last - job.started_at))


class _Timers:
    def __init__(self, simulation: Simulation) -> None:
        self.sim = simulation

    def call_at(self, at: int) -> None:
        self.sim.push(max(at, self.sim.now), Kind.TICK, "", 0)


class Simulation:
    def __init__(
        self,
        config: QuotaConfig,
        jobs: Iterable[SimJob],
        journal: Journal | None = None,
        *,
        backoff_base_ms: int = 10_000,
        on_progress: Callable[[int, int], None] | None = None,
        checkpoint_aware_victims: bool = True,
        nodes: Iterable[NodeState] | None = None,
        epoch_ms: int = 0,
        spent_before: Iterable[UsageInterval] = (),
        failures: FailureModel | None = None,
        rack_label: str = "topology.kuota.dev/rack",
    ) -> None:
        """`nodes`: the simulated cluster's nodes, for flavors with a topology; admitted workloads' pods are bound
        to the nodes of the engine's placement while they run (None: no nodes, quota alone decides). `failures`:
        how nodes fail and are repaired (None: never). `rack_label`: the node label the figures count racks by.

        `epoch_ms`: the epoch instant virtual time 0 stands for, so budgets' day, week and month windows fall on
        real dates; `spent_before`: usage before then (epoch milliseconds, ended by 0), which budgets count in
        their windows. Neither changes a decision of a quota file without budgets."""
        self.now = 0
        self.jobs = {job.workload.name: job for job in jobs}
        self.acked_at: dict[str, int] = {}
        self._heap: list[tuple[int, Kind, int, str, int]] = []
        self._failures_pending = 0
        """NODE_DOWN and NODE_UP events in the heap. Once nothing else is, the run goes on only while workloads wait
        (a repair may let them in), and not past `2 × nodes` such events in a row that admitted nothing (workloads
        that fit on no node whatever is repaired would otherwise wait through failures and repairs for ever)."""
        self._idle_node_events = 0
        self._seq = itertools.count()
        self.cluster = SimulatedCluster(self)
        self.stats = SimulationStats(config)
        node_list = list(nodes) if nodes is not None else None
        self.inventory: NodeInventory | None = NodeInventory(node_list) if node_list is not None else None
        self.node_stats = NodeStats(self.inventory, rack_label=rack_label) if self.inventory is not None else None
        self.failures = NodeFailures(failures) if failures is not None and node_list else None
        stats: Journal = Journals(self.stats, self.node_stats) if self.node_stats is not None else self.stats
        journals = Journals(stats, journal) if journal is not None else stats
        self.controller = Controller(
            config,
            self.cluster,
            _Timers(self),
            journals,
            backoff_base_ms=backoff_base_ms,
            checkpoint_aware_victims=checkpoint_aware_victims,
        )
        self.controller.manager.nodes = self.inventory
        budgets = self.controller.budgets
        budgets.epoch_ms = epoch_ms
        if budgets.active:
            budgets.keep_record()
        budgets.load(list(spent_before))
        # Messages show virtual time as seconds since the start of the replay.
        self.controller.manager.time_text = lambda ms: f"{ms // 1000}s"
        self.stats.bind(self)
        self.on_progress = on_progress
        self._stepping = False
        self.finished = 0
        for job in self.jobs.values():
            self.push(job.submit_ms, Kind.SUBMIT, job.workload.name, 0)
        if self.failures is not None and node_list is not None:
            for node in node_list:
                self.push(self.failures.next_failure(node.name, 0), Kind.NODE_DOWN, node.name, _DRAWN)

    def push(self, at: int, kind: Kind, name: str, generation: int) -> None:
        if kind is Kind.NODE_DOWN or kind is Kind.NODE_UP:
            self._failures_pending += 1
        heapq.heappush(self._heap, (at, kind, next(self._seq), name, generation))

    def outage(self, node: str, at: int, repaired_at: int | None = None) -> None:
        """A scripted failure of `node` at `at`, Ready again at `repaired_at` (None: never), beside any the
        failure model draws."""
        self.push(at, Kind.NODE_DOWN, node, _SCRIPTED)
        if repaired_at is not None:
            self.push(repaired_at, Kind.NODE_UP, node, _SCRIPTED)

    def _going(self) -> bool:
        if len(self._heap) > self._failures_pending:
            return True
        if not self._heap or self.inventory is None or self._idle_node_events > 2 * len(self.inventory):
            return False
        return any(len(queue) for queue in self.controller.manager.queues.values())

    def run(self, until_ms: int | None = None) -> SimulationStats:
        self._settle(self.now)  # an operator may have changed something since the last instant
        while self._going():
            if until_ms is not None and self._heap[0][0] > until_ms:
                break
            self._instant()
        if until_ms is not None and until_ms > self.now:
            self.now = until_ms
        self._close()
        return self.stats

    def budget_spending(self) -> list[WindowSpending]:
        """Every budget in every window the replay overlapped, up to its last workload event (a budget's own timer
        may run the clock on to a window's end with nothing left to do); none without budgets."""
        budgets = self.controller.budgets
        if budgets.record is None:
            return []
        start, end = budgets.epoch_ms, budgets.epoch_ms + self.stats.last_event
        return period_spending(self.controller.config, budgets.record, budgets.exhausted_at, start, end)

    def _close(self) -> None:
        self.stats.advance(self.now)
        if self.node_stats is not None:
            self.node_stats.close(self.now)

    def step(self, instants: int) -> bool:
        """Run the next `instants` instants (every event of one virtual time, then the cycles it allows); False once
        the simulation is over. Stepping until False decides exactly what one `run()` decides: it only pauses
        between instants, where a caller may write the ledger out."""
        if not self._stepping:
            self._stepping = True
            self._settle(self.now)
        for _ in range(instants):
            if not self._going():
                break
            self._instant()
        if self._going():
            return True
        self._close()
        return False

    def _instant(self) -> None:
        at = self._heap[0][0]
        self.now = at
        self.stats.advance(at)
        while self._heap and self._heap[0][0] == at:
            _, kind, _, name, generation = heapq.heappop(self._heap)
            self._apply(kind, name, generation)
        self._settle(at)

    def _settle(self, at: int) -> None:
        self.controller.tick(at)
        # Keep cycling while cycles make progress: one head per team per cycle, as in Kueue.
        for _ in range(10_000):
            if self.controller.schedule(at) is None:
                break

    def _apply(self, kind: Kind, name: str, generation: int) -> None:
        if kind < Kind.NODE_DOWN:
            self._idle_node_events = 0  # something other than failures and repairs happened
        job = self.jobs.get(name)
        controller = self.controller
        if kind is Kind.SUBMIT and job is not None:
            controller.submit(job.workload, self.now)
        elif kind is Kind.FINISH and job is not None and generation == job.generation and job.started_at is not None:
            job.finished_at = self.now
            job.started_at = None
            controller.job_finished(name, self.now, succeeded=True)
            self.finished += 1
            if self.on_progress is not None:
                self.on_progress(self.finished, len(self.jobs))
        elif kind is Kind.ACK and job is not None and generation == job.generation and job.started_at is not None:
            job.checkpoints += 1
            self.acked_at[name] = self.now
            controller.checkpoint_acked(name, f"{name}@{job.checkpoints}", self.now)
        elif kind is Kind.SUSPENDED and job is not None and generation == job.generation:
            controller.suspended(name, self.now)
        elif kind is Kind.READY and job is not None and generation == job.generation:
            controller.pods_reported(name, None, self.now)
        elif kind is Kind.NODE_DOWN:
            self._failures_pending -= 1
            self._idle_node_events += 1
            self.cluster.node_down(name)
            if self.failures is not None and generation == _DRAWN:
                self.push(self.failures.repaired_at(name, self.now), Kind.NODE_UP, name, _DRAWN)
        elif kind is Kind.NODE_UP:
            self._failures_pending -= 1
            self._idle_node_events += 1
            self.cluster.node_up(name)
            if self.failures is not None and generation == _DRAWN:
                self.push(self.failures.next_failure(name, self.now), Kind.NODE_DOWN, name, _DRAWN)
        # TICK needs nothing here: the loop ticks the controller after every instant.


@dataclass
class TeamStats:
    jobs: int = 0
    finished: int = 0
    gpu_ms: int = 0
    """milli-GPU × ms actually used."""
    borrowed_gpu_ms: int = 0
    waits_ms: list[int] = field(default_factory=list)
    preemptions: int = 0
    lost_gpu_milliseconds: int = 0


class SimulationStats(NullJournal):
    """A Journal that keeps the figures `kuota simulate` reports, sampled over virtual time; the steps it does not
    count are NullJournal's."""

    def __init__(self, config: QuotaConfig, samples: int = 1500) -> None:
        self.config = config
        self.teams = {t.name: TeamStats() for t in config.teams}
        # What "in use" measures: GPUs, or cpu for a quota file without GPUs (Kueue's own perf mixes).
        has_gpu = any(r.endswith("gpu") for t in config.teams for g in t.groups() for r in g.covered_resources)
        self.measured: Callable[[str], bool] = (lambda r: r.endswith("gpu")) if has_gpu else (lambda r: r == "cpu")
        self.gpu_nominal = {
            t.name: sum(
                q.nominal for g in t.groups() for f in g.flavors for r, q in f.resources.items() if self.measured(r)
            )
            for t in config.teams
        }
        self.admit_times: dict[str, int] = {}
        """First admission of every workload."""
        self.in_use: dict[str, int] = dict.fromkeys(self.teams, 0)
        self.submitted_at: dict[str, int] = {}
        self.admitted_once: set[str] = set()
        self.running_gpus: dict[str, int] = {}
        self.last_at = 0
        self.first_submit: int | None = None
        self.last_event = 0
        self.samples: list[tuple[int, dict[str, int]]] = []
        self.queue_depth: list[tuple[int, dict[str, int]]] = []
        self.sample_every = 1
        self._next_sample = 0
        self._target_samples = samples
        self.sim: Simulation | None = None

    def bind(self, sim: Simulation) -> None:
        self.sim = sim
        times = [job.submit_ms + job.duration_ms for job in sim.jobs.values()]
        span = max(times, default=0) - min((j.submit_ms for j in sim.jobs.values()), default=0)
        self.sample_every = max(1, span // self._target_samples)

    # -- time ---------------------------------------------------------------------------------------------------

    def advance(self, now: int) -> None:
        elapsed = now - self.last_at
        if elapsed > 0:
            for team, used in self.in_use.items():
                if used:
                    stats = self.teams[team]
                    stats.gpu_ms += used * elapsed
                    above = used - self.gpu_nominal[team]
                    if above > 0:
                        stats.borrowed_gpu_ms += above * elapsed
            self.last_at = now
        while now >= self._next_sample:
            self._sample(self._next_sample)
            self._next_sample += self.sample_every

    def _sample(self, at: int) -> None:
        self.samples.append((at, {t: v // 1000 for t, v in self.in_use.items()}))
        if self.sim is not None:
            manager = self.sim.controller.manager
            self.queue_depth.append((at, {t: len(q) for t, q in manager.queues.items()}))
            if self.sim.node_stats is not None:
                self.sim.node_stats.sample(at)

    # -- journal (each one marked @override: a misspelt name would be a method the controller never calls) ---------

    @override
    def workload_seen(self, workload: Workload, at: int) -> None:
        self.teams[workload.team].jobs += 1
        self.submitted_at[workload.name] = at
        if self.first_submit is None or at < self.first_submit:
            self.first_submit = at

    @override
    def admitted(
        self, workload: Workload, attempt: int, usage: Mapping[tuple[str, str], int], borrowed: object, at: int
    ) -> None:
        gpus = sum(v for (_, r), v in usage.items() if self.measured(r))
        self.running_gpus[workload.name] = gpus
        self.in_use[workload.team] += gpus
        if workload.name not in self.admitted_once:
            self.admitted_once.add(workload.name)
            self.admit_times[workload.name] = at
            self.teams[workload.team].waits_ms.append(at - self.submitted_at.get(workload.name, at))

    def _stop(self, workload: Workload) -> None:
        self.in_use[workload.team] -= self.running_gpus.pop(workload.name, 0)

    @override
    def finished(self, workload: Workload, attempt: int, succeeded: bool, at: int) -> None:
        self._stop(workload)
        self.teams[workload.team].finished += 1
        self.last_event = max(self.last_event, at)

    @override
    def requeued(self, workload: Workload, attempt: int, eligible_at: int, at: int) -> None:
        self._stop(workload)

    @override
    def preemption_issued(self, victim: Workload, attempt: int, preemptor: str | None, reason: object, at: int) -> None:
        self.teams[victim.team].preemptions += 1

    @override
    def suspended(self, victim: Workload, attempt: int, lost_gpu_milliseconds: int, at: int) -> None:
        self.teams[victim.team].lost_gpu_milliseconds += lost_gpu_milliseconds

    # -- summary ------------------------------------------------------------------------------------------------

    def summary(self) -> dict[str, object]:
        start = self.first_submit or 0
        makespan_ms = max(1, self.last_event - start)
        capacity = _gpu_capacity(self.config)
        used = sum(s.gpu_ms for s in self.teams.values())
        lost = sum(s.lost_gpu_milliseconds for s in self.teams.values())
        utilization = used / (capacity * makespan_ms) if capacity else 0.0
        credits = self.sim.controller.credits.credits(self.last_at) if self.sim is not None else {}
        teams: dict[str, dict[str, object]] = {}
        for name, s in self.teams.items():
            waits = sorted(s.waits_ms)
            credit = credits.get(name)
            teams[name] = {
                "jobs": s.jobs,
                "finished": s.finished,
                "gpu_hours": round(s.gpu_ms / 1000 / 3_600_000, 2),
                "mean_wait_s": round(sum(waits) / len(waits) / 1000, 1) if waits else 0.0,
                "p95_wait_s": round(waits[min(len(waits) - 1, int(len(waits) * 0.95))] / 1000, 1) if waits else 0.0,
                "share_of_capacity": round(s.gpu_ms / (capacity * makespan_ms), 4) if capacity else 0.0,
                "borrowed_gpu_hours": round(s.borrowed_gpu_ms / 1000 / 3_600_000, 2),
                "preemptions": s.preemptions,
                "lost_gpu_seconds": round(s.lost_gpu_milliseconds / 1000, 1),
                "lost_gpu_hours": round(s.lost_gpu_milliseconds / 1000 / 3600, 2),
                "credit": float(round(credit.credit, 4)) if credit is not None else 0.0,
            }
        return {
            "jobs": sum(s.jobs for s in self.teams.values()),
            "finished": sum(s.finished for s in self.teams.values()),
            "utilization": round(utilization, 4),
            "jain_fairness": round(self.jain(), 4),
            "makespan_hours": round(makespan_ms / 3_600_000, 2),
            "lost_gpu_hours": round(lost / 1000 / 3600, 2),
            "teams": teams,
        }

    def min_usage_share(self) -> float:
        """The least any team used of its own nominal quota, on average over the run (Kueue's min usage)."""
        span = max(1, self.last_event - (self.first_submit or 0))
        shares = [s.gpu_ms / (self.gpu_nominal[t] * span) for t, s in self.teams.items() if self.gpu_nominal[t]]
        return min(shares, default=0.0)

    def jain(self) -> float:
        """Jain's index over teams that asked for GPUs, of GPU-hours received per GPU of nominal quota."""
        values = [s.gpu_ms / self.gpu_nominal[t] for t, s in self.teams.items() if s.jobs and self.gpu_nominal[t] > 0]
        if not values or not any(values):
            return 1.0
        return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def _ready(inventory: NodeInventory, node: str) -> bool:
    state = inventory.node(node)
    return state is not None and state.ready


def _gpu_capacity(config: QuotaConfig) -> int:
    """Whole-cluster capacity of the measured resource in milli-units: every nominal quota of teams and cohorts."""
    has_gpu = any(r.endswith("gpu") for t in config.teams for g in t.groups() for r in g.covered_resources)
    total = 0
    for holder in (*config.teams, *config.cohorts):
        for group in holder.groups():
            for entry in group.flavors:
                for resource, quota in entry.resources.items():
                    if resource.endswith("gpu") if has_gpu else resource == "cpu":
                        total += quota.nominal
    return total
