"""Which node each gated pod of a pod set placed node by node is let go onto, as Kueue's TAS ungates pods onto
hostnames: the placement says how many of the pod set's pods go on each node, the pods say where they are. One
mechanism for both sorts of gated pods: those of the kinds held back pod by pod (clusters/kube/gated.py) and those of
kinds with pod templates whose placed pod sets kuota admitted behind its gate (clusters/kube/placed_pods.py).

A pod of the pod set holds a node when it is past the gate and not finished (running there, or pinned there by its
hostname selector and not yet bound), or when it is being let go there (`pinned`, until the watch shows it ungated).
A gated pod goes to a node with fewer of the pod set's pods than the placement counts there, node by node in name
order; when none is left (the pod it replaces still holds its node) it waits, gated, for one to go. Pods being
deleted hold nothing: they belong to a stopped run, or are going, and the scheduler waits for them to be gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from admission.nodes import NodeInventory
from clusters.kube.topology_assignment import HOSTNAME_LABEL, next_nodes
from workloads.gates import holds_resources, is_deleting, is_gated, pod_name

Pod = Mapping[str, Any]


def uid_of(pod: Pod) -> str:
    uid = (pod.get("metadata") or {}).get("uid")
    return uid if isinstance(uid, str) else ""


def node_of(pod: Pod, by_hostname: Mapping[str, str]) -> str | None:
    """The node a pod let go runs on, or was pinned to (its hostname selector), among a placement's nodes."""
    spec = pod.get("spec") or {}
    bound = spec.get("nodeName")
    if isinstance(bound, str) and bound:
        return bound
    selector = spec.get("nodeSelector") or {}
    return by_hostname.get(str(selector.get(HOSTNAME_LABEL))) if isinstance(selector, dict) else None


class NodePins:
    def __init__(self, inventory: Callable[[], NodeInventory | None]) -> None:
        self.inventory = inventory
        self.pinned: dict[str, str] = {}
        """Uids of gated pods being let go onto a node of their placement → that node (until the watch shows them
        ungated, with the node in their selector)."""

    def forget(self, uid: str) -> None:
        """The pod is gone, was let go (the watch shows it ungated), or its patch failed."""
        self.pinned.pop(uid, None)

    def hostname(self, node: str) -> str:
        """The `kubernetes.io/hostname` label of a node (its name when the inventory does not know it)."""
        inventory = self.inventory()
        state = inventory.node(node) if inventory is not None else None
        return state.labels.get(HOSTNAME_LABEL, node) if state is not None else node

    def choose(self, counts: Mapping[str, int], pods: Iterable[Pod], gated: Iterable[Pod]) -> dict[str, str]:
        """For the `gated` pods of one pod set (not yet being let go), by uid, the node each goes to, given the
        placement's pods per node (`counts`) and every pod of the pod set (`pods`)."""
        by_hostname = {self.hostname(node): node for node in counts}
        taken: dict[str, int] = {}
        for pod in pods:
            if is_deleting(pod):
                continue
            if is_gated(pod):
                node = self.pinned.get(uid_of(pod))  # on its way there
            else:
                node = node_of(pod, by_hostname) if holds_resources(pod) else None
            if node is not None:
                taken[node] = taken.get(node, 0) + 1
        waiting = sorted((p for p in gated if uid_of(p) not in self.pinned), key=pod_name)
        return {uid_of(pod): node for pod, node in zip(waiting, next_nodes(counts, taken, len(waiting)), strict=False)}

    def pin(self, pod: Pod, node: str) -> str:
        """Record that `pod` is being let go onto `node`; its hostname, for the pod's node selector."""
        self.pinned[uid_of(pod)] = node
        return self.hostname(node)
