"""Every kind kuota knows, and the ones a deployment enables.

A kind is registered here once; the webhooks serve, and the cluster adapter watches, exactly the enabled ones. The
quota file's `jobKinds` (or `kuota serve --kinds`) enables them by kind name; `Job` alone is the default, so a
deployment asks for the API permissions of a kind only when it queues that kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

from workloads.kind import JobKind
from workloads.kinds.job import JOB
from workloads.kinds.jobset import JOBSET
from workloads.kinds.kubeflow import JAXJOB, PADDLEJOB, PYTORCHJOB, TFJOB, XGBOOSTJOB
from workloads.kinds.mpijob import MPIJOB
from workloads.kinds.raycluster import RAYCLUSTER
from workloads.kinds.rayjob import RAYJOB
from workloads.kinds.trainjob import TRAINJOB

#: Every kind, in the order listings show them.
ALL: tuple[JobKind, ...] = (
    JOB,
    JOBSET,
    PYTORCHJOB,
    TFJOB,
    XGBOOSTJOB,
    PADDLEJOB,
    JAXJOB,
    MPIJOB,
    TRAINJOB,
    RAYJOB,
    RAYCLUSTER,
)

DEFAULT_KINDS: tuple[str, ...] = ("Job",)


class UnknownKind(ValueError):
    """A kind name no module implements."""


class Registry:
    """A set of kinds, looked up by kind name, by API resource (for webhook paths) or by group/version/kind."""

    def __init__(self, kinds: Iterable[JobKind]) -> None:
        self.kinds: tuple[JobKind, ...] = tuple(kinds)
        self._by_name: Mapping[str, JobKind] = MappingProxyType({k.kind: k for k in self.kinds})
        self._by_resource = {(k.group, k.version, k.plural): k for k in self.kinds}
        self._by_gvk = {(k.group, k.version, k.kind): k for k in self.kinds}

    def __iter__(self) -> Iterator[JobKind]:
        return iter(self.kinds)

    def __len__(self) -> int:
        return len(self.kinds)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def get(self, name: str) -> JobKind | None:
        return self._by_name.get(name)

    def by_resource(self, group: str, version: str, plural: str) -> JobKind | None:
        return self._by_resource.get((group, version, plural))

    def by_gvk(self, group: str, version: str, kind: str) -> JobKind | None:
        return self._by_gvk.get((group, version, kind))

    def enabled(self, names: Iterable[str]) -> Registry:
        """The kinds named, in registry order; raises UnknownKind naming the known ones for a name none has."""
        wanted = list(dict.fromkeys(n.strip() for n in names if n.strip()))
        unknown = [n for n in wanted if n not in self._by_name]
        if unknown:
            raise UnknownKind(
                f"unknown job kind{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                f"kuota queues: {', '.join(self._by_name)}"
            )
        return Registry(k for k in self.kinds if k.kind in wanted)


REGISTRY = Registry(ALL)


def enabled_kinds(names: Iterable[str] | None) -> Registry:
    """The registry of the kinds named (the defaults when None)."""
    return REGISTRY.enabled(DEFAULT_KINDS if names is None else names)
