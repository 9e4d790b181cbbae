"""A batch/v1 Job reduced to the workload the engine admits, and everything that can be wrong with it.

Pure: a Job body (the JSON the API server sends, as plain mappings) and the quota file in, a `Workload` or a list of
problems out. The webhooks use it to deny what kuota could never queue; the Kubernetes cluster adapter uses it to
turn the Jobs it watches into workloads. Every problem message says what is wrong and what to do about it, because
it reaches the person who ran `kubectl apply`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from functools import lru_cache
from types import MappingProxyType
from typing import Any, NamedTuple, TypeGuard
from urllib.parse import urlsplit

from admission.labels import (
    CHECKPOINT_URL,
    KUEUE_MIN_PARALLELISM,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    MIN_PARALLELISM,
    PRIORITY_LABEL,
    QUEUE_LABEL,
)
from admission.workload import PodSet, Workload
from quota.config import Namespace, PriorityClass, QuotaConfig
from quota.quantity import QuantityError, QuantityTooLarge, format_resource, parse_quantity, too_large

#: Kueue names the single pod set of a batch/v1 Job "main"; so do we, so names line up across both.
POD_SET_NAME = "main"

_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


class JobProblemKind(StrEnum):
    NOT_A_JOB = "NotAJob"
    INVALID_FIELD = "InvalidField"
    NO_NAMESPACE = "NoNamespace"
    NO_QUEUE = "NoQueue"
    INVALID_QUEUE_NAME = "InvalidQueueName"
    UNKNOWN_QUEUE = "UnknownQueue"
    QUEUE_NOT_OPEN = "QueueNotOpen"
    UNKNOWN_PRIORITY_CLASS = "UnknownPriorityClass"
    BAD_MIN_PARALLELISM = "BadMinParallelism"
    BAD_CHECKPOINT_URL = "BadCheckpointURL"
    BAD_QUANTITY = "BadQuantity"


@dataclass(frozen=True, slots=True)
class JobProblem:
    kind: JobProblemKind
    field: str
    """Where in the Job, e.g. `metadata.labels[kuota.dev/queue]`."""
    message: str
    """What is wrong, then what to do."""


class JobError(ValueError):
    """A Job kuota cannot turn into a workload; carries every problem found."""

    def __init__(self, problems: Sequence[JobProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(p.message for p in self.problems))


class RequestedNames(NamedTuple):
    """The queue and priority class a Job names in its labels (kuota's labels first, then Kueue's).

    These small results are named tuples rather than dataclasses: they are made for every Job the webhooks see.
    """

    queue: str | None
    queue_label: str | None
    priority_class: str | None
    priority_label: str | None


class JobConversion(NamedTuple):
    workload: Workload | None
    problems: tuple[JobProblem, ...] = ()
    names: RequestedNames = RequestedNames(None, None, None, None)


@dataclass(slots=True)
class PodSetRequest:
    """A Job's one pod set as the never-fits rule reads it: what a `PodSet` holds but its name, without copies.

    Not frozen: a frozen dataclass costs four times as much to make, and this one is made for every review.
    """

    count: int
    min_count: int | None
    requests: dict[str, int]
    """Per-pod requests in milli-units."""
    node_selector: Mapping[str, str]
    """The Job's own nodeSelector (not a copy: readers only read it)."""


class JobReading(NamedTuple):
    """A Job read once: every problem `convert_job` finds, and everything its workload is made of.

    `convert_job` builds a Workload from it; the validating webhook reads it as it is, since its rules need the
    names, the team and the pod set, and building a frozen Workload for every review would be wasted.
    """

    problems: tuple[JobProblem, ...]
    names: RequestedNames
    metadata: Mapping[str, Any]
    labels: Mapping[str, Any]
    annotations: Mapping[str, Any]
    namespace: str | None
    queue: str | None
    """`namespace/name` of the queue the Job goes to."""
    team: str | None
    priority_class: PriorityClass | None
    pod_set: PodSetRequest | None
    """Set exactly when the Job converts to a workload: kuota manages it and nothing is wrong with it."""


