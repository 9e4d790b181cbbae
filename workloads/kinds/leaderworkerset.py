"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): each group of a leader and its workers is one gang workload.

A LeaderWorkerSet runs `spec.replicas` groups of `spec.leaderWorkerTemplate.size` pods: a leader, from
`leaderTemplate` when there is one, and size - 1 workers from `workerTemplate` (without a leader template all
`size` pods come from the worker template). It has no suspend switch, so kuota holds it back pod by pod
(workloads/gates.py): the mutating webhook copies the queue and priority class labels onto both pod templates, so
that every pod the LeaderWorkerSet controller creates names its queue, and the pod webhook creates each such pod
behind kuota's scheduling gate.

As in Kueue, each group is one workload with pod sets `leader` (1) and `worker` (size - 1), or `main` (size)
without a leader template, so scaling the set adds or removes workloads. A group's key is
`LeaderWorkerSet/NAMESPACE/NAME-INDEX`, its leader pod's name; a group index never holds a `-`, so the key splits
back into the set and the group at its last `-`. Pods say which group they are in with the LeaderWorkerSet
controller's labels (`leaderworkerset.sigs.k8s.io/name`, `.../group-index`; leaders carry `.../worker-index: "0"`,
and a leader's index is also its pod name's ordinal, which LWS's own pod webhook copies into the label).

A group never finishes (a LeaderWorkerSet serves until it is deleted or scaled down, like a RayCluster); stopped,
its pods are deleted and the controller creates them again, gated, so the group waits in its queue again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from admission.labels import PRIORITY_LABEL, QUEUE_LABEL
from workloads.gates import MAIN, GatedKind, Group, GroupReading, Member, pod_name
from workloads.kind import JSONPatch, Path, PodTemplate, dotted, pod_spec_at, pointer, value_at, whole_number
from workloads.problems import JobProblem, JobProblemKind, not_a
from workloads.quantities import is_map, mapping, pod_requests

#: Labels the LeaderWorkerSet controller and its pod webhook put on every pod of a set.
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"

LEADER = "leader"
WORKER = "worker"

_TEMPLATE: Path = ("spec", "leaderWorkerTemplate")
_LEADER: Path = (*_TEMPLATE, "leaderTemplate")
_WORKER: Path = (*_TEMPLATE, "workerTemplate")
_KUOTA_LABELS = (QUEUE_LABEL, PRIORITY_LABEL)


