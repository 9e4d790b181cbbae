"""A workload as the engine sees it: who asks, for how much, and (when running) where it was put.

Everything is plain frozen data so a cycle can be replayed bit for bit. Quantities are integer milli-units,
times integer milliseconds on whatever clock the caller uses (only their order matters to the engine).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from quota.pod_set import PodSet
from quota.tree import FlavorResource


@dataclass(frozen=True, slots=True)
class Admission:
    """Where a running workload was placed: per pod set, resource → flavor, and the admitted counts."""

    flavors: Mapping[str, Mapping[str, str]]
    counts: Mapping[str, int]
    admitted_at: int = 0
    placement: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """On flavors with a topology: per pod set, node → pods placed there (empty: no node placement)."""


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    team: str
    priority: int
    pod_sets: tuple[PodSet, ...]
    created_at: int = 0
    queue: str | None = None
    priority_class: str | None = None
    preemptible: bool = True
    admission: Admission | None = None
    evicting: bool = False
    """Already asked to leave (checkpointing or suspending); such workloads are the first victims."""
    labels: Mapping[str, str] = field(default_factory=dict)
    expected_runtime_ms: int | None = None
    """What the job says it will run (`kuota.dev/expected-runtime`); only wait-time estimates read it."""

    @property
    def admitted(self) -> bool:
        return self.admission is not None

    def usage(self) -> dict[FlavorResource, int]:
        """What an admitted workload holds, per flavor and resource."""
        if self.admission is None:
            return {}
        held: dict[FlavorResource, int] = {}
        for pod_set in self.pod_sets:
            flavors = self.admission.flavors.get(pod_set.name, {})
            count = self.admission.counts.get(pod_set.name, pod_set.count)
            for resource, quantity in pod_set.requests.items():
                flavor = flavors.get(resource)
                if flavor is None or quantity == 0:
                    continue
                key = (flavor, resource)
                held[key] = held.get(key, 0) + quantity * count
        return held
