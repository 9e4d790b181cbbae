"""An object of any kind read once into everything kuota needs: its problems, names, team and pod sets.

Pure: the object (the JSON the API server sends, as plain mappings), its kind and the indexed quota file in; a
`Reading` out, from which `convert` builds the `Workload` the engine admits. The webhooks read objects on every
review, so the reading builds no frozen Workload and type-checks each part once.

A workload is named `KIND/NAMESPACE/NAME` everywhere, so that a JobSet and a Job of the same name never collide.

A kind that reads its pod sets from objects it references (a TrainJob's runtime) is read with a `Resolve` that
looks them up; without one (the webhooks have none) everything the object alone says is checked, and its pod sets
stay unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from types import MappingProxyType
from typing import Any, NamedTuple, TypeGuard

from admission.labels import QUEUE_LABEL
from admission.workload import Workload
from quota.config import PriorityClass, QuotaConfig
from quota.pod_set import PodSet, TopologyRequest
from quota.quantity import format_resource, too_large
from quota.taints import Toleration
from workloads.gates import GatedKind, Group, GroupReading
from workloads.kind import JobKind, PodTemplate, Resolve, dotted
from workloads.problems import JobError, JobProblem, JobProblemKind, not_a
from workloads.quantities import CACHED_TEXT_MAX, is_map, mapping, pod_requests_into
from workloads.rules import (
    ConfigIndex,
    RequestedNames,
    annotations_checkpoint_problem,
    config_index,
    expected_runtime,
    min_count,
    names_in_labels,
    priority_class_for,
    queue_of,
)
from workloads.topology import tolerations_of, topology_request

_NO_NAMES = RequestedNames(None, None, None, None)

#: What a missing or mistyped part of an object reads as; read-only, since it is shared.
EMPTY: Mapping[str, Any] = MappingProxyType({})


def workload_key(kind: str, namespace: str, name: str) -> str:
    """A workload's name: `KIND/NAMESPACE/NAME`."""
    return f"{kind}/{namespace}/{name}"


def split_key(key: str) -> tuple[str, str, str]:
    """(kind, namespace, name) of a workload key; `NAMESPACE/NAME` alone is a Job (what users type)."""
    parts = key.split("/")
    if all(parts):
        if len(parts) == 2:
            return "Job", parts[0], parts[1]
        if len(parts) == 3:
            return parts[0], parts[1], parts[2]
    raise ValueError(f"{key!r} is not KIND/NAMESPACE/NAME or NAMESPACE/NAME")


def qualified(key: str) -> str:
    """`key` with its kind: `NAMESPACE/NAME` becomes `Job/NAMESPACE/NAME`; anything else is returned as it is."""
    return f"Job/{key}" if key.count("/") == 1 else key


@dataclass(slots=True)
class PodSetRequest:
    """One pod set as the never-fits rule reads it: what a `PodSet` holds, without copies.

    Not frozen: a frozen dataclass costs four times as much to make, and these are made for every review.
    """

    name: str
    count: int
    min_count: int | None
    requests: dict[str, int]
    """Per-pod requests in milli-units."""
    node_selector: Mapping[str, str]
    """The template's own nodeSelector (not a copy: readers only read it)."""
    topology: TopologyRequest | None = None
    tolerations: tuple[Toleration, ...] = ()


class Parts(NamedTuple):
    """The parts of an object the rules read, each type-checked once: a part of the wrong type is a problem and
    reads as empty."""

    metadata: Mapping[str, Any]
    labels: Mapping[str, Any]
    annotations: Mapping[str, Any]
    spec: Mapping[str, Any]
    problems: list[JobProblem]


class Reading(NamedTuple):
    """An object read once: every problem found, and everything its workload is made of."""

    problems: tuple[JobProblem, ...]
    names: RequestedNames
    metadata: Mapping[str, Any]
    labels: Mapping[str, Any]
    annotations: Mapping[str, Any]
    namespace: str | None
    queue: str | None
    """`namespace/name` of the queue the object goes to."""
    team: str | None
    priority_class: PriorityClass | None
    pod_sets: tuple[PodSetRequest, ...] | None
    """Set exactly when the object converts to a workload: kuota manages it and nothing is wrong with it (and, for a
    kind that reads its pod sets from objects it references, those could be looked up)."""


class Conversion(NamedTuple):
    workload: Workload | None
    problems: tuple[JobProblem, ...] = ()
    names: RequestedNames = _NO_NAMES


def _string_map(value: Any) -> TypeGuard[Mapping[Any, str]]:
    """A map whose values are all strings (its keys came from JSON: strings too)."""
    if type(value) is not dict and not isinstance(value, Mapping):
        return False
    # A loop rather than all() over a generator: a third of the cost, for every label and annotation map.
    for item in value.values():  # noqa: SIM110
        if not isinstance(item, str):
            return False
    return True


