"""Plain Pods and pod groups (core v1 Pod): a pod that names a queue is a workload of one pod, and pods that
share a group name are one gang workload.

* A pod labelled `kuota.dev/queue` (or Kueue's `kueue.x-k8s.io/queue-name`) is the workload `Pod/NAMESPACE/NAME`,
  with one pod set, `main`, of one pod.
* Pods that also carry `kuota.dev/pod-group: GROUP` (or Kueue's `kueue.x-k8s.io/pod-group-name`) and the
  annotation `kuota.dev/pod-group-total-count: N` (or Kueue's `kueue.x-k8s.io/pod-group-total-count`) are the
  workload `PodGroup/NAMESPACE/GROUP`, queued once all N pods exist and admitted all together. Its pod sets are
  its pods grouped by role, as Kueue's pod groups are: pods with the same per-pod requests and node selector form
  one pod set, named by a short hash of the two. The webhook writes that name on each pod as `kuota.dev/pod-set`
  when the pod is created, because admission adds to the node selector and the pod must stay in its pod set.

Each pod is held back by kuota's scheduling gate (workloads/gates.py). Nobody creates a plain pod again, so a
workload whose pods kuota deletes to stop it ends there, finished and not succeeded, as Kueue's do; whoever made
the pods may create them again, as a new workload. A workload has finished once all its pods have: succeeded
when N of them (one, for a lone pod) succeeded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, ClassVar

import orjson

from admission.labels import (
    KUEUE_POD_GROUP_LABEL,
    KUEUE_POD_GROUP_TOTAL_COUNT,
    KUEUE_QUEUE_LABEL,
    POD_GROUP_LABEL,
    POD_GROUP_TOTAL_COUNT,
    POD_SET,
    QUEUE_LABEL,
)
from workloads.gates import (
    MAIN,
    GatedKind,
    GatedPod,
    Group,
    GroupReading,
    Member,
    finished_at,
    gate_patch,
    holds_resources,
    is_deleting,
    is_terminal,
    phase,
    pod_name,
)
from workloads.kind import JobKind, JSONPatch, PodTemplate, Status, pointer
from workloads.problems import JobProblem, JobProblemKind, short
from workloads.quantities import mapping, pod_requests

#: Pods in one group at most: a bound that keeps the count a small number and the group one gang a cluster runs.
MAX_GROUP_PODS = 100_000

_SPEC = ("spec",)


def group_name(labels: Mapping[str, Any]) -> tuple[str | None, str]:
    """The pod group a pod's labels name (kuota's label first, then Kueue's), and the label that names it."""
    for key in (POD_GROUP_LABEL, KUEUE_POD_GROUP_LABEL):
        value = labels.get(key)
        if isinstance(value, str) and value:
            return value, key
    return None, POD_GROUP_LABEL


def total_count(annotations: Mapping[str, Any]) -> tuple[int | None, str, Any]:
    """The pod group's size from its annotation (kuota's first): the count (None when absent or not a whole number
    from 1 to MAX_GROUP_PODS), the annotation read and its raw value."""
    key = POD_GROUP_TOTAL_COUNT if POD_GROUP_TOTAL_COUNT in annotations else KUEUE_POD_GROUP_TOTAL_COUNT
    raw = annotations.get(key)
    text = raw.strip() if isinstance(raw, str) else ""
    if text.isdecimal() and text.isascii() and len(text) <= 6 and 1 <= int(text) <= MAX_GROUP_PODS:
        return int(text), key, raw
    return None, key, raw


def role(pod: Mapping[str, Any]) -> str:
    """The pod set a pod of a group belongs to: a hash of its per-pod requests and node selector."""
    spec = mapping(pod.get("spec"))
    requests, _ = pod_requests(spec, "spec")
    selector = {k: v for k, v in mapping(spec.get("nodeSelector")).items() if isinstance(v, str)}
    shape = orjson.dumps([sorted(requests.items()), sorted(selector.items())])
    return hashlib.sha256(shape).hexdigest()[:8]


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(mapping(pod.get("metadata")).get("labels"))


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(mapping(pod.get("metadata")).get("annotations"))


