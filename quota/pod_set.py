"""A pod set: `count` identical pods, each asking for the same resources; what every workload is made of.

It lives here, below both the admission engine and the ledger, because both speak of the same thing: the engine
fits pod sets into quota, the ledger records them as submitted. Plain frozen data, no checks: the workload
readers bound what they accept, and the ledger checks what it records (accounting.events).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PodSet:
    name: str
    count: int
    requests: Mapping[str, int]
    """Per-pod requests in milli-units."""
    min_count: int | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """Only labels that flavors define matter: they rule flavors in or out."""

    def total(self, count: int | None = None) -> dict[str, int]:
        n = self.count if count is None else count
        return {resource: quantity * n for resource, quantity in self.requests.items()}