# -- the quota file, indexed for lookups per Job ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigIndex:
    """What Job conversion looks up in the quota file, keyed for constant-time access."""

    team_of_queue: Mapping[str, str]
    queue_names: Mapping[str, tuple[str, ...]]
    """namespace → names of the queues open to it, in file order."""
    queue_namespaces: Mapping[str, tuple[str, ...]]
    """queue name → namespaces that have a queue of that name."""
    namespaces: Mapping[str, Namespace]
    priority_classes: Mapping[str, PriorityClass]
    default_class: PriorityClass | None

    @classmethod
    def build(cls, config: QuotaConfig) -> ConfigIndex:
        team_of_queue: dict[str, str] = {}
        names: dict[str, list[str]] = {}
        spaces: dict[str, list[str]] = {}
        for team in config.teams:
            for queue in team.queues:
                team_of_queue[queue] = team.name
                namespace, _, name = queue.partition("/")
                names.setdefault(namespace, []).append(name)
                spaces.setdefault(name, []).append(namespace)
        return cls(
            team_of_queue=team_of_queue,
            queue_names={ns: tuple(v) for ns, v in names.items()},
            queue_namespaces={name: tuple(v) for name, v in spaces.items()},
            namespaces={ns.name: ns for ns in config.namespaces},
            priority_classes={pc.name: pc for pc in config.priority_classes},
            default_class=config.default_priority_class(),
        )

    def managed(self, namespace: str) -> bool:
        settings = self.namespaces.get(namespace)
        return settings is not None and settings.managed

    def default_queue(self, namespace: str) -> str | None:
        """The queue NAME a Job of a managed namespace gets when it names none (`defaultQueue` may be `ns/name`)."""
        settings = self.namespaces.get(namespace)
        if settings is None or not settings.managed or not settings.default_queue:
            return None
        return settings.default_queue.rpartition("/")[2]

    def open_queues_hint(self, namespace: str) -> str:
        names = self.queue_names.get(namespace, ())
        if not names:
            return f"no queue is open to namespace {namespace} yet: ask your cluster admin to add one to a team"
        return f"queues open to namespace {namespace}: {', '.join(names)}"


_indexes: dict[int, tuple[QuotaConfig, ConfigIndex]] = {}


def config_index(config: QuotaConfig) -> ConfigIndex:
    """The index of `config`, built once per config object (the live config changes rarely; Jobs arrive often)."""
    cached = _indexes.get(id(config))
    if cached is not None and cached[0] is config:
        return cached[1]
    index = ConfigIndex.build(config)
    if len(_indexes) >= 4:
        _indexes.clear()
    # Holding the config in the entry keeps its id from being reused by another object.
    _indexes[id(config)] = (config, index)
    return index


# -- what a Job names ---------------------------------------------------------------------------------------------


def _is_map(value: Any) -> TypeGuard[Mapping[str, Any]]:
    # Bodies are parsed JSON, so nearly always plain dicts: checking that first skips the slow ABC check.
    return type(value) is dict or isinstance(value, Mapping)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if _is_map(value) else {}


def job_labels(job: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(job.get("metadata")).get("labels"))


def job_annotations(job: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(job.get("metadata")).get("annotations"))


def _first_label(labels: Mapping[str, Any], first: str, second: str) -> tuple[str | None, str | None]:
    value = labels.get(first)
    if isinstance(value, str):
        return value, first
    value = labels.get(second)
    if isinstance(value, str):
        return value, second
    return None, None


def requested_names(job: Mapping[str, Any]) -> RequestedNames:
    """The queue and priority class names a Job asks for in its labels; kuota's labels win over Kueue's."""
    return names_in_labels(job_labels(job))


def names_in_labels(labels: Mapping[str, Any]) -> RequestedNames:
    """`requested_names` of a Job whose labels are already at hand."""
    if not labels:
        return _NO_NAMES
    queue, queue_label = _first_label(labels, QUEUE_LABEL, KUEUE_QUEUE_LABEL)
    priority, priority_label = _first_label(labels, PRIORITY_LABEL, KUEUE_PRIORITY_LABEL)
    return RequestedNames(queue, queue_label, priority, priority_label)


_NO_NAMES = RequestedNames(None, None, None, None)


