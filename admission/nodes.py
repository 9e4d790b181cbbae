"""The nodes as the engine sees them: labels, what each can hold, what is already bound to it, whether it takes work.

Only flavors that declare a topology need nodes; for the others kuota counts quota and leaves placement to the
scheduler. The Kubernetes adapter fills an inventory from its Node and Pod watches, the simulated cluster from
its own nodes; the engine reads a copy per cycle. Quantities are integer milli-units like everywhere else.

Pure data and arithmetic: no clocks, no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

# The node model's taints and tolerations live one layer down, where pod sets can carry tolerations too.
from quota.taints import Taint, TaintEffect, Toleration, tolerated

__all__ = ["NodeInventory", "NodeState", "Taint", "TaintEffect", "Toleration", "tolerated"]


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node: its labels, its allocatable resources, and whether it takes new placements."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    """Per resource, in milli-units (`pods` too: 110 pods is 110,000)."""
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    """Cordoned: keeps what runs on it, takes nothing new."""

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.unschedulable


class NodeInventory:
    """Every known node and, per node, what is bound to it: by owner key (a pod, or a workload's placement).

    An owner's usage on a node is set and cleared as a whole, so replaying a watch (the same pod seen again) or a
    placement twice never counts anything twice.
    """

    def __init__(self, nodes: Iterable[NodeState] = ()) -> None:
        self._nodes: dict[str, NodeState] = {}
        self._bound: dict[str, dict[str, dict[str, int]]] = {}
        """node → owner → requests."""
        self._used: dict[str, dict[str, int]] = {}
        """node → resource → the sum over its owners."""
        self._owners: dict[str, set[str]] = {}
        """owner → the nodes it has usage on."""
        self._changes: list[str] | None = None
        """Nodes whose usage changed, in order, once `track_changes` was called (a cycle's placement index
        reads it to update only those nodes)."""
        self._clock = itertools.count(1)
        """Shared with every copy, so that a stamp names one change in one inventory, never two."""
        self._stamps: dict[str, int] = {}
        """node → the stamp of the last change to it (its state or its usage)."""
        self._nodes_stamp = 0
        """The stamp of the last change to any node's state (added, replaced, removed)."""
        self.derived: dict[str, object] = {}
        """What the engine derives from the nodes and keeps from one cycle to the next (the placement's room
        indexes): shared with every copy, and checked against the stamps before it is used."""
        for node in nodes:
            self.set_node(node)

    # -- nodes ------------------------------------------------------------------------------------------------

    def set_node(self, node: NodeState) -> None:
        """Add a node or replace what is known of it; its bindings stay."""
        self._nodes[node.name] = node
        self._nodes_stamp = self._stamps[node.name] = next(self._clock)
        self._bound.setdefault(node.name, {})
        self._used.setdefault(node.name, {})

    def remove_node(self, name: str) -> None:
        """Forget a deleted node and everything bound to it."""
        self._nodes.pop(name, None)
        self._nodes_stamp = next(self._clock)
        self._stamps.pop(name, None)
        for owner in self._bound.pop(name, {}):
            nodes = self._owners.get(owner)
            if nodes is not None:
                nodes.discard(name)
                if not nodes:
                    del self._owners[owner]
        self._used.pop(name, None)

    def node(self, name: str) -> NodeState | None:
        return self._nodes.get(name)

    def __iter__(self) -> Iterator[NodeState]:
        return iter(self._nodes.values())

    def __len__(self) -> int:
        return len(self._nodes)

    # -- usage ------------------------------------------------------------------------------------------------

    def bind(self, owner: str, node: str, requests: Mapping[str, int]) -> None:
        """Set what `owner` holds on `node` (replacing what it held there before)."""
        self.unbind(owner, node)
        kept = {r: q for r, q in requests.items() if q > 0}
        if self._changes is not None:
            self._changes.append(node)
        self._stamps[node] = next(self._clock)
        bound = self._bound.setdefault(node, {})
        bound[owner] = kept
        used = self._used.setdefault(node, {})
        for resource, quantity in kept.items():
            used[resource] = used.get(resource, 0) + quantity
        self._owners.setdefault(owner, set()).add(node)

    def unbind(self, owner: str, node: str | None = None) -> None:
        """Clear what `owner` holds on `node`, or on every node when `node` is None."""
        nodes = self._owners.get(owner)
        if not nodes:
            return
        for name in [node] if node is not None else list(nodes):
            if name not in nodes:
                continue
            nodes.discard(name)
            if self._changes is not None:
                self._changes.append(name)
            self._stamps[name] = next(self._clock)
            held = self._bound.get(name, {}).pop(owner, {})
            used = self._used.get(name, {})
            for resource, quantity in held.items():
                left = used.get(resource, 0) - quantity
                if left:
                    used[resource] = left
                else:
                    used.pop(resource, None)
        if not nodes:
            self._owners.pop(owner, None)

    def owners_on(self, node: str) -> frozenset[str]:
        return frozenset(self._bound.get(node, {}))

    def nodes_of(self, owner: str) -> frozenset[str]:
        return frozenset(self._owners.get(owner, ()))

    def used(self, node: str) -> Mapping[str, int]:
        return self._used.get(node, {})

    def free(self, node: str) -> dict[str, int]:
        """Allocatable less what is bound, per allocatable resource; never below zero (a node can be overbooked
        when its allocatable shrinks under running pods)."""
        state = self._nodes.get(node)
        if state is None:
            return {}
        used = self._used.get(node, {})
        return {r: max(0, q - used.get(r, 0)) for r, q in state.allocatable.items()}

    # -- stamps ---------------------------------------------------------------------------------------------------

    def stamp(self, node: str) -> int:
        """Changes whenever `node`'s state or usage does, in this inventory or a copy: two inventories of one origin
        showing the same stamp for a node hold the same state and usage for it (0: an unknown node)."""
        return self._stamps.get(node, 0)

    @property
    def nodes_stamp(self) -> int:
        """Changes whenever a node is added, replaced or removed (what makes a node eligible for placement)."""
        return self._nodes_stamp

    # -- change tracking --------------------------------------------------------------------------------------

    def track_changes(self) -> None:
        """Start recording which nodes' usage changes (only on a short-lived copy: the record grows)."""
        if self._changes is None:
            self._changes = []

    def change_mark(self) -> int:
        return len(self._changes) if self._changes is not None else 0

    def changed_since(self, mark: int) -> list[str]:
        """The nodes whose usage changed after `change_mark()` returned `mark` (repeats possible)."""
        return self._changes[mark:] if self._changes is not None else []

    def copy(self) -> NodeInventory:
        """An independent inventory a cycle may bind into and unbind from without touching this one."""
        other = NodeInventory()
        other._nodes = dict(self._nodes)
        other._bound = {n: {o: dict(r) for o, r in owners.items()} for n, owners in self._bound.items()}
        other._used = {n: dict(r) for n, r in self._used.items()}
        other._owners = {o: set(ns) for o, ns in self._owners.items()}
        other._clock = self._clock
        other._stamps = dict(self._stamps)
        other._nodes_stamp = self._nodes_stamp
        other.derived = self.derived
        return other
