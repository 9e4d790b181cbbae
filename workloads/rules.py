"""The rules every kind shares: which queue and team a job goes to, its priority class, its annotations.

A job of any kind names its queue and priority class in its own labels (kuota's spellings first, then Kueue's), or
gets its managed namespace's default queue and the configured default class; the quota file is indexed once per
version so these lookups cost a dictionary access per job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from admission.labels import (
    CHECKPOINT_URL,
    EXPECTED_RUNTIME,
    KUEUE_MIN_PARALLELISM,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    MIN_PARALLELISM,
    PRIORITY_LABEL,
    QUEUE_LABEL,
)
from quota.config import Namespace, PriorityClass, QuotaConfig
from quota.duration import DurationError, parse_duration_ms
from workloads.problems import JobProblem, JobProblemKind, short
from workloads.quantities import CACHED_TEXT_MAX, mapping

_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


class RequestedNames(NamedTuple):
    """The queue and priority class a Job names in its labels (kuota's labels first, then Kueue's).

    These small results are named tuples rather than dataclasses: they are made for every Job the webhooks see.
    """

    queue: str | None
    queue_label: str | None
    priority_class: str | None
    priority_label: str | None


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
    topology_levels: frozenset[str] = frozenset()
    """Every level of every topology: a pod set's topology wish must name one."""

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
            topology_levels=frozenset(level for t in config.topologies for level in t.levels),
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


def job_labels(job: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(mapping(job.get("metadata")).get("labels"))


def job_annotations(job: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(mapping(job.get("metadata")).get("annotations"))


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
    namespace = mapping(job.get("metadata")).get("namespace")
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


def min_count(
    annotations: Mapping[str, Any], count: int, problems: list[JobProblem], scaled: str | None = "the Job's parallelism"
) -> int | None:
    """The smallest pod count a job accepts to start with (partial admission), from its annotation.

    `scaled` names what kuota lowers when it admits fewer pods; None when the kind cannot start partially, which
    makes the annotation a problem rather than a promise kuota would not keep.
    """
    key = MIN_PARALLELISM if MIN_PARALLELISM in annotations else KUEUE_MIN_PARALLELISM
    raw = annotations.get(key)
    if raw is None:
        return None
    text = raw.strip() if isinstance(raw, str) else ""
    value = int(text) if text.isdecimal() and text.isascii() and len(text) <= 9 else None
    if scaled is None:
        problems.append(
            JobProblem(
                JobProblemKind.BAD_MIN_PARALLELISM,
                f"metadata.annotations[{key}]",
                f"annotation {key} asks for partial admission, which this kind of job does not support (its pods "
                "start together or not at all); remove the annotation",
            )
        )
        return None
    if value is not None and 1 <= value <= count:
        return value
    problems.append(
        JobProblem(
            JobProblemKind.BAD_MIN_PARALLELISM,
            f"metadata.annotations[{key}]",
            f"annotation {key} is {short(raw)}; set it to a whole number from 1 to {scaled} ({count}) "
            "to allow starting with fewer pods, or remove it to start all pods together",
        )
    )
    return None


def expected_runtime(annotations: Mapping[str, Any], problems: list[JobProblem] | None = None) -> int | None:
    """What the job says it will run, in milliseconds (`kuota.dev/expected-runtime: 6h`), bounded as every duration
    kuota reads; a value that is not a duration is a problem (when `problems` collects them) and reads as none."""
    raw = annotations.get(EXPECTED_RUNTIME)
    if raw is None:
        return None
    try:
        if not isinstance(raw, str):
            raise DurationError(f"{short(raw)} is not a duration")
        value = parse_duration_ms(raw)
    except DurationError as exc:
        if problems is not None:
            problems.append(
                JobProblem(
                    JobProblemKind.BAD_EXPECTED_RUNTIME,
                    f"metadata.annotations[{EXPECTED_RUNTIME}]",
                    f"annotation {EXPECTED_RUNTIME}: {exc}; set it to how long the job runs (examples: 90m, 6h, "
                    "1h30m) or remove it",
                )
            )
        return None
    return value


def _is_http_url(text: str) -> bool:
    return _read_is_http_url(text) if len(text) > CACHED_TEXT_MAX else _cached_is_http_url(text)


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
    return annotations_checkpoint_problem(job_annotations(job))


def annotations_checkpoint_problem(annotations: Mapping[str, Any]) -> JobProblem | None:
    raw = annotations.get(CHECKPOINT_URL)
    if raw is None:
        return None
    if isinstance(raw, str) and _is_http_url(raw):
        return None
    return JobProblem(
        JobProblemKind.BAD_CHECKPOINT_URL,
        f"metadata.annotations[{CHECKPOINT_URL}]",
        f"annotation {CHECKPOINT_URL} is {short(raw)}, which is not an http:// or https:// URL; set it to the "
        "endpoint that checkpoints this Job, or remove it to use the annotation handshake",
    )


def queue_of(
    names: RequestedNames, namespace: str, index: ConfigIndex, noun: str = "Job"
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
                f"namespace {namespace} is managed by kuota and this {noun} names no queue; add the label "
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
                f"label {label} is {short(name)}, which is not a valid label value{placeholder}; set it to the name "
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
    queue, team, problem = queue_of(names, namespace, index)
    name = names.queue if names.queue is not None else index.default_queue(namespace)
    return QueueResolution(queue, name, team, problem)