def job_namespace(job: Mapping[str, Any]) -> str | None:
    namespace = _mapping(job.get("metadata")).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else None


def is_managed(job: Mapping[str, Any], config: QuotaConfig, namespace: str | None = None) -> bool:
    """kuota queues a Job that names a queue, and every Job of a namespace the quota file marks as managed."""
    if requested_names(job).queue is not None:
        return True
    namespace = namespace or job_namespace(job)
    return namespace is not None and config_index(config).managed(namespace)


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and _is_label_text(value)


@lru_cache(maxsize=1024)
def _is_label_text(value: str) -> bool:
    """Cached: a cluster's Jobs name the same few queues over and over (and only short strings get here)."""
    return _LABEL_VALUE.fullmatch(value) is not None


def resolve_priority_class(
    job: Mapping[str, Any], config: QuotaConfig, names: RequestedNames | None = None
) -> PriorityClass | None:
    """semantics.md's order: the label, else the pod template's priorityClassName if configured, else the default.

    Raises JobError when the label names a class the quota file does not have. `names` saves reading them again.
    """
    names = names if names is not None else requested_names(job)
    priority_class, problem = priority_class_for(_pod_spec(job), names, config_index(config))
    if problem is not None:
        raise JobError([problem])
    return priority_class


def priority_class_for(
    pod: Mapping[str, Any], names: RequestedNames, index: ConfigIndex
) -> tuple[PriorityClass | None, JobProblem | None]:
    """`resolve_priority_class` for a pod spec and names at hand: the class, or the problem with the label."""
    if names.priority_class is not None:
        found = index.priority_classes.get(names.priority_class)
        if found is not None:
            return found, None
        known = ", ".join(index.priority_classes) or "(none is configured)"
        fallback = f" (the default, {index.default_class.name})" if index.default_class else ""
        return None, JobProblem(
            JobProblemKind.UNKNOWN_PRIORITY_CLASS,
            f"metadata.labels[{names.priority_label}]",
            f"priority class {names.priority_class!r} (label {names.priority_label}) is not configured in kuota; "
            f"set the label to one of: {known}, or remove it to get the Job's usual priority{fallback}",
        )
    pod_class = pod.get("priorityClassName")
    if isinstance(pod_class, str) and pod_class in index.priority_classes:
        return index.priority_classes[pod_class], None
    return index.default_class, None


# -- resources ----------------------------------------------------------------------------------------------------


_QUANTITY_TYPES = (str, int, float)


_CACHED_TEXT_MAX = 256
"""Longer strings are read every time: caches of what users send must not hold megabytes of it."""


def _milli(raw: str | int | float) -> int | None:
    """A quantity's milli-units, None when it is not one or is negative."""
    if type(raw) is str and len(raw) > _CACHED_TEXT_MAX:
        return _read_milli(raw)
    return _cached_milli(raw)


def _read_milli(raw: str | int | float) -> int | None:
    try:
        milli = parse_quantity(raw)
    except (QuantityError, ValueError, OverflowError):
        return None
    return milli if milli >= 0 else None


@lru_cache(maxsize=4096)
def _cached_milli(raw: str | int | float) -> int | None:
    """Cached: the same few quantity strings recur in every Job."""
    return _read_milli(raw)


def _quantity(raw: Any, path: str, problems: list[JobProblem]) -> int | None:
    milli = _milli(raw) if type(raw) in _QUANTITY_TYPES else None
    if milli is None:
        problems.append(_quantity_problem(raw, path))
    return milli


def _quantity_problem(raw: Any, path: str) -> JobProblem:
    if type(raw) in _QUANTITY_TYPES and str(raw).strip().startswith("-"):
        return JobProblem(
            JobProblemKind.BAD_QUANTITY, path, f"{path} is {_short(raw)}, which is negative; give 0 or more"
        )
    if type(raw) in _QUANTITY_TYPES:
        try:
            parse_quantity(raw)
        except QuantityTooLarge as exc:
            return JobProblem(JobProblemKind.BAD_QUANTITY, path, f"{path}: {exc}; ask for less")
        except (ValueError, OverflowError):
            pass
    return JobProblem(
        JobProblemKind.BAD_QUANTITY,
        path,
        f"{path} is {_short(raw)}, which is not a Kubernetes quantity; use one such as 500m, 2, 1.5 or 4Gi",
    )


