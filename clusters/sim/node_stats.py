"""What a simulation with nodes reports: where gangs landed, how fragmented the free GPUs were, what failures cost.

A Journal (it hears admissions, NodeFailure evictions and the work they lost) that the simulated cluster also
tells about node failures and repairs, and that samples the node inventory over virtual time. Exact integers
throughout (milli-GPU × ms); the summary rounds for people.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from typing_extensions import override

from admission.nodes import NodeInventory
from admission.workload import Workload
from queues.journal import NullJournal

MS_PER_HOUR = 3_600_000


@dataclass(frozen=True, slots=True)
class FragmentationSample:
    at: int
    free_gpus: int
    """Free GPUs (milli-units) on Ready, uncordoned nodes."""
    stranded_gpus: int
    """Of those, the ones on nodes that are not wholly free: what a whole-node (8-GPU) pod cannot use."""
    free_racks: int
    """Racks whose every node is Ready, uncordoned and holds nothing."""
    racks: int
    nodes_down: int

    @property
    def stranded_share(self) -> float:
        return self.stranded_gpus / self.free_gpus if self.free_gpus else 0.0


@dataclass
class NodeStats(NullJournal):
    inventory: NodeInventory
    gpu_resource: str = "nvidia.com/gpu"
    rack_label: str = "topology.kuota.dev/rack"
    multi_node_admissions: int = 0
    """Admissions whose pods were placed on more than one node."""
    single_rack_admissions: int = 0
    """Of those, the ones whose nodes all share one rack."""
    node_failures: int = 0
    node_repairs: int = 0
    down_gpu_ms: int = 0
    """GPU capacity out of service while nodes were NotReady (milli-GPU × ms)."""
    evictions: int = 0
    """Workloads evicted for NodeFailure."""
    lost_gpu_ms: int = 0
    """Work lost to failures (milli-GPU × ms): at each NodeFailure eviction, the controller's figure (GPUs × time
    since the last checkpoint); for a gang whose node came back within the grace period and which restarted in
    place, GPUs × the time from its last checkpoint to its restart."""
    restarts_in_place: int = 0
    samples: list[FragmentationSample] = field(default_factory=list)
    _down_since: dict[str, int] = field(default_factory=dict)
    _failed_over: set[str] = field(default_factory=set)

    # -- journal --------------------------------------------------------------------------------------------------

    @override
    def admitted(
        self, workload: Workload, attempt: int, usage: Mapping[tuple[str, str], int], borrowed: object, at: int
    ) -> None:
        admission = workload.admission
        if admission is None or not admission.placement:
            return
        nodes = {node for placed in admission.placement.values() for node in placed}
        if len(nodes) < 2:
            return
        self.multi_node_admissions += 1
        racks = {self._rack_of(node) for node in nodes}
        if len(racks) == 1 and None not in racks:
            self.single_rack_admissions += 1

    @override
    def node_failed(self, victim: Workload, attempt: int, node: str, since: int, at: int) -> None:
        self.evictions += 1
        self._failed_over.add(victim.name)

    @override
    def suspended(self, victim: Workload, attempt: int, lost_gpu_milliseconds: int, at: int) -> None:
        if victim.name in self._failed_over:
            self._failed_over.discard(victim.name)
            self.lost_gpu_ms += lost_gpu_milliseconds * 1000  # milli-GPU-seconds → milli-GPU × ms

    # -- what the simulated cluster tells ------------------------------------------------------------------------

    def node_down(self, node: str, at: int) -> None:
        self.node_failures += 1
        self._down_since[node] = at

    def node_up(self, node: str, at: int) -> None:
        since = self._down_since.pop(node, None)
        if since is not None:
            self.node_repairs += 1
            self.down_gpu_ms += self._gpus(node) * (at - since)

    def restarted_in_place(self, gpus: int, lost_ms: int) -> None:
        self.restarts_in_place += 1
        self.lost_gpu_ms += gpus * lost_ms

    def close(self, at: int) -> None:
        """Count the capacity of nodes still down at the end of the run, up to `at`."""
        for node, since in self._down_since.items():
            self.down_gpu_ms += self._gpus(node) * max(0, at - since)
            self._down_since[node] = at

    # -- sampling -------------------------------------------------------------------------------------------------

    def sample(self, at: int) -> None:
        free = stranded = down = 0
        racks: dict[str | None, bool] = {}
        for node in self.inventory:
            gpus = node.allocatable.get(self.gpu_resource, 0)
            if not gpus:
                continue
            rack = node.labels.get(self.rack_label)
            busy = bool(self.inventory.used(node.name))
            if not node.ready:
                down += 1
            if not node.schedulable:
                racks[rack] = False
                continue
            left = self.inventory.free(node.name).get(self.gpu_resource, 0)
            free += left
            if busy:
                stranded += left
            racks[rack] = racks.get(rack, True) and not busy
        counted = {rack: whole for rack, whole in racks.items() if rack is not None}
        self.samples.append(FragmentationSample(at, free, stranded, sum(counted.values()), len(counted), down))

    # -- summary --------------------------------------------------------------------------------------------------

    def summary(self, failures: bool) -> dict[str, object]:
        shares = [s.stranded_share for s in self.samples if s.free_gpus]
        out: dict[str, object] = {
            "nodes": sum(1 for n in self.inventory if n.allocatable.get(self.gpu_resource, 0)),
            "multi_node_admissions": self.multi_node_admissions,
            "single_rack_admissions": self.single_rack_admissions,
            "single_rack_share": round(self.single_rack_admissions / self.multi_node_admissions, 4)
            if self.multi_node_admissions
            else 0.0,
            "mean_stranded_free_gpu_share": round(sum(shares) / len(shares), 4) if shares else 0.0,
            "mean_free_racks": round(sum(s.free_racks for s in self.samples) / len(self.samples), 2)
            if self.samples
            else 0.0,
            "racks": self.samples[-1].racks if self.samples else 0,
        }
        if failures:
            out.update(
                {
                    "node_failures": self.node_failures,
                    "node_repairs": self.node_repairs,
                    "down_gpu_hours": round(self.down_gpu_ms / 1000 / MS_PER_HOUR, 2),
                    "node_failure_evictions": self.evictions,
                    "restarts_in_place": self.restarts_in_place,
                    "failure_lost_gpu_hours": round(self.lost_gpu_ms / 1000 / MS_PER_HOUR, 2),
                }
            )
        return out

    # -- internals ------------------------------------------------------------------------------------------------

    def _rack_of(self, node: str) -> str | None:
        state = self.inventory.node(node)
        return state.labels.get(self.rack_label) if state is not None else None

    def _gpus(self, node: str) -> int:
        state = self.inventory.node(node)
        return state.allocatable.get(self.gpu_resource, 0) if state is not None else 0