class LeaderWorkerSetKind(GatedKind):
    group: ClassVar[str] = "leaderworkerset.x-k8s.io"
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "LeaderWorkerSet"
    plural: ClassVar[str] = "leaderworkersets"
    workload_kinds: ClassVar[tuple[str, ...]] = ("LeaderWorkerSet",)

    @property
    def count_fields(self) -> str:
        return "spec.leaderWorkerTemplate.size"

    def templates(self, spec: Mapping[str, Any], problems: list[JobProblem]) -> list[PodTemplate]:
        """One group's pod sets: the leader and the workers, or `main` without a leader template."""
        template = spec.get("leaderWorkerTemplate")
        if not is_map(template):
            problems.append(not_a("an object", dotted(_TEMPLATE), self.noun))
            return []
        size = whole_number(template.get("size"), (*_TEMPLATE, "size"), problems, 1)
        if size < 1:
            problems.append(
                JobProblem(
                    JobProblemKind.INVALID_FIELD,
                    dotted((*_TEMPLATE, "size")),
                    f"{dotted((*_TEMPLATE, 'size'))} is 0; set it to 1 or more pods per group (the leader counts)",
                )
            )
            size = 1
        # pod_spec_at reads `container[path[-2]]["spec"]`: the container here is the leaderWorkerTemplate.
        worker = pod_spec_at(template, (*_WORKER, "spec"), problems, self.noun)
        out: list[PodTemplate] = []
        if template.get("leaderTemplate") is not None:
            leader = pod_spec_at(template, (*_LEADER, "spec"), problems, self.noun)
            if leader is not None:
                out.append(PodTemplate(LEADER, (*_LEADER, "spec"), leader, 1))
            if worker is not None:
                out.append(PodTemplate(WORKER, (*_WORKER, "spec"), worker, size - 1))
        elif worker is not None:
            out.append(PodTemplate(MAIN, (*_WORKER, "spec"), worker, size))
        return out

    # -- which pods, which workloads -------------------------------------------------------------------------

    def claims(self, pod: Mapping[str, Any]) -> bool:
        return isinstance(_labels(pod).get(NAME_LABEL), str)

    def member(self, pod: Mapping[str, Any]) -> Member | None:
        labels = _labels(pod)
        name = labels.get(NAME_LABEL)
        if not isinstance(name, str) or not name:
            return None
        index = labels.get(GROUP_INDEX_LABEL)
        if not isinstance(index, str) and labels.get(WORKER_INDEX_LABEL) == "0":
            # A leader before LWS's pod webhook labelled it: its index is its name's ordinal (`NAME-INDEX`).
            prefix, _, ordinal = pod_name(pod).rpartition("-")
            index = ordinal if prefix == name else None
        if not isinstance(index, str) or not index or "-" in index:
            return None
        return Member(self.kind, f"{name}-{index}")

    def workloads_of(self, obj: Mapping[str, Any]) -> list[str]:
        name = mapping(obj.get("metadata")).get("name")
        if not isinstance(name, str) or not name:
            return []
        replicas = whole_number(mapping(obj.get("spec")).get("replicas"), ("spec", "replicas"), [], 1)
        return [f"{name}-{index}" for index in range(replicas)]

    def read_group(self, group: Group) -> GroupReading:
        owner = group.owner
        if owner is None:  # its pods are seen before the set itself: wait for it
            return GroupReading({}, [], {}, False, [])
        templates = self.read_templates(owner)
        names = {t.name for t in templates}
        pod_set_of: dict[str, str] = {}
        for pod in group.pods:
            leads = _labels(pod).get(WORKER_INDEX_LABEL) == "0"
            pod_set_of[pod_name(pod)] = LEADER if leads and LEADER in names else WORKER if WORKER in names else MAIN
        return GroupReading(owner, templates, pod_set_of, True, [])

    # -- the webhooks ----------------------------------------------------------------------------------------

    def pod_labels_patch(self, obj: Mapping[str, Any], labels: Mapping[str, str]) -> JSONPatch:
        """kuota's labels on both pod templates, so that the pods name their queue (this changes the set's
        template revision only at creation, before any pod exists)."""
        ops: JSONPatch = []
        for path in (_LEADER, _WORKER):
            template = value_at(obj, path)
            if not is_map(template):
                continue
            metadata = template.get("metadata")
            wanted = {k: v for k, v in labels.items() if mapping(mapping(metadata).get("labels")).get(k) != v}
            if not wanted:
                continue
            if not is_map(metadata):
                ops.append({"op": "add", "path": pointer((*path, "metadata")), "value": {"labels": wanted}})
            elif not is_map(metadata.get("labels")):
                ops.append({"op": "add", "path": pointer((*path, "metadata", "labels")), "value": wanted})
            else:
                ops.extend(
                    {"op": "add", "path": pointer((*path, "metadata", "labels", k)), "value": v}
                    for k, v in wanted.items()
                )
        return ops

    def hold_problem(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
        labels = _labels(obj)
        for path in (_LEADER, _WORKER):
            template = value_at(obj, path)
            if not is_map(template):
                continue
            own = mapping(mapping(template.get("metadata")).get("labels"))
            for key in _KUOTA_LABELS:
                if key in labels and own.get(key) != labels[key]:
                    return (
                        f"{dotted((*path, 'metadata', 'labels'))} must carry {key}: {labels[key]} as the "
                        "LeaderWorkerSet does (its pods are queued by it); leave the label as kuota set it"
                    )
        if old is None:
            return None
        before = _labels(old)
        for key in _KUOTA_LABELS:
            if labels.get(key) != before.get(key):
                return (
                    f"label {key} of a queued LeaderWorkerSet cannot change (its pods carry it); keep it, or delete "
                    "the LeaderWorkerSet and create it again with the new label"
                )
        if _shape(self, obj) != _shape(self, old):
            return (
                "the pods of a queued LeaderWorkerSet cannot change what they ask for (kuota admits each group "
                f"for its pod sets); keep {self.count_fields} and the templates' resources, or delete the "
                "LeaderWorkerSet and create it again"
            )
        return None


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(mapping(obj.get("metadata")).get("labels"))


def _shape(kind: LeaderWorkerSetKind, obj: Mapping[str, Any]) -> list[tuple[str, int, dict[str, int]]]:
    """A group's pod sets as admission sees them: names, pods, per-pod requests."""
    return [(t.name, t.count, pod_requests(t.spec)[0]) for t in kind.read_templates(obj)]


LEADERWORKERSET = LeaderWorkerSetKind()
