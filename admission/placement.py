"""Topology placement: which nodes a pod set's pods go to, node by node, inside the domain its wish asks for.

A flavor with a topology (quota file `topologies:`) admits a pod set only when its pods also fit on nodes: each pod
on one node with room for all of its requests (sums over a rack are not enough: an 8-GPU pod needs a node with 8
free GPUs). Nodes count when they take new work (ready, not cordoned), their repelling taints are all tolerated by
the pods (their own tolerations plus the flavor's), their labels match the flavor's node labels and the pods'
nodeSelector, and they carry every level label of the topology.

The rules (spec/topology.md):

* `required: LEVEL`: every pod inside one domain of LEVEL (one rack), or no admission;
* `preferred: LEVEL`: the same, else one domain of the next level up, and so on, and finally anywhere;
* no wish: anywhere, still node by node;
* among the domains that fit, the tightest: the one with the fewest pods' worth of room left afterwards, so that
  big domains stay whole for big gangs (ties: the domain's label values, for a deterministic answer);
* inside the chosen domain, the same rule one level down: the tightest child domain that holds every pod, else the
  roomiest children first until what is left fits one child, which is again the tightest that holds the rest.

Room is counted in whole pods per node (the smallest, over the pod's requests, of free // request), with integer
milli-units throughout. Pure: no clocks, no I/O.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from admission.never_fits import PODS
from admission.nodes import NodeInventory, NodeState, tolerated
from quota.config import QuotaConfig, Topology
from quota.pod_set import PodSet, TopologyRequest
from quota.taints import Toleration

#: One pod on a node: it takes a `pods` slot wherever the node's allocatable counts them.
POD_SLOT = 1000


@dataclass(frozen=True, slots=True)
class PodSetPlacement:
    """Where a pod set's pods go: per node, how many; and the narrowest domain that holds them all.

    What the Kubernetes adapter needs for the admit patch: `node_selector()` pins the whole pod set to its domain
    when there is one; `nodes` gives the per-node counts (per-pod assignment where one selector cannot say it).
    """

    topology: str
    nodes: Mapping[str, int]
    """Node name → pods of this pod set placed on it (only nodes with at least one)."""
    level: str | None = None
    """The label of the narrowest topology level one of whose domains holds every pod; None: they span several
    domains of the widest level."""
    domain: str | None = None
    """That domain's value of `level` (the rack's name)."""

    @property
    def pods(self) -> int:
        return sum(self.nodes.values())

    def node_selector(self) -> dict[str, str]:
        return {self.level: self.domain} if self.level is not None and self.domain is not None else {}


@dataclass(frozen=True, slots=True)
class Demand:
    """One pod set on one flavor, as placement sees it."""

    pod_set: PodSet
    count: int
    topology: Topology
    node_labels: Mapping[str, str]
    tolerations: tuple[Toleration, ...]


@dataclass(slots=True)
class _Slot:
    node: NodeState
    path: tuple[str, ...]
    """The node's value of each level, widest first."""
    room: int = 0


def per_pod_usage(requests: Mapping[str, int]) -> dict[str, int]:
    """What one pod takes from a node: its requests and one pod slot."""
    usage = {r: q for r, q in requests.items() if q > 0}
    usage[PODS] = usage.get(PODS, 0) + POD_SLOT
    return usage


