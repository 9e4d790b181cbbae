"""A trace replayed on nodes (sim/topology.py): jobs shaped into pods that fit a node, the placement they ask for
by `--topology`, the quota file's GPU flavors given the simulated topology and nodes, and the figures: with
topology on a multi-node gang lands in one free rack; off, pods go where there is most room."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from clusters.sim.failures import FailureModel
from quota.loader import load_config_text
from quota.pod_set import TopologyRequest
from sim.nodes import BLOCK_LABEL, HOSTNAME_LABEL, LEVELS, RACK_LABEL
from sim.replay import replay
from sim.topology import TOPOLOGY_NAME, NodeLayout, NodeSetup, TopologyMode, node_shaped, topology_wish, with_nodes
from sim.traces import TraceJob

CONFIG = load_config_text(
    """
flavors:
  - {name: h100, nodeLabels: {gpu: h100}}
  - {name: a100, nodeLabels: {gpu: a100}}
  - {name: cpu}
teams:
  - name: ml
    queues: [ml/default]
    quotas:
      - {flavor: h100, resources: {nvidia.com/gpu: {nominal: 128}, cpu: {nominal: 1000}}}
      - {flavor: a100, resources: {nvidia.com/gpu: {nominal: 20}, cpu: {nominal: 1000}}}
  - name: etl
    queues: [etl/default]
    quotas: [{flavor: cpu, resources: {cpu: {nominal: 64}}}]
"""
)


def _trace_job(name: str, at_s: int, gpus: int, seconds: int = 3600, pods: int = 1) -> TraceJob:
    return TraceJob(
        name, at_s * 1000, seconds * 1000, "ml", None, gpus, 1000 * pods, 4 * 1024**3 * 1000 * gpus, None, pods=pods
    )


@given(
    st.integers(min_value=1, max_value=512),
    st.integers(min_value=1, max_value=16),
    st.integers(min_value=1, max_value=16),
    st.integers(min_value=1, max_value=10_000),
)
def test_a_job_becomes_pods_that_each_fit_a_node(gpus: int, gpus_per_node: int, pods: int, cpu: int) -> None:
    # A trace job as the readers make it: its totals split evenly over its own pods.
    job = TraceJob("j", 0, 1000, "ml", None, gpus * pods, cpu * pods, 7 * cpu * pods, None, pods=pods)
    shaped = node_shaped(job, gpus_per_node)
    assert shaped.gpus == job.gpus, "the job's GPUs are kept"
    assert shaped.pods >= job.pods and shaped.gpus % shaped.pods == 0
    if gpus <= gpus_per_node:
        assert shaped is job, "pods that fit a node are left alone"
    else:
        assert shaped.gpus // shaped.pods <= gpus_per_node
    # cpu and memory split evenly, by less than a milli-unit per pod more than the trace said.
    assert shaped.cpu_milli % shaped.pods == 0 and job.cpu_milli <= shaped.cpu_milli < job.cpu_milli + shaped.pods
    assert shaped.memory_milli % shaped.pods == 0
    assert job.memory_milli <= shaped.memory_milli < job.memory_milli + shaped.pods
    shaped.pod_requests()  # splits without error


def test_the_fewest_pods_that_fit_a_node() -> None:
    assert node_shaped(_trace_job("a", 0, 8), 8).pods == 1
    assert node_shaped(_trace_job("b", 0, 32), 8).pods == 4
    assert node_shaped(_trace_job("c", 0, 12), 8).pods == 2  # 2 × 6 GPUs: 12 does not split into 8s
    assert node_shaped(_trace_job("d", 0, 24), 8).pods == 3


def test_the_wish_follows_the_mode_and_the_size() -> None:
    layout = NodeLayout(None, 8, 4, 8)

    def wish(gpus: int, mode: TopologyMode) -> TopologyRequest | None:
        return topology_wish(node_shaped(_trace_job("j", 0, gpus), 8), NodeSetup(layout, mode))

    assert wish(8, TopologyMode.required) is None, "one node's worth asks for nothing"
    assert wish(32, TopologyMode.required) == TopologyRequest(RACK_LABEL, True)
    assert wish(64, TopologyMode.required) == TopologyRequest(BLOCK_LABEL, True)
    assert wish(512, TopologyMode.required) is None, "more than a block: anywhere"
    assert wish(64, TopologyMode.preferred) == TopologyRequest(RACK_LABEL, False)
    assert wish(32, TopologyMode.off) is None


def test_gpu_flavors_get_the_topology_and_their_own_nodes() -> None:
    failures = FailureModel(3_600_000, 60_000)
    placed, nodes = with_nodes(CONFIG, NodeSetup(NodeLayout(None, 8, 4, 2), TopologyMode.required, failures))
    flavors = {f.name: f.topology for f in placed.flavors}
    assert flavors == {"h100": TOPOLOGY_NAME, "a100": TOPOLOGY_NAME, "cpu": None}
    assert [t.levels for t in placed.topologies] == [LEVELS]
    assert placed.node_failure is not None and placed.node_failure.grace_period == 300_000
    h100 = [n for n in nodes if n.labels["gpu"] == "h100"]
    a100 = [n for n in nodes if n.labels["gpu"] == "a100"]
    assert len(h100) == 16 and len(a100) == 3, "auto: as many nodes as the GPU quota fills, rounded up"
    # The a100 nodes start on the next block: no rack holds two flavors.
    assert a100[0].name == "node-016" and a100[0].labels[BLOCK_LABEL] == "block-02"
    assert not {n.labels[RACK_LABEL] for n in h100} & {n.labels[RACK_LABEL] for n in a100}

    off, _ = with_nodes(CONFIG, NodeSetup(NodeLayout(2), TopologyMode.off))
    assert [t.levels for t in off.topologies] == [(HOSTNAME_LABEL,)] and off.node_failure is None


def test_a_quota_file_without_gpu_quota_has_nothing_to_place() -> None:
    config = load_config_text(
        "flavors: [{name: cpu}]\n"
        "teams: [{name: t, queues: [t/q], quotas: [{flavor: cpu, resources: {cpu: {nominal: 4}}}]}]"
    )
    try:
        with_nodes(config, NodeSetup())
    except ValueError as exc:
        assert "no flavor holds GPU quota" in str(exc)
    else:
        raise AssertionError("expected a ValueError")


def _gang_after_singles(mode: TopologyMode) -> dict[str, object]:
    # 16 h100 nodes in 4 racks: eight 1-GPU jobs first, then a 32-GPU job (4 pods of 8).
    jobs = [_trace_job(f"single-{i}", i, 1, 7200) for i in range(8)]
    jobs.append(_trace_job("gang", 60, 32))
    result = replay(CONFIG, jobs, nodes=NodeSetup(NodeLayout(None, 8, 4, 8), mode))
    assert all(job.finished_at is not None for job in result.simulation.jobs.values())
    nodes = result.summary()["nodes"]
    assert isinstance(nodes, dict)
    return nodes


def test_topology_on_places_a_multi_node_gang_in_a_free_rack_and_off_spreads_it() -> None:
    for mode in (TopologyMode.required, TopologyMode.preferred):
        nodes = _gang_after_singles(mode)
        assert (nodes["multi_node_admissions"], nodes["single_rack_admissions"]) == (1, 1), mode
    # Off: the topology knows hosts only; the gang's pods go to the roomiest nodes in name order, over two racks.
    nodes = _gang_after_singles(TopologyMode.off)
    assert (nodes["multi_node_admissions"], nodes["single_rack_admissions"]) == (1, 0)
    assert nodes["racks"] == 5 and nodes["nodes"] == 19
