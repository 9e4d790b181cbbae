"""Gang readiness (the quota file's `waitForPodsReady`): an admitted workload whose pods are not all ready in time
is evicted like a victim (checkpoint first) for PodsReadyTimeout, requeued with backoff, and deactivated after
`requeuingLimit` requeues; a gang that lost readiness gets `recoveryTimeout`; `blockAdmission` admits nothing else
of its scope while an admitted workload there is not ready; a gang that gets ready in time is never touched."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.workload import Workload
from clusters.sim.cluster import SimJob, Simulation
from queues.controller import Controller
from queues.journal import Journals, NullJournal, RecordingJournal
from queues.loop import LoopTimers
from queues.manager import SERIAL_MESSAGE, State
from quota.config import QuotaConfig
from quota.loader import load_config_text
from quota.pod_set import PodSet
from quota.preemption import PreemptionReason
from tests.admin.conftest import StubCluster

S = 1_000
MIN = 60 * S

BASE = """
flavors: [{name: a100}]
priorityClasses:
  - {name: research, value: 100, default: true, checkpointTimeout: 20s}
teams:
  - name: nlp
    queues: [nlp/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
  - name: vision
    queues: [vision/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
"""


def config(extra: str = "", nlp: str = "") -> QuotaConfig:
    text = BASE + extra
    if nlp:
        text = text.replace(
            "  - name: nlp\n    queues: [nlp/default]\n", f"  - name: nlp\n    queues: [nlp/default]\n    {nlp}\n"
        )
    return load_config_text(text)


def workload(name: str, team: str, gpus: int, at: int = 0, pods: int = 2) -> Workload:
    return Workload(
        name=name,
        team=team,
        priority=100,
        pod_sets=(PodSet("main", pods, {"nvidia.com/gpu": gpus * 1000 // pods}),),
        created_at=at,
        queue=f"{team}/default",
        priority_class="research",
    )


def sim_job(name: str, team: str, gpus: int, at: int, minutes: int, **kw: object) -> SimJob:
    return SimJob(workload(name, team, gpus, at), at, minutes * MIN, **kw)  # type: ignore[arg-type]


def simulate(cfg: QuotaConfig, *jobs: SimJob, backoff_ms: int = 10 * S) -> tuple[Simulation, RecordingJournal]:
    journal = RecordingJournal()
    sim = Simulation(cfg, jobs, journal, backoff_base_ms=backoff_ms)
    sim.run()
    return sim, journal


def times(journal: RecordingJournal, step: str, name: str) -> list[int]:
    return [p["args"][-1] for p in journal.named(step) if p["args"][0].name == name]


def test_a_gang_never_ready_is_evicted_requeued_with_backoff_and_deactivated_after_the_limit() -> None:
    cfg = config("waitForPodsReady: {timeout: 1m, requeuingLimit: 2, backoffBase: 30s}\n")
    stuck = sim_job("stuck", "nlp", 8, 0, 10, start_delay_ms=None, hook_delay_ms=None)
    sim, journal = simulate(cfg, stuck)
    # Admitted at 0; not ready by 60 s: evicted, asked to checkpoint (20 s, never answered), suspended at 80 s,
    # requeued for 30 s; again from 110 s (deadline 170, suspended 190, backoff 60 s); the third timeout, after
    # the limit of two requeues, deactivates it at 330 s.
    assert times(journal, "admitted", "stuck") == [0, 110 * S, 250 * S]
    issued = [p["args"] for p in journal.named("preemption_issued")]
    assert [(a[2], str(a[3]), a[4]) for a in issued] == [
        (None, "PodsReadyTimeout", 60 * S),
        (None, "PodsReadyTimeout", 170 * S),
        (None, "PodsReadyTimeout", 310 * S),
    ]
    assert times(journal, "checkpoint_timed_out", "stuck") == [80 * S, 190 * S, 330 * S]
    assert [p["args"][2] for p in journal.named("requeued")] == [110 * S, 250 * S]
    [deactivated] = journal.named("deactivated")
    assert deactivated["args"][-1] == 330 * S
    assert "requeuingLimit 2" in deactivated["args"][2]
    manager = sim.controller.manager
    assert manager.state["stuck"] is State.PENDING and "stuck" in manager.deactivated
    assert "stuck" not in {w.name for w in manager.heads()}
    assert "deactivated" in manager.messages["stuck"]
    assert all(v == 0 for v in manager.live.teams["nlp"].usage.values()), "a deactivated workload holds no quota"

    # An operator's release puts it back: admitted at once, with a fresh count of timeouts.
    sim.controller.release("stuck", "ops", sim.now)
    sim.run(until_ms=sim.now + 61 * S)
    assert times(journal, "admitted", "stuck")[-1] == 330 * S
    assert "stuck" not in manager.deactivated
    assert sim.controller.tracking["stuck"].ready_timeouts == 1


def test_a_limit_of_zero_deactivates_at_the_first_timeout_and_no_limit_never_does() -> None:
    _, journal = simulate(
        config("waitForPodsReady: {timeout: 1m, requeuingLimit: 0}\n"),
        sim_job("stuck", "nlp", 8, 0, 10, start_delay_ms=None, hook_delay_ms=None),
    )
    assert len(journal.named("admitted")) == 1 and not journal.named("requeued")
    assert len(journal.named("deactivated")) == 1

    sim = Simulation(
        config("waitForPodsReady: {timeout: 1m}\n"),
        [sim_job("stuck", "nlp", 8, 0, 10, start_delay_ms=None, hook_delay_ms=None)],
        RecordingJournal(),
        backoff_base_ms=10 * S,
    )
    sim.run(until_ms=60 * MIN)
    assert sim.controller.tracking["stuck"].ready_timeouts >= 10
    assert not sim.controller.manager.deactivated


def test_the_backoff_doubles_from_the_controllers_base_without_a_backoff_base() -> None:
    _, journal = simulate(
        config("waitForPodsReady: {timeout: 1m, requeuingLimit: 3}\n"),
        sim_job("stuck", "nlp", 8, 0, 10, start_delay_ms=None, hook_delay_ms=None),
        backoff_ms=7 * S,
    )
    suspended = times(journal, "suspended", "stuck")
    eligible = [p["args"][2] for p in journal.named("requeued")]
    assert [e - s for s, e in zip(suspended, eligible, strict=False)] == [7 * S, 14 * S, 28 * S]


def test_a_checkpoint_answer_suspends_the_timed_out_gang_at_once() -> None:
    _, journal = simulate(
        config("waitForPodsReady: {timeout: 1m, requeuingLimit: 0}\n"),
        sim_job("slow", "nlp", 8, 0, 10, start_delay_ms=None, hook_delay_ms=5 * S),
    )
    # Its pods never got ready, so the simulated job never started and cannot answer: the deadline decides.
    assert times(journal, "checkpoint_timed_out", "slow") == [80 * S]


def test_a_gang_ready_in_time_is_untouched_and_a_slower_one_is_evicted() -> None:
    cfg = config("waitForPodsReady: {timeout: 1m, requeuingLimit: 0}\n")
    sim, journal = simulate(
        cfg,
        sim_job("quick", "nlp", 8, 0, 10, start_delay_ms=59 * S),
        sim_job("slow", "vision", 8, 0, 10, start_delay_ms=61 * S, hook_delay_ms=None),
    )
    assert sim.jobs["quick"].finished_at == 59 * S + 10 * MIN
    assert [p["args"][0].name for p in journal.named("preemption_issued")] == ["slow"]
    assert sim.jobs["slow"].finished_at is None and "slow" in sim.controller.manager.deactivated


def test_without_the_setting_nothing_is_timed() -> None:
    sim, journal = simulate(config(), sim_job("stuck", "nlp", 8, 0, 10, start_delay_ms=None))
    assert not journal.named("preemption_issued")
    assert sim.controller.manager.state["stuck"] is State.ADMITTED
    assert not sim.controller.not_ready


def test_a_teams_block_overrides_the_global_one() -> None:
    cfg = config("waitForPodsReady: {timeout: 1m, requeuingLimit: 0}\n", nlp="waitForPodsReady: {timeout: 5m}")
    _, journal = simulate(
        cfg,
        sim_job("nlp-job", "nlp", 8, 0, 10, start_delay_ms=2 * MIN),
        sim_job("vision-job", "vision", 8, 0, 10, start_delay_ms=2 * MIN, hook_delay_ms=None),
    )
    assert [p["args"][0].name for p in journal.named("preemption_issued")] == ["vision-job"]


def controller(cfg: QuotaConfig) -> tuple[Controller, StubCluster, RecordingJournal]:
    cluster, journal = StubCluster(), RecordingJournal()
    return Controller(cfg, cluster, LoopTimers(), journal), cluster, journal


def evicted(journal: RecordingJournal) -> list[tuple[str, str]]:
    return [(p["args"][0].name, str(p["args"][3])) for p in journal.named("preemption_issued")]


def test_a_gang_that_loses_readiness_gets_the_recovery_timeout() -> None:
    c, cluster, journal = controller(config("waitForPodsReady: {timeout: 1m, recoveryTimeout: 30s}\n"))
    c.submit(workload("a", "nlp", 8, pods=4), 0)
    c.schedule(0)
    assert cluster.admitted == ["a"]
    c.pods_reported("a", 3, 10 * S)
    c.tick(50 * S)
    c.pods_reported("a", 4, 55 * S)  # all four ready: the first deadline no longer counts
    c.tick(61 * S)
    assert not cluster.checkpoints
    c.pods_reported("a", 3, 100 * S)  # a pod failed: 30 s to recover
    c.tick(129 * S)
    c.pods_reported("a", 4, 120 * S)
    c.tick(130 * S)
    assert not cluster.checkpoints, "it recovered in time"
    c.pods_reported("a", 2, 200 * S)
    c.tick(229 * S)
    assert not cluster.checkpoints
    c.tick(230 * S)
    assert cluster.checkpoints == ["a"] and evicted(journal) == [("a", "PodsReadyTimeout")]
    assert c.manager.state["a"] is State.EVICTING


def test_without_a_recovery_timeout_a_gang_that_lost_readiness_is_left_alone() -> None:
    c, cluster, _ = controller(config("waitForPodsReady: {timeout: 1m}\n"))
    c.submit(workload("a", "nlp", 8, pods=4), 0)
    c.schedule(0)
    c.pods_reported("a", 4, 10 * S)
    c.pods_reported("a", 0, 20 * S)
    c.tick(100 * MIN)
    assert not cluster.checkpoints and c.manager.state["a"] is State.ADMITTED


def test_a_kind_that_cannot_tell_counts_as_ready() -> None:
    c, cluster, _ = controller(config("waitForPodsReady: {timeout: 1m}\n"))
    c.submit(workload("a", "nlp", 8, pods=4), 0)
    c.schedule(0)
    c.pods_reported("a", None, 1 * S)
    c.tick(2 * MIN)
    assert not cluster.checkpoints and not c.not_ready


def test_block_admission_holds_the_next_gang_until_the_first_is_ready() -> None:
    c, cluster, _ = controller(config("waitForPodsReady: {timeout: 5m, blockAdmission: true}\n"))
    c.submit(workload("first", "nlp", 4, at=0), 0)
    c.submit(workload("second", "vision", 4, at=1), 1)
    c.schedule(10)
    # Both fit, but one cycle admits one workload of a blockAdmission scope.
    assert cluster.admitted == ["first"]
    assert c.manager.messages["second"] == SERIAL_MESSAGE
    for at in (20, 30):
        c.schedule(at)
    assert cluster.admitted == ["first"]
    reason = c.manager.messages["second"]
    assert "blockAdmission" in reason and "first" in reason
    c.pods_reported("first", 1, 40)
    c.schedule(50)
    assert cluster.admitted == ["first"], "one pod of two is not the gang"
    c.pods_reported("first", 2, 60)
    c.schedule(70)
    assert cluster.admitted == ["first", "second"]


def test_block_admission_in_a_teams_block_holds_only_that_team() -> None:
    cfg = config(nlp="waitForPodsReady: {timeout: 5m, blockAdmission: true}")
    c, cluster, _ = controller(cfg)
    c.submit(workload("nlp-1", "nlp", 4, at=0), 0)
    c.submit(workload("nlp-2", "nlp", 4, at=1), 1)
    c.submit(workload("vision-1", "vision", 4, at=2), 2)
    c.submit(workload("vision-2", "vision", 4, at=3), 3)
    for at in (10, 20, 30):
        c.schedule(at)
    assert sorted(cluster.admitted) == ["nlp-1", "vision-1", "vision-2"]
    c.pods_reported("nlp-1", 2, 40)
    c.schedule(50)
    assert "nlp-2" in cluster.admitted


def test_block_admission_stops_two_half_started_gangs_from_deadlocking() -> None:
    # Two gangs that could each only start on pods the other holds: with blockAdmission the second waits, the
    # first times out, and the second gets its turn the moment the first is evicted (a leaving workload holds
    # nothing back).
    cfg = config("waitForPodsReady: {timeout: 1m, requeuingLimit: 0, blockAdmission: true}\n")
    sim, journal = simulate(
        cfg,
        sim_job("a", "nlp", 8, 0, 10, start_delay_ms=None, hook_delay_ms=None),
        sim_job("b", "vision", 8, 1, 10, start_delay_ms=10 * S),
    )
    assert times(journal, "admitted", "a") == [0]
    assert times(journal, "admitted", "b") == [60 * S], "admitted once a was evicted, not while it was not ready"
    assert sim.jobs["b"].finished_at == 70 * S + 10 * MIN


def test_a_preempted_gang_that_was_not_ready_holds_nothing_back() -> None:
    c, cluster, _ = controller(config("waitForPodsReady: {timeout: 5m, blockAdmission: true}\n"))
    c.submit(workload("a", "nlp", 4), 0)
    c.submit(workload("b", "vision", 4, at=1), 1)
    c.schedule(0)
    c.schedule(5)
    assert cluster.admitted == ["a"]
    c.preempt("a", "ops", 10)
    c.schedule(15)
    assert cluster.admitted == ["a", "b"], "a leaving workload no longer blocks admission"
    c.suspended("a", 20)
    assert c.manager.state["a"] is State.PENDING and "a" not in c.manager.deactivated


class _AdmissionWatch(NullJournal):
    """Checks, at every admission, that no other admitted workload of the (global) blockAdmission scope is not
    ready, and records every eviction's reason."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None
        self.reasons: list[tuple[str, str]] = []

    def admitted(self, workload: Workload, *args: Any, **kwargs: Any) -> None:
        at = args[-1]
        assert self.sim is not None
        waiting = self.sim.controller.not_ready - {workload.name}
        assert not waiting, f"{workload.name} admitted at {at} while {sorted(waiting)} were not ready"

    def preemption_issued(
        self, victim: Workload, attempt: int, preemptor: str | None, reason: PreemptionReason | str, at: int
    ) -> None:
        self.reasons.append((victim.name, str(reason)))


@settings(max_examples=int(os.environ.get("KUOTA_HYPOTHESIS_EXAMPLES", "50")), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["nlp", "vision"]),
            st.integers(1, 8),  # GPUs
            st.integers(0, 300),  # submitted at (s)
            st.integers(1, 20),  # minutes of work
            st.one_of(st.none(), st.integers(0, 120)),  # seconds until ready (None: never)
        ),
        min_size=1,
        max_size=8,
    ),
    st.booleans(),
)
def test_block_admission_never_admits_beside_a_gang_that_is_not_ready(
    jobs: list[tuple[str, int, int, int, int | None]], block: bool
) -> None:
    cfg = config(f"waitForPodsReady: {{timeout: 1m, requeuingLimit: 2, blockAdmission: {str(block).lower()}}}\n")
    sim_jobs = [
        sim_job(
            f"j{i}",
            team,
            gpus,
            at * S,
            minutes,
            start_delay_ms=None if ready is None else ready * S,
            hook_delay_ms=None,
        )
        for i, (team, gpus, at, minutes, ready) in enumerate(jobs)
    ]
    watch = _AdmissionWatch()
    sim = Simulation(cfg, sim_jobs, watch if block else Journals(), backoff_base_ms=10 * S)
    watch.sim = sim
    sim.run()
    # Whatever the mix: a gang ready within the timeout is never evicted for readiness, one never ready never
    # runs and ends deactivated, and every other job finishes.
    for i, (_, _, _, _, ready) in enumerate(jobs):
        name = f"j{i}"
        if ready is None:
            assert name in sim.controller.manager.deactivated
        elif ready < 60:
            assert sim.jobs[name].finished_at is not None
            if block:
                assert (name, "PodsReadyTimeout") not in watch.reasons


