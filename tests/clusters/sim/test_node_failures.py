"""Node failures on the simulated cluster: a failed node's gangs stop, are evicted for NodeFailure after the quota
file's grace period, lose exactly the work since their last checkpoint, requeue at the front and resume elsewhere;
nothing is placed on a node until it is repaired; failures drawn from a seed are the same on every run."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.workload import Workload
from clusters.sim.cluster import SimJob, Simulation
from clusters.sim.failures import FailureModel, NodeFailures
from queues.journal import NullJournal
from quota.config import QuotaConfig
from quota.loader import load_config_text
from quota.pod_set import PodSet, TopologyRequest
from quota.preemption import PreemptionReason
from sim.nodes import BLOCK_LABEL, HOSTNAME_LABEL, RACK_LABEL, generated_nodes

GPU = "nvidia.com/gpu"
MINUTE = 60_000
HOUR = 60 * MINUTE


def _config(strategy: str = "BestEffortFIFO") -> QuotaConfig:
    return load_config_text(
        f"""
topologies: [{{name: fabric, levels: [{BLOCK_LABEL}, {RACK_LABEL}, {HOSTNAME_LABEL}]}}]
flavors: [{{name: h100, topology: fabric}}]
nodeFailure: {{gracePeriod: 5m}}
teams:
  - name: ml
    queues: [ml/default]
    queueingStrategy: {strategy}
    quotas: [{{flavor: h100, resources: {{{GPU}: {{nominal: 1000}}}}}}]