def _resources_path(path: str, key: str | None, index: int) -> str:
    """Where a `resources` object is: the pod's own (`key` None), or that of item `index` of container list `key`."""
    return f"{path}.resources" if key is None else f"{path}.{key}[{index}].resources"


def _quantities(
    resources: Any, problems: list[JobProblem], path: str, key: str | None = None, index: int = 0
) -> dict[str, int]:
    """`resources` of one container (or of the pod) as effective requests: requests, and limits where no request
    is given, as in Kubernetes. A problem's path is spelled out only when there is a problem: most Jobs have none.
    """
    if type(resources) is not dict and not isinstance(resources, Mapping):
        problems.append(_not_a("an object", _resources_path(path, key, index)))
        return {}
    out = _parsed(resources.get("requests"), "requests", problems, path, key, index)
    limits = _parsed(resources.get("limits"), "limits", problems, path, key, index)
    if not out:
        return limits
    for resource, milli in limits.items():
        if resource not in out:
            out[resource] = milli
    return out


def _parsed(
    values: Any, part: str, problems: list[JobProblem], path: str, key: str | None, index: int
) -> dict[str, int]:
    """The quantities of a `requests` or `limits` map in milli-units; a problem for each that is not one."""
    if values is None:
        return {}
    if type(values) is not dict and not isinstance(values, Mapping):
        problems.append(_not_a("an object", f"{_resources_path(path, key, index)}.{part}"))
        return {}
    out: dict[str, int] = {}
    for resource, raw in values.items():
        milli = _milli(raw) if type(raw) in _QUANTITY_TYPES else None
        if milli is None:
            problems.append(_quantity_problem(raw, f"{_resources_path(path, key, index)}.{part}[{resource}]"))
        else:
            out[str(resource)] = milli
    return out


def _add(total: dict[str, int], extra: Mapping[str, int]) -> None:
    for resource, value in extra.items():
        total[resource] = total.get(resource, 0) + value


def _max_into(total: dict[str, int], other: Mapping[str, int]) -> None:
    for resource, value in other.items():
        if value > total.get(resource, 0):
            total[resource] = value


def _container_list(pod: Mapping[str, Any], key: str, path: str, problems: list[JobProblem]) -> list[Any]:
    """The list of containers under `key` (empty when there is none, or a problem when it is not a list).

    Its items may still be anything: the caller checks each in turn, so problems come out in the Job's order.
    """
    containers = pod.get(key)
    if containers is None:
        return []
    if not isinstance(containers, list):
        problems.append(_not_a("a list", f"{path}.{key}"))
        return []
    return containers


def pod_requests(pod: Mapping[str, Any], path: str = "spec.template.spec") -> tuple[dict[str, int], list[JobProblem]]:
    """Per-pod requests in milli-units by Kubernetes' effective-request rule.

    max(sum of the containers plus sidecars, the largest init container plus the sidecars started before it),
    per resource, or the pod-level request where one is given, plus the pod's overhead. Sidecars are init
    containers with `restartPolicy: Always`; they run for the pod's lifetime. A resource given only as a limit
    counts as requested at its limit, which is how GPUs are usually asked for.
    """
    problems: list[JobProblem] = []
    return _pod_requests(pod, path, problems), problems