def test_the_deactivation_is_marked_on_the_cluster_and_taken_back_on_release() -> None:
    c, cluster, journal = controller(config("waitForPodsReady: {timeout: 1m, requeuingLimit: 0}\n"))
    c.submit(workload("a", "nlp", 8), 0)
    c.schedule(0)
    c.tick(60 * S)  # not ready: evicted, asked to checkpoint (20 s)
    c.tick(80 * S)  # no answer: suspended
    assert evicted(journal) == [("a", "PodsReadyTimeout")]
    c.suspended("a", 81 * S)
    assert "a" in c.manager.deactivated
    assert cluster.deactivated == {"a": c.manager.messages["a"]}
    c.release("a", "ops", 90 * S)
    assert cluster.deactivated == {"a": None}
    c.schedule(90 * S)
    assert cluster.admitted == ["a", "a"]


def test_a_workload_found_deactivated_stays_out_of_the_queue_until_released() -> None:
    c, cluster, _ = controller(config("waitForPodsReady: {timeout: 1m}\n"))
    c.submit(workload("a", "nlp", 8), 0)
    c.found_deactivated("a", "deactivated: before the restart")
    c.schedule(10)
    assert not cluster.admitted
    assert c.manager.messages["a"] == "deactivated: before the restart"
    c.release("a", "ops", 20)
    c.schedule(30)
    assert cluster.admitted == ["a"]
