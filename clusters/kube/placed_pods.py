"""The pods of kinds with pod templates (Job, JobSet, the Kubeflow kinds, Ray, TrainJob) whose pod sets kuota placed
node by node, let go one by one onto the nodes the placement counted, as Kueue's TAS does.

Pinning a pod set to its domain alone (the nodeSelector entry of its rack) leaves kube-scheduler free to pack the
rack otherwise than kuota counted it (four half-node pods on four nodes where kuota counted two full ones), and a
later placement in that rack then finds nodes fuller than kuota thinks. So the admit patch also gives each placed
pod set's template kuota's scheduling gate and the label `kuota.dev/placed-pod-set: POD_SET` (beside
`kuota.dev/workload`); the operator makes the pods from the template, gated. This watch sees exactly those pods (a
label selector: no other pod is sent or held), files them by workload, and for each gated pod of an admitted
workload sends one JSON patch that removes the gate and adds the `kubernetes.io/hostname` of a node the placement
still has room on for its pod set (clusters/kube/node_pins.py, the same choice the kinds held pod by pod make). A
pod that fails and is made again by its operator goes where the one it replaces left room.

The placement comes from the admission (`place`), or, for a workload found running after a restart, from its
`kuota.dev/topology-assignment` annotation; it is dropped when the workload is stopped, finishes or goes
(`release`): the pods of a stopped run are deleted by their operator, and the next admission places them again.
The ungate patch first tests the pod's uid, so it never lets go a pod other than the one it was made for; it is not
retried against the pod read again (kuota needs only `patch` on pods for this): a refused patch is tried again
from what the watch shows after RETRY_S.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from admission.labels import PLACED_POD_SET, WORKLOAD_LABEL, workload_label_value
from admission.placement import PodSetPlacement
from clusters.kube.api import NotFound, status_of
from clusters.kube.node_pins import NodePins, uid_of
from clusters.kube.topology_assignment import HOSTNAME_LABEL
from workloads.gates import GATED_POD, is_deleting, is_gated, pod_name, ungate_patch
from workloads.kind import JSONPatch, Placement
from workloads.quantities import mapping

if TYPE_CHECKING:
    from clusters.kube.cluster import KubeCluster

log = structlog.get_logger("kuota.kube")

Obj = dict[str, Any]

#: How long a refused ungate patch waits before it is made again from what the watch shows.
RETRY_S = 1.0


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(mapping(pod.get("metadata")).get("labels"))


class PlacedPods:
    def __init__(self, cluster: KubeCluster) -> None:
        self.cluster = cluster
        self.pins = NodePins(cluster.node_inventory)
        self.pods: dict[str, dict[str, Obj]] = {}
        """`kuota.dev/workload` label → pod name → pod, for every pod the watch shows."""
        self.placed: dict[str, Mapping[str, PodSetPlacement]] = {}
        """`kuota.dev/workload` label of an admitted workload → its gated pod sets' placements."""
        self.keys: dict[str, str] = {}
        """The same labels → the workloads' keys."""
        self.in_flight: set[str] = set()
        """Uids of pods being let go: not patched twice before the watch shows the result."""

    # -- what the controller decided ------------------------------------------------------------------------------

    def place(self, key: str, placements: Mapping[str, PodSetPlacement]) -> None:
        """An admitted workload whose pod sets `placements` are gated: let their pods go as they come."""
        label = workload_label_value(key)
        if not placements:
            self.release(key)
            return
        self.placed[label] = dict(placements)
        self.keys[label] = key
        self.sync(label)

    def release(self, key: str) -> None:
        """The workload is stopped, finished or gone: none of its gated pods is let go any more."""
        label = workload_label_value(key)
        self.placed.pop(label, None)
        self.keys.pop(label, None)

    # -- what the watch reports -------------------------------------------------------------------------------

    def pods_listed(self, items: list[Obj]) -> None:
        """A full list (at start, after 410 Gone): it replaces what was known."""
        self.pods.clear()
        for pod in items:
            self._file(pod)
        present = {uid_of(pod) for pods in self.pods.values() for pod in pods.values()}
        for uid in [u for u in self.pins.pinned if u not in present]:
            self.pins.forget(uid)
        self.in_flight &= present
        for label in list(self.placed):
            self.sync(label)

    def pod_event(self, event: str, pod: Obj) -> None:
        label = _labels(pod).get(WORKLOAD_LABEL)
        if event == "DELETED" or not is_gated(pod):
            self.in_flight.discard(uid_of(pod))
            self.pins.forget(uid_of(pod))
        if not isinstance(label, str):
            return
        if event == "DELETED":
            self.pods.get(label, {}).pop(pod_name(pod), None)
            if not self.pods.get(label):
                self.pods.pop(label, None)
        else:
            self._file(pod)
        if label in self.placed:
            self.sync(label)

    def _file(self, pod: Obj) -> None:
        label = _labels(pod).get(WORKLOAD_LABEL)
        if isinstance(label, str):
            self.pods.setdefault(label, {})[pod_name(pod)] = pod

    # -- letting pods go ----------------------------------------------------------------------------------------

    def sync(self, label: str) -> None:
        """Let go the gated pods of one admitted workload that its placement has room for."""
        key, placed = self.keys.get(label), self.placed.get(label)
        if key is None or placed is None or key in self.cluster.suspending:
            return
        pods = list(self.pods.get(label, {}).values())
        for pod_set, placement in placed.items():
            mine = [p for p in pods if _labels(p).get(PLACED_POD_SET) == pod_set]
            gated = [p for p in mine if is_gated(p) and not is_deleting(p) and uid_of(p) not in self.in_flight]
            if not gated:
                continue
            hosts = self.pins.choose(placement.nodes, mine, gated)
            for pod in gated:
                node = hosts.get(uid_of(pod))
                if node is None:
                    continue  # no room left in the placement yet: it waits, gated, for a pod of its pod set to go
                selector = {**placement.node_selector(), HOSTNAME_LABEL: self.pins.pin(pod, node)}
                self.in_flight.add(uid_of(pod))
                self.cluster.spawn(self._let_go(key, label, pod, Placement(selector, ())), f"place {key} pod")

    async def _let_go(self, key: str, label: str, pod: Mapping[str, Any], placement: Placement) -> None:
        namespace, name = str(mapping(pod.get("metadata")).get("namespace", "")), pod_name(pod)

        def patch(current: Obj | None) -> JSONPatch:
            return [{"op": "test", "path": "/metadata/uid", "value": uid_of(pod)}, *ungate_patch(pod, placement)]

        try:
            await self.cluster.api.patch_object(GATED_POD, namespace, name, patch, reread=False)
            self.cluster.patches += 1
        except NotFound:
            self.in_flight.discard(uid_of(pod))  # gone: its operator makes another, which the watch shows
            self.pins.forget(uid_of(pod))
        except Exception as exc:
            self.in_flight.discard(uid_of(pod))
            self.pins.forget(uid_of(pod))
            log.error("pod_placement_failed", job=key, pod=name, status=status_of(exc), error=str(exc)[:300])
            asyncio.get_running_loop().call_later(RETRY_S, self.sync, label)