def _string_map_part(value: Any, path: str, problems: list[JobProblem], noun: str) -> Mapping[str, Any]:
    """Labels, annotations: a problem unless a map of strings; a map of anything still reads as itself."""
    if value is None:
        return EMPTY
    if not _string_map(value):
        problems.append(not_a("a map of strings", path, noun))
        return mapping(value)
    return value


def parts(obj: Any, noun: str = "batch/v1 Job") -> Parts:
    """The metadata and spec of an object, with a problem for each part of the wrong type (all NOT_A_JOB)."""
    if type(obj) is not dict and not isinstance(obj, Mapping):
        return Parts(EMPTY, EMPTY, EMPTY, EMPTY, [not_a("an object", "the object", noun)])
    problems: list[JobProblem] = []
    metadata = obj.get("metadata")
    if metadata is None:
        metadata = EMPTY
    elif type(metadata) is not dict and not isinstance(metadata, Mapping):
        problems.append(not_a("an object", "metadata", noun))
        metadata = EMPTY
    spec = obj.get("spec")
    if spec is None:
        spec = EMPTY
    elif type(spec) is not dict and not isinstance(spec, Mapping):
        problems.append(not_a("an object", "spec", noun))
        return Parts(metadata, mapping(metadata.get("labels")), mapping(metadata.get("annotations")), EMPTY, problems)
    labels = _string_map_part(metadata.get("labels"), "metadata.labels", problems, noun)
    annotations = _string_map_part(metadata.get("annotations"), "metadata.annotations", problems, noun)
    return Parts(metadata, labels, annotations, spec, problems)


def structure(
    kind: JobKind, obj: Any, resolve: Resolve | None = None, namespace: str | None = None
) -> tuple[Parts, list[PodTemplate]]:
    """The parts and pod templates of `obj`; every structural problem is in the parts' problem list.

    With `resolve`, a kind that references other objects reads its templates from them (a problem for each one
    that is not found); without it, such a kind's templates are what the object alone says (none).
    """
    found = parts(obj, kind.noun)
    if not is_map(obj) or (obj.get("spec") is not None and not is_map(obj.get("spec"))):
        return found, []  # nothing below an unreadable spec can be read
    if resolve is None:
        return found, kind.templates(found.spec, found.problems)
    return found, kind.resolved_templates(obj, found.spec, found.problems, resolve, namespace)


def structure_problems(kind: JobKind, obj: Any) -> list[JobProblem]:
    """What makes a body not an object of `kind` kuota can read (wrong types where objects, lists or strings go)."""
    return structure(kind, obj)[0].problems


def read(
    kind: JobKind, obj: Any, index: ConfigIndex, namespace: str | None = None, resolve: Resolve | None = None
) -> Reading:
    """`obj` read for `convert`, problems and all, without building its Workload.

    `namespace` is the request's namespace when the body does not carry one (it may not on CREATE). `resolve` looks
    up the objects a kind like TrainJob reads its pod sets from; without it their pod sets are left unknown (None)
    while every other rule is still checked.
    """
    (metadata, labels, annotations, _spec, problems), templates = structure(kind, obj, resolve, namespace)
    if not is_map(obj):
        return Reading(tuple(problems), _NO_NAMES, metadata, labels, annotations, None, None, None, None, None)
    names = names_in_labels(labels)
    if not namespace:
        namespace = metadata.get("namespace")
        if not isinstance(namespace, str) or not namespace:
            problems.append(
                JobProblem(
                    JobProblemKind.NO_NAMESPACE,
                    "metadata.namespace",
                    f"the {kind.kind} has no namespace; set metadata.namespace",
                )
            )
            return Reading(tuple(problems), names, metadata, labels, annotations, None, None, None, None, None)
    unresolved = resolve is None and bool(kind.referenced_kinds)
    return _read_parts(
        kind, metadata, labels, annotations, templates, problems, names, namespace, index, unresolved, obj
    )


