"""The pods of the workloads held back pod by pod, and the objects that define them, by workload key. No I/O.

The adapter keeps one list+watch of pods (those labelled with a queue) and one of each such kind's objects (the
LeaderWorkerSets). This index answers, for a workload key, the object that defines it and the pods that are its own
(`Group`, which the kind reads), and for each event the keys it touched, so that only those are looked at again.
A key is defined by its object when the kind has objects (a LeaderWorkerSet's groups; scaling it down undefines
some), and by its pods when pods alone make it (a plain pod, a pod group).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from workloads.gates import GatedKind, Group, pod_name
from workloads.reading import split_key, workload_key
from workloads.registry import Registry

Obj = Mapping[str, Any]


def _namespace(obj: Obj) -> str:
    namespace = (obj.get("metadata") or {}).get("namespace")
    return namespace if isinstance(namespace, str) else ""


class PodGroups:
    def __init__(self, kinds: Registry) -> None:
        self.kinds = kinds
        self._pods: dict[str, dict[str, Obj]] = {}
        """Workload key → pod name → pod."""
        self._key_of: dict[tuple[str, str], str] = {}
        """(namespace, pod name) → the workload key the pod was filed under."""
        self._owners: dict[str, Obj] = {}
        """`KIND/NAMESPACE/NAME` of each defining object → the object."""
        self._defined: dict[str, str] = {}
        """Workload key → the key of the object that defines it."""

    # -- pods -------------------------------------------------------------------------------------------------

    def key_of(self, pod: Obj) -> str | None:
        """The workload key of a pod, when an enabled kind claims it and its labels say which workload."""
        kind = self.kinds.claiming(pod)
        member = kind.member(pod) if kind is not None else None
        if member is None:
            return None
        return workload_key(member.kind, _namespace(pod), member.name)

    def pod_seen(self, pod: Obj) -> set[str]:
        """File a new or changed pod; the keys it left and joined."""
        touched = self.pod_gone(pod)
        key = self.key_of(pod)
        if key is not None:
            self._pods.setdefault(key, {})[pod_name(pod)] = pod
            self._key_of[(_namespace(pod), pod_name(pod))] = key
            touched.add(key)
        return touched

    def pod_gone(self, pod: Obj) -> set[str]:
        key = self._key_of.pop((_namespace(pod), pod_name(pod)), None)
        if key is None:
            return set()
        pods = self._pods.get(key, {})
        pods.pop(pod_name(pod), None)
        if not pods:
            self._pods.pop(key, None)
        return {key}

    def pods_listed(self, items: Iterable[Obj]) -> set[str]:
        """Every pod, after a full list: the keys of the pods before and after."""
        touched = set(self._pods)
        self._pods.clear()
        self._key_of.clear()
        for pod in items:
            touched |= self.pod_seen(pod)
        return touched

    # -- the objects that define workloads --------------------------------------------------------------------

    def owner_seen(self, kind: GatedKind, obj: Obj) -> set[str]:
        """File a new or changed object; the keys of the workloads it defined before and defines now."""
        name = (obj.get("metadata") or {}).get("name")
        owner = workload_key(kind.kind, _namespace(obj), str(name))
        touched = self.owner_gone(kind, obj)
        self._owners[owner] = obj
        for group in kind.workloads_of(obj):
            key = workload_key(kind.kind, _namespace(obj), group)
            self._defined[key] = owner
            touched.add(key)
        return touched

    def owner_gone(self, kind: GatedKind, obj: Obj) -> set[str]:
        name = (obj.get("metadata") or {}).get("name")
        owner = workload_key(kind.kind, _namespace(obj), str(name))
        self._owners.pop(owner, None)
        gone = {key for key, by in self._defined.items() if by == owner}
        for key in gone:
            del self._defined[key]
        return gone

    def owners_listed(self, kind: GatedKind, items: Iterable[Obj]) -> set[str]:
        """Every object of `kind`, after a full list: the keys they defined before and define now."""
        prefix = f"{kind.kind}/"
        touched = {key for key in self._defined if key.startswith(prefix)}
        for owner in [o for o in self._owners if o.startswith(prefix)]:
            del self._owners[owner]
        self._defined = {k: v for k, v in self._defined.items() if not k.startswith(prefix)}
        for obj in items:
            touched |= self.owner_seen(kind, obj)
        return touched

    # -- reading ----------------------------------------------------------------------------------------------

    def workload_keys(self) -> set[str]:
        return set(self._pods) | set(self._defined)

    def group(self, key: str) -> Group | None:
        """The workload's object and pods; None when nothing defines it any more."""
        key_kind, namespace, name = split_key(key)
        kind = self.kinds.for_workload(key_kind)
        if not isinstance(kind, GatedKind):
            return None
        pods = tuple(self._pods.get(key, {}).values())
        if not kind.defines_workloads:
            return Group(key_kind, namespace, name, None, pods) if pods else None
        owner = self._defined.get(key)
        if owner is None:
            return None
        return Group(key_kind, namespace, name, self._owners[owner], pods)