def _pod_requests(pod: Mapping[str, Any], path: str, problems: list[JobProblem]) -> dict[str, int]:
    total: dict[str, int] = {}
    for i, container in enumerate(_container_list(pod, "containers", path, problems)):
        if type(container) is not dict and not isinstance(container, Mapping):
            problems.append(_not_a("an object", f"{path}.containers[{i}]"))
            continue
        resources = container.get("resources")
        if resources is not None:
            requests = _quantities(resources, problems, path, "containers", i)
            if total:
                _add(total, requests)
            else:
                total = requests  # the first container's own dict: most pods have one container
    init_containers = _container_list(pod, "initContainers", path, problems)
    if init_containers:
        _add_init_containers(total, init_containers, path, problems)
    pod_level = pod.get("resources")
    if pod_level is not None:
        # Pod-level resources (Kubernetes 1.32+) replace the containers' sum for the resources they name.
        for resource, value in _quantities(pod_level, problems, path).items():
            if resource in ("cpu", "memory") or resource.startswith("hugepages-"):
                total[resource] = value
    overhead = pod.get("overhead")
    if overhead is not None:
        if _is_map(overhead):
            for resource, raw in overhead.items():
                milli = _quantity(raw, f"{path}.overhead[{resource}]", problems)
                if milli is not None:
                    total[str(resource)] = total.get(str(resource), 0) + milli
        else:
            problems.append(_not_a("an object", f"{path}.overhead"))
    # Quantities are never negative, so only zeros are dropped; most pods have none, and no copy is needed then.
    return {r: q for r, q in total.items() if q > 0} if 0 in total.values() else total


def _add_init_containers(
    total: dict[str, int], init_containers: list[Any], path: str, problems: list[JobProblem]
) -> None:
    """Sidecars add to `total`; `total` then covers the peak of every init container with the sidecars before it."""
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(init_containers):
        if not _is_map(container):
            problems.append(_not_a("an object", f"{path}.initContainers[{i}]"))
            continue
        resources = container.get("resources")
        requests = {} if resources is None else _quantities(resources, problems, path, "initContainers", i)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            _max_into(init_peak, sidecars)
        else:
            during = dict(requests)
            _add(during, sidecars)
            _max_into(init_peak, during)
    _max_into(total, init_peak)


# -- the Job ------------------------------------------------------------------------------------------------------


def _pod_spec(job: Mapping[str, Any]) -> Any:
    return _mapping(_mapping(_mapping(job.get("spec")).get("template")).get("spec"))


def _not_a(kind: str, path: str) -> JobProblem:
    return JobProblem(JobProblemKind.NOT_A_JOB, path, f"{path} must be {kind}; send a valid batch/v1 Job")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _count(spec: Mapping[str, Any], key: str, problems: list[JobProblem]) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        problems.append(
            JobProblem(
                JobProblemKind.INVALID_FIELD,
                f"spec.{key}",
                f"spec.{key} is {_short(value)}; set it to a whole number of pods (0 or more)",
            )
        )
        return None
    return value


def _pod_count(parallelism: int | None, completions: int | None) -> int:
    """Pods that run at once: parallelism (default 1), never more than the completions still wanted."""
    count = 1 if parallelism is None else parallelism
    return completions if completions is not None and completions < count else count


def pod_count(job: Mapping[str, Any]) -> int:
    """How many pods a Job runs at once (a malformed count reads as its default)."""
    spec = _mapping(job.get("spec"))
    ignored: list[JobProblem] = []
    return _pod_count(_count(spec, "parallelism", ignored), _count(spec, "completions", ignored))


def _min_count(annotations: Mapping[str, Any], count: int, problems: list[JobProblem]) -> int | None:
    key = MIN_PARALLELISM if MIN_PARALLELISM in annotations else KUEUE_MIN_PARALLELISM
    raw = annotations.get(key)
    if raw is None:
        return None
    text = raw.strip() if isinstance(raw, str) else ""
    value = int(text) if text.isdecimal() and text.isascii() and len(text) <= 9 else None
    if value is not None and 1 <= value <= count:
        return value
    problems.append(
        JobProblem(
            JobProblemKind.BAD_MIN_PARALLELISM,
            f"metadata.annotations[{key}]",
            f"annotation {key} is {_short(raw)}; set it to a whole number from 1 to the Job's parallelism ({count}) "
            "to allow starting with fewer pods, or remove it to start all pods together",
        )
    )
    return None


def _is_http_url(text: str) -> bool:
    return _read_is_http_url(text) if len(text) > _CACHED_TEXT_MAX else _cached_is_http_url(text)


@lru_cache(maxsize=1024)
def _cached_is_http_url(text: str) -> bool:
    return _read_is_http_url(text)


def _read_is_http_url(text: str) -> bool:
    try:
        parts = urlsplit(text.strip())
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        return False


