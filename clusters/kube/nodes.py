"""The nodes kuota sees: Node objects and the pods bound to them, kept in a LiveInventory (clusters/kube/inventory.py,
the NodeInventory of admission/nodes.py in which a placed workload's pods step aside for its placement).

Two list+watches, started only when the quota file asks for node features (`nodeFailure`, or a flavor's
`topology`): every Node, and every
pod bound to a node that has not terminated (field selector `spec.nodeName!=,status.phase!=Succeeded,
status.phase!=Failed`, so pending and finished pods are never sent, as kube-scheduler's own cache leaves them out).
A Node becomes a NodeState: its labels, its allocatable resources in exact milli-units (quota/quantity.py), its
taints, Ready (the `Ready` condition True; False or Unknown is not) and cordoned (`spec.unschedulable`). A pod is
bound in the inventory under `NAMESPACE/NAME` with its effective requests as the scheduler counts them
(workloads/quantities.py: max(the containers and sidecars, the largest init container) plus overhead); a pod that
terminates leaves the watch's selection, which kube-apiserver reports as its deletion. A pod being deleted keeps
its resources until it is gone (as the scheduler counts it), but belongs to a stopped run, so it names no workload.

Which workload a pod is comes from the `kuota.dev/workload` label that kuota's admit patch sets on every pod
template (and gated pod) it lets run (admission/labels.py). A full list (at start, or after 410 Gone) replaces
what was known, never adds to it: a node or pod missing from it was deleted meanwhile.

Each change of a node's readiness is reported to `on_node(name, ready, since)`: a deleted node is not ready from
the moment it is seen gone; a NotReady node since its condition's `lastTransitionTime` when it has one.
Malformed values (an unreadable quantity, an unknown taint effect) are logged and left out, never raised.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from admission.labels import WORKLOAD_LABEL
from admission.nodes import NodeState, Taint, TaintEffect
from clusters.kube.inventory import LiveInventory
from quota.quantity import QuantityError, parse_quantity
from workloads.kind import parse_time
from workloads.quantities import is_map, mapping, pod_requests

log = structlog.get_logger("kuota.kube.nodes")

Obj = dict[str, Any]

#: The pods the inventory needs: bound to a node and not terminated.
BOUND_POD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True, slots=True)
class CoreKind:
    """A kind of the core API group, as the reflector lists and watches it."""

    kind: str
    plural: str
    group: str = ""
    version: str = "v1"


NODES = CoreKind("Node", "nodes")
BOUND_PODS = CoreKind("Pod", "pods")


def _name(obj: Mapping[str, Any]) -> str:
    name = mapping(obj.get("metadata")).get("name")
    return name if isinstance(name, str) else ""


def pod_key(obj: Mapping[str, Any]) -> str:
    metadata = mapping(obj.get("metadata"))
    return f"{metadata.get('namespace')}/{metadata.get('name')}"


def _ready_condition(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    conditions = mapping(obj.get("status")).get("conditions")
    if not isinstance(conditions, list):
        return None
    return next((c for c in conditions if is_map(c) and c.get("type") == "Ready"), None)


def node_state(obj: Mapping[str, Any]) -> NodeState:
    """A Node as the engine sees it. A node without a Ready condition (just registered) is not ready."""
    name = _name(obj)
    metadata, spec, status = mapping(obj.get("metadata")), mapping(obj.get("spec")), mapping(obj.get("status"))
    labels = {str(k): str(v) for k, v in mapping(metadata.get("labels")).items()}
    allocatable: dict[str, int] = {}
    for resource, raw in mapping(status.get("allocatable")).items():
        try:
            allocatable[str(resource)] = parse_quantity(raw)
        except (QuantityError, ValueError, TypeError):
            log.warning("node_quantity_unreadable", node=name, resource=str(resource), value=str(raw)[:64])
    taints: list[Taint] = []
    found = spec.get("taints")
    for taint in found if isinstance(found, list) else []:
        if not is_map(taint) or not isinstance(taint.get("key"), str):
            continue
        try:
            effect = TaintEffect(str(taint.get("effect", "")))
        except ValueError:
            log.warning("node_taint_unreadable", node=name, taint=str(taint)[:200])
            continue
        taints.append(Taint(taint["key"], str(taint.get("value") or ""), effect))
    ready = _ready_condition(obj)
    return NodeState(
        name=name,
        labels=labels,
        allocatable=allocatable,
        taints=tuple(taints),
        ready=ready is not None and ready.get("status") == "True",
        unschedulable=spec.get("unschedulable") is True,
    )


def not_ready_since(obj: Mapping[str, Any]) -> int | None:
    """When a node that is not Ready stopped being Ready (epoch ms), if its condition says."""
    ready = _ready_condition(obj)
    moment = parse_time(ready.get("lastTransitionTime")) if ready is not None else None
    return int(moment.timestamp() * 1000) if moment is not None else None


@dataclass(frozen=True, slots=True)
class BoundPod:
    """What the inventory keeps of a pod bound to a node."""

    node: str
    requests: Mapping[str, int]
    workload: str | None
    """Its `kuota.dev/workload` label (None: not one of kuota's pods, or being deleted: of a stopped run)."""


def bound_pod(obj: Mapping[str, Any]) -> BoundPod | None:
    """A pod as the inventory counts it; None when it holds nothing on a node (not bound, or terminated)."""
    spec, status = mapping(obj.get("spec")), mapping(obj.get("status"))
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node or status.get("phase") in ("Succeeded", "Failed"):
        return None
    requests, problems = pod_requests(spec, "spec")
    if problems:
        log.warning("pod_requests_unreadable", pod=pod_key(obj), problems=[p.message for p in problems[:3]])
    metadata = mapping(obj.get("metadata"))
    label = mapping(metadata.get("labels")).get(WORKLOAD_LABEL)
    deleting = metadata.get("deletionTimestamp") is not None
    return BoundPod(node, requests, label if isinstance(label, str) and not deleting else None)


class NodeWatch:
    """The inventory and the pods on each node, from what the two reflectors report."""

    def __init__(
        self,
        on_node: Callable[[str, bool, int | None], None] | None = None,
        on_room: Callable[[], None] | None = None,
    ) -> None:
        self.inventory = LiveInventory()
        """Pods counted one by one, except those of workloads the queue manager binds by placement
        (clusters/kube/inventory.py)."""
        self.on_node = on_node
        """Told (node, ready, not ready since) whenever a node's readiness changes, and of every node listed."""
        self.on_room = on_room
        """Told when nodes may have more room than before (a pod counted by itself left, a node came, became
        schedulable or grew), so that work waiting for room on nodes looks again."""
        self.pods: dict[str, BoundPod] = {}
        self._on_node: dict[str, set[str]] = {}
        """node → the pods bound to it (kept for nodes the inventory does not know, or no longer)."""

    # -- nodes ----------------------------------------------------------------------------------------------------

    def nodes_listed(self, items: list[Obj]) -> None:
        """A full list: it replaces what was known (a node missing from it was deleted meanwhile)."""
        present = {_name(obj) for obj in items}
        for node in [n.name for n in self.inventory if n.name not in present]:
            self._node_gone(node)
        for obj in items:
            self._node_seen(obj, listed=True)

    def node_event(self, kind: str, obj: Obj) -> None:
        if kind == "DELETED":
            self._node_gone(_name(obj))
        else:
            self._node_seen(obj, listed=False)

    def _node_seen(self, obj: Obj, *, listed: bool) -> None:
        state = node_state(obj)
        if not state.name:
            return
        before = self.inventory.node(state.name)
        self.inventory.set_node(state)  # binds what runs on a node known again, or listed after its pods
        if self.on_room is not None and state.schedulable and (before is None or _grew(before, state)):
            self.on_room()
        if self.on_node is not None and (listed or before is None or before.ready != state.ready):
            self.on_node(state.name, state.ready, None if state.ready else not_ready_since(obj))

    def _node_gone(self, name: str) -> None:
        if self.inventory.node(name) is None:
            return
        self.inventory.remove_node(name)
        if self.on_node is not None:
            self.on_node(name, False, None)

    # -- pods -----------------------------------------------------------------------------------------------------

    def pods_listed(self, items: list[Obj]) -> None:
        """A full list of the bound pods: it replaces what was known."""
        fresh = {pod_key(obj): found for obj in items if (found := bound_pod(obj)) is not None}
        for key in [k for k in self.pods if k not in fresh]:
            self._unbind(key)
        for key, found in fresh.items():
            self._bind(key, found)

    def pod_event(self, kind: str, obj: Obj) -> None:
        key = pod_key(obj)
        found = None if kind == "DELETED" else bound_pod(obj)
        if found is None:
            self._unbind(key)
        else:
            self._bind(key, found)

    def _bind(self, key: str, pod: BoundPod) -> None:
        before = self.pods.get(key)
        if before is not None and before.node != pod.node:
            self._unbind(key)
        self.pods[key] = pod
        self._on_node.setdefault(pod.node, set()).add(key)
        self.inventory.bind_pod(key, pod.node, pod.requests, pod.workload)

    def _unbind(self, key: str) -> None:
        pod = self.pods.pop(key, None)
        if pod is None:
            return
        freed = self.inventory.counted_alone(key)
        self.inventory.unbind_pod(key)
        if freed and self.on_room is not None:
            self.on_room()
        keys = self._on_node.get(pod.node)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._on_node[pod.node]

    def workload_labels_on(self, node: str) -> set[str]:
        """The `kuota.dev/workload` labels of the pods on `node` that are not being deleted."""
        return {label for key in self._on_node.get(node, ()) if (label := self.pods[key].workload) is not None}


def _grew(before: NodeState, after: NodeState) -> bool:
    """Whether a node may now take pods it could not: schedulable again, fewer taints, more of a resource."""
    if not before.schedulable:
        return True
    if set(after.taints) < set(before.taints) or after.labels != before.labels:
        return True
    return any(q > before.allocatable.get(r, 0) for r, q in after.allocatable.items())