"""
    )


def _job(
    name: str, submit_ms: int, pods: int, seconds: int, *, created_ms: int | None = None, every_ms: int | None = None
) -> SimJob:
    pod_set = PodSet("main", pods, {GPU: 8000}, topology=TopologyRequest(RACK_LABEL, True) if pods > 1 else None)
    workload = Workload(name, "ml", 0, (pod_set,), created_at=submit_ms if created_ms is None else created_ms)
    return SimJob(workload, submit_ms, seconds * 1000, checkpoint_interval_ms=every_ms, hook_delay_ms=None)


class Record(NullJournal):
    """What the controller told: admissions with their nodes, NodeFailure evictions, and the work each stop lost."""

    def __init__(self) -> None:
        self.admissions: list[tuple[int, str, frozenset[str]]] = []
        self.evictions: list[tuple[int, str, str]] = []
        self.node_failures: list[tuple[int, str, str, int]] = []
        self.lost: list[tuple[int, str, int]] = []

    def admitted(
        self, workload: Workload, attempt: int, usage: Mapping[tuple[str, str], int], borrowed: object, at: int
    ) -> None:
        assert workload.admission is not None
        nodes = frozenset(n for placed in workload.admission.placement.values() for n in placed)
        self.admissions.append((at, workload.name, nodes))

    def preemption_issued(self, victim: Workload, attempt: int, preemptor: str | None, reason: object, at: int) -> None:
        self.evictions.append((at, victim.name, str(reason)))

    def node_failed(self, victim: Workload, attempt: int, node: str, since: int, at: int) -> None:
        self.node_failures.append((at, victim.name, node, since))

    def suspended(self, victim: Workload, attempt: int, lost_gpu_milliseconds: int, at: int) -> None:
        self.lost.append((at, victim.name, lost_gpu_milliseconds))


def test_a_failed_nodes_gang_is_evicted_after_the_grace_period_and_requeued_at_the_front() -> None:
    # StrictFIFO: the oldest workload blocks the queue. "big" (created first, four nodes) waits behind "gang",
    # which runs on two nodes of the only rack; when one of them fails, gang is evicted after the grace period and
    # requeued in front of big: it is admitted again at once on the two nodes left, and big still waits.
    record = Record()
    gang = _job("gang", 5 * MINUTE, 2, 10 * 3600, every_ms=30 * MINUTE)
    big = _job("big", 10 * MINUTE, 4, 3600, created_ms=0)
    sim = Simulation(_config("StrictFIFO"), [gang, big], record, nodes=generated_nodes(4, 8, 4, 1))
    sim.run(until_ms=70 * MINUTE - 1)
    ((_, _, first_nodes),) = [a for a in record.admissions if a[1] == "gang"]
    failed = sorted(first_nodes)[0]
    sim.outage(failed, 70 * MINUTE, repaired_at=5 * HOUR)
    sim.run(until_ms=75 * MINUTE)

    assert sim.cluster.workloads_on(failed) == frozenset()
    assert record.node_failures == [(75 * MINUTE, "gang", failed, 70 * MINUTE)]
    assert (75 * MINUTE, "gang", str(PreemptionReason.NODE_FAILURE)) in record.evictions
    # Admitted again at the instant it was evicted, ahead of the older "big", on nodes other than the failed one.
    at, name, nodes = record.admissions[-1]
    assert (at, name) == (75 * MINUTE, "gang") and failed not in nodes and len(nodes) == 2
    assert [w.name for w in sim.controller.manager.pending("ml")] == ["big"]
    # Checkpoints every 30 minutes from its start at 5m: the last at 65m; 16 GPUs × 10 minutes lost (the 5 minutes
    # of work before the failure and the 5 minutes of grace it stood still), no more.
    assert record.lost == [(75 * MINUTE, "gang", 16_000 * 10 * 60)]
    assert sim.jobs["gang"].progress_ms == 60 * MINUTE
    assert sim.node_stats is not None and sim.node_stats.lost_gpu_ms == 16_000 * 10 * MINUTE

    sim.run()
    assert sim.jobs["gang"].finished_at == 75 * MINUTE + 9 * HOUR, "it resumed from its checkpoint: 9 h left"


def test_lost_work_without_checkpoints_is_the_whole_run_and_a_node_back_in_time_evicts_nothing() -> None:
    record = Record()
    solo = _job("solo", 0, 1, 4 * 3600)
    steady = _job("steady", 0, 1, 4 * 3600, every_ms=HOUR)
    sim = Simulation(_config(), [solo, steady], record, nodes=generated_nodes(2, 8, 2, 1))
    sim.run(until_ms=1)
    placed = {name: next(iter(nodes)) for _, name, nodes in record.admissions}
    sim.outage(placed["solo"], 90 * MINUTE)  # never repaired
    sim.outage(placed["steady"], 150 * MINUTE, repaired_at=153 * MINUTE)  # back within the 5-minute grace period
    sim.run()

    assert [(at, name) for at, name, _, _ in record.node_failures] == [(95 * MINUTE, "solo")]
    # No checkpoint: all 95 minutes of solo's run are lost.
    assert record.lost == [(95 * MINUTE, "solo", 8000 * 95 * 60)]
    # steady restarted in place from its 2 h checkpoint at 153m: it ends 2 h later, and the stats count the 30
    # minutes since the checkpoint plus the 3 minutes it stood still.
    assert sim.jobs["steady"].finished_at == 153 * MINUTE + 2 * HOUR
    # solo waited for a Ready node (its own never came back), got steady's and ran its 4 hours from the start.
    assert sim.jobs["solo"].finished_at == 153 * MINUTE + 2 * HOUR + 4 * HOUR
    assert [name for _, name, _ in record.admissions] == ["solo", "steady", "solo"]
    stats = sim.node_stats
    assert stats is not None and stats.restarts_in_place == 1
    assert stats.lost_gpu_ms == 8000 * 95 * MINUTE + 8000 * 33 * MINUTE


def test_nothing_is_placed_on_a_failed_node_until_it_is_repaired() -> None:
    record = Record()
    jobs = [_job(f"j{i:02d}", i * 10 * MINUTE, 1, 25 * 60) for i in range(30)]
    sim = Simulation(_config(), jobs, record, nodes=generated_nodes(2, 8, 2, 1))
    sim.outage("node-000", 1, repaired_at=3 * HOUR)
    sim.run()

    assert all(job.finished_at is not None for job in sim.jobs.values())
    during = [nodes for at, _, nodes in record.admissions if 1 <= at < 3 * HOUR]
    after = [nodes for at, _, nodes in record.admissions if at >= 3 * HOUR]
    assert during and all(nodes == {"node-001"} for nodes in during)
    assert any("node-000" in nodes for nodes in after), "the repaired node takes work again"


def test_failures_drawn_from_a_seed_are_the_same_on_every_run() -> None:
    model = FailureModel(mtbf_ms=24 * HOUR, repair_ms=2 * HOUR, repair_exponential=True, seed=7)

    def history(failures: NodeFailures, node: str) -> list[int]:
        times, at = [], 0
        for _ in range(20):
            down = failures.next_failure(node, at)
            at = failures.repaired_at(node, down)
            times += [down, at]
        return times

    first = NodeFailures(model)
    # Another run that also draws for other nodes, in another order, gives each node the same history.
    second = NodeFailures(model)
    history(second, "node-009")
    assert history(first, "node-000") == history(second, "node-000")
    assert history(NodeFailures(FailureModel(24 * HOUR, 2 * HOUR, True, seed=8)), "node-000") != history(
        NodeFailures(model), "node-000"
    )

    def run(seed: int) -> tuple[list[tuple[int, str, str, int]], list[tuple[int, str, int]]]:
        record = Record()
        jobs = [_job(f"j{i:02d}", i * 20 * MINUTE, 1 + i % 2, 3 * 3600, every_ms=30 * MINUTE) for i in range(24)]
        failures = FailureModel(mtbf_ms=12 * HOUR, repair_ms=HOUR, seed=seed)
        sim = Simulation(_config(), jobs, record, nodes=generated_nodes(8, 8, 4, 2), failures=failures)
        sim.run()
        # The run ends with its last job, though nodes would go on failing and being repaired.
        assert sim.now == max(job.finished_at or 0 for job in sim.jobs.values())
        return record.node_failures, record.lost

    once = run(3)
    assert once[0], "failures happened"
    assert run(3) == once
    assert run(4) != once


@settings(max_examples=30, deadline=None)
@given(
    st.integers(min_value=1, max_value=4 * 3600),
    st.sampled_from([None, 10 * MINUTE, 30 * MINUTE, HOUR]),
    st.integers(min_value=1, max_value=2),
)
def test_lost_work_is_gpus_times_the_time_since_the_last_checkpoint(fail_s: int, every: int | None, pods: int) -> None:
    record = Record()
    job = _job("job", 0, pods, 6 * 3600, every_ms=every)
    sim = Simulation(_config(), [job], record, nodes=generated_nodes(4, 8, 4, 1))
    sim.run(until_ms=0)
    (_, _, nodes) = record.admissions[0]
    failed_at = fail_s * 1000
    sim.outage(sorted(nodes)[0], failed_at)
    sim.run(until_ms=failed_at + 5 * MINUTE)
    last_checkpoint = failed_at // every * every if every else 0
    evicted = failed_at + 5 * MINUTE
    assert record.lost == [(evicted, "job", pods * 8000 * (evicted - last_checkpoint) // 1000)]
    assert sim.jobs["job"].progress_ms == last_checkpoint
