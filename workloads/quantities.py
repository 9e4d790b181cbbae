"""A pod's requests as Kubernetes counts them, in exact milli-units, with a problem for every unreadable quantity.

Shared by every kind: whatever wraps it, a pod template is a PodSpec, and the scheduler charges it the same way.
Quantity strings are cached (the same few recur in every job); long strings never are, so that a hostile body
cannot fill the cache with megabytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any, TypeGuard

from quota.quantity import QuantityError, QuantityTooLarge, parse_quantity
from workloads.problems import JobProblem, JobProblemKind, not_a, short


def is_map(value: Any) -> TypeGuard[Mapping[str, Any]]:
    # Bodies are parsed JSON, so nearly always plain dicts, or None where a field is absent: checking those first
    # skips the ABC check, a Python-level call (absent nodeSelectors made it 1.3 % of kuota's CPU on e2e's mix).
    return type(value) is dict or (value is not None and isinstance(value, Mapping))


def mapping(value: Any) -> Mapping[str, Any]:
    """`value` when it is a mapping, else an empty one: for reading parts whose type was checked elsewhere."""
    return value if is_map(value) else {}


_QUANTITY_TYPES = (str, int, float)


CACHED_TEXT_MAX = 256
"""Longer strings are read every time: caches of what users send must not hold megabytes of it."""


def _milli(raw: str | int | float) -> int | None:
    """A quantity's milli-units, None when it is not one or is negative."""
    if type(raw) is str and len(raw) > CACHED_TEXT_MAX:
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


def quantity(raw: Any, path: str, problems: list[JobProblem]) -> int | None:
    """One quantity in milli-units, or None with a problem saying why it is not one (for the field at `path`)."""
    milli = _milli(raw) if type(raw) in _QUANTITY_TYPES else None
    if milli is None:
        problems.append(_quantity_problem(raw, path))
    return milli


def _quantity_problem(raw: Any, path: str) -> JobProblem:
    if type(raw) in _QUANTITY_TYPES and str(raw).strip().startswith("-"):
        return JobProblem(
            JobProblemKind.BAD_QUANTITY, path, f"{path} is {short(raw)}, which is negative; give 0 or more"
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
        f"{path} is {short(raw)}, which is not a Kubernetes quantity; use one such as 500m, 2, 1.5 or 4Gi",
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
        problems.append(not_a("an object", _resources_path(path, key, index)))
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
        problems.append(not_a("an object", f"{_resources_path(path, key, index)}.{part}"))
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
        problems.append(not_a("a list", f"{path}.{key}"))
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
    return pod_requests_into(pod, path, problems), problems


def pod_requests_into(pod: Mapping[str, Any], path: str, problems: list[JobProblem]) -> dict[str, int]:
    total: dict[str, int] = {}
    for i, container in enumerate(_container_list(pod, "containers", path, problems)):
        if type(container) is not dict and not isinstance(container, Mapping):
            problems.append(not_a("an object", f"{path}.containers[{i}]"))
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
        if is_map(overhead):
            for resource, raw in overhead.items():
                milli = quantity(raw, f"{path}.overhead[{resource}]", problems)
                if milli is not None:
                    total[str(resource)] = total.get(str(resource), 0) + milli
        else:
            problems.append(not_a("an object", f"{path}.overhead"))
    # Quantities are never negative, so only zeros are dropped; most pods have none, and no copy is needed then.
    return {r: q for r, q in total.items() if q > 0} if 0 in total.values() else total


def _add_init_containers(
    total: dict[str, int], init_containers: list[Any], path: str, problems: list[JobProblem]
) -> None:
    """Sidecars add to `total`; `total` then covers the peak of every init container with the sidecars before it."""
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(init_containers):
        if not is_map(container):
            problems.append(not_a("an object", f"{path}.initContainers[{i}]"))
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