def checkpoint_url_problem(job: Mapping[str, Any]) -> JobProblem | None:
    return _checkpoint_url_problem(job_annotations(job))


def _checkpoint_url_problem(annotations: Mapping[str, Any]) -> JobProblem | None:
    raw = annotations.get(CHECKPOINT_URL)
    if raw is None:
        return None
    if isinstance(raw, str) and _is_http_url(raw):
        return None
    return JobProblem(
        JobProblemKind.BAD_CHECKPOINT_URL,
        f"metadata.annotations[{CHECKPOINT_URL}]",
        f"annotation {CHECKPOINT_URL} is {_short(raw)}, which is not an http:// or https:// URL; set it to the "
        "endpoint that checkpoints this Job, or remove it to use the annotation handshake",
    )


def _queue(
    names: RequestedNames, namespace: str, index: ConfigIndex
) -> tuple[str | None, str | None, JobProblem | None]:
    """(`namespace/name`, team, problem) for the queue a Job names, or its namespace's default queue."""
    name, label = names.queue, names.queue_label
    if name is None:
        name, label = index.default_queue(namespace), QUEUE_LABEL
    if name is None:
        if not index.managed(namespace):
            return None, None, None
        return (
            None,
            None,
            JobProblem(
                JobProblemKind.NO_QUEUE,
                f"metadata.labels[{QUEUE_LABEL}]",
                f"namespace {namespace} is managed by kuota and this Job names no queue; add the label "
                f"{QUEUE_LABEL}: <queue> ({index.open_queues_hint(namespace)})",
            ),
        )
    path = f"metadata.labels[{label}]"
    if not is_label_value(name):
        placeholder = " and looks like a placeholder left in" if any(c in name for c in "<> {}") else ""
        return (
            None,
            None,
            JobProblem(
                JobProblemKind.INVALID_QUEUE_NAME,
                path,
                f"label {label} is {_short(name)}, which is not a valid label value{placeholder}; set it to the name "
                f"of a queue ({index.open_queues_hint(namespace)})",
            ),
        )
    key = f"{namespace}/{name}"
    team = index.team_of_queue.get(key)
    if team is not None:
        return key, team, None
    elsewhere = index.queue_namespaces.get(name)
    if elsewhere:
        return (
            None,
            None,
            JobProblem(
                JobProblemKind.QUEUE_NOT_OPEN,
                path,
                f"queue {name!r} is not open to namespace {namespace} (only to {', '.join(elsewhere)}); "
                f"use a queue of this namespace ({index.open_queues_hint(namespace)}), "
                f"or ask your cluster admin to add {key} to a team",
            ),
        )
    return (
        None,
        None,
        JobProblem(
            JobProblemKind.UNKNOWN_QUEUE,
            path,
            f"queue {name!r} does not exist in namespace {namespace}; set label {label} to an existing queue "
            f"({index.open_queues_hint(namespace)})",
        ),
    )


class QueueResolution(NamedTuple):
    queue: str | None
    """`namespace/name` of the queue the Job goes to, or None."""
    name: str | None
    """The queue NAME, as a queue label holds it (the Job's own, or its namespace's default)."""
    team: str | None
    problem: JobProblem | None


def resolve_queue(
    job: Mapping[str, Any], config: QuotaConfig, namespace: str, names: RequestedNames | None = None
) -> QueueResolution:
    """The queue a Job goes to: the one its labels name, else its managed namespace's default queue.

    No queue and no problem means kuota does not manage the Job. `names` saves reading them again.
    """
    return queue_for(names if names is not None else requested_names(job), namespace, config_index(config))


def queue_for(names: RequestedNames, namespace: str, index: ConfigIndex) -> QueueResolution:
    """`resolve_queue` for names and an index at hand."""
    queue, team, problem = _queue(names, namespace, index)
    name = names.queue if names.queue is not None else index.default_queue(namespace)
    return QueueResolution(queue, name, team, problem)


def structure_problems(job: Any) -> list[JobProblem]:
    """What makes a body not a Job kuota can read (wrong types where objects, lists or strings belong)."""
    return job_parts(job).problems


def _created_at(metadata: Mapping[str, Any]) -> int:
    raw = metadata.get("creationTimestamp")
    return _epoch_ms(raw) if isinstance(raw, str) else 0


