"""Nodes and a topology for a trace replay: `kuota simulate --nodes ... --topology ...`.

A trace says how many GPUs a job wants, not how its pods are shaped nor where they should go. With nodes, every
flavor that holds GPU quota gets its own generated nodes (labelled like kuota's kwok nodes: block, rack, host,
plus the flavor's node labels) and is placed on them; a job with more GPUs than a node has becomes a gang of pods
that each fit a node, and asks for its placement as `--topology` says:

* `required` — inside one rack when its pods fit in a rack, else inside one block, else anywhere;
* `preferred` — a rack if one has room, else the narrowest level up that has (spec/topology.md's fallback);
* `off` — no wish, and the flavor's topology knows hosts only: pods still go node by node where they fit
  (roomiest nodes first, as a scheduler that spreads does), but nothing keeps a gang's nodes together.

The same trace replays with topology on and off, and the figures count racks from the node labels either way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from admission.nodes import NodeState
from clusters.sim.failures import FailureModel
from quota.config import QuotaConfig
from quota.loader import load_config_data
from quota.pod_set import TopologyRequest
from sim.nodes import BLOCK_LABEL, HOSTNAME_LABEL, LEVELS, RACK_LABEL, generated_nodes
from sim.traces import TraceJob

#: The topology the simulation gives the GPU flavors.
TOPOLOGY_NAME = "simulated-nodes"


class TopologyMode(StrEnum):
    required = "required"
    preferred = "preferred"
    off = "off"


@dataclass(frozen=True, slots=True)
class NodeLayout:
    count: int | None = None
    """Nodes per GPU flavor; None: as many as the flavor's GPU quota fills (rounded up)."""
    gpus_per_node: int = 8
    nodes_per_rack: int = 4
    racks_per_block: int = 8

    def __post_init__(self) -> None:
        for name in ("gpus_per_node", "nodes_per_rack", "racks_per_block"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be 1 or more")
        if self.count is not None and self.count < 1:
            raise ValueError("nodes must be 1 or more (or auto)")


@dataclass(frozen=True, slots=True)
class NodeSetup:
    """How a replay runs on nodes: their layout, how multi-node jobs ask for placement, how nodes fail."""

    layout: NodeLayout = NodeLayout()
    mode: TopologyMode = TopologyMode.required
    failures: FailureModel | None = None


def gpu_flavors(config: QuotaConfig) -> dict[str, tuple[str, int]]:
    """Flavor → (its GPU resource, the GPU quota it holds over the whole tree, milli-units), in file order."""
    found: dict[str, tuple[str, int]] = {}
    for holder in (*config.cohorts, *config.teams):
        for group in holder.groups():
            for entry in group.flavors:
                for resource, quota in entry.resources.items():
                    if resource.endswith("gpu"):
                        _, total = found.get(entry.flavor, (resource, 0))
                        found[entry.flavor] = (resource, total + quota.nominal)
    order = [f.name for f in config.flavors]
    return {name: found[name] for name in order if name in found}


def with_nodes(config: QuotaConfig, setup: NodeSetup) -> tuple[QuotaConfig, list[NodeState]]:
    """The quota file with the simulated topology on its GPU flavors (and `nodeFailure` on with its default grace
    period when nodes fail and the file does not say), and the nodes: each flavor's from a block boundary on, so
    that no rack holds two flavors. ValueError when no flavor holds GPU quota or the topology name is taken."""
    flavors = gpu_flavors(config)
    if not flavors:
        raise ValueError("no flavor holds GPU quota: there is nothing to place on nodes")
    if any(t.name == TOPOLOGY_NAME for t in config.topologies):
        raise ValueError(f"the quota file already has a topology named {TOPOLOGY_NAME!r}")
    body: dict[str, Any] = config.model_dump(by_alias=True, exclude_unset=True, mode="json")
    levels = list(LEVELS) if setup.mode is not TopologyMode.off else [HOSTNAME_LABEL]
    body["topologies"] = [*body.get("topologies", []), {"name": TOPOLOGY_NAME, "levels": levels}]
    for flavor in body["flavors"]:
        if flavor["name"] in flavors:
            flavor["topology"] = TOPOLOGY_NAME
    if setup.failures is not None and config.node_failure is None:
        body["nodeFailure"] = {}
    layout = setup.layout
    per_block = layout.nodes_per_rack * layout.racks_per_block
    nodes: list[NodeState] = []
    first = 0
    by_name = {f.name: f for f in config.flavors}
    for name, (resource, quota) in flavors.items():
        gpus = layout.gpus_per_node * 1000
        count = layout.count if layout.count is not None else max(1, -(-quota // gpus))
        nodes += generated_nodes(
            count,
            layout.gpus_per_node,
            layout.nodes_per_rack,
            layout.racks_per_block,
            first=first,
            labels=by_name[name].node_labels,
            gpu_resource=resource,
        )
        first += -(-count // per_block) * per_block
    return load_config_data(body, source="simulated nodes"), nodes


def node_shaped(job: TraceJob, gpus_per_node: int) -> TraceJob:
    """The job as a gang whose pods each fit one node: the fewest pods (at least the job's own) that split its
    GPUs evenly with no more than a node's worth each. Its cpu and memory totals are rounded up to split evenly
    too (by fewer milli-units than it has pods). A job whose pods already fit a node is unchanged."""
    if job.gpus <= 0 or (job.gpus // job.pods <= gpus_per_node and job.gpus % job.pods == 0):
        return job
    pods = max(job.pods, -(-job.gpus // gpus_per_node))
    while job.gpus % pods:
        pods += 1
    return dataclasses.replace(
        job, pods=pods, cpu_milli=_round_up(job.cpu_milli, pods), memory_milli=_round_up(job.memory_milli, pods)
    )


def topology_wish(job: TraceJob, setup: NodeSetup) -> TopologyRequest | None:
    """What a node-shaped job asks for: nothing if it fits one node or topology is off; else as `setup.mode`."""
    layout = setup.layout
    if setup.mode is TopologyMode.off or job.gpus <= layout.gpus_per_node:
        return None
    if setup.mode is TopologyMode.preferred:
        return TopologyRequest(RACK_LABEL, required=False)
    per_node = max(1, layout.gpus_per_node // max(1, job.gpus // job.pods))  # pods of this job one node holds
    if job.pods <= per_node * layout.nodes_per_rack:
        return TopologyRequest(RACK_LABEL, required=True)
    if job.pods <= per_node * layout.nodes_per_rack * layout.racks_per_block:
        return TopologyRequest(BLOCK_LABEL, required=True)
    return None


def multi_node_jobs(jobs: Iterable[TraceJob], gpus_per_node: int) -> int:
    return sum(1 for job in jobs if job.gpus > gpus_per_node)


def _round_up(total: int, pods: int) -> int:
    return -(-total // pods) * pods