class PodKind(GatedPod, GatedKind):
    group: ClassVar[str] = ""
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "Pod"
    plural: ClassVar[str] = "pods"
    workload_kinds: ClassVar[tuple[str, ...]] = ("Pod", "PodGroup")
    defines_workloads: ClassVar[bool] = False
    requeued_when_stopped: ClassVar[bool] = False

    @property
    def pods(self) -> JobKind:
        return self

    # -- which pods, which workloads -------------------------------------------------------------------------

    def claims(self, pod: Mapping[str, Any]) -> bool:
        labels = _labels(pod)
        return isinstance(labels.get(QUEUE_LABEL), str) or isinstance(labels.get(KUEUE_QUEUE_LABEL), str)

    def member(self, pod: Mapping[str, Any]) -> Member | None:
        group, _ = group_name(_labels(pod))
        if group is not None:
            return Member("PodGroup", group)
        name = pod_name(pod)
        return Member("Pod", name) if name else None

    def read_group(self, group: Group) -> GroupReading:
        pods = sorted(group.pods, key=pod_name)
        if not pods:
            return GroupReading({}, [], {}, False, [])
        if group.kind == "Pod":
            pod = pods[0]
            template = PodTemplate(MAIN, _SPEC, mapping(pod.get("spec")), 1)
            return GroupReading(pod, [template], {pod_name(pod): MAIN}, True, [])
        # Pods that failed or are being deleted are no longer the group's: a replacement takes their place.
        active = [p for p in pods if phase(p) != "Failed" and not is_deleting(p)] or pods
        first = active[0]
        total, key, raw = total_count(_annotations(first))
        problems: list[JobProblem] = []
        if any(total_count(_annotations(p))[0] != total for p in active):
            problems.append(
                JobProblem(
                    JobProblemKind.INVALID_FIELD,
                    f"metadata.annotations[{key}]",
                    f"the pods of group {group.name} disagree on annotation {key}; set it to the same number of "
                    "pods on every pod of the group",
                )
            )
        pod_set_of = {pod_name(p): _role_of(p) for p in pods}
        counts: dict[str, int] = {}
        specs: dict[str, Mapping[str, Any]] = {}
        for pod in active:
            name = pod_set_of[pod_name(pod)]
            counts[name] = counts.get(name, 0) + 1
            specs.setdefault(name, mapping(pod.get("spec")))
        if total is not None and len(active) > total:
            problems.append(
                JobProblem(
                    JobProblemKind.INVALID_FIELD,
                    f"metadata.annotations[{key}]",
                    f"group {group.name} has {len(active)} pods, more than its annotation {key} ({short(raw)}); "
                    "delete the extra pods, or set the annotation to the group's size on every pod",
                )
            )
        templates = [PodTemplate(name, _SPEC, specs[name], counts[name]) for name in sorted(counts)]
        complete = total is not None and len(active) >= total
        return GroupReading(first, templates, pod_set_of, complete, problems)

    def group_status(self, group: Group) -> Status:
        pods = group.pods
        if pods and all(is_terminal(p) for p in pods):
            succeeded = sum(phase(p) == "Succeeded" for p in pods)
            needed = 1 if group.kind == "Pod" else total_count(_annotations(pods[0]))[0] or len(pods)
            ends = [t for p in pods if (t := finished_at(p)) is not None]
            return Status(succeeded >= needed, max(ends) if ends else None, stopped=True)
        return Status(stopped=not any(holds_resources(p) for p in pods))

    # -- the webhooks ----------------------------------------------------------------------------------------

    def suspend_patch(self, obj: Mapping[str, Any]) -> JSONPatch:
        """The gate, and on a pod of a group the name of its pod set."""
        ops = gate_patch(obj)
        if group_name(_labels(obj))[0] is None:
            return ops
        wanted = role(obj)
        annotations = mapping(obj.get("metadata")).get("annotations")
        if isinstance(annotations, Mapping):
            if annotations.get(POD_SET) != wanted:
                ops.append({"op": "add", "path": pointer(("metadata", "annotations", POD_SET)), "value": wanted})
        else:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {POD_SET: wanted}})
        return ops

    def metadata_problems(self, labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> list[JobProblem]:
        group, label = group_name(labels)
        total, key, raw = total_count(annotations)
        if group is None:
            if raw is None:
                return []
            return [
                JobProblem(
                    JobProblemKind.INVALID_FIELD,
                    f"metadata.annotations[{key}]",
                    f"annotation {key} sizes a pod group, but this pod names none; add the label "
                    f"{POD_GROUP_LABEL}: <group> to every pod of the group, or remove the annotation",
                )
            ]
        if total is not None:
            return []
        said = "is missing" if raw is None else f"is {short(raw)}"
        return [
            JobProblem(
                JobProblemKind.INVALID_FIELD,
                f"metadata.annotations[{key}]",
                f"pod group {group} (label {label}) needs the annotation {key}: the number of pods in the group, "
                f"and it {said}; set it to a whole number from 1 to {MAX_GROUP_PODS} on every pod of the group",
            )
        ]

    def hold_problem(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
        group, label = group_name(_labels(obj))
        if old is None:
            if group is not None and _annotations(obj).get(POD_SET) != role(obj):
                return (
                    f"annotation {POD_SET} is set by kuota only (the pod set of this pod of group {group}); "
                    "remove it from the manifest"
                )
            return None
        before, _ = group_name(_labels(old))
        if group != before or total_count(_annotations(obj))[0] != total_count(_annotations(old))[0]:
            return (
                f"a pod cannot move to another pod group or change its group's size (label {label}, annotation "
                f"{POD_GROUP_TOTAL_COUNT}); delete the pod and create it again"
            )
        if _annotations(obj).get(POD_SET) != _annotations(old).get(POD_SET):
            return f"annotation {POD_SET} is set by kuota only (the pod set of this pod); leave it as kuota set it"
        return None


def _role_of(pod: Mapping[str, Any]) -> str:
    written = _annotations(pod).get(POD_SET)
    return written if isinstance(written, str) and written else role(pod)


POD = PodKind()
