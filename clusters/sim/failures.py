"""When the simulated cluster's nodes fail and come back: seeded, reproducible, independent per node.

Each node fails after an exponentially distributed time with mean `mtbf_ms` (failures of different nodes are
independent, the usual model of GPU-cluster reliability studies) and is repaired after `repair_ms`, fixed or
exponentially distributed with that mean; then it runs again until its next failure. Every node draws from its
own generator, seeded by the model's seed and the node's name, so a node's history does not depend on how many
nodes there are or on the order in which the simulation asks.

Floats appear only in the draws, which are rounded to whole milliseconds of virtual time: no float decides an
admission.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class FailureModel:
    mtbf_ms: int
    """Mean time between failures of one node (from its repair to its next failure)."""
    repair_ms: int
    """How long a failed node stays NotReady (the mean, when `repair_exponential`)."""
    repair_exponential: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mtbf_ms <= 0:
            raise ValueError("the mean time between failures must be longer than 0")
        if self.repair_ms <= 0:
            raise ValueError("the repair time must be longer than 0")


@dataclass
class NodeFailures:
    """The failure and repair times of each node, drawn as the simulation reaches them."""

    model: FailureModel
    _draws: dict[str, random.Random] = field(default_factory=dict)

    def _rng(self, node: str) -> random.Random:
        rng = self._draws.get(node)
        if rng is None:
            # A string seed is hashed (SHA-512) by random.Random: stable across runs and Python processes.
            rng = self._draws[node] = random.Random(f"{self.model.seed}/{node}")
        return rng

    def next_failure(self, node: str, after: int) -> int:
        """When `node`, up since `after`, fails next (always later than `after`)."""
        gap = self._rng(node).expovariate(1.0 / self.model.mtbf_ms)
        return after + max(1, round(gap))

    def repaired_at(self, node: str, failed: int) -> int:
        """When `node`, failed at `failed`, is Ready again."""
        if not self.model.repair_exponential:
            return failed + self.model.repair_ms
        return failed + max(1, round(self._rng(node).expovariate(1.0 / self.model.repair_ms)))
