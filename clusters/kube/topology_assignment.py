"""Where an admitted workload's pods were placed, as kuota writes it on the object and reads it back. Pure.

The engine places each pod set of a topology flavor node by node (admission/placement.py). The admit patch carries
that placement in the annotation `kuota.dev/topology-assignment`, so a restarted controller or a new leader binds
the same nodes instead of counting the running workload nowhere (and placing something else on its nodes):

    {"worker":{"topology":"gpu-fabric","level":"topology.kuota.dev/rack","domain":"rack-001",
               "nodes":{"gpu-node-004":2,"gpu-node-005":2}}}

per pod set: the topology, the narrowest level one of whose domains holds every pod and that domain (absent when
the pods span several domains of the widest level), the pods per node, and `"pinned":true` when the admit patch
added the nodeSelector entry `level: domain` to the pod template (not when the template's owner had written that
entry already). Compact JSON, keys sorted, so the same placement is the same text. A requeued object loses
exactly the pins kuota added, and none its owner wrote, before it is placed again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from admission.labels import TOPOLOGY_ASSIGNMENT
from admission.nodes import NodeInventory
from admission.placement import PodSetPlacement
from quota.config import QuotaConfig, Topology

#: Longest annotation text read back; beyond it the value is not kuota's (a 10,000-node gang writes about 300 KB
#: less than this; kube-apiserver caps all annotations of an object at 256 KiB anyway).
MAX_TEXT = 1 << 20


class Assigned(NamedTuple):
    """One pod set's placement as the annotation holds it, and whether kuota pinned the template to its domain."""

    placement: PodSetPlacement
    pinned: bool = False


class AssignmentError(ValueError):
    """The annotation does not read as a placement (set by hand, or cut short)."""


def narrowest_domain(topology: Topology, labels_of: Mapping[str, Mapping[str, str]]) -> tuple[str | None, str | None]:
    """The narrowest level of `topology` one of whose domains holds every node of `labels_of` (node → its labels),
    with that domain's value; (None, None) when they span several domains of the widest level or a node's labels
    are unknown. A domain of a level is one value of it under one value of every wider level."""
    if not labels_of:
        return None, None
    paths = set()
    for labels in labels_of.values():
        path = tuple(labels.get(level) for level in topology.levels)
        if any(value is None for value in path):
            return None, None
        paths.add(path)
    for depth in range(len(topology.levels), 0, -1):
        if len({path[:depth] for path in paths}) == 1:
            value = next(iter(paths))[depth - 1]
            assert value is not None
            return topology.levels[depth - 1], value
    return None, None


def assignment_of(
    config: QuotaConfig,
    flavors: Mapping[str, Mapping[str, str]],
    placement: Mapping[str, Mapping[str, int]],
    nodes: NodeInventory | None,
) -> dict[str, PodSetPlacement]:
    """Per placed pod set, its placement with the narrowest domain, from an Admission's node counts (`placement`),
    its flavors and the nodes' labels as the inventory knows them."""
    out: dict[str, PodSetPlacement] = {}
    for pod_set, counts in sorted(placement.items()):
        used = {node: pods for node, pods in counts.items() if pods > 0}
        if not used:
            continue
        topology = _topology(config, flavors.get(pod_set, {}).values())
        if topology is None:
            continue
        labels_of: dict[str, Mapping[str, str]] = {}
        for node in used:
            state = nodes.node(node) if nodes is not None else None
            if state is not None:
                labels_of[node] = state.labels
        level, domain = narrowest_domain(topology, labels_of) if len(labels_of) == len(used) else (None, None)
        out[pod_set] = PodSetPlacement(topology.name, dict(sorted(used.items())), level, domain)
    return out


def _topology(config: QuotaConfig, flavors: Iterable[str]) -> Topology | None:
    for flavor in dict.fromkeys(flavors):
        found = config.topology_of(flavor)
        if found is not None:
            return found
    return None


