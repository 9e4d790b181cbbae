"""Property tests for topology placement: whatever the nodes, what runs on them and what a pod set asks, no node
is ever over-committed, a required pod set sits inside one domain of its level, the chosen domain is the tightest
that fits, and a pod set is refused only when no domain could hold it (checked by brute force)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.cycle import Verdict
from admission.nodes import NodeInventory, NodeState
from admission.placement import Placer, per_pod_usage
from admission.workload import Workload
from queues.manager import QueueManager, State
from quota.loader import load_config_text
from quota.pod_set import PodSet, TopologyRequest
from sim.nodes import BLOCK_LABEL, HOSTNAME_LABEL, LEVELS, RACK_LABEL, generated_nodes

SETTINGS = settings(
    max_examples=int(os.environ.get("KUOTA_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
GPU = "nvidia.com/gpu"
CONFIG = load_config_text(
    f"""
topologies: [{{name: fabric, levels: [{BLOCK_LABEL}, {RACK_LABEL}, {HOSTNAME_LABEL}]}}]
flavors: [{{name: h100, topology: fabric}}]
teams:
  - {{name: a, queues: [ml/a], quotas: [{{flavor: h100, resources: {{{GPU}: {{nominal: 1000}}}}}}]}}
  - {{name: b, queues: [ml/b], quotas: [{{flavor: h100, resources: {{{GPU}: {{nominal: 1000}}}}}}]}}
  - {{name: c, queues: [ml/c], quotas: [{{flavor: h100, resources: {{{GPU}: {{nominal: 1000}}}}}}]}}
"""
)
WISHES = st.sampled_from(
    [
        None,
        TopologyRequest(RACK_LABEL, True),
        TopologyRequest(BLOCK_LABEL, True),
        TopologyRequest(HOSTNAME_LABEL, True),
        TopologyRequest(RACK_LABEL, False),
        TopologyRequest(HOSTNAME_LABEL, False),
    ]
)


@st.composite
def clusters(draw: st.DrawFn) -> NodeInventory:
    """Up to 16 nodes of 4 or 8 GPUs in racks of 1-4 and blocks of 1-3 racks, some cordoned, with GPUs in use."""
    count = draw(st.integers(1, 16))
    gpus = draw(st.sampled_from([4, 8]))
    nodes = generated_nodes(count, gpus, draw(st.integers(1, 4)), draw(st.integers(1, 3)), allocatable={"cpu": 64_000})
    inventory = NodeInventory()
    for node in nodes:
        cordoned = draw(st.integers(0, 9)) == 0
        inventory.set_node(NodeState(node.name, node.labels, node.allocatable, unschedulable=cordoned))
        used = draw(st.integers(0, gpus))
        if used:
            inventory.bind(f"running-{node.name}", node.name, {GPU: used * 1000, "cpu": used * 1000})
    return inventory


def _free_room(inventory: NodeInventory, node: NodeState, one: dict[str, int]) -> int:
    if not node.schedulable:
        return 0
    free = inventory.free(node.name)
    return min(
        (free.get(r, 0) // q if r in node.allocatable else (10**9 if r == "pods" else 0)) for r, q in one.items()
    )


def _rooms(inventory: NodeInventory, depth: int, one: dict[str, int]) -> dict[tuple[str, ...], int]:
    rooms: dict[tuple[str, ...], int] = {}
    for node in inventory:
        key = tuple(node.labels[level] for level in LEVELS[:depth])
        rooms[key] = rooms.get(key, 0) + _free_room(inventory, node, one)
    return rooms


@SETTINGS
@given(clusters(), st.integers(1, 12), st.sampled_from([1, 2, 4, 8]), WISHES)
def test_placement_rules_hold(inventory: NodeInventory, count: int, gpus: int, wish: TopologyRequest | None) -> None:
    pod_set = PodSet("main", count, {GPU: gpus * 1000, "cpu": 1000}, topology=wish)
    placer = Placer(CONFIG, inventory)
    demand = placer.demand(pod_set, count, ["h100"])
    assert demand is not None
    found = placer.place(demand)
    assert found == placer.place_directly(demand), "the room index and a fresh count disagree"
    one = per_pod_usage(pod_set.requests)
    depth = LEVELS.index(wish.level) + 1 if wish is not None else 0
    rooms = _rooms(inventory, depth, one)
    if found is None:
        if wish is None or not wish.required:
            assert sum(_free_room(inventory, n, one) for n in inventory) < count, "refused though the nodes hold it"
        else:
            assert max(rooms.values(), default=0) < count, "refused though a domain of its level holds it"
        return
    assert found.pods == count
    for name, pods in found.nodes.items():
        node = inventory.node(name)
        assert node is not None and node.schedulable, "placed on a node that takes no new work"
        assert pods <= _free_room(inventory, node, one), f"{name} over-committed"
    if wish is not None and wish.required:
        keys = {tuple(inventory.node(n).labels[level] for level in LEVELS[:depth]) for n in found.nodes}  # type: ignore[union-attr]
        assert len(keys) == 1, "a required pod set spans several domains of its level"
        (key,) = keys
        tightest = min(room for room in rooms.values() if room >= count)
        assert rooms[key] == tightest, "not the tightest domain that holds it"
        level_value = key[-1]
        assert found.level is not None
        assert LEVELS.index(found.level) >= depth - 1, "the reported domain is wider than the required level"
        if found.level == wish.level:
            assert found.domain == level_value


@SETTINGS
@given(
    clusters(),
    st.lists(st.tuples(st.integers(1, 8), st.sampled_from([1, 4, 8]), WISHES), min_size=1, max_size=3),
)
def test_a_cycle_never_over_commits_a_node(
    inventory: NodeInventory, asks: list[tuple[int, int, TopologyRequest | None]]
) -> None:
    """Heads of several teams in one cycle: what they are placed on, with what already runs, fits every node."""
    manager = QueueManager(CONFIG)
    manager.nodes = inventory
    for index, (count, gpus, wish) in enumerate(asks):
        pod_set = PodSet("main", count, {GPU: gpus * 1000}, topology=wish)
        manager.add(Workload(f"w{index}", "abc"[index], 0, (pod_set,), created_at=index))
    result = manager.schedule(1_000)
    admitted = [d for d in result.decisions if d.verdict is Verdict.ADMITTED]
    for decision in admitted:
        assert manager.state[decision.workload.name] is State.ADMITTED
        assert sum(decision.placements["main"].nodes.values()) == decision.counts["main"]
    for node in inventory:
        used = inventory.used(node.name)
        for resource, quantity in used.items():
            assert quantity <= node.allocatable.get(resource, quantity), f"{node.name} over-committed in {resource}"


@SETTINGS
@given(clusters(), st.lists(st.tuples(st.integers(1, 6), st.sampled_from([1, 4, 8]), WISHES), min_size=1, max_size=6))
def test_the_room_index_follows_every_bind_and_unbind(
    inventory: NodeInventory, asks: list[tuple[int, int, TopologyRequest | None]]
) -> None:
    """Placing, binding and unbinding in turn on one cycle's inventory: the index answers what a fresh count does."""
    cycle = inventory.copy()
    placer = Placer(CONFIG, cycle)
    placed: list[str] = []
    for index, (count, gpus, wish) in enumerate(asks):
        pod_set = PodSet("main", count, {GPU: gpus * 1000}, topology=wish)
        demand = placer.demand(pod_set, count, ["h100"])
        assert demand is not None
        found = placer.place(demand)
        assert found == placer.place_directly(demand)
        if found is None:
            continue
        owner = f"head-{index}"
        for node, pods in found.nodes.items():
            cycle.bind(owner, node, {r: q * pods for r, q in per_pod_usage(pod_set.requests).items()})
        placed.append(owner)
        if index % 3 == 2:
            cycle.unbind(placed.pop(0))  # a victim leaves


