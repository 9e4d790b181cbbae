"""The engine on nodes, for what a topology makes impossible and where preemption looks (spec/topology.md).

* `preferred` preemption falls back a level at a time, as placement does: when no domain of the preferred level
  could be freed, the victims free a domain of the next level up, never more of them than that level needs;
* a gang that no domain its wish accepts could hold even with every node empty is inadmissible with that reason,
  and evicts nobody; and (a property, checked against placement on the nodes emptied) `never_fits` says so exactly
  when no placement exists on the empty nodes.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from admission.cycle import Verdict
from admission.nodes import NodeInventory, NodeState
from admission.placement import Placer
from admission.workload import Admission, Workload
from queues.manager import QueueManager
from quota.loader import load_config_text
from quota.pod_set import PodSet, TopologyRequest
from sim.nodes import BLOCK_LABEL, RACK_LABEL, generated_nodes
from tests.admission.test_placement_properties import CONFIG as PROPERTY_CONFIG
from tests.admission.test_placement_properties import GPU, SETTINGS, WISHES, clusters

CONFIG = load_config_text(
    f"""
topologies: [{{name: fabric, levels: [{BLOCK_LABEL}, {RACK_LABEL}, kubernetes.io/hostname]}}]
flavors: [{{name: h100, topology: fabric}}]
teams:
  - name: ml
    queues: [ml/ml]
    preemption: {{withinTeam: LowerPriority}}
    quotas: [{{flavor: h100, resources: {{{GPU}: {{nominal: 1000}}}}}}]
"""
)


def manager_on(nodes: int, per_rack: int, racks_per_block: int, running_on: list[str]) -> QueueManager:
    """8-GPU nodes; a low-priority whole-node job on each of `running_on`, admitted in that order."""
    inventory = NodeInventory()
    for node in generated_nodes(nodes, 8, per_rack, racks_per_block):
        inventory.set_node(NodeState(node.name, node.labels, node.allocatable))
    manager = QueueManager(CONFIG)
    manager.nodes = inventory
    for index, node in enumerate(running_on):
        admission = Admission({"main": {GPU: "h100"}}, {"main": 1}, admitted_at=index, placement={"main": {node: 1}})
        pod_set = PodSet("main", 1, {GPU: 8000})
        manager.add(Workload(f"low-{node}", "ml", 0, (pod_set,), created_at=index, admission=admission))
    return manager


def gang(count: int, wish: TopologyRequest) -> Workload:
    return Workload("urgent", "ml", 10, (PodSet("main", count, {GPU: 8000}, topology=wish),), created_at=100)


def test_preferred_preemption_frees_a_wider_domain_when_no_domain_of_its_level_can_be_freed() -> None:
    # Two racks of four in one block; five nodes busy. Six pods prefer a rack: no rack holds six even empty.
    running = ["node-000", "node-001", "node-004", "node-005", "node-006"]
    manager = manager_on(8, 4, 2, running)
    manager.add(gang(6, TopologyRequest(RACK_LABEL, False)))
    [decision] = [d for d in manager.schedule(1_000).decisions if d.workload.name == "urgent"]
    assert decision.verdict is Verdict.PREEMPTING
    victims = sorted(t.workload.name for t in decision.victims)
    assert len(victims) == 3, "as many as the block needs to hold six, no more"
    assert victims == ["low-node-004", "low-node-005", "low-node-006"], "equal priorities: the last admitted first"


def test_preferred_preemption_frees_a_domain_of_its_own_level_when_one_can_be_freed() -> None:
    # One block of two racks of four; rack-000 runs three jobs, rack-001 two. Four pods prefer a rack. Freeing the
    # block would take one victim (3 free nodes + 1), but a rack can be freed, with two (rack-001's): the gang keeps
    # to its preferred level, as placement would put it there first.
    manager = manager_on(8, 4, 2, ["node-000", "node-001", "node-002", "node-004", "node-005"])
    manager.add(gang(4, TopologyRequest(RACK_LABEL, False)))
    [decision] = [d for d in manager.schedule(1_000).decisions if d.workload.name == "urgent"]
    assert decision.verdict is Verdict.PREEMPTING
    assert sorted(t.workload.name for t in decision.victims) == ["low-node-004", "low-node-005"]
    assert decision.assignment is not None
    [placed] = [p for p in decision.assignment.pod_sets if p.name == "main"]
    assert placed.placement is not None and placed.placement.domain == "rack-001"


def test_a_gang_no_domain_could_ever_hold_is_inadmissible_and_evicts_nobody() -> None:
    manager = manager_on(8, 4, 2, ["node-000", "node-004"])
    manager.add(gang(5, TopologyRequest(RACK_LABEL, True)))
    [decision] = [d for d in manager.schedule(1_000).decisions if d.workload.name == "urgent"]
    assert decision.verdict is Verdict.NO_FIT and not decision.victims
    assert "can never fit" in decision.message and "at most 4" in decision.message, decision.message


@SETTINGS
@given(clusters(), st.integers(1, 12), st.sampled_from([1, 2, 4, 8]), WISHES)
def test_never_fits_exactly_when_the_emptied_nodes_hold_no_placement(
    inventory: NodeInventory, count: int, gpus: int, wish: TopologyRequest | None
) -> None:
    pod_set = PodSet("main", count, {GPU: gpus * 1000, "cpu": 1000}, topology=wish)
    placer = Placer(PROPERTY_CONFIG, inventory)
    demand = placer.demand(pod_set, count, ["h100"])
    assert demand is not None
    # The same nodes with nothing on them and all taking work (a cordoned or NotReady node may come back).
    empty = NodeInventory()
    for node in inventory:
        empty.set_node(NodeState(node.name, node.labels, node.allocatable))
    on_empty = Placer(PROPERTY_CONFIG, empty)
    empty_demand = on_empty.demand(pod_set, count, ["h100"])
    assert empty_demand is not None
    assert (placer.never_fits(demand) is None) == (on_empty.place_directly(empty_demand) is not None)
