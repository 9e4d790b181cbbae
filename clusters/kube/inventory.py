"""The live node inventory the queue manager places into on Kubernetes: every pod counted once, either by itself or
by its workload's placement.

Two sources hold room on a node. Pods the bound-pod watch reports (other tenants, daemonsets, pods of a stopped run
still terminating, kuota workloads admitted without a placement) are bound one by one under `NAMESPACE/NAME`. An
admitted workload placed on nodes is bound by the queue manager under its name, as its placement says, from the
instant it is admitted: its pods do not exist yet then, and a cycle that ran before they were bound must still see
the room taken. The two would count the same pods twice once the workload's pods are bound, so a pod whose
`kuota.dev/workload` label names a workload bound by placement is kept aside (remembered, not counted); when the
placement is taken back (the workload finished or was stopped), the pods still there are counted one by one again.

Kept consistent whatever the order of events: a pod seen before its workload's placement (a relist, a new leader
rebuilding admissions after the pods were listed) is taken out when the placement comes; a placement taken back
before its pods go counts them until they do. A pod being deleted carries no workload (clusters/kube/nodes.py):
it belongs to a stopped run and is counted by itself until it is gone.

Pure bookkeeping, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from admission.labels import workload_label_value
from admission.nodes import NodeInventory, NodeState


@dataclass(frozen=True, slots=True)
class _Pod:
    node: str
    requests: Mapping[str, int]
    workload: str | None


class LiveInventory(NodeInventory):
    """A NodeInventory whose per-pod usage steps aside for the placements bound under workload names.

    `bind`/`unbind` are the queue manager's (owners are workload names); the watch uses `bind_pod`/`unbind_pod`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._pods: dict[str, _Pod] = {}
        self._labelled: dict[str, set[str]] = {}
        """`kuota.dev/workload` label → the keys of the pods carrying it."""
        self._placed: dict[str, str] = {}
        """Workload name → its label, for the workloads bound by placement."""
        self._placed_labels: set[str] = set()
        self._rebinding: str | None = None

    # -- the watch's side ---------------------------------------------------------------------------------------

    def bind_pod(self, key: str, node: str, requests: Mapping[str, int], workload: str | None) -> None:
        """A pod bound to `node`: counted by itself unless its workload is bound by placement."""
        self.unbind_pod(key)
        self._pods[key] = _Pod(node, requests, workload)
        if workload is not None:
            self._labelled.setdefault(workload, set()).add(key)
        self._count(key)

    def unbind_pod(self, key: str) -> None:
        pod = self._pods.pop(key, None)
        if pod is None:
            return
        if pod.workload is not None:
            keys = self._labelled.get(pod.workload)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._labelled[pod.workload]
        super().unbind(key)

    def set_node(self, node: NodeState) -> None:
        known = self.node(node.name) is not None
        super().set_node(node)
        if not known:
            # Known again after a deletion, or listed after its pods: count what runs on it.
            for key, pod in self._pods.items():
                if pod.node == node.name:
                    self._count(key)

    def counted_alone(self, key: str) -> bool:
        """Whether the pod `key` is counted by itself (False: by its workload's placement, or unknown)."""
        return bool(self.nodes_of(key))

    def _count(self, key: str) -> None:
        pod = self._pods[key]
        if pod.workload in self._placed_labels or self.node(pod.node) is None:
            return
        super().bind(key, pod.node, pod.requests)

    # -- the queue manager's side -------------------------------------------------------------------------------

    def bind(self, owner: str, node: str, requests: Mapping[str, int]) -> None:
        """Bind part of workload `owner`'s placement; its pods stop counting by themselves."""
        if owner not in self._placed:
            label = workload_label_value(owner)
            self._placed[owner] = label
            self._placed_labels.add(label)
            for key in self._labelled.get(label, ()):
                super().unbind(key)
        # NodeInventory.bind clears the owner's old usage on the node through `unbind` first: that is no placement
        # taken back, so this class's unbind must not count the pods again meanwhile.
        self._rebinding = owner
        try:
            super().bind(owner, node, requests)
        finally:
            self._rebinding = None

    def unbind(self, owner: str, node: str | None = None) -> None:
        """Take back workload `owner`'s placement (on `node`, or all of it); once none is left, the pods it still
        has count by themselves until they go."""
        super().unbind(owner, node)
        label = self._placed.get(owner)
        if label is None or owner == self._rebinding or self.nodes_of(owner):
            return
        del self._placed[owner]
        self._placed_labels.discard(label)
        for key in self._labelled.get(label, ()):
            self._count(key)