CHANGES = st.lists(
    st.tuples(st.sampled_from(["bind", "unbind", "cordon", "uncordon", "remove", "restore"]), st.integers(0, 15)),
    max_size=6,
)


@SETTINGS
@given(
    clusters(),
    st.lists(
        st.tuples(st.lists(st.tuples(st.integers(1, 6), st.sampled_from([1, 4, 8]), WISHES), max_size=3), CHANGES),
        min_size=1,
        max_size=5,
    ),
)
def test_what_placement_keeps_between_cycles_answers_as_a_fresh_start(
    live: NodeInventory, cycles: list[tuple[list[tuple[int, int, TopologyRequest | None]], list[tuple[str, int]]]]
) -> None:
    """Cycle after cycle on copies of one live inventory whose nodes change between them (work starts and stops,
    nodes are cordoned, deleted and come back): the placement kept from earlier cycles (node lists, domains, room
    indexes, read through the inventory's stamps) answers every ask as a placement that starts from nothing does."""
    original = {node.name: node for node in live}
    for asks, changes in cycles:
        cycle = live.copy()
        fresh = live.copy()
        fresh.derived = {}  # nothing kept: everything derived again from the nodes as they are
        placer, plain = Placer(CONFIG, cycle), Placer(CONFIG, fresh)
        for index, (count, gpus, wish) in enumerate(asks):
            pod_set = PodSet("main", count, {GPU: gpus * 1000}, topology=wish)
            demand, plain_demand = placer.demand(pod_set, count, ["h100"]), plain.demand(pod_set, count, ["h100"])
            assert demand is not None and plain_demand is not None
            found = placer.place(demand)
            assert found == plain.place(plain_demand), "kept placement and a fresh start disagree"
            if found is not None:
                for target in (cycle, fresh):
                    for node, pods in found.nodes.items():
                        target.bind(
                            f"head-{index}", node, {r: q * pods for r, q in per_pod_usage(pod_set.requests).items()}
                        )
        names = sorted(original)
        for change, pick in changes:
            name = names[pick % len(names)]
            node = live.node(name)
            if change == "bind" and node is not None:
                live.bind(f"started-{pick}", name, {GPU: 1000, "cpu": 1000})
            elif change == "unbind":
                live.unbind(f"started-{pick}")
            elif change in ("cordon", "uncordon") and node is not None:
                live.set_node(NodeState(name, node.labels, node.allocatable, unschedulable=change == "cordon"))
            elif change == "remove":
                live.remove_node(name)
            elif change == "restore" and node is None:
                live.set_node(original[name])