def _read_parts(
    kind: JobKind,
    metadata: Mapping[str, Any],
    labels: Mapping[str, Any],
    annotations: Mapping[str, Any],
    templates: list[PodTemplate],
    problems: list[JobProblem],
    names: RequestedNames,
    namespace: str,
    index: ConfigIndex,
    unresolved: bool = False,
    obj: Any = None,
) -> Reading:
    """The rest of `read`, shared with `read_group`. `unresolved`: the kind reads its pod sets from objects it
    references and there was no lookup, so there are no pod sets to convert even when nothing is wrong."""
    queue, team, queue_problem = queue_of(names, namespace, index, kind.kind)
    if queue_problem is not None:
        problems.append(queue_problem)
    elif queue is None:  # not kuota's
        return Reading(tuple(problems), names, metadata, labels, annotations, namespace, None, None, None, None)
    priority_class, priority_problem = priority_class_for(first_priority(templates), names, index)
    if priority_problem is not None:
        problems.append(priority_problem)
    url_problem = annotations_checkpoint_problem(annotations)
    if url_problem is not None:
        problems.append(url_problem)
    expected_runtime(annotations, problems)
    problems.extend(kind.metadata_problems(labels, annotations))
    pod_sets = _pod_sets(kind, templates, annotations, problems, index, obj)
    if problems or team is None or unresolved:
        return Reading(
            tuple(problems), names, metadata, labels, annotations, namespace, queue, team, priority_class, None
        )
    return Reading((), names, metadata, labels, annotations, namespace, queue, team, priority_class, pod_sets)


def first_priority(templates: list[PodTemplate]) -> Mapping[str, Any]:
    """The pod spec whose priorityClassName stands for the object: the first that names one (Kueue's rule)."""
    for template in templates:
        if template.spec.get("priorityClassName"):
            return template.spec
    return templates[0].spec if templates else EMPTY


def _template_annotations(obj: Any, template: PodTemplate) -> Mapping[str, Any]:
    """The annotations of the pod template whose spec is at `template.path` in `obj` (none for a template read
    from another object, or when there is no object at hand)."""
    if obj is None or template.source is not None:
        return EMPTY
    node: Any = obj
    for part in template.path[:-1]:
        if isinstance(part, str) and is_map(node):
            node = node.get(part)
        elif isinstance(part, int) and isinstance(node, list) and 0 <= part < len(node):
            node = node[part]
        else:
            return EMPTY
    return mapping(mapping(mapping(node).get("metadata")).get("annotations"))


def _pod_sets(
    kind: JobKind,
    templates: list[PodTemplate],
    annotations: Mapping[str, Any],
    problems: list[JobProblem],
    index: ConfigIndex,
    obj: Any = None,
) -> tuple[PodSetRequest, ...]:
    # The min-count annotation applies to the one pod set that can be scaled down; kinds with none refuse it.
    scaled = next((t for t in templates if t.scaled is not None), None)
    if scaled is not None and scaled.scaled is not None:
        minimum = min_count(annotations, scaled.count, problems, dotted(scaled.scaled))
    else:
        minimum = min_count(annotations, 0, problems, None)
    out: list[PodSetRequest] = []
    totals: dict[str, int] = {}
    for template in templates:
        requests = pod_requests_into(template.spec, template.where, problems)
        for resource, milli in requests.items():
            totals[resource] = totals.get(resource, 0) + milli * template.count
        out.append(
            PodSetRequest(
                template.name,
                template.count,
                minimum if template.scaled is not None else None,
                requests,
                mapping(template.spec.get("nodeSelector")),
                topology_request(
                    _template_annotations(obj, template), annotations, template.where, index.topology_levels, problems
                ),
                tolerations_of(template.spec),
            )
        )
    for resource, total in totals.items():
        if too_large(total):  # each quantity is bounded; their sum over containers and pods is not
            problems.append(_too_much(kind, templates, out, resource))
    return tuple(out)


def _too_much(kind: JobKind, templates: list[PodTemplate], pod_sets: list[PodSetRequest], resource: str) -> JobProblem:
    if len(pod_sets) == 1:
        only = pod_sets[0]
        asks = f"{only.count} pods of {format_resource(resource, only.requests[resource])} {resource} each"
        where = templates[0].where
    else:
        asks = f"{resource} over its pod sets ({', '.join(p.name for p in pod_sets)})"
        where = "spec"
    return JobProblem(
        JobProblemKind.BAD_QUANTITY,
        where,
        f"this {kind.kind} asks for {asks}, more than kuota accounts (below 2**63 milli-units of a resource per "
        "workload); ask for less",
    )


def convert(
    kind: JobKind, obj: Any, config: QuotaConfig, namespace: str | None = None, resolve: Resolve | None = None
) -> Conversion:
    """The workload `obj` asks kuota to admit, or every problem that stops it from being one.

    An object kuota does not manage (no queue, namespace not managed) converts to no workload and no problem; so
    does one whose pod sets live in objects it references when there is no `resolve` to look them up.
    """
    reading = read(kind, obj, config_index(config), namespace, resolve)
    if reading.pod_sets is None or reading.team is None or reading.queue is None or reading.namespace is None:
        return Conversion(None, reading.problems, reading.names)
    name = reading.metadata.get("name") or reading.metadata.get("generateName") or ""
    key = workload_key(kind.kind, reading.namespace, str(name))
    return Conversion(_workload(reading, key, _created_at(reading.metadata)), (), reading.names)


