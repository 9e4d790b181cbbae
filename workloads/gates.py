"""Kinds held back pod by pod, by a scheduling gate, instead of by a switch on one object.

A LeaderWorkerSet has no `suspend`, and a plain Pod is its own object: what kuota can hold back is each pod. The
pod webhook creates every pod of a queued workload with the scheduling gate `kuota.dev/admission` (the scheduler
leaves a gated pod alone). Admission removes the gate pod by pod, each pod's patch adding its flavor's node
selector and tolerations too: while a pod is gated Kubernetes lets it gain nodeSelector entries (never change or
drop one) and tolerations (never change or drop one), which is all a placement adds. Stopping a workload deletes
its pods.

A `GatedKind` says which pods are its own, which workload each belongs to, which workloads its objects define (a
LeaderWorkerSet one per group), how a workload's pods read into pod sets and whether they are all there, and when
the workload has finished. `GatedPod` is one pod read as an object: the webhooks review the pods of every gated
kind through it, with the same rules as any other object. Pure, like the rest of workloads/.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, NamedTuple

from admission.labels import SCHEDULING_GATE
from workloads.kind import (
    JobKind,
    JSONPatch,
    Path,
    Placement,
    PodTemplate,
    Status,
    condition_true,
    dotted,
    label_ops,
    parse_time,
    pointer,
)
from workloads.problems import JobProblem, not_a
from workloads.quantities import is_map, mapping

#: The pod set of a workload with one kind of pod (Kueue's name for it).
MAIN = "main"

_POD: Path = ("spec",)


class Member(NamedTuple):
    """The workload a pod belongs to: the KIND and NAME parts of its key (the namespace is the pod's)."""

    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class Group:
    """One gated workload's pods, and the object that defines it when there is one (a LeaderWorkerSet)."""

    kind: str
    """The KIND part of the workload's key."""
    namespace: str
    name: str
    """The NAME part of the workload's key."""
    owner: Mapping[str, Any] | None
    pods: tuple[Mapping[str, Any], ...]


class GroupReading(NamedTuple):
    """A gated workload read from its object and pods."""

    labelled: Mapping[str, Any]
    """The object whose labels and annotations name its queue, priority class and checkpoint URL."""
    templates: list[PodTemplate]
    """Its pod sets: name, per-pod spec (paths are within that object or pod) and pods."""
    pod_set_of: Mapping[str, str]
    """The pod set of each of its pods, by pod name."""
    complete: bool
    """Every pod it runs at once exists or is defined: a pod group is not queued until all its pods exist."""
    problems: list[JobProblem]


# -- one pod ---------------------------------------------------------------------------------------------------------


def _gates(pod: Mapping[str, Any]) -> list[Any]:
    gates = mapping(pod.get("spec")).get("schedulingGates")
    return gates if isinstance(gates, list) else []


def gate_index(pod: Mapping[str, Any]) -> int | None:
    """Where kuota's gate is in the pod's scheduling gates, None when it has none."""
    for index, gate in enumerate(_gates(pod)):
        if is_map(gate) and gate.get("name") == SCHEDULING_GATE:
            return index
    return None


def is_gated(pod: Mapping[str, Any]) -> bool:
    return gate_index(pod) is not None


def phase(pod: Mapping[str, Any]) -> str:
    value = mapping(pod.get("status")).get("phase")
    return value if isinstance(value, str) else "Pending"


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def is_deleting(pod: Mapping[str, Any]) -> bool:
    return bool(mapping(pod.get("metadata")).get("deletionTimestamp"))


def holds_resources(pod: Mapping[str, Any]) -> bool:
    """Past kuota's gate and not finished: it runs, or may be bound to a node at any moment (also while being
    deleted, until it is gone)."""
    return not is_gated(pod) and not is_terminal(pod)


def group_ready_pods(group: Group) -> int:
    """Pods of a gated workload that are past kuota's gate and ready (their Ready condition) or done, for gang
    readiness: a gated kind has no status of its own that counts them."""
    return sum(
        1
        for pod in group.pods
        if not is_gated(pod)
        and not is_deleting(pod)
        and (phase(pod) == "Succeeded" or condition_true(pod, "Ready") is not None)
    )


def pod_name(pod: Mapping[str, Any]) -> str:
    name = mapping(pod.get("metadata")).get("name")
    return name if isinstance(name, str) else ""


def finished_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the last of its containers ended, if the kubelet said."""
    latest: datetime | None = None
    statuses = mapping(pod.get("status")).get("containerStatuses")
    for container in statuses if isinstance(statuses, list) else ():
        terminated = mapping(mapping(mapping(container).get("state")).get("terminated"))
        moment = parse_time(terminated.get("finishedAt"))
        if moment is not None and (latest is None or moment > latest):
            latest = moment
    return latest


def gate_patch(pod: Mapping[str, Any]) -> JSONPatch:
    """The ops that create `pod` with kuota's gate (none when it has it)."""
    if is_gated(pod):
        return []
    gates = mapping(pod.get("spec")).get("schedulingGates")
    if isinstance(gates, list):
        return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": SCHEDULING_GATE}}]
    if not is_map(pod.get("spec")):
        return [{"op": "add", "path": "/spec", "value": {"schedulingGates": [{"name": SCHEDULING_GATE}]}}]
    return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": SCHEDULING_GATE}]}]


def ungate_patch(pod: Mapping[str, Any], placement: Placement) -> JSONPatch:
    """The ops that let a gated pod be scheduled where `placement` says: kuota's gate removed (after a test that
    it is still where it was, so that a gate removed meanwhile cannot make it remove another), the node selector
    entries and tolerations the pod lacks added. Existing entries are never changed: Kubernetes refuses that."""
    spec = mapping(pod.get("spec"))
    ops: JSONPatch = []
    index = gate_index(pod)
    if index is not None:
        where = pointer(("spec", "schedulingGates", index))
        ops.append({"op": "test", "path": where + "/name", "value": SCHEDULING_GATE})
        ops.append({"op": "remove", "path": where})
    selector = spec.get("nodeSelector")
    if is_map(selector):
        for key, value in placement.node_selector.items():
            if key not in selector:
                ops.append({"op": "add", "path": pointer(("spec", "nodeSelector", key)), "value": value})
    elif placement.node_selector:
        ops.append({"op": "add", "path": "/spec/nodeSelector", "value": dict(placement.node_selector)})
    tolerations = spec.get("tolerations")
    if isinstance(tolerations, list):
        for toleration in placement.tolerations:
            if toleration not in tolerations:
                ops.append({"op": "add", "path": "/spec/tolerations/-", "value": dict(toleration)})
    elif placement.tolerations:
        ops.append({"op": "add", "path": "/spec/tolerations", "value": [dict(t) for t in placement.tolerations]})
    if placement.labels:
        ops.extend(label_ops(pod, (), placement.labels))
    return ops


class GatedPod(JobKind):
    """A pod read as an object, as the webhooks review the pods of every gated kind: one pod set of one pod, held
    back by kuota's scheduling gate, let go by removing it, finished when its phase says so."""

    group: ClassVar[str] = ""
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "Pod"
    plural: ClassVar[str] = "pods"

    @property
    def held_by(self) -> str:
        return f"the scheduling gate {SCHEDULING_GATE}"

    @property
    def count_fields(self) -> str:
        return "its pods"

    def templates(self, spec: Mapping[str, Any], problems: list[JobProblem]) -> list[PodTemplate]:
        if spec.get("containers") is None:  # one of another type is the requests' reading's to name
            problems.append(not_a("a list", dotted((*_POD, "containers")), self.noun))
        selector = spec.get("nodeSelector")
        if selector is not None and not (is_map(selector) and all(isinstance(v, str) for v in selector.values())):
            problems.append(not_a("a map of strings", dotted((*_POD, "nodeSelector")), self.noun))
        return [PodTemplate(MAIN, _POD, spec, 1)]

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        return is_gated(obj)

    def suspend_patch(self, obj: Mapping[str, Any]) -> JSONPatch:
        return gate_patch(obj)

    def run_patch(self, obj: Mapping[str, Any], placements: Mapping[str, Placement]) -> JSONPatch:
        """`placements` holds the one placement of the pod's pod set (a pod is in one pod set)."""
        if len(placements) != 1:
            raise ValueError(f"a pod is placed by one placement, not {len(placements)}")
        return ungate_patch(obj, next(iter(placements.values())))

    def stop_patch(self, obj: Mapping[str, Any]) -> JSONPatch:
        """Nothing: a pod is stopped by deleting it (a running pod cannot be held back again)."""
        return []

    def status(self, obj: Mapping[str, Any]) -> Status:
        if is_terminal(obj):
            return Status(phase(obj) == "Succeeded", finished_at(obj), stopped=True)
        return Status(stopped=not holds_resources(obj))


GATED_POD = GatedPod()


class GatedKind(JobKind):
    """A kind whose workloads kuota holds back pod by pod with its scheduling gate.

    Its object, if it has one besides pods (a LeaderWorkerSet), has no switch: it always counts as waiting (only
    its pods start, each past its gate), and the patches on it are empty. Its pods are reviewed as `pods` says.
    """

    workload_kinds: ClassVar[tuple[str, ...]]
    """The KIND parts of its workloads' keys (`LeaderWorkerSet`; `Pod` and `PodGroup`)."""
    defines_workloads: ClassVar[bool] = True
    """Whether objects of the kind define its workloads (a LeaderWorkerSet its groups); False when pods alone do."""
    requeued_when_stopped: ClassVar[bool] = True
    """Whether the pods of a stopped workload come back (their operator creates them again, gated) so that it
    waits in its queue again; False for pods nobody creates again: the workload ends when they are deleted."""

    @property
    def held_by(self) -> str:
        return f"the scheduling gate {SCHEDULING_GATE} on its pods"

    @property
    def pods(self) -> JobKind:
        """The kind the pod webhook reviews this kind's pods as."""
        return GATED_POD

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        return True

    def suspend_patch(self, obj: Mapping[str, Any]) -> JSONPatch:
        return []

    def run_patch(self, obj: Mapping[str, Any], placements: Mapping[str, Placement]) -> JSONPatch:
        return []

    def stop_patch(self, obj: Mapping[str, Any]) -> JSONPatch:
        return []

    def status(self, obj: Mapping[str, Any]) -> Status:
        return Status()

    @abstractmethod
    def claims(self, pod: Mapping[str, Any]) -> bool:
        """Whether `pod` is one of this kind's, as soon as it is created (the pod webhook gates the pods claimed)."""

    @abstractmethod
    def member(self, pod: Mapping[str, Any]) -> Member | None:
        """The workload a pod of this kind belongs to, None while its labels do not say yet."""

    def workloads_of(self, obj: Mapping[str, Any]) -> list[str]:
        """The NAME parts of the workloads an object of the kind defines (none when pods alone define them)."""
        return []

    @abstractmethod
    def read_group(self, group: Group) -> GroupReading:
        """The pod sets of one workload, which pod set each of its pods is in, and whether it is complete."""

    def group_status(self, group: Group) -> Status:
        """Finished or not (never, unless the kind says otherwise: a serving kind runs until deleted), and
        stopped once none of its pods holds resources."""
        return Status(stopped=not any(holds_resources(pod) for pod in group.pods))
