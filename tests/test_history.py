"""sim.history: ledger records of random histories (preempted with and without checkpoints, unfinished, never run)
back into jobs. The work a job did, its requests, its submission time and its checkpoint answer come back exactly."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.records import AdmissionRecord, PreemptionRecord, WorkloadRecord
from quota.loader import load_config_text
from sim.history import (
    FINISHED_WITHOUT_RUNNING,
    NO_RUNTIME,
    TEAM_MISSING,
    extract,
    lower_median,
    sim_jobs_of,
    to_ms,
)

ORIGIN = datetime(2021, 3, 4, tzinfo=UTC)
DEFAULT_HOOK = 10_000
GPU = "nvidia.com/gpu"


def at(ms: int) -> datetime:
    return ORIGIN + timedelta(milliseconds=ms)


@dataclass
class Truth:
    workload: WorkloadRecord
    admissions: list[AdmissionRecord]
    preemptions: list[PreemptionRecord]
    duration_ms: int | None
    """The work it did; None when unfinished or never run."""
    hook_delay_ms: int | None
    finished_without_running: bool = False


pod_set = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["main", "worker"]),
        "count": st.integers(1, 4),
        "requests": st.fixed_dictionaries({GPU: st.sampled_from([0, 1000, 2000, 8000]), "cpu": st.integers(1, 64_000)}),
    }
)


@st.composite
def histories(draw: st.DrawFn, index: int) -> Truth:
    name = f"Job/ns/w{index}"
    team = draw(st.sampled_from(["a", "b"]))
    pod_sets = draw(st.lists(pod_set, min_size=1, max_size=2, unique_by=lambda p: p["name"]))
    for ps in pod_sets:
        ps["min_count"] = None
    created = draw(st.integers(0, 10**9))
    usage = {("f", r): sum(ps["count"] * ps["requests"][r] for ps in pod_sets) for r in (GPU, "cpu")}
    gpus = usage[("f", GPU)]
    fate = draw(st.sampled_from(["finished", "finished", "running", "pending", "deleted"]))
    admissions: list[AdmissionRecord] = []
    preemptions: list[PreemptionRecord] = []
    if fate in ("pending", "deleted"):
        workload = record(name, team, pod_sets, created, at(created + 5) if fate == "deleted" else None)
        return Truth(workload, [], [], None, DEFAULT_HOOK, finished_without_running=fate == "deleted")
    now, progress, hook, timed_out = created + draw(st.integers(0, 10**6)), 0, None, False
    for attempt in range(1, draw(st.integers(0, 3)) + 2):
        last = (attempt > 1 and draw(st.booleans())) or attempt == 4
        admitted = now
        if last:
            ran = draw(st.integers(0, 10**7))
            if fate == "running":
                admissions.append(admission(name, attempt, team, admitted, None, None, usage))
                break
            # Sometimes asked to checkpoint just before it finished: it finishes first, never suspended.
            if draw(st.booleans()):
                issued = admitted + ran // 2
                preemptions.append(preemption(name, attempt, issued, None, None, None, None))
            admissions.append(admission(name, attempt, team, admitted, admitted + ran, "Finished", usage))
            progress += ran
            now = admitted + ran
            break
        ran = draw(st.integers(0, 10**6))
        issued = admitted + ran
        if draw(st.booleans()) and not timed_out:  # answers: keeps its work up to the ack
            delay = hook if hook is not None else draw(st.integers(0, 60_000))
            hook = delay
            end, lost = issued + delay, 0
            progress += end - admitted
            preemptions.append(preemption(name, attempt, issued, end, None, end, lost))
        elif hook is None:  # never answers: all the work of this admission is lost
            timed_out = True
            end = issued + 120_000
            lost = gpus * (end - admitted) // 1000
            if gpus == 0:
                lost = 0
            preemptions.append(preemption(name, attempt, issued, None, end, end, lost))
        else:
            continue
        admissions.append(admission(name, attempt, team, admitted, end, "Preempted", usage))
        now = end + draw(st.integers(0, 10**5))
    finished = fate == "finished" and admissions and admissions[-1].end_reason == "Finished"
    workload = record(name, team, pod_sets, created, at(now) if finished else None)
    if timed_out and hook is None:
        expected_hook: int | None = None
    else:
        expected_hook = hook if hook is not None else DEFAULT_HOOK
    if not finished:
        # A running workload cut short by the draws above is still running as far as the ledger knows.
        return Truth(workload, admissions, preemptions, None, expected_hook)
    # Work lost by a timed-out admission without GPUs is unknowable: the rules keep nothing of it, like the truth.
    return Truth(workload, admissions, preemptions, progress, expected_hook)


def record(
    name: str, team: str, pod_sets: list[dict[str, object]], created: int, end: datetime | None
) -> WorkloadRecord:
    return WorkloadRecord(
        workload_id=name, name=name.rsplit("/", 1)[1], namespace="ns", team=team, queue=f"{team}/default",
        priority=100, priority_class="research", pod_sets=pod_sets, created_at=at(created), finished_at=end,
        succeeded=None if end is None else True,
    )  # fmt: skip


def admission(
    name: str,
    attempt: int,
    team: str,
    start: int,
    end: int | None,
    reason: str | None,
    usage: dict[tuple[str, str], int],
) -> AdmissionRecord:
    return AdmissionRecord(
        workload_id=name, attempt=attempt, team=team, admitted_at=at(start), pod_sets=[], usage=usage, borrowed={},
        ended_at=None if end is None else at(end), end_reason=reason,
    )  # fmt: skip


def preemption(
    name: str, attempt: int, issued: int, acked: int | None, timed_out: int | None, suspended: int | None,
    lost: int | None,
) -> PreemptionRecord:  # fmt: skip
    return PreemptionRecord(
        victim=name, victim_attempt=attempt, victim_team=None, preemptor=None, reason="InCohortReclamation",
        issued_at=at(issued), checkpoint_via="annotation", checkpoint_deadline=None,
        checkpoint_requested_at=at(issued), checkpoint_acked_at=None if acked is None else at(acked),
        checkpoint_timed_out_at=None if timed_out is None else at(timed_out), checkpoint_id=None,
        suspended_at=None if suspended is None else at(suspended), requeued_at=None, lost_gpu_milliseconds=lost,
    )  # fmt: skip


@st.composite
def ledgers(draw: st.DrawFn) -> list[Truth]:
    return [draw(histories(i)) for i in range(draw(st.integers(1, 12)))]


@settings(deadline=None)
@given(ledgers())
def test_extracted_jobs_are_the_work_the_ledger_recorded(truths: list[Truth]) -> None:
    extraction = extract(
        [t.workload for t in truths],
        [a for t in truths for a in t.admissions],
        [p for t in truths for p in t.preemptions],
        origin=ORIGIN,
        default_hook_delay_ms=DEFAULT_HOOK,
    )
    jobs = {job.name: job for job in extraction.jobs}
    assert len(jobs) + sum(extraction.excluded.values()) == len(truths)
    assert [job.submit_ms for job in extraction.jobs] == sorted(job.submit_ms for job in extraction.jobs)
    finished_runs: dict[tuple[str, int], list[int]] = {}
    for truth in truths:
        job = jobs.get(truth.workload.workload_id)
        if truth.duration_ms is not None:
            assert job is not None
            finished_runs.setdefault((job.team, job.gpu_milli()), []).append(truth.duration_ms)
    for truth in truths:
        workload = truth.workload
        job = jobs.get(workload.workload_id)
        if truth.finished_without_running:
            assert job is None
            continue
        if job is None:  # unfinished, with nothing of its size to go by
            assert truth.duration_ms is None
            continue
        assert job.submit_ms == to_ms(workload.created_at, ORIGIN)
        assert job.team == workload.team and job.queue == workload.queue
        # Every admission recorded exactly what the extracted pod sets ask for.
        for recorded in truth.admissions:
            for resource in (GPU, "cpu"):
                total = sum(ps.count * ps.requests.get(resource, 0) for ps in job.pod_sets)
                assert total == recorded.usage[("f", resource)]
        assert job.hook_delay_ms == truth.hook_delay_ms
        if truth.duration_ms is not None:
            assert job.duration_ms == truth.duration_ms and not job.estimated
        else:
            assert job.estimated
            assert job.duration_ms == lower_median(finished_runs[(job.team, job.gpu_milli())])
    left_out = sum(1 for t in truths if t.duration_ms is None and not t.finished_without_running) - extraction.estimated
    assert extraction.excluded.get(NO_RUNTIME, 0) == left_out
    assert extraction.excluded.get(FINISHED_WITHOUT_RUNNING, 0) == sum(t.finished_without_running for t in truths)


CONFIG = """
flavors: [{name: f}]
priorityClasses:
  - {name: research, value: 100, default: true}
  - {name: production, value: 1000, preemptible: false}
