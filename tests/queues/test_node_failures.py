"""Node failures (the quota file's `nodeFailure`): a node NotReady or gone for longer than the grace period evicts
every admitted workload with pods on it, for NodeFailure, without asking for a checkpoint; the workload is stopped
at once with the GPU time since its last checkpoint counted lost, requeued at the front of its queue with no
backoff, and readmitted to resume from its last checkpoint. A node Ready again in time evicts nothing."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.nodes import NodeInventory
from admission.workload import Workload
from queues.controller import Controller
from queues.journal import RecordingJournal
from queues.manager import State
from quota.config import QuotaConfig
from quota.loader import load_config_text
from quota.pod_set import PodSet
from quota.preemption import PreemptionReason

S = 1_000
MIN = 60 * S

CONFIG = """
flavors: [{name: a100}]
priorityClasses:
  - {name: research, value: 100, default: true, checkpointTimeout: 20s}
nodeFailure: {gracePeriod: 2m}
teams:
  - name: nlp
    queues: [nlp/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 16}}}]
"""


class NodeCluster:
    """A cluster that says which workloads have pods on which node, and records what the controller asks."""

    def __init__(self) -> None:
        self.on_node: dict[str, set[str]] = {}
        self.admitted: list[tuple[str, str | None]] = []
        self.checkpoints: list[str] = []
        self.suspended: list[str] = []

    def admit(
        self,
        workload: Workload,
        flavors: Mapping[str, Mapping[str, str]],
        counts: Mapping[str, int],
        resume_from: str | None,
    ) -> None:
        self.admitted.append((workload.name, resume_from))

    def request_checkpoint(self, workload: Workload, deadline: int, reason: str, preemptor: str | None) -> str:
        self.checkpoints.append(workload.name)
        return "annotation"

    def suspend(self, workload: Workload) -> None:
        self.suspended.append(workload.name)

    def mark_deactivated(self, workload: Workload, message: str | None) -> None:
        return None

    def last_checkpoint_at(self, workload: Workload) -> int | None:
        return None

    def workloads_on(self, node: str) -> frozenset[str]:
        return frozenset(self.on_node.get(node, ()))

    def node_inventory(self) -> NodeInventory | None:
        return None


class Timers:
    def __init__(self) -> None:
        self.asked: list[int] = []

    def call_at(self, at: int) -> None:
        self.asked.append(at)


def gang(name: str, gpus: int, at: int = 0, priority: int = 100) -> Workload:
    return Workload(
        name=name,
        team="nlp",
        priority=priority,
        pod_sets=(PodSet("main", 1, {"nvidia.com/gpu": gpus * 1000}),),
        created_at=at,
        queue="nlp/default",
        priority_class="research",
    )


def controller(text: str = CONFIG) -> tuple[Controller, NodeCluster, RecordingJournal]:
    cluster = NodeCluster()
    journal = RecordingJournal()
    return Controller(load_config_text(text), cluster, Timers(), journal), cluster, journal


def run(ctl: Controller, now: int) -> None:
    ctl.tick(now)
    while ctl.schedule(now) is not None:
        pass


def test_a_node_lost_past_the_grace_period_evicts_its_workload_to_the_front_to_resume_from_its_checkpoint() -> None:
    ctl, cluster, journal = controller()
    ctl.submit(gang("Job/nlp/train", 8), 0)
    run(ctl, 0)
    assert cluster.admitted == [("Job/nlp/train", None)]
    cluster.on_node["gpu-1"] = {"Job/nlp/train"}
    ctl.checkpoint_reported("Job/nlp/train", 10 * MIN, "ckpt-10")  # a checkpoint the job made on its own
    # Newer work of the same priority arrives and waits (the team holds 16 GPUs, train and this one 8 each...).
    ctl.submit(gang("Job/nlp/newer", 16, at=5 * MIN), 5 * MIN)
    run(ctl, 5 * MIN)
    assert ctl.manager.state["Job/nlp/newer"] is State.PENDING

    ctl.node_changed("gpu-1", ready=False, at=20 * MIN)
    run(ctl, 21 * MIN)
    assert ctl.manager.state["Job/nlp/train"] is State.ADMITTED, "within the grace period nothing happens"
    assert ctl.next_due() == 22 * MIN

    run(ctl, 22 * MIN)
    # Evicted for NodeFailure without a checkpoint request, stopped at once, lost 8 GPUs × 12 min since 10 min.
    [issued] = journal.named("preemption_issued")
    assert issued["args"][2:] == (None, PreemptionReason.NODE_FAILURE, 22 * MIN)
    assert cluster.checkpoints == []
    [failed] = journal.named("node_failed")
    assert failed["args"][1:] == (1, "gpu-1", 20 * MIN, 22 * MIN)
    [suspended] = journal.named("suspended")
    assert suspended["args"][2] == 8_000 * 12 * MIN // 1000
    assert cluster.suspended == ["Job/nlp/train"]

    # Its pods are gone: requeued with no backoff, ahead of the newer work, and readmitted at once from ckpt-10.
    ctl.suspended("Job/nlp/train", 23 * MIN)
    [requeued] = journal.named("requeued")
    assert requeued["args"][2] == 23 * MIN, "eligible at once: no backoff for a node failure"
    assert [w.name for w in ctl.manager.pending("nlp")] == ["Job/nlp/train", "Job/nlp/newer"]
    run(ctl, 23 * MIN)
    assert cluster.admitted[-1] == ("Job/nlp/train", "ckpt-10")
    assert ctl.manager.state["Job/nlp/newer"] is State.PENDING


def test_the_front_goes_before_older_work_of_its_priority_but_not_before_higher_priority() -> None:
    ctl, cluster, _journal = controller()
    ctl.submit(gang("Job/nlp/train", 16, at=10 * MIN), 10 * MIN)
    run(ctl, 10 * MIN)
    ctl.submit(gang("Job/nlp/older", 16, at=0), 11 * MIN)  # created before train (a clock skew, an import...)
    ctl.submit(gang("Job/nlp/urgent", 16, at=12 * MIN, priority=1000), 12 * MIN)
    cluster.on_node["gpu-1"] = {"Job/nlp/train"}
    ctl.node_changed("gpu-1", ready=False, at=13 * MIN)
    run(ctl, 15 * MIN)
    ctl.suspended("Job/nlp/train", 15 * MIN)
    assert [w.name for w in ctl.manager.pending("nlp")] == ["Job/nlp/urgent", "Job/nlp/train", "Job/nlp/older"]


def test_a_node_ready_again_within_the_grace_period_evicts_nothing_and_a_later_failure_starts_afresh() -> None:
    ctl, cluster, journal = controller()
    ctl.submit(gang("Job/nlp/train", 8), 0)
    run(ctl, 0)
    cluster.on_node["gpu-1"] = {"Job/nlp/train"}
    ctl.node_changed("gpu-1", ready=False, at=1 * MIN)
    ctl.node_changed("gpu-1", ready=False, at=2 * MIN)  # still NotReady: the clock does not restart
    ctl.node_changed("gpu-1", ready=True, at=2 * MIN + 59 * S)
    run(ctl, 3 * MIN)
    run(ctl, 10 * MIN)
    assert journal.named("preemption_issued") == [] and ctl.manager.state["Job/nlp/train"] is State.ADMITTED
    # It fails again: a new grace period from then.
    ctl.node_changed("gpu-1", ready=False, at=20 * MIN)
    run(ctl, 21 * MIN)
    assert journal.named("preemption_issued") == []
    run(ctl, 22 * MIN)
    assert [p["args"][3] for p in journal.named("preemption_issued")] == [PreemptionReason.NODE_FAILURE]


def test_the_transition_time_counts_so_a_restarted_controller_does_not_wait_a_whole_grace_period_again() -> None:
    ctl, cluster, journal = controller()
    ctl.submit(gang("Job/nlp/train", 8), 0)
    run(ctl, 0)
    cluster.on_node["gpu-1"] = {"Job/nlp/train"}
    ctl.node_changed("gpu-1", ready=False, at=10 * MIN, since=9 * MIN)
    assert ctl.next_due() == 11 * MIN
    run(ctl, 11 * MIN)
    assert len(journal.named("node_failed")) == 1


def test_only_workloads_with_pods_on_the_node_are_evicted_and_one_already_leaving_stops_waiting_for_its_answer() -> (
    None
):
    ctl, cluster, journal = controller(CONFIG.replace("checkpointTimeout: 20s", "checkpointTimeout: 10m"))
    for name in ("Job/nlp/a", "Job/nlp/b", "Job/nlp/c"):
        ctl.submit(gang(name, 4), 0)
    run(ctl, 0)
    ctl.preempt("Job/nlp/b", "ops", 1 * MIN)  # asked to checkpoint; its node will never answer
    assert cluster.checkpoints == ["Job/nlp/b"]
    cluster.on_node["gpu-1"] = {"Job/nlp/a", "Job/nlp/b"}
    ctl.node_changed("gpu-1", ready=False, at=1 * MIN)
    run(ctl, 3 * MIN)
    assert sorted(cluster.suspended) == ["Job/nlp/a", "Job/nlp/b"]
    assert ctl.manager.state["Job/nlp/c"] is State.ADMITTED
    assert sorted(p["args"][0].name for p in journal.named("node_failed")) == ["Job/nlp/a", "Job/nlp/b"]
    assert [p["args"][0].name for p in journal.named("preemption_issued")] == ["Job/nlp/b", "Job/nlp/a"]
    # Nothing more happens at b's checkpoint deadline: it is already stopped.
    run(ctl, 12 * MIN)
    assert journal.named("checkpoint_timed_out") == []


def test_without_the_block_nodes_are_never_acted_on_and_a_reload_that_adds_it_starts_counting() -> None:
    plain = CONFIG.replace("nodeFailure: {gracePeriod: 2m}\n", "")
    ctl, cluster, journal = controller(plain)
    ctl.submit(gang("Job/nlp/train", 8), 0)
    run(ctl, 0)
    cluster.on_node["gpu-1"] = {"Job/nlp/train"}
    ctl.node_changed("gpu-1", ready=False, at=1 * MIN)
    run(ctl, 60 * MIN)
    assert journal.named("preemption_issued") == []
    ctl.reload(load_config_text(CONFIG), CONFIG, "test", 60 * MIN)
    run(ctl, 60 * MIN)
    assert [p["args"][3] for p in journal.named("preemption_issued")] == [PreemptionReason.NODE_FAILURE]


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(st.tuples(st.booleans(), st.integers(min_value=1, max_value=200)), min_size=1, max_size=12),
)
def test_an_eviction_happens_exactly_when_a_failure_outlasts_the_grace_period(events: list[tuple[bool, int]]) -> None:
    """Random Ready/NotReady reports (seconds apart): the workload is evicted, at the instant the grace period ends,
    iff some NotReady run, from its first report, lasts 120 s before a Ready report (or the end, 10 minutes after
    the last report)."""
    ctl, cluster, journal = controller()
    ctl.submit(gang("Job/nlp/train", 8), 0)
    run(ctl, 0)
    cluster.on_node["gpu-1"] = {"Job/nlp/train"}
    now = 0
    failed_since: int | None = None
    expected: int | None = None
    for ready, gap in events:
        now += gap * S
        if failed_since is not None and expected is None and now >= failed_since + 2 * MIN:
            expected = failed_since + 2 * MIN
        while (due := ctl.next_due()) is not None and due <= now:  # the loop wakes at each reminder
            run(ctl, due)
        ctl.node_changed("gpu-1", ready=ready, at=now)
        if ready:
            failed_since = None
        elif failed_since is None:
            failed_since = now
    end = now + 10 * MIN
    if failed_since is not None and expected is None:
        expected = failed_since + 2 * MIN
    while (due := ctl.next_due()) is not None and due <= end:
        run(ctl, due)
    issued = journal.named("node_failed")
    if expected is None:
        assert issued == []
    else:
        assert [p["args"][-1] for p in issued] == [expected]


def test_the_quota_files_block_is_read_and_checked(tmp_path: object) -> None:
    from quota.loader import ConfigError

    assert load_config_text("nodeFailure: {}\n").node_failure is not None
    config: QuotaConfig = load_config_text("nodeFailure: {}\n")
    assert config.node_failure is not None and config.node_failure.grace_period == 5 * MIN
    assert config.watches_nodes and not load_config_text("teams: []\n").watches_nodes
    assert load_config_text("nodeFailure: {gracePeriod: 90s}\n").node_failure.grace_period == 90 * S  # type: ignore[union-attr]
    for block, expected in [
        ("{gracePeriod: 0s}", "nodeFailure.gracePeriod (line 2): must be longer than 0"),
        ("{gracePeriod: 100000000h}", "nodeFailure.gracePeriod (line 2): '100000000h' is longer than 100 years"),
        ("{gracePeriod: soon}", "nodeFailure.gracePeriod (line 2): 'soon' is not a duration"),
        ("5m", "nodeFailure (line 2): '5m' is not a block"),
        ("{grace: 1m}", "nodeFailure.grace (line 2): unknown field"),
    ]:
        try:
            load_config_text(f"teams: []\nnodeFailure: {block}\n", source="q.yaml")
        except ConfigError as error:
            rendered = [p.render() for p in error.problems]
            assert any(expected in line for line in rendered), rendered
        else:
            raise AssertionError(f"{block} was accepted")
