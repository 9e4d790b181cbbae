"""Real history into replayable jobs: what `kuota whatif` replays under two quota files.

Pure: ledger records in (`accounting.records`: workloads, their admissions and preemptions), jobs out; the reading
is `accounting.history`. Every time is whole milliseconds after `origin` (the window's start), every request
the ledger's exact milli-units.

The rules, per workload created in the window:

* **Submission** is its creation time; team, queue, priority class and pod sets (names, counts, minimum counts,
  per-pod requests) are as the ledger recorded them when the workload was first seen.
* **Run time** is the work it did, not the time it held quota: for each admission, the full span
  (admitted → ended) when it is the last admission of a finished workload; for a preempted admission, the
  progress it kept: up to its checkpoint ack, or without an ack its span less the work lost (the ledger's lost
  GPU-milliseconds over the GPUs it held); nothing for an admission that ended any other way. A last admission
  that finished while asked to checkpoint (never suspended) counts in full.
* **Unfinished work** (still running, or still pending, when the ledger was read) takes the median run time
  (the lower median, exact) of the finished workloads of the same team and size (total GPUs requested); with
  none to go by it is left out and counted.
* **Finished without ever running** (deleted while pending): left out and counted.
* **Checkpoint hooks**: a workload that acked a checkpoint request answers after the delay it took then; one
  whose request timed out and that never acked never answers; one never asked (or that finished before
  answering) is assumed to answer after `default_hook_delay_ms`.
  Periodic checkpoints are not in the ledger, so a replayed job checkpoints only when asked.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from accounting.records import AdmissionRecord, PreemptionRecord, WorkloadRecord
from admission.workload import Workload
from clusters.sim.cluster import DEFAULT_HOOK_DELAY_MS, SimJob
from quota.config import QuotaConfig
from quota.pod_set import PodSet

FINISHED_WITHOUT_RUNNING = "finished without ever running"
NO_RUNTIME = "unfinished, and no finished workload of its team and size to take a run time from"
TEAM_MISSING = "its team is not in the quota file"

_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class HistoryJob:
    """One workload of the window, ready to replay."""

    name: str
    """The ledger's workload id (`KIND/NAMESPACE/NAME`, or a Job's bare or `NAMESPACE/NAME` name)."""
    team: str
    queue: str
    priority_class: str | None
    pod_sets: tuple[PodSet, ...]
    submit_ms: int
    duration_ms: int
    hook_delay_ms: int | None
    """How long it takes to answer a checkpoint request; None: it never answers."""
    estimated: bool = False
    """True: unfinished, its run time is the median of its team and size."""

    def gpu_milli(self) -> int:
        return gpu_milli(self.pod_sets)


@dataclass
class Extraction:
    jobs: list[HistoryJob]
    excluded: dict[str, int] = field(default_factory=dict)
    """Workloads left out, by reason."""

    @property
    def estimated(self) -> int:
        return sum(job.estimated for job in self.jobs)


def to_ms(moment: datetime, origin: datetime) -> int:
    """Whole milliseconds from `origin` to `moment`, to the nearest (the ledger keeps microseconds)."""
    micros = (moment - origin) // timedelta(microseconds=1)
    return (micros + 500) // 1000


def pod_sets_of(rows: Sequence[Mapping[str, object]]) -> tuple[PodSet, ...]:
    """The ledger's JSON pod sets ([{name, count, min_count, requests}]) as pod sets."""
    out = []
    for row in rows:
        requests = row.get("requests") or {}
        assert isinstance(requests, Mapping)
        min_count = row.get("min_count")
        out.append(
            PodSet(
                str(row["name"]),
                int(str(row["count"])),
                {str(r): int(str(q)) for r, q in requests.items()},
                min_count=None if min_count is None else int(str(min_count)),
            )
        )
    return tuple(out)


def gpu_milli(pod_sets: Iterable[PodSet]) -> int:
    return sum(ps.count * q for ps in pod_sets for r, q in ps.requests.items() if r.endswith("gpu"))


