"""The Kubernetes Cluster's half for the kinds kuota holds back pod by pod (LeaderWorkerSet, plain Pods).

What it hears are the objects that define such workloads (LeaderWorkerSets) and the pods labelled with a queue,
filed by workload key in `PodGroups`; after each event, the keys it touched are looked at again (`sync`):

* a workload seen for the first time is submitted once its kind reads it whole (a pod group once all its pods
  exist). One whose pods run past kuota's gate with `kuota.dev/admitted-flavor` is already admitted: it is
  submitted with the admission rebuilt from the annotation, so a restart or a new leader admits nothing twice;
* admit: one JSON patch per gated pod (workloads/gates.py `ungate_patch`: kuota's gate removed, the pod set's
  flavors' node selector and tolerations added) with the admission annotations; a pod of an admitted workload
  created later (an operator replacing one) gets the same, until the workload is stopped. A pod of a pod set placed
  by a topology also gets its domain's entry and the hostname of a node the placement still has a pod for;
  when it has none left (the pod replaced still holds its node) the pod waits, gated, for one to go;
* stop (the suspend of a preemption): every pod of the workload is deleted, each only while it is the pod seen (its
  uid), so that a pod created again under the same name stays. A LeaderWorkerSet's controller creates them again,
  gated, and the workload counts as suspended once none of its pods holds resources: it waits in its queue again.
  Nobody creates a plain pod again, so such a workload ends there, finished and not succeeded, as Kueue's do;
* the checkpoint handshake runs on the pods: `kuota.dev/checkpoint-requested-at` goes on each pod that runs, and an
  answer on any pod of the workload counts (the URL hook is read from the set's, or else the pods', annotations).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import structlog

from admission.labels import (
    ADMITTED_FLAVOR,
    CHECKPOINT_COMPLETED_AT,
    CHECKPOINT_REQUESTED_AT,
    RESUME_FROM,
    TOPOLOGY_ASSIGNMENT,
    WORKLOAD_ID,
    WORKLOAD_LABEL,
    workload_label_value,
)
from admission.workload import Workload
from clusters.kube.admitted import admission_annotations, annotation_ops, pod_placement
from clusters.kube.api import NotFound, status_of
from clusters.kube.events import rfc3339
from clusters.kube.node_pins import NodePins, uid_of
from clusters.kube.pod_groups import PodGroups
from clusters.kube.topology_assignment import HOSTNAME_LABEL, Assigned, assignment_of, encode
from clusters.kube.topology_assignment import read_annotation as read_assignment
from workloads.gates import (
    GATED_POD,
    GatedKind,
    Group,
    group_ready_pods,
    holds_resources,
    is_deleting,
    is_gated,
    pod_name,
    ungate_patch,
)
from workloads.kind import JSONPatch, Placement, parse_time
from workloads.reading import convert_group, split_key
from workloads.rules import job_annotations

if TYPE_CHECKING:
    from clusters.kube.cluster import KubeCluster

log = structlog.get_logger("kuota.kube")

Obj = dict[str, Any]


class Admitted(NamedTuple):
    """What an admitted workload's pods get: its pod sets' flavors and the admission annotations."""

    flavors: Mapping[str, Mapping[str, str]]
    annotations: Mapping[str, str | None]
    assignment: Mapping[str, Assigned] = {}
    """Per pod set placed on nodes by a topology: its placement (each of its pods is pinned to the domain)."""


def _completed_at(obj: Mapping[str, Any]) -> str:
    value = job_annotations(obj).get(CHECKPOINT_COMPLETED_AT)
    return value if isinstance(value, str) else ""


def group_view(group: Group) -> Obj:
    """What the cluster keeps as a gated workload's object: its name, and the annotations of its set and pods
    together, the pod that answered a checkpoint last having the last word (the checkpoint steps read them)."""
    annotations: dict[str, Any] = dict(job_annotations(group.owner or {}))
    for pod in sorted(group.pods, key=_completed_time):
        annotations.update(job_annotations(pod))
    return {"metadata": {"namespace": group.namespace, "name": group.name, "annotations": annotations}}


def _completed_time(pod: Mapping[str, Any]) -> float:
    moment = parse_time(_completed_at(pod))
    return moment.timestamp() if moment is not None else 0.0


class GatedWorkloads:
    def __init__(self, cluster: KubeCluster) -> None:
        self.cluster = cluster
        self.groups = PodGroups(cluster.kinds)
        self.admitted: dict[str, Admitted] = {}
        """Admitted workloads whose gated pods kuota lets go, by key."""
        self.in_flight: set[str] = set()
        """Uids of pods being let go or deleted: not patched twice before the watch shows the result."""
        self.pins = NodePins(cluster.node_inventory)
        """The node each gated pod of a placed pod set is let go onto (clusters/kube/node_pins.py)."""

    def kind(self, key: str) -> GatedKind:
        kind = self.cluster.kinds.for_workload(split_key(key)[0])
        if not isinstance(kind, GatedKind):
            raise KeyError(f"{key}: not a workload held back pod by pod")
        return kind

    def owns(self, key: str) -> bool:
        return isinstance(self.cluster.kinds.for_workload(split_key(key)[0]), GatedKind)

    # -- what the watches report ------------------------------------------------------------------------------

    def pods_listed(self, items: list[Obj]) -> None:
        self._sync_all(self.groups.pods_listed(items))

    def pod_event(self, event: str, pod: Obj) -> None:
        if event == "DELETED" or not is_gated(pod):
            self.in_flight.discard(uid_of(pod))
            self.pins.forget(uid_of(pod))
        touched = self.groups.pod_gone(pod) if event == "DELETED" else self.groups.pod_seen(pod)
        self._sync_all(touched)

    def owners_listed(self, kind: GatedKind, items: list[Obj]) -> None:
        self._sync_all(self.groups.owners_listed(kind, items))

    def owner_event(self, kind: GatedKind, event: str, obj: Obj) -> None:
        touched = self.groups.owner_gone(kind, obj) if event == "DELETED" else self.groups.owner_seen(kind, obj)
        self._sync_all(touched)

    def _sync_all(self, keys: set[str]) -> None:
        for key in sorted(keys):
            self.sync(key)

    def sync(self, key: str) -> None:
        """Bring the controller and the pods in line with what the watches last showed of one workload."""
        cluster = self.cluster
        controller = cluster.controller
        if controller is None:
            return
        group = self.groups.group(key)
        if group is None:  # its set was deleted or scaled down, or its last pod went
            self.admitted.pop(key, None)
            cluster.done.discard(key)
            cluster.deleted(key)
            return
        kind = self.kind(key)
        status = kind.group_status(group)
        view = group_view(group)
        if key not in cluster.submitted:
            if status.finished is not None:
                return
            if key in cluster.done and not any(is_gated(p) for p in group.pods):
                return  # ended; a gated pod would be a new attempt
            cluster.done.discard(key)
            workload = self._workload(kind, key, group)
            if workload is not None:
                cluster.submit(workload, view)
                self._let_go(key, kind, group)
                if workload.admission is not None:  # found running: its readiness now, not at its next change
                    controller.pods_reported(key, group_ready_pods(group), cluster.clock())
            return
        stopped = cluster.progress(key, view, status)
        if status.finished is not None:
            self.admitted.pop(key, None)
        elif stopped and kind.requeued_when_stopped:
            cluster.suspended(key)
        elif stopped:
            self._ended(key, False)  # nobody creates its pods again
        else:
            self._let_go(key, kind, group)
            if key in self.admitted:
                controller.pods_reported(key, group_ready_pods(group), cluster.clock())
                if controller.dirty:
                    cluster.wake()

    def _ended(self, key: str, succeeded: bool) -> None:
        self.admitted.pop(key, None)
        self.cluster.finished(key, succeeded)

    def _workload(self, kind: GatedKind, key: str, group: Group) -> Workload | None:
        cluster = self.cluster
        conversion = convert_group(kind, group, cluster.config())
        cluster.note_problems(key, kind, conversion.problems)
        if conversion.workload is None:
            return None
        workload = conversion.workload
        running = [p for p in group.pods if holds_resources(p)]
        flavor = next((f for p in running if (f := job_annotations(p).get(ADMITTED_FLAVOR))), None)
        if flavor:
            # Already admitted: its gated pods (kuota stopped half-way, or replacements) are let go alike.
            annotations = job_annotations(next(p for p in running if job_annotations(p).get(ADMITTED_FLAVOR)))
            assignment = read_assignment(annotations)
            admitted = cluster.with_admission(workload, flavor, assignment)
            assert admitted.admission is not None
            self.admitted[key] = Admitted(
                admitted.admission.flavors,
                {k: annotations.get(k) for k in (ADMITTED_FLAVOR, WORKLOAD_ID, RESUME_FROM, TOPOLOGY_ASSIGNMENT)},
                assignment,
            )
            return admitted
        if running:
            # Past the gate without an admission (created while the webhooks were away).
            log.warning("job_running_unadmitted", job=key, pods=len(running))
            if not kind.requeued_when_stopped:
                return None  # a plain pod nobody would create again: left alone, not counted
            self._delete_pods(key, running)  # they come back gated
        return workload

    # -- what the controller decides ---------------------------------------------------------------------------

    def admit(self, workload: Workload, flavors: Mapping[str, Mapping[str, str]], resume_from: str | None) -> None:
        key = workload.name
        config = self.cluster.config()
        placed = assignment_of(
            config, flavors, workload.admission.placement if workload.admission else {}, self.cluster.node_inventory()
        )
        # Gated pods are created from the owner's templates without kuota's pins: every pin is kuota's addition.
        assignment = {name: Assigned(p, bool(p.node_selector())) for name, p in placed.items()}
        annotations = {**admission_annotations(key, flavors, resume_from), TOPOLOGY_ASSIGNMENT: encode(assignment)}
        self.admitted[key] = Admitted(flavors, annotations, assignment)
        self.cluster.suspending.discard(key)
        group = self.groups.group(key)
        if group is not None:
            self._let_go(key, self.kind(key), group)

    def stop(self, key: str) -> None:
        self.admitted.pop(key, None)
        self.cluster.suspending.add(key)
        group = self.groups.group(key)
        pods = [p for p in group.pods if not is_deleting(p)] if group is not None else []
        self._delete_pods(key, pods)
        # Nothing may be left to wait for (no pod held resources): look again once the controller is done.
        self.cluster.later(lambda: self.sync(key))

    def ask_for_checkpoint(self, key: str) -> None:
        group = self.groups.group(key)
        stamp = {"metadata": {"annotations": {CHECKPOINT_REQUESTED_AT: rfc3339(self.cluster.clock())}}}
        for pod in group.pods if group is not None else ():
            if holds_resources(pod):
                namespace = (pod.get("metadata") or {}).get("namespace", "")
                self.cluster.spawn(self._merge(namespace, pod_name(pod), stamp), f"checkpoint annotation {key}")

    # -- the calls ----------------------------------------------------------------------------------------------

    def _let_go(self, key: str, kind: GatedKind, group: Group) -> None:
        """Ungate the gated pods of an admitted workload."""
        admitted = self.admitted.get(key)
        if admitted is None or key in self.cluster.suspending:
            return
        gated = [p for p in group.pods if is_gated(p) and not is_deleting(p) and uid_of(p) not in self.in_flight]
        if not gated:
            return
        pod_set_of = kind.read_group(group).pod_set_of
        config = self.cluster.config()
        hosts = self._hosts(group, pod_set_of, admitted, gated)
        for pod in gated:
            pod_set = pod_set_of.get(pod_name(pod), "")
            placement = pod_placement(pod, pod_set, config, admitted.flavors)
            selector = dict(placement.node_selector)
            if pod_set in admitted.assignment:
                # Pinned to its pod set's domain, and to the node the placement counted it on (as Kueue's TAS
                # ungates pods onto hostnames), so that the nodes kuota counts are the nodes the pods run on.
                selector.update(admitted.assignment[pod_set].placement.node_selector())
                node = hosts.get(uid_of(pod))
                if node is None:
                    continue  # the placement has no node left for it yet: it waits, gated, for a pod to go
                selector[HOSTNAME_LABEL] = self.pins.pin(pod, node)
            placement = dataclasses.replace(
                placement, node_selector=selector, labels={WORKLOAD_LABEL: workload_label_value(key)}
            )
            self.in_flight.add(uid_of(pod))
            self.cluster.spawn(self._ungate(key, pod, placement, admitted.annotations), f"admit {key} pod")

    def _hosts(
        self, group: Group, pod_set_of: Mapping[str, str], admitted: Admitted, gated: list[Mapping[str, Any]]
    ) -> dict[str, str]:
        """For the gated pods of placed pod sets, by uid, the node each goes to (clusters/kube/node_pins.py)."""
        out: dict[str, str] = {}
        for pod_set, assigned in admitted.assignment.items():
            mine = [p for p in group.pods if pod_set_of.get(pod_name(p)) == pod_set]
            waiting = [p for p in gated if pod_set_of.get(pod_name(p)) == pod_set]
            out.update(self.pins.choose(assigned.placement.nodes, mine, waiting))
        return out

    async def _merge(self, namespace: str, name: str, body: Obj) -> None:
        with contextlib.suppress(NotFound):  # gone (stopped meanwhile): nothing to ask
            await self.cluster.api.patch_object(GATED_POD, namespace, name, body)

    async def _ungate(
        self, key: str, pod: Mapping[str, Any], placement: Placement, annotations: Mapping[str, str | None]
    ) -> None:
        namespace, name = (pod.get("metadata") or {}).get("namespace", ""), pod_name(pod)

        def patch(current: Obj | None) -> JSONPatch:
            seen = current if current is not None else pod
            # Each op was made for the pod it is sent to (on a retry, the pod read again: one created again under
            # the same name is the workload's too, and is let go alike).
            ops: JSONPatch = [{"op": "test", "path": "/metadata/uid", "value": uid_of(seen)}]
            return ops + annotation_ops(seen, annotations) + ungate_patch(seen, placement)

        try:
            await self.cluster.api.patch_object(GATED_POD, namespace, name, patch)
            self.cluster.patches += 1
        except NotFound:
            self.in_flight.discard(uid_of(pod))  # gone: the watch says what happens next
            self.pins.forget(uid_of(pod))
        except Exception as exc:
            self.in_flight.discard(uid_of(pod))
            self.pins.forget(uid_of(pod))
            log.error("admission_failed", job=key, pod=name, status=status_of(exc), error=str(exc)[:300])
            cluster = self.cluster
            if cluster.controller is not None and key in cluster.submitted and key in self.admitted:
                # Pods already let go must not run on quota given back: stop them all, then requeue.
                self.stop(key)
                cluster.suspending.discard(key)
                cluster.controller.admission_failed(key, cluster.clock())
                cluster.wake()

    def _delete_pods(self, key: str, pods: list[Mapping[str, Any]]) -> None:
        for pod in pods:
            uid = uid_of(pod)
            self.in_flight.add(uid)
            namespace = (pod.get("metadata") or {}).get("namespace", "")
            self.cluster.spawn(
                self.cluster.api.delete_object(GATED_POD, namespace, pod_name(pod), uid or None),
                f"stop {key} pod {pod_name(pod)}",
            )

    # -- after a restart ---------------------------------------------------------------------------------------

    def running(self) -> set[str]:
        """Keys of the workloads whose pods run under an admission kuota made (for the ledger's recovery)."""
        out: set[str] = set()
        for key in self.groups.workload_keys():
            group = self.groups.group(key)
            if group is not None and any(
                holds_resources(p) and ADMITTED_FLAVOR in job_annotations(p) for p in group.pods
            ):
                out.add(key)
        return out
