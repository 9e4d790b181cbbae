"""Taints and tolerations, as Kubernetes matches them: what a node repels and what a pod accepts.

Here, below the engine and the workload readers, because a pod set carries its pods' tolerations (read from the
pod template) and the engine matches them against the nodes' taints (admission.nodes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    @property
    def repels(self) -> bool:
        """Whether a pod that does not tolerate it is kept off the node (PreferNoSchedule only discourages)."""
        return self.effect is not TaintEffect.PREFER_NO_SCHEDULE


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod's toleration, as Kubernetes matches it: `key` empty with Exists tolerates every taint."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    """Empty: every effect."""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def tolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> bool:
    """Whether pods with `tolerations` may be placed on a node with `taints`."""
    held = tuple(tolerations)
    return all(any(t.tolerates(taint) for t in held) for taint in taints if taint.repels)