teams:
  - name: a
    queues: [a/default, a/urgent]
    quotas: [{flavor: f, resources: {nvidia.com/gpu: {nominal: 8}}}]
"""


def test_sim_jobs_follow_the_quota_file() -> None:
    workloads = [
        record("Job/ns/kept", "a", [{"name": "main", "count": 2, "requests": {GPU: 1000, "cpu": 500}}], 0, at(60_000)),
        record("Job/ns/gone", "b", [{"name": "main", "count": 1, "requests": {GPU: 1000}}], 10, at(70_000)),
    ]
    usage = {("f", GPU): 2000, ("f", "cpu"): 1000}
    admissions = [
        admission("Job/ns/kept", 1, "a", 1_000, 60_000, "Finished", usage),
        admission("Job/ns/gone", 1, "b", 1_000, 70_000, "Finished", {("f", GPU): 1000}),
    ]
    extraction = extract(workloads, admissions, [], origin=ORIGIN)
    config = load_config_text(CONFIG)
    jobs, left_out = sim_jobs_of(config, extraction.jobs)
    assert left_out == {TEAM_MISSING: 1}
    (job,) = jobs
    assert job.duration_ms == 59_000 and job.submit_ms == 0
    # cpu is not in team a's quota: not requested, as `kuota simulate` does; the recorded queue is kept.
    assert job.workload.pod_sets[0].requests == {GPU: 1000}
    assert job.workload.queue == "a/default" and job.workload.priority == 100
    assert lower_median([5, 1, 3, 2]) == 2