def _workload(reading: Reading, key: str, created_at: int) -> Workload:
    """The workload of a reading that has pod sets, a team and a queue (the caller checked)."""
    pod_sets, team, priority_class = reading.pod_sets, reading.team, reading.priority_class
    assert pod_sets is not None and team is not None
    return Workload(
        name=key,
        team=team,
        priority=priority_class.value if priority_class is not None else 0,
        pod_sets=tuple(
            PodSet(
                name=p.name,
                count=p.count,
                requests=p.requests,
                min_count=p.min_count,
                node_selector=dict(p.node_selector),
                topology=p.topology,
                tolerations=p.tolerations,
            )
            for p in pod_sets
        ),
        created_at=created_at,
        queue=reading.queue,
        priority_class=priority_class.name if priority_class is not None else None,
        preemptible=priority_class.preemptible if priority_class is not None else True,
        labels=dict(reading.labels),
        expected_runtime_ms=expected_runtime(reading.annotations),
    )


class GroupConversion(NamedTuple):
    """A gated workload converted: its Workload once its pods are all there and nothing is wrong."""

    workload: Workload | None
    problems: tuple[JobProblem, ...]
    pod_set_of: Mapping[str, str]
    """The pod set of each of its pods, by pod name."""
    complete: bool


def read_group(kind: GatedKind, group: Group, index: ConfigIndex) -> tuple[Reading, GroupReading]:
    """A gated workload read as `read` reads an object: the labels of the object that names its queue, the pod
    sets of its pods, every problem of either."""
    found = kind.read_group(group)
    labelled = parts(found.labelled, kind.noun)
    problems = [*labelled.problems, *found.problems]
    names = names_in_labels(labelled.labels)
    reading = _read_parts(
        kind,
        labelled.metadata,
        labelled.labels,
        labelled.annotations,
        found.templates,
        problems,
        names,
        group.namespace,
        index,
    )
    return reading, found


def convert_group(kind: GatedKind, group: Group, config: QuotaConfig) -> GroupConversion:
    """The workload `KIND/NAMESPACE/NAME` of a group of pods (and its object), created when its first pod was."""
    reading, found = read_group(kind, group, config_index(config))
    if not found.complete:
        return GroupConversion(None, reading.problems, found.pod_set_of, False)
    if reading.pod_sets is None or reading.team is None or reading.queue is None:
        return GroupConversion(None, reading.problems, found.pod_set_of, True)
    stamps = [_created_at(mapping(pod.get("metadata"))) for pod in group.pods]
    created_at = min((t for t in stamps if t), default=0) or _created_at(reading.metadata)
    key = workload_key(group.kind, group.namespace, group.name)
    return GroupConversion(_workload(reading, key, created_at), (), found.pod_set_of, True)


def workload_of(
    kind: JobKind, obj: Any, config: QuotaConfig, namespace: str | None = None, resolve: Resolve | None = None
) -> Workload:
    """The workload of an object kuota manages; raises JobError listing every problem otherwise (also when kuota
    does not manage it: it has no team to be admitted under)."""
    conversion = convert(kind, obj, config, namespace, resolve)
    if conversion.workload is not None:
        return conversion.workload
    if conversion.problems:
        raise JobError(conversion.problems)
    if resolve is None and kind.referenced_kinds:
        raise ValueError(f"a {kind.kind} reads its pod sets from the objects it references: pass resolve")
    raise JobError(
        [
            JobProblem(
                JobProblemKind.NO_QUEUE,
                f"metadata.labels[{QUEUE_LABEL}]",
                f"the {kind.kind} names no queue; add the label {QUEUE_LABEL}: <queue> to have kuota admit it",
            )
        ]
    )


def _created_at(metadata: Mapping[str, Any]) -> int:
    raw = metadata.get("creationTimestamp")
    return _epoch_ms(raw) if isinstance(raw, str) else 0


def _epoch_ms(raw: str) -> int:
    """RFC 3339 to Unix milliseconds, 0 when unreadable."""
    return _read_epoch_ms(raw) if len(raw) > CACHED_TEXT_MAX else _cached_epoch_ms(raw)


@lru_cache(maxsize=256)
def _cached_epoch_ms(raw: str) -> int:
    """Cached: jobs created together share the second."""
    return _read_epoch_ms(raw)


def _read_epoch_ms(raw: str) -> int:
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        return 0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
