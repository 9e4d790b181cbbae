"""The Cluster interface: how the controller acts on the world, and how the world answers.

Commands are synchronous and must return at once (a Kubernetes implementation schedules the API calls and
retries them itself); answers come back as calls on the controller (`job_finished`, `checkpoint_acked`,
`suspended`, ...). Two implementations: clusters/kube/cluster.py (kubernetes-asyncio) and clusters/sim/cluster.py
(a virtual clock, for `kuota simulate`, tests and `kuota serve --cluster sim`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from admission.nodes import NodeInventory
from admission.workload import Workload


class Cluster(Protocol):
    def admit(
        self,
        workload: Workload,
        flavors: Mapping[str, Mapping[str, str]],
        counts: Mapping[str, int],
        resume_from: str | None,
    ) -> None:
        """Let the workload run: unsuspend it with the flavors' node selectors and tolerations."""

    def request_checkpoint(self, workload: Workload, deadline: int, reason: str, preemptor: str | None) -> str:
        """Ask a victim to checkpoint before `deadline` (ms); returns how ("url" or "annotation")."""
        ...

    def suspend(self, workload: Workload) -> None:
        """Stop the workload (spec.suspend: true); the cluster reports `suspended` once its pods are gone."""

    def mark_deactivated(self, workload: Workload, message: str | None) -> None:
        """Record on the workload's object that it is deactivated (with why), or no longer (None), so that a
        controller that starts later keeps it out of the queue; a cluster that does not outlive its controller
        need not."""

    def last_checkpoint_at(self, workload: Workload) -> int | None:
        """When the workload last checkpointed on its own, if the cluster knows (bounds the work lost)."""
        ...

    def workloads_on(self, node: str) -> frozenset[str]:
        """The workloads with pods bound to `node` (pods being deleted left out: they belong to a stopped run);
        empty for a cluster that does not watch nodes. The cluster tells the controller how nodes fare with
        `node_changed`."""
        ...

    def node_inventory(self) -> NodeInventory | None:
        """The nodes and what is bound to each, kept current by the cluster's watches (None: it watches none).
        Live: a reader that binds or unbinds takes a `copy()` first."""
        ...


class Timers(Protocol):
    def call_at(self, at: int) -> None:
        """Make sure the controller's `tick` runs at (or soon after) time `at`."""
