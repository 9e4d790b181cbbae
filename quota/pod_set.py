"""A pod set: `count` identical pods, each asking for the same resources; what every workload is made of.

It lives here, below both the admission engine and the ledger, because both speak of the same thing: the engine
fits pod sets into quota, the ledger records them as submitted. Plain frozen data, no checks: the workload
readers bound what they accept, and the ledger checks what it records (accounting.events).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from quota.taints import Toleration


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """Where a pod set's pods must (or would rather) be together: inside one domain of a topology level."""

    level: str
    """A node label of the flavor's topology (`topology.kuota.dev/rack`)."""
    required: bool
    """Required: in one domain of `level` or not admitted. Preferred: the narrowest level that fits, from `level`
    up, and failing every level anywhere."""


@dataclass(frozen=True, slots=True)
class PodSet:
    name: str
    count: int
    requests: Mapping[str, int]
    """Per-pod requests in milli-units."""
    min_count: int | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """The pods' nodeSelector. For flavors, only labels some flavor defines matter (they rule flavors in or out);
    on a flavor with a topology every label must match the node the pods go to."""
    topology: TopologyRequest | None = None
    tolerations: tuple[Toleration, ...] = ()
    """The pods' tolerations: only nodes whose repelling taints they all tolerate take them (topology flavors)."""

    def total(self, count: int | None = None) -> dict[str, int]:
        n = self.count if count is None else count
        return {resource: quantity * n for resource, quantity in self.requests.items()}