def _epoch_ms(raw: str) -> int:
    """RFC 3339 to Unix milliseconds, 0 when unreadable."""
    return _read_epoch_ms(raw) if len(raw) > _CACHED_TEXT_MAX else _cached_epoch_ms(raw)


@lru_cache(maxsize=256)
def _cached_epoch_ms(raw: str) -> int:
    """Cached: Jobs created together share the second."""
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


#: What a missing or mistyped part of a Job reads as; read-only, since it is shared.
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class JobParts(NamedTuple):
    """The parts of a Job the rules read, each type-checked once so that readers need not check again: a part
    of the wrong type is a problem and reads as empty."""

    metadata: Mapping[str, Any]
    labels: Mapping[str, Any]
    annotations: Mapping[str, Any]
    spec: Mapping[str, Any]
    pod: Mapping[str, Any]
    """The pod template's spec."""
    problems: list[JobProblem]


def _string_map(value: Any) -> bool:
    if type(value) is not dict and not isinstance(value, Mapping):
        return False
    # A loop rather than all() over a generator: a third of the cost, for every label and annotation map.
    for item in value.values():  # noqa: SIM110
        if not isinstance(item, str):
            return False
    return True


def _string_map_part(value: Any, path: str, problems: list[JobProblem]) -> Mapping[str, Any]:
    """Labels, annotations: a problem unless a map of strings; a map of anything still reads as itself."""
    if value is None:
        return _EMPTY
    if not _string_map(value):
        problems.append(_not_a("a map of strings", path))
        return _mapping(value)
    return value  # type: ignore[no-any-return]


# Bodies are parsed JSON, so parts are nearly always plain dicts: `type(x) is dict` is tested first, inline, on the
# paths every review takes, which skips the slower check against the Mapping ABC and a function call.


def job_parts(job: Any) -> JobParts:
    """The parts of a Job, with a problem for each part of the wrong type (all of them NOT_A_JOB)."""
    if type(job) is not dict and not isinstance(job, Mapping):
        return JobParts(_EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY, [_not_a("an object", "the object")])
    problems: list[JobProblem] = []
    metadata = job.get("metadata")
    if metadata is None:
        metadata = _EMPTY
    elif type(metadata) is not dict and not isinstance(metadata, Mapping):
        problems.append(_not_a("an object", "metadata"))
        metadata = _EMPTY
    spec = job.get("spec")
    if spec is None:
        spec = _EMPTY
    elif type(spec) is not dict and not isinstance(spec, Mapping):
        # Nothing below the spec can be read, so nothing more is checked.
        problems.append(_not_a("an object", "spec"))
        labels, annotations = _mapping(metadata.get("labels")), _mapping(metadata.get("annotations"))
        return JobParts(metadata, labels, annotations, _EMPTY, _EMPTY, problems)
    labels = _string_map_part(metadata.get("labels"), "metadata.labels", problems)
    annotations = _string_map_part(metadata.get("annotations"), "metadata.annotations", problems)
    template = spec.get("template")
    pod: Any
    if type(template) is not dict and not isinstance(template, Mapping):
        problems.append(_not_a("an object", "spec.template"))
        pod = _EMPTY
    else:
        pod = template.get("spec")
        if type(pod) is not dict and not isinstance(pod, Mapping):
            problems.append(_not_a("an object", "spec.template.spec"))
            pod = _EMPTY
    selector = pod.get("nodeSelector")
    if selector is not None and not _string_map(selector):
        problems.append(_not_a("a map of strings", "spec.template.spec.nodeSelector"))
    return JobParts(metadata, labels, annotations, spec, pod, problems)