def placement_usage(
    pod_sets: Iterable[PodSet], placement: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """Per node, what a workload's placement (pod set → node → pods) takes from it."""
    by_node: dict[str, dict[str, int]] = {}
    for pod_set in pod_sets:
        nodes = placement.get(pod_set.name)
        if not nodes:
            continue
        one = per_pod_usage(pod_set.requests)
        for node, pods in nodes.items():
            held = by_node.setdefault(node, {})
            for resource, quantity in one.items():
                held[resource] = held.get(resource, 0) + quantity * pods
    return by_node


class Placer:
    """Places pod sets on one cycle's inventory; the eligible nodes of a (flavor, pod shape) are found once."""

    def __init__(self, config: QuotaConfig, inventory: NodeInventory) -> None:
        self.config = config
        self.inventory = inventory
        self._flavors = {f.name: f for f in config.flavors}
        self._eligible: dict[tuple[object, ...], list[_Slot]] = {}
        self._usage: dict[int, tuple[PodSet, dict[str, int]]] = {}
        self.topology_flavors = frozenset(f.name for f in config.flavors if config.topology_of(f.name) is not None)
        inventory.track_changes()
        kept = inventory.derived.get(_KEPT)
        if not isinstance(kept, _Kept) or kept.config is not config:
            kept = _Kept(config)
            inventory.derived[_KEPT] = kept
        # Rebuilt only when some node's state changed: a node added, removed, failed, repaired or cordoned.
        kept.forget_unless(inventory.nodes_stamp)
        self._kept = kept

    # -- what a pod set asks -------------------------------------------------------------------------------------

    def demand(self, pod_set: PodSet, count: int, flavors: Iterable[str]) -> Demand | None:
        """The placement demand of `pod_set` on its assigned `flavors` (None: no flavor of it has a topology)."""
        topology: Topology | None = None
        labels: dict[str, str] = {}
        tolerations: list[Toleration] = list(pod_set.tolerations)
        for name in dict.fromkeys(flavors):
            spec = self._flavors.get(name)
            if spec is None:
                continue
            labels.update(spec.node_labels)
            # The admit patch adds the flavor's tolerations to the pods, so they count as the pods' own.
            tolerations.extend(
                Toleration(t.key or "", t.operator, t.value or "", t.effect or "") for t in spec.tolerations
            )
            if topology is None:
                topology = self.config.topology_of(name)
        if topology is None:
            return None
        return Demand(pod_set, count, topology, labels, tuple(tolerations))

    # -- eligible nodes ------------------------------------------------------------------------------------------

    @staticmethod
    def _slot_key(demand: Demand) -> tuple[object, ...]:
        return (
            demand.topology.name,
            tuple(sorted(demand.node_labels.items())),
            tuple(sorted(demand.pod_set.node_selector.items())),
            demand.tolerations,
        )

    def _slots(self, demand: Demand) -> list[_Slot]:
        key = self._slot_key(demand)
        found = self._eligible.get(key)
        if found is None:
            kept = self._kept.slots.get(key)
            if kept is None:
                kept = self._kept.slots[key] = self._find_slots(demand)
            # The cycle's own slots: `place_directly` writes their room.
            found = self._eligible[key] = [_Slot(s.node, s.path) for s in kept]
        return found

    def _find_slots(self, demand: Demand, *, only_schedulable: bool = True) -> list[_Slot]:
        levels = demand.topology.levels
        selector = {**demand.pod_set.node_selector, **demand.node_labels}
        out: list[_Slot] = []
        for node in self.inventory:
            if only_schedulable and not node.schedulable:
                continue
            labels = node.labels
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            path = tuple(labels.get(level) for level in levels)
            if any(value is None for value in path):
                continue  # a node outside the topology takes no topology placement
            if node.taints and not tolerated(node.taints, demand.tolerations):
                continue
            out.append(_Slot(node, tuple(v for v in path if v is not None)))
        out.sort(key=lambda s: (s.path, s.node.name))
        return out

    def _room(self, slots: Sequence[_Slot], one: Mapping[str, int], extra: Mapping[str, Mapping[str, int]]) -> None:
        inventory = self.inventory
        for slot in slots:
            node = slot.node
            allocatable = node.allocatable
            used = inventory.used(node.name)
            added = extra.get(node.name)
            room: int | None = None
            for resource, quantity in one.items():
                have = allocatable.get(resource)
                if have is None:
                    if resource == PODS:
                        continue  # a node that does not count pods does not limit them
                    room = 0
                    break
                free = have - used.get(resource, 0) - (added.get(resource, 0) if added else 0)
                fits = free // quantity if free > 0 else 0
                if room is None or fits < room:
                    room = fits
                    if room == 0:
                        break
            slot.room = room if room is not None else 0

    # -- placing ---------------------------------------------------------------------------------------------------

    def place(
        self,
        demand: Demand,
        extra: Mapping[str, Mapping[str, int]] | None = None,
        scope: frozenset[str] | None = None,
    ) -> PodSetPlacement | None:
        """Where `demand`'s pods go, or None when its wish cannot be met on the nodes as they are now.

        `extra`: usage not in the inventory yet (earlier pod sets of the same workload). `scope`: only these nodes
        (a preemption search asking about one domain)."""
        if demand.count > 0 and not extra and scope is None:
            return self._index(demand).place(demand)
        return self.place_directly(demand, extra, scope)

    def place_directly(
        self,
        demand: Demand,
        extra: Mapping[str, Mapping[str, int]] | None = None,
        scope: frozenset[str] | None = None,
    ) -> PodSetPlacement | None:
        """`place` computed from the nodes' usage afresh (the index gives the same answer, faster)."""
        slots = self._slots(demand)
        if scope is not None:
            slots = [s for s in slots if s.node.name in scope]
        count = demand.count
        if count == 0:
            return PodSetPlacement(demand.topology.name, {})
        self._room(slots, per_pod_usage(demand.pod_set.requests), extra or {})
        slots = [s for s in slots if s.room > 0]
        if sum(s.room for s in slots) < count:
            return None
        levels = demand.topology.levels
        for depth in _depths(demand.pod_set.topology, levels):
            chosen = _tightest(slots, depth, count) if depth else slots
            if chosen is None:
                continue
            nodes: dict[str, int] = {}
            _fill(chosen, depth, len(levels), count, nodes)
            return _placement(demand.topology, chosen, nodes)
        return None

    def _one(self, pod_set: PodSet) -> dict[str, int]:
        """`per_pod_usage` of a pod set, once per cycle (the cache holds the pod set, so its id stays its own)."""
        cached = self._usage.get(id(pod_set))
        if cached is None or cached[0] is not pod_set:
            cached = self._usage[id(pod_set)] = (pod_set, per_pod_usage(pod_set.requests))
        return cached[1]

    def _index(self, demand: Demand) -> _RoomIndex:
        one = self._one(demand.pod_set)
        slot_key = self._slot_key(demand)
        key = (slot_key, tuple(sorted(one.items())))
        kept = self._kept
        index = kept.indexes.get(key)
        if index is None:
            skeleton = kept.skeletons.get(slot_key)
            if skeleton is None:
                skeleton = kept.skeletons[slot_key] = _Skeleton(self._slots(demand), len(demand.topology.levels))
            index = kept.indexes[key] = _RoomIndex(self.inventory, skeleton, demand.topology, one)
        else:
            index.attach(self.inventory)
        return index

    def domain_levels(self, demand: Demand) -> list[list[frozenset[str]]]:
        """The domains a preemption search may free for `demand`, level by level in the order placement tries them
        (`required`: its level's; `preferred`: its level's, then each wider level's, then the whole topology as one
        domain; no wish: the whole topology), each domain as the names of its nodes, whatever runs there now."""
        slots = self._slots(demand)
        out: list[list[frozenset[str]]] = []
        for depth in _depths(demand.pod_set.topology, demand.topology.levels):
            groups: dict[tuple[str, ...], set[str]] = {}
            for slot in slots:
                groups.setdefault(slot.path[:depth], set()).add(slot.node.name)
            out.append([frozenset(groups[key]) for key in sorted(groups)])
        return out

    def never_fits(self, demand: Demand) -> str | None:
        """Why `demand` could never be placed, or None when it could: no domain its wish accepts (for `required`,
        one of its level; otherwise the whole topology, where `preferred` ends) could hold its pods even with every
        node of it empty. Nodes that take no work now (NotReady, cordoned) count: they may come back. Counted at
        the pod set's smallest admissible count (partial admission may admit fewer pods)."""
        count = demand.pod_set.min_count if demand.pod_set.min_count is not None else demand.count
        wish = demand.pod_set.topology
        required = wish is not None and wish.required and wish.level in demand.topology.levels
        depth = demand.topology.levels.index(wish.level) + 1 if required and wish is not None else 0
        key = (self._slot_key(demand), tuple(sorted(self._one(demand.pod_set).items())), depth)
        largest = self._kept.capacity.get(key)
        if largest is None:
            one = self._one(demand.pod_set)
            held: dict[tuple[str, ...], int] = {}
            for slot in self._find_slots(demand, only_schedulable=False):
                domain = slot.path[:depth]
                held[domain] = held.get(domain, 0) + _empty_room(slot.node, one)
            largest = self._kept.capacity[key] = max(held.values(), default=0)
        if largest >= count:
            return None
        where = (
            f"no {wish.level} domain of topology {demand.topology.name}"
            if required and wish is not None
            else f"the nodes of topology {demand.topology.name} together"
        )
        return (
            f"can never fit: {where} could hold its {count} pods even with every node empty (at most {largest}); "
            "ask for fewer or smaller pods, or a wider level"
        )


#: The key of the placement's kept state in `NodeInventory.derived`.
_KEPT = "placement"


class _Kept:
    """What placement derives from the nodes and keeps from one cycle's inventory copy to the next, so that a cycle
    costs what changed since the last one rather than the number of nodes: the eligible nodes and the domains of
    every (topology, node labels, selector, tolerations), and the room index of every pod shape on them. All of it
    but the room depends on the nodes' state only (kept while `nodes_stamp` stays); the room indexes bring
    themselves up to date node by node from the stamps (`_RoomIndex.attach`)."""

    def __init__(self, config: QuotaConfig) -> None:
        self.config = config
        self.nodes_stamp: int | None = None
        self.slots: dict[tuple[object, ...], list[_Slot]] = {}
        self.skeletons: dict[tuple[object, ...], _Skeleton] = {}
        self.indexes: dict[tuple[object, ...], _RoomIndex] = {}
        self.capacity: dict[tuple[object, ...], int] = {}
        """The most pods of one shape that one domain at a depth could hold, every node empty (never_fits)."""

    def forget_unless(self, nodes_stamp: int) -> None:
        if nodes_stamp != self.nodes_stamp:
            self.nodes_stamp = nodes_stamp
            self.slots.clear()
            self.skeletons.clear()
            self.indexes.clear()
            self.capacity.clear()


class _Skeleton:
    """The domains of one set of eligible nodes, level by level, numbered in label order (shared by the room
    indexes of every pod shape on these nodes: numbers compare faster than tuples of labels)."""

    def __init__(self, slots: Sequence[_Slot], levels: int) -> None:
        self.leaves = levels + 1
        keys: list[set[tuple[str, ...]]] = [set() for _ in range(self.leaves + 1)]
        keys[0].add(())  # the whole topology, even with no node in it
        for slot in slots:
            key = (*slot.path, slot.node.name)
            for depth in range(self.leaves + 1):
                keys[depth].add(key[:depth])
        self.keys = [sorted(level) for level in keys]
        ordinal = [{key: number for number, key in enumerate(level)} for level in self.keys]
        self.path: dict[str, tuple[int, ...]] = {}
        """Node name → its domain's number at every depth (0: everything; the last: the node itself)."""
        children: list[list[set[int]]] = [[set() for _ in level] for level in self.keys]
        for slot in slots:
            key = (*slot.path, slot.node.name)
            numbers = tuple(ordinal[depth][key[:depth]] for depth in range(self.leaves + 1))
            self.path[slot.node.name] = numbers
            for depth in range(self.leaves):
                children[depth][numbers[depth]].add(numbers[depth + 1])
        self.children = [[sorted(c) for c in level] for level in children]


class _RoomIndex:
    """Room (in pods of one shape) per node and per domain of every level, kept current as usage changes.

    Depth d holds the domains of the d widest levels; depth len(levels) + 1 the nodes. Per depth, the domains are
    also bucketed by room, each bucket sorted, so the tightest domain that holds n pods is the first of the
    smallest room >= n. A cycle's placements touch a few nodes each; only those are recomputed (the inventory
    records which), so placing costs about the number of domains looked at, not the number of nodes.
    """

    def __init__(self, inventory: NodeInventory, skeleton: _Skeleton, topology: Topology, one: Mapping[str, int]):
        self.inventory = inventory
        self.skeleton = skeleton
        self.topology = topology
        self.one = dict(one)
        self.leaves = skeleton.leaves
        self.mark = inventory.change_mark()
        self.seen: dict[str, int] = {}
        """Node → the inventory stamp its room was computed at."""
        self.room: list[list[int]] = [[0] * len(level) for level in skeleton.keys]
        leaf = self.room[self.leaves]
        for name, numbers in skeleton.path.items():
            self.seen[name] = inventory.stamp(name)
            room = self._node_room(name)
            leaf[numbers[-1]] = room
            for depth in range(self.leaves):
                self.room[depth][numbers[depth]] += room
        self.buckets: list[dict[int, list[int]]] = []
        for rooms in self.room:
            buckets: dict[int, list[int]] = {}
            for number, room in enumerate(rooms):
                buckets.setdefault(room, []).append(number)  # in number order already
            self.buckets.append(buckets)

    def _node_room(self, name: str) -> int:
        state = self.inventory.node(name)
        if state is None:
            return 0
        allocatable = state.allocatable
        used = self.inventory.used(name)
        room: int | None = None
        for resource, quantity in self.one.items():
            have = allocatable.get(resource)
            if have is None:
                if resource == PODS:
                    continue
                return 0
            free = have - used.get(resource, 0)
            fits = free // quantity if free > 0 else 0
            if room is None or fits < room:
                room = fits
        return room if room is not None else 0

    def _refresh(self, name: str) -> None:
        numbers = self.skeleton.path.get(name)
        if numbers is None:
            return
        self.seen[name] = self.inventory.stamp(name)
        delta = self._node_room(name) - self.room[self.leaves][numbers[-1]]
        if delta == 0:
            return
        for depth, number in enumerate(numbers):
            rooms, buckets = self.room[depth], self.buckets[depth]
            old = rooms[number]
            new = rooms[number] = old + delta
            bucket = buckets[old]
            del bucket[bisect_left(bucket, number)]
            if not bucket:
                del buckets[old]
            insort(buckets.setdefault(new, []), number)

    def sync(self) -> None:
        changed = self.inventory.changed_since(self.mark)
        self.mark += len(changed)
        for name in set(changed):
            self._refresh(name)

    def attach(self, inventory: NodeInventory) -> None:
        """Bring the room up to date with `inventory`: the one it follows (its change record says which nodes
        changed), or another copy of the same nodes, a later cycle's (the nodes whose stamp differs from the one
        their room was computed at: those changed in either copy since)."""
        if inventory is self.inventory:
            self.sync()
            return
        self.inventory = inventory
        self.mark = inventory.change_mark()
        seen = self.seen
        for name in self.skeleton.path:
            if inventory.stamp(name) != seen.get(name):
                self._refresh(name)

    def tightest(self, depth: int, count: int) -> int | None:
        buckets = self.buckets[depth]
        fitting = [room for room in buckets if room >= count]
        return buckets[min(fitting)][0] if fitting else None

    def place(self, demand: Demand) -> PodSetPlacement | None:
        count = demand.count
        if self.room[0][0] < count:
            return None
        for depth in _depths(demand.pod_set.topology, demand.topology.levels):
            domain = self.tightest(depth, count) if depth else 0
            if domain is None:
                continue
            nodes: dict[str, int] = {}
            self._fill(depth, domain, count, nodes)
            return self._placement(nodes)
        return None

    def _fill(self, depth: int, domain: int, count: int, out: dict[str, int]) -> None:
        if depth == self.leaves:
            name = self.skeleton.keys[depth][domain][-1]
            out[name] = out.get(name, 0) + count
            return
        rooms = self.room[depth + 1]
        children = [c for c in self.skeleton.children[depth][domain] if rooms[c] > 0]
        left = count
        # Roomiest first (fewest domains used), until what is left fits in one child: that one the tightest.
        order = sorted(children, key=lambda c: (-rooms[c], c))
        for position, child in enumerate(order):
            fitting = [c for c in order[position:] if rooms[c] >= left]
            if fitting:
                self._fill(depth + 1, min(fitting, key=lambda c: (rooms[c], c)), left, out)
                return
            self._fill(depth + 1, child, rooms[child], out)
            left -= rooms[child]

    def _placement(self, nodes: dict[str, int]) -> PodSetPlacement:
        paths = [self.skeleton.path[name] for name in nodes]
        levels = self.topology.levels
        for depth in range(len(levels), 0, -1):
            first = paths[0][depth]
            if all(p[depth] == first for p in paths):
                domain = self.skeleton.keys[depth][first][-1]
                return PodSetPlacement(self.topology.name, dict(sorted(nodes.items())), levels[depth - 1], domain)
        return PodSetPlacement(self.topology.name, dict(sorted(nodes.items())))


def _empty_room(node: NodeState, one: Mapping[str, int]) -> int:
    """How many pods of per-pod usage `one` a node holds with nothing on it."""
    room: int | None = None
    for resource, quantity in one.items():
        have = node.allocatable.get(resource)
        if have is None:
            if resource == PODS:
                continue  # a node that does not count pods does not limit them
            return 0
        fits = have // quantity
        room = fits if room is None else min(room, fits)
    return room if room is not None else 0


def _depths(wish: TopologyRequest | None, levels: Sequence[str]) -> list[int]:
    """The domain depths to try, in order: 1 is the widest level, len(levels) the narrowest, 0 anywhere."""
    if wish is None or wish.level not in levels:
        return [0]
    depth = levels.index(wish.level) + 1
    if wish.required:
        return [depth]
    return [*range(depth, 0, -1), 0]


def _tightest(slots: Sequence[_Slot], depth: int, count: int) -> list[_Slot] | None:
    """The slots of the domain at `depth` that holds `count` pods with the least room to spare (None: none does)."""
    room: dict[tuple[str, ...], int] = {}
    for slot in slots:
        key = slot.path[:depth]
        room[key] = room.get(key, 0) + slot.room
    best: tuple[int, tuple[str, ...]] | None = None
    for key, total in room.items():
        if total >= count and (best is None or (total, key) < best):
            best = (total, key)
    if best is None:
        return None
    key = best[1]
    return [s for s in slots if s.path[:depth] == key]


def _fill(slots: Sequence[_Slot], depth: int, leaves: int, count: int, out: dict[str, int]) -> None:
    """Put `count` pods on `slots` (one domain at `depth`, room for them all), one level down at a time."""
    if depth >= leaves:
        # Below the narrowest level the children are the nodes themselves.
        children = [[s] for s in slots]
    else:
        grouped: dict[tuple[str, ...], list[_Slot]] = {}
        for slot in slots:
            grouped.setdefault(slot.path[: depth + 1], []).append(slot)
        children = list(grouped.values())
    rooms = [sum(s.room for s in child) for child in children]
    left = count
    # Roomiest first (fewest domains used), until what is left fits in one child: that one the tightest.
    order = sorted(range(len(children)), key=lambda i: (-rooms[i], _key(children[i])))
    taken: set[int] = set()
    while left > 0:
        fitting = [i for i in order if i not in taken and rooms[i] >= left]
        if fitting:
            last = min(fitting, key=lambda i: (rooms[i], _key(children[i])))
            _put(children[last], depth + 1, leaves, left, out)
            return
        index = next(i for i in order if i not in taken)
        taken.add(index)
        _put(children[index], depth + 1, leaves, rooms[index], out)
        left -= rooms[index]


def _put(child: list[_Slot], depth: int, leaves: int, count: int, out: dict[str, int]) -> None:
    if len(child) == 1:  # one node (below the narrowest level, or a domain with a single node)
        name = child[0].node.name
        out[name] = out.get(name, 0) + count
    else:
        _fill(child, depth, leaves, count, out)


def _key(child: list[_Slot]) -> tuple[tuple[str, ...], str]:
    return (child[0].path, child[0].node.name)


def _placement(topology: Topology, slots: Sequence[_Slot], nodes: dict[str, int]) -> PodSetPlacement:
    used = [s for s in slots if s.node.name in nodes]
    level: str | None = None
    domain: str | None = None
    for depth in range(len(topology.levels), 0, -1):
        values = {s.path[depth - 1] for s in used}
        if len(values) == 1 and len({s.path[:depth] for s in used}) == 1:
            level, domain = topology.levels[depth - 1], next(iter(values))
            break
    return PodSetPlacement(topology.name, dict(sorted(nodes.items())), level, domain)


@dataclass(slots=True)
class WorkloadPlacement:
    """Placements of a workload's pod sets so far, and what they take per node (for the next pod set)."""

    by_pod_set: dict[str, PodSetPlacement] = field(default_factory=dict)
    usage: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, pod_set: PodSet, placement: PodSetPlacement) -> None:
        self.by_pod_set[pod_set.name] = placement
        one = per_pod_usage(pod_set.requests)
        for node, pods in placement.nodes.items():
            held = self.usage.setdefault(node, {})
            for resource, quantity in one.items():
                held[resource] = held.get(resource, 0) + quantity * pods