def kept_progress_ms(admission: AdmissionRecord, preemption: PreemptionRecord) -> int:
    """The work a preempted admission kept: up to its checkpoint ack; without one, its span less the work lost."""
    if preemption.checkpoint_acked_at is not None:
        return max(0, (preemption.checkpoint_acked_at - admission.admitted_at) // _MS)
    end = preemption.suspended_at or admission.ended_at
    if end is None:
        return 0
    span = (end - admission.admitted_at) // _MS
    gpus = sum(v for (_, resource), v in admission.usage.items() if resource.endswith("gpu"))
    lost = preemption.lost_gpu_milliseconds
    if gpus <= 0 or lost is None:
        return 0  # nothing says what survived
    lost_ms = -(-lost * 1000 // gpus)  # milli-GPU-seconds × 1000 / milli-GPUs, rounded up: never more kept than was
    return max(0, span - lost_ms)


def run_time_ms(
    workload: WorkloadRecord, admissions: Sequence[AdmissionRecord], preemptions: Mapping[int, PreemptionRecord]
) -> int | None:
    """The work a finished workload did (see the module's rules), or None when it is unfinished or never ran."""
    if workload.finished_at is None or not admissions:
        return None
    ordered = sorted(admissions, key=lambda a: a.attempt)
    total = 0
    for admission in ordered:
        preemption = preemptions.get(admission.attempt)
        if preemption is not None and preemption.suspended_at is not None:
            total += kept_progress_ms(admission, preemption)
        elif admission is ordered[-1]:  # ran to the end, also when it finished while asked to checkpoint
            end = admission.ended_at or workload.finished_at
            total += max(0, (end - admission.admitted_at) // _MS)
    return total


def hook_delay_of(preemptions: Iterable[PreemptionRecord], default_ms: int | None) -> int | None:
    timed_out = False
    for preemption in sorted(preemptions, key=lambda p: p.victim_attempt):
        if preemption.checkpoint_acked_at is not None and preemption.checkpoint_requested_at is not None:
            return max(0, (preemption.checkpoint_acked_at - preemption.checkpoint_requested_at) // _MS)
        timed_out = timed_out or preemption.checkpoint_timed_out_at is not None
    return None if timed_out else default_ms


def lower_median(values: Sequence[int]) -> int:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def extract(
    workloads: Iterable[WorkloadRecord],
    admissions: Iterable[AdmissionRecord],
    preemptions: Iterable[PreemptionRecord],
    *,
    origin: datetime,
    default_hook_delay_ms: int | None = DEFAULT_HOOK_DELAY_MS,
) -> Extraction:
    """The window's workloads as jobs, ordered by submission then name, and what was left out."""
    by_workload: dict[str, list[AdmissionRecord]] = defaultdict(list)
    for admission in admissions:
        by_workload[admission.workload_id].append(admission)
    preempted: dict[str, dict[int, PreemptionRecord]] = defaultdict(dict)
    for preemption in preemptions:
        preempted[preemption.victim][preemption.victim_attempt] = preemption
    excluded: dict[str, int] = {}
    known: list[tuple[WorkloadRecord, tuple[PodSet, ...], int | None]] = []
    finished_runs: dict[tuple[str, int], list[int]] = defaultdict(list)
    for workload in workloads:
        pod_sets = pod_sets_of(workload.pod_sets)
        ran = run_time_ms(workload, by_workload.get(workload.workload_id, []), preempted.get(workload.workload_id, {}))
        if workload.finished_at is not None and ran is None:
            excluded[FINISHED_WITHOUT_RUNNING] = excluded.get(FINISHED_WITHOUT_RUNNING, 0) + 1
            continue
        if ran is not None:
            finished_runs[(workload.team, gpu_milli(pod_sets))].append(ran)
        known.append((workload, pod_sets, ran))
    jobs = []
    for workload, pod_sets, ran in known:
        estimated = ran is None
        if ran is None:
            runs = finished_runs.get((workload.team, gpu_milli(pod_sets)))
            if not runs:
                excluded[NO_RUNTIME] = excluded.get(NO_RUNTIME, 0) + 1
                continue
            ran = lower_median(runs)
        jobs.append(
            HistoryJob(
                name=workload.workload_id,
                team=workload.team,
                queue=workload.queue,
                priority_class=workload.priority_class,
                pod_sets=pod_sets,
                submit_ms=to_ms(workload.created_at, origin),
                duration_ms=ran,
                hook_delay_ms=hook_delay_of(preempted.get(workload.workload_id, {}).values(), default_hook_delay_ms),
                estimated=estimated,
            )
        )
    jobs.sort(key=lambda job: (job.submit_ms, job.name))
    return Extraction(jobs, excluded)


def sim_jobs_of(config: QuotaConfig, jobs: Iterable[HistoryJob]) -> tuple[list[SimJob], dict[str, int]]:
    """The jobs as the simulated cluster runs them under `config`, and those it cannot (by reason).

    Priority follows the job's class in `config` (its default class when the file has no class of that name);
    requests for resources the team's quota does not cover are dropped, as `kuota simulate` drops them; the job
    keeps its recorded queue when the team still has it, else takes the team's first queue.
    """
    teams = {t.name: t for t in config.teams}
    classes = {p.name: p for p in config.priority_classes}
    default = config.default_priority_class()
    covered = {name: {r for g in team.groups() for r in g.covered_resources} for name, team in teams.items()}
    out: list[SimJob] = []
    excluded: dict[str, int] = {}
    for job in jobs:
        team = teams.get(job.team)
        if team is None:
            excluded[TEAM_MISSING] = excluded.get(TEAM_MISSING, 0) + 1
            continue
        klass = classes.get(job.priority_class or "") or default
        pod_sets = tuple(
            PodSet(
                ps.name,
                ps.count,
                {r: q for r, q in ps.requests.items() if q > 0 and r in covered[job.team]},
                min_count=ps.min_count,
            )
            for ps in job.pod_sets
        )
        queue = job.queue if job.queue in team.queues else (team.queues[0] if team.queues else None)
        workload = Workload(
            name=job.name,
            team=job.team,
            priority=klass.value if klass else 0,
            pod_sets=pod_sets,
            created_at=job.submit_ms,
            queue=queue,
            priority_class=klass.name if klass else None,
            preemptible=klass.preemptible if klass else True,
        )
        out.append(SimJob(workload, job.submit_ms, job.duration_ms, None, job.hook_delay_ms))
    return out, excluded