def read_job(job: Any, index: ConfigIndex, namespace: str | None = None) -> JobReading:
    """A Job read for `convert_job`, problems and all, without building its Workload.

    `namespace` is the request's namespace when the body does not carry one (it may not on CREATE).
    """
    metadata, labels, annotations, spec, pod, problems = job_parts(job)
    if not _is_map(job):
        return JobReading(tuple(problems), _NO_NAMES, metadata, labels, annotations, None, None, None, None, None)
    names = names_in_labels(labels)
    if not namespace:
        namespace = metadata.get("namespace")
        if not isinstance(namespace, str) or not namespace:
            problems.append(
                JobProblem(
                    JobProblemKind.NO_NAMESPACE,
                    "metadata.namespace",
                    "the Job has no namespace; set metadata.namespace",
                )
            )
            return JobReading(tuple(problems), names, metadata, labels, annotations, None, None, None, None, None)
    queue, team, queue_problem = _queue(names, namespace, index)
    if queue_problem is not None:
        problems.append(queue_problem)
    elif queue is None:  # a Job kuota does not manage
        return JobReading(tuple(problems), names, metadata, labels, annotations, namespace, None, None, None, None)
    priority_class, priority_problem = priority_class_for(pod, names, index)
    if priority_problem is not None:
        problems.append(priority_problem)
    count = _pod_count(_count(spec, "parallelism", problems), _count(spec, "completions", problems))
    min_count = _min_count(annotations, count, problems)
    url_problem = _checkpoint_url_problem(annotations)
    if url_problem is not None:
        problems.append(url_problem)
    requests = _pod_requests(pod, "spec.template.spec", problems)
    for resource, milli in requests.items():
        if too_large(milli * count):  # each quantity is bounded; their sum over containers and pods is not
            problems.append(
                JobProblem(
                    JobProblemKind.BAD_QUANTITY,
                    "spec.template.spec",
                    f"this Job asks for {count} pods of {format_resource(resource, milli)} {resource} each, more "
                    f"than kuota accounts (below 2**63 milli-units of a resource per workload); ask for less",
                )
            )
    pod_set = None
    if not problems and team is not None:
        pod_set = PodSetRequest(count, min_count, requests, _mapping(pod.get("nodeSelector")))
    return JobReading(
        tuple(problems), names, metadata, labels, annotations, namespace, queue, team, priority_class, pod_set
    )


def convert_job(job: Mapping[str, Any], config: QuotaConfig, namespace: str | None = None) -> JobConversion:
    """The workload a Job asks kuota to admit, or every problem that stops it from being one.

    `namespace` is the request's namespace when the body does not carry one (it may not on CREATE). A Job that
    kuota does not manage (no queue, namespace not managed) converts to no workload and no problem.
    """
    reading = read_job(job, config_index(config), namespace)
    pod_set, team, queue = reading.pod_set, reading.team, reading.queue
    if pod_set is None or team is None or queue is None:
        return JobConversion(None, reading.problems, reading.names)
    metadata, priority_class = reading.metadata, reading.priority_class
    name = metadata.get("name") or metadata.get("generateName") or ""
    workload = Workload(
        name=f"{reading.namespace}/{name}",
        team=team,
        priority=priority_class.value if priority_class is not None else 0,
        pod_sets=(
            PodSet(
                name=POD_SET_NAME,
                count=pod_set.count,
                requests=pod_set.requests,
                min_count=pod_set.min_count,
                node_selector=dict(pod_set.node_selector),
            ),
        ),
        created_at=_created_at(metadata),
        queue=queue,
        priority_class=priority_class.name if priority_class is not None else None,
        preemptible=priority_class.preemptible if priority_class is not None else True,
        labels=dict(reading.labels),
    )
    return JobConversion(workload, (), reading.names)


def workload_from_job(job: Mapping[str, Any], config: QuotaConfig, namespace: str | None = None) -> Workload:
    """The workload of a Job kuota manages; raises JobError listing every problem otherwise.

    A Job kuota does not manage (no queue label in a namespace that is not managed) raises JobError too, with a
    NO_QUEUE problem, since it has no team to be admitted under: check `is_managed` first to tell the two apart.
    """
    conversion = convert_job(job, config, namespace)
    if conversion.workload is not None:
        return conversion.workload
    if conversion.problems:
        raise JobError(conversion.problems)
    raise JobError(
        [
            JobProblem(
                JobProblemKind.NO_QUEUE,
                f"metadata.labels[{QUEUE_LABEL}]",
                f"the Job names no queue; add the label {QUEUE_LABEL}: <queue> to have kuota admit it",
            )
        ]
    )
