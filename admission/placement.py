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
        self._indexes: dict[tuple[object, ...], _RoomIndex] = {}
        inventory.track_changes()

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
            found = self._eligible[key] = self._find_slots(demand)
        return found

    def _find_slots(self, demand: Demand) -> list[_Slot]:
        levels = demand.topology.levels
        selector = {**demand.pod_set.node_selector, **demand.node_labels}
        out: list[_Slot] = []
        for node in self.inventory:
            if not node.schedulable:
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

    def _index(self, demand: Demand) -> _RoomIndex:
        one = per_pod_usage(demand.pod_set.requests)
        key = (self._slot_key(demand), tuple(sorted(one.items())))
        index = self._indexes.get(key)
        if index is None:
            index = self._indexes[key] = _RoomIndex(self.inventory, self._slots(demand), demand.topology, one)
        else:
            index.sync()
        return index

    def domains(self, demand: Demand) -> list[frozenset[str]]:
        """The node names of each domain a preemption search may free for `demand` (its wish's level; the whole
        topology as one domain when it has no wish), whatever is running there now."""
        slots = self._slots(demand)
        wish = demand.pod_set.topology
        if wish is None or wish.level not in demand.topology.levels:
            return [frozenset(s.node.name for s in slots)] if slots else []
        depth = demand.topology.levels.index(wish.level) + 1
        groups: dict[tuple[str, ...], set[str]] = {}
        for slot in slots:
            groups.setdefault(slot.path[:depth], set()).add(slot.node.name)
        return [frozenset(groups[key]) for key in sorted(groups)]


class _RoomIndex:
    """Room (in pods of one shape) per node and per domain of every level, kept current as usage changes.

    Depth d holds the domains of the d widest levels (keys: their label values); depth len(levels) + 1 the nodes
    (keys: the values and the node's name). Per depth, the keys are also bucketed by room, each bucket sorted, so
    the tightest domain that holds n pods is the first key of the smallest room >= n. A cycle's placements touch a
    few nodes each; only those are recomputed (the inventory records which), so placing costs about the number of
    domains looked at, not the number of nodes.
    """

    def __init__(self, inventory: NodeInventory, slots: Sequence[_Slot], topology: Topology, one: Mapping[str, int]):
        self.inventory = inventory
        self.topology = topology
        self.one = dict(one)
        self.leaves = len(topology.levels) + 1
        self.node_key: dict[str, tuple[str, ...]] = {}
        self.room: list[dict[tuple[str, ...], int]] = [{} for _ in range(self.leaves + 1)]
        self.buckets: list[dict[int, list[tuple[str, ...]]]] = [{} for _ in range(self.leaves + 1)]
        self.children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
        for slot in slots:
            key = (*slot.path, slot.node.name)
            self.node_key[slot.node.name] = key
            for depth in range(self.leaves):
                parent, child = key[:depth], key[: depth + 1]
                if child not in self.room[depth + 1]:
                    self.children.setdefault(parent, []).append(child)
                    self.room[depth + 1][child] = 0
        self.room[0][()] = 0
        for children in self.children.values():
            children.sort()
        self.mark = inventory.change_mark()
        # Rooms first, then the sums and buckets in one pass each: cheaper than moving every key bucket by bucket.
        leaf = self.room[self.leaves]
        for name, key in self.node_key.items():
            room = self._node_room(name)
            leaf[key] = room
            for depth in range(self.leaves):
                self.room[depth][key[:depth]] += room
        for depth in range(self.leaves + 1):
            buckets = self.buckets[depth]
            for part, room in self.room[depth].items():
                buckets.setdefault(room, []).append(part)
            for bucket in buckets.values():
                bucket.sort()

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
        key = self.node_key.get(name)
        if key is None:
            return
        delta = self._node_room(name) - self.room[self.leaves][key]
        if delta == 0:
            return
        for depth in range(self.leaves + 1):
            part = key[:depth]
            old = self.room[depth][part]
            new = old + delta
            self.room[depth][part] = new
            bucket = self.buckets[depth][old]
            del bucket[bisect_left(bucket, part)]
            if not bucket:
                del self.buckets[depth][old]
            insort(self.buckets[depth].setdefault(new, []), part)

    def sync(self) -> None:
        changed = self.inventory.changed_since(self.mark)
        self.mark += len(changed)
        for name in set(changed):
            self._refresh(name)

    def tightest(self, depth: int, count: int) -> tuple[str, ...] | None:
        buckets = self.buckets[depth]
        fitting = [room for room in buckets if room >= count]
        return buckets[min(fitting)][0] if fitting else None

    def place(self, demand: Demand) -> PodSetPlacement | None:
        count = demand.count
        if self.room[0][()] < count:
            return None
        for depth in _depths(demand.pod_set.topology, demand.topology.levels):
            domain = self.tightest(depth, count) if depth else ()
            if domain is None:
                continue
            nodes: dict[str, int] = {}
            self._fill(domain, count, nodes)
            return self._placement(nodes)
        return None

    def _fill(self, domain: tuple[str, ...], count: int, out: dict[str, int]) -> None:
        if len(domain) == self.leaves:
            out[domain[-1]] = out.get(domain[-1], 0) + count
            return
        rooms = self.room[len(domain) + 1]
        children = [c for c in self.children.get(domain, ()) if rooms[c] > 0]
        left = count
        # Roomiest first (fewest domains used), until what is left fits in one child: that one the tightest.
        order = sorted(children, key=lambda c: (-rooms[c], c))
        for position, child in enumerate(order):
            fitting = [c for c in order[position:] if rooms[c] >= left]
            if fitting:
                self._fill(min(fitting, key=lambda c: (rooms[c], c)), left, out)
                return
            self._fill(child, rooms[child], out)
            left -= rooms[child]

    def _placement(self, nodes: dict[str, int]) -> PodSetPlacement:
        keys = [self.node_key[name] for name in nodes]
        levels = self.topology.levels
        for depth in range(len(levels), 0, -1):
            first = keys[0][:depth]
            if all(k[:depth] == first for k in keys):
                return PodSetPlacement(self.topology.name, dict(sorted(nodes.items())), levels[depth - 1], first[-1])
        return PodSetPlacement(self.topology.name, dict(sorted(nodes.items())))


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
