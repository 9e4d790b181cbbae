"""The simulated cluster with nodes: gangs run where the engine placed them, and no node ever holds more than it
has, through admissions, completions and preemptions on the virtual clock."""

from __future__ import annotations

from admission.nodes import NodeInventory
from admission.workload import Workload
from clusters.sim.cluster import SimJob, Simulation
from queues.manager import QueueManager, State
from quota.loader import load_config_text
from quota.pod_set import PodSet, TopologyRequest
from sim.nodes import BLOCK_LABEL, HOSTNAME_LABEL, RACK_LABEL, generated_nodes

GPU = "nvidia.com/gpu"
CONFIG = load_config_text(
    f"""
topologies: [{{name: fabric, levels: [{BLOCK_LABEL}, {RACK_LABEL}, {HOSTNAME_LABEL}]}}]
flavors: [{{name: h100, topology: fabric}}]
priorityClasses: [{{name: low, value: 0}}, {{name: high, value: 10}}]
teams:
  - name: ml
    queues: [ml/default]
    quotas: [{{flavor: h100, resources: {{{GPU}: {{nominal: 1000}}}}}}]
    preemption: {{withinTeam: LowerPriority}}
"""
)


def _job(name: str, at_s: int, pods: int, gpus: int, seconds: int, *, rack: bool, priority: int = 0) -> SimJob:
    wish = TopologyRequest(RACK_LABEL, True) if rack else None
    pod_set = PodSet("main", pods, {GPU: gpus * 1000}, topology=wish)
    workload = Workload(name, "ml", priority, (pod_set,), created_at=at_s * 1000)
    return SimJob(workload, at_s * 1000, seconds * 1000, hook_delay_ms=1000)


def test_gangs_run_in_one_rack_and_nodes_never_overflow() -> None:
    jobs = [
        *(_job(f"single-{i}", i, 1, 4, 300, rack=False) for i in range(10)),
        *(_job(f"gang-{i}", 20 + i, 4, 8, 200, rack=True) for i in range(4)),
        _job("urgent", 60, 4, 8, 100, rack=True, priority=10),
    ]
    sim = Simulation(CONFIG, jobs, nodes=generated_nodes(12, 8, 4, 3))
    manager = sim.controller.manager
    inventory = manager.nodes
    assert inventory is not None
    racks_of: dict[str, set[str]] = {}
    while sim.step(1):
        for node in inventory:
            assert inventory.used(node.name).get(GPU, 0) <= node.allocatable[GPU], f"{node.name} over-committed"
        for workload in manager.running():
            if workload.admission is not None and workload.name.startswith(("gang", "urgent")):
                nodes = workload.admission.placement["main"]
                assert sum(nodes.values()) == 4
                racks = {inventory.node(n).labels[RACK_LABEL] for n in nodes}  # type: ignore[union-attr]
                assert len(racks) == 1, f"{workload.name} spans racks {racks}"
                racks_of.setdefault(workload.name, set()).update(racks)
    assert all(job.finished_at is not None for job in sim.jobs.values()), "every job ran to its end"
    assert set(racks_of) == {"gang-0", "gang-1", "gang-2", "gang-3", "urgent"}
    assert all(not inventory.nodes_of(job) for job in sim.jobs), "finished work holds no node"
    # urgent found no free rack (the singles and two gangs hold them): it took one gang's rack, which resumed later.
    (preemption,) = manager.preemptions.values()
    assert (preemption.victim, preemption.preemptor) == ("gang-0", "urgent")
    assert sim.jobs["gang-0"].resumed_from == [None, "gang-0@1"]


def test_a_head_parked_for_want_of_nodes_looks_again_when_nodes_change() -> None:
    """A gang no rack holds is parked (quota would fit); a new rack lets it in once the cluster says nodes changed."""
    manager = QueueManager(CONFIG)
    inventory = NodeInventory(generated_nodes(2, 8, 4, 3))
    manager.nodes = inventory
    gang = _job("gang", 0, 4, 8, 100, rack=True).workload
    manager.add(gang)
    manager.schedule(1_000)
    assert manager.inadmissible("gang"), manager.messages["gang"]
    # Two nodes in all: not merely no room now, never on these nodes; it still looks again when they change.
    assert (
        "can never fit: no topology.kuota.dev/rack domain of topology fabric could hold its 4 pods"
        in (manager.messages["gang"])
    )
    for node in generated_nodes(4, 8, 4, 3, first=4):
        inventory.set_node(node)
    manager.schedule(2_000)
    assert manager.state["gang"] is State.PENDING and manager.inadmissible("gang"), "parked: nobody said so"
    manager.nodes_changed()
    manager.schedule(3_000)
    assert manager.state["gang"] is State.ADMITTED
    admission = manager.workloads["gang"].admission
    assert admission is not None and sorted(admission.placement["main"]) == [
        "node-004",
        "node-005",
        "node-006",
        "node-007",
    ]
