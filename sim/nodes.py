"""Nodes for the simulated cluster and scenarios, named and labelled as kuota's kwok nodes are
(testing/cluster/nodes.go): `PREFIX000`, `topology.kuota.dev/rack: rack-000` for every `nodes_per_rack` nodes,
`topology.kuota.dev/block: block-00` for every `racks_per_block` racks, `kubernetes.io/hostname` the node's name.
"""

from __future__ import annotations

from collections.abc import Mapping

from admission.nodes import NodeState, Taint

BLOCK_LABEL = "topology.kuota.dev/block"
RACK_LABEL = "topology.kuota.dev/rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The levels of the kwok nodes' topology, widest first.
LEVELS = (BLOCK_LABEL, RACK_LABEL, HOSTNAME_LABEL)


def generated_nodes(
    count: int,
    gpus_per_node: int = 8,
    nodes_per_rack: int = 4,
    racks_per_block: int = 8,
    *,
    prefix: str = "node-",
    first: int = 0,
    labels: Mapping[str, str] | None = None,
    allocatable: Mapping[str, int] | None = None,
    gpu_resource: str = "nvidia.com/gpu",
    taints: tuple[Taint, ...] = (),
) -> list[NodeState]:
    """`count` identical nodes numbered from `first` (racks and blocks follow the number, so a second group that
    starts where the first stopped continues its racks). `allocatable` (milli-units) besides the GPUs: by default
    96 CPUs, 1 TiB of memory and 110 pods, as the kwok nodes have."""
    base = dict(allocatable) if allocatable is not None else {"cpu": 96_000, "memory": 1024**4 * 1000, "pods": 110_000}
    if gpus_per_node > 0:
        base[gpu_resource] = gpus_per_node * 1000
    out = []
    for index in range(first, first + count):
        name = f"{prefix}{index:03d}"
        rack = index // max(nodes_per_rack, 1)
        node_labels = {
            **(labels or {}),
            HOSTNAME_LABEL: name,
            RACK_LABEL: f"rack-{rack:03d}",
            BLOCK_LABEL: f"block-{rack // max(racks_per_block, 1):02d}",
        }
        out.append(NodeState(name, node_labels, dict(base), taints))
    return out
