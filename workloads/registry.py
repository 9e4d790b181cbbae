"""Every kind kuota knows, and the ones a deployment enables.

A kind is registered here once; the webhooks serve, and the cluster adapter watches, exactly the enabled ones. The
quota file's `jobKinds` (or `kuota serve --kinds`) enables them by kind name; `Job` alone is the default, so a
deployment asks for the API permissions of a kind only when it queues that kind.

Pods are reviewed for the kinds held back pod by pod (workloads/gates.py): a pod belongs to the first enabled such
kind that claims it (a LeaderWorkerSet's pods to LeaderWorkerSet before Pod), and to none when an object of a kind
with its own switch controls it (a Job's pods, a RayCluster's): such pods wait on their object's switch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from workloads.gates import GatedKind
from workloads.kind import JobKind
from workloads.kinds.job import JOB
from workloads.kinds.jobset import JOBSET
from workloads.kinds.kubeflow import JAXJOB, PADDLEJOB, PYTORCHJOB, TFJOB, XGBOOSTJOB
from workloads.kinds.leaderworkerset import LEADERWORKERSET
from workloads.kinds.mpijob import MPIJOB
from workloads.kinds.pod import POD
from workloads.kinds.raycluster import RAYCLUSTER
from workloads.kinds.rayjob import RAYJOB
from workloads.kinds.trainjob import TRAINJOB
from workloads.quantities import is_map, mapping

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
    LEADERWORKERSET,
    POD,
)

#: (API group, kind) of every kind held back by its own switch: their pods are never queued as pods.
_SWITCHED = frozenset((k.group, k.kind) for k in ALL if not isinstance(k, GatedKind))

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
        self.gated: tuple[GatedKind, ...] = tuple(k for k in self.kinds if isinstance(k, GatedKind))
        """The enabled kinds held back pod by pod, in registry order."""
        self._by_workload_kind: dict[str, JobKind] = {k.kind: k for k in self.kinds}
        for gated in self.gated:
            self._by_workload_kind.update(dict.fromkeys(gated.workload_kinds, gated))

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

    def for_workload(self, key_kind: str) -> JobKind | None:
        """The kind of a workload by the KIND part of its key (`PodGroup` is the Pod kind's)."""
        return self._by_workload_kind.get(key_kind)

    def claiming(self, pod: Mapping[str, Any]) -> GatedKind | None:
        """The enabled kind that holds `pod` back with kuota's scheduling gate, if any."""
        if not self.gated or _switched_owner(pod):
            return None
        return next((kind for kind in self.gated if kind.claims(pod)), None)

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


def _switched_owner(pod: Mapping[str, Any]) -> bool:
    """Whether an object of a kind with its own switch controls `pod`."""
    owners = mapping(pod.get("metadata")).get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if is_map(owner) and owner.get("controller") is True:
            group = str(owner.get("apiVersion", "")).rpartition("/")[0]
            if (group, owner.get("kind")) in _SWITCHED:
                return True
    return False


REGISTRY = Registry(ALL)


def enabled_kinds(names: Iterable[str] | None) -> Registry:
    """The registry of the kinds named (the defaults when None)."""
    return REGISTRY.enabled(DEFAULT_KINDS if names is None else names)