def encode(assignment: Mapping[str, Assigned]) -> str | None:
    """The annotation's text (None: nothing placed on nodes, the annotation is removed)."""
    if not assignment:
        return None
    body: dict[str, dict[str, Any]] = {}
    for pod_set, (placed, pinned) in assignment.items():
        entry: dict[str, Any] = {"topology": placed.topology, "nodes": dict(placed.nodes)}
        if placed.level is not None and placed.domain is not None:
            entry["level"], entry["domain"] = placed.level, placed.domain
        if pinned:
            entry["pinned"] = True
        body[pod_set] = entry
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def decode(text: str) -> dict[str, Assigned]:
    """The placement an annotation holds; AssignmentError names what is wrong with one that does not read."""
    if len(text) > MAX_TEXT:
        raise AssignmentError(f"longer than {MAX_TEXT} characters")
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise AssignmentError(f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise AssignmentError("not a mapping of pod sets")
    out: dict[str, Assigned] = {}
    for pod_set, entry in body.items():
        if not isinstance(entry, dict):
            raise AssignmentError(f"pod set {pod_set!r}: not a mapping")
        topology, level, domain, nodes = (entry.get(k) for k in ("topology", "level", "domain", "nodes"))
        if not isinstance(topology, str):
            raise AssignmentError(f"pod set {pod_set!r}: topology is not a string")
        if (level is None) != (domain is None) or not all(v is None or isinstance(v, str) for v in (level, domain)):
            raise AssignmentError(f"pod set {pod_set!r}: level and domain must be strings, both or neither")
        if not isinstance(nodes, dict) or not all(
            isinstance(node, str) and isinstance(pods, int) and not isinstance(pods, bool) and pods > 0
            for node, pods in nodes.items()
        ):
            raise AssignmentError(f"pod set {pod_set!r}: nodes is not a mapping of node names to pod counts above 0")
        pinned = entry.get("pinned", False)
        if not isinstance(pinned, bool) or (pinned and level is None):
            raise AssignmentError(f"pod set {pod_set!r}: pinned must be true or false, and true only with a domain")
        out[str(pod_set)] = Assigned(PodSetPlacement(topology, dict(nodes), level, domain), pinned)
    return out


def without_pin(selector: Mapping[str, str], earlier: Assigned | None) -> dict[str, str]:
    """A pod set's node selector without the domain entry an earlier admission pinned it with (if kuota added it)."""
    out = dict(selector)
    if earlier is not None and earlier.pinned:
        for key, value in earlier.placement.node_selector().items():
            if out.get(key) == value:
                del out[key]
    return out


def pinned(selector: Mapping[str, str], placed: PodSetPlacement) -> tuple[dict[str, str], bool]:
    """The node selector pinning a pod set to its placement's domain, and whether the pin is kuota's addition
    (False when there is no domain, or the selector already says it)."""
    pin = placed.node_selector()
    out = dict(selector)
    added = bool(pin) and any(out.get(key) != value for key, value in pin.items())
    out.update(pin)
    return out, added


def read_annotation(annotations: Mapping[str, Any]) -> dict[str, Assigned]:
    """The assignment an object's annotations hold ({} when none, or when it does not read: a bad value must not
    stop a restart; the caller's workload then counts on no nodes, and is pinned by nothing kuota removes)."""
    text = annotations.get(TOPOLOGY_ASSIGNMENT)
    if not isinstance(text, str) or not text:
        return {}
    try:
        return decode(text)
    except AssignmentError:
        return {}


#: The node label a pod is pinned to one node with (every node has it; kube-scheduler matches it as any label).
HOSTNAME_LABEL = "kubernetes.io/hostname"


def next_nodes(counts: Mapping[str, int], taken: Mapping[str, int], pods: int) -> list[str]:
    """Nodes for `pods` more pods of a pod set whose placement puts `counts` pods on each node, `taken` of which
    are there (or on their way) already: node by node in name order, each as often as it has pods left. Fewer than
    `pods` when the placement has no more left (a replacement pod while the one it replaces is still there)."""
    out: list[str] = []
    for node in sorted(counts):
        left = counts[node] - taken.get(node, 0)
        while left > 0 and len(out) < pods:
            out.append(node)
            left -= 1
    return out
