"""An in-memory object store that behaves like etcd underneath the apiserver: one global, monotonically
increasing resourceVersion, compare-and-swap writes, a bounded event history (watch replay, consistent paged
lists) and compaction.

Every method is synchronous: under asyncio that makes each write atomic, and makes "publish to watchers"
happen in the same step as the write, so a watcher that subscribed before a write can never miss it."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .jsonutil import clone

Obj = dict[str, Any]
ObjKey = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped objects
# Aliases, because inside ObjectStore the name `list` is the method.
Objects = list[Obj]
StoredObjects = list[tuple[str, Obj]]


class StoreError(Exception):
    pass


class NotFoundInStore(StoreError):
    pass


class ExistsInStore(StoreError):
    pass


class VersionMismatch(StoreError):
    def __init__(self, current: Obj) -> None:
        super().__init__("resourceVersion mismatch")
        self.current = current


class Compacted(StoreError):
    def __init__(self, requested: int, compacted: int) -> None:
        super().__init__(f"too old resource version: {requested} ({compacted})")
        self.requested = requested
        self.compacted = compacted


@dataclass(frozen=True)
class StoredEvent:
    """One write. `obj` is the state after the write (for DELETED: the last state, stamped with the deletion's
    resourceVersion, as etcd reports it); `prev` is the state before (None for ADDED). Shared between
    watchers: never mutate."""

    rv: int
    storage: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: Obj
    prev: Obj | None


EventList = list[StoredEvent]


@dataclass(eq=False)
class Subscription:
    """What a watcher or controller gets: every StoredEvent from the moment of subscribing, plus whatever
    control items the server puts in (drop, bookmark)."""

    storages: frozenset[str] | None
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)

    def wants(self, storage: str) -> bool:
        return self.storages is None or storage in self.storages


def object_key(obj: Obj) -> ObjKey:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta["name"]


def _without_rv(obj: Obj) -> Obj:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


class ObjectStore:
    def __init__(self, history_limit: int = 10_000, first_resource_version: int = 1000) -> None:
        self.history_limit = history_limit
        self._rv = first_resource_version
        # Everything at or below this resourceVersion is forgotten: watches and continue tokens from before it
        # get 410 Expired.
        self._compacted_rv = first_resource_version
        self._objects: dict[str, dict[ObjKey, Obj]] = {}
        self._history: deque[StoredEvent] = deque()
        self._subscriptions: set[Subscription] = set()
        self._last_write: dict[str, int] = {}

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def compacted_resource_version(self) -> int:
        return self._compacted_rv

    # reads

    def get(self, storage: str, namespace: str, name: str) -> Obj | None:
        obj = self._objects.get(storage, {}).get((namespace, name))
        return clone(obj) if obj is not None else None

    def peek(self, storage: str, namespace: str, name: str) -> Obj | None:
        """The stored object itself, not a copy: read it, never change it."""
        return self._objects.get(storage, {}).get((namespace, name))

    def last_write(self, storage: str) -> int:
        """The resourceVersion of the latest write to a storage (0 before the first): a cache key."""
        return self._last_write.get(storage, 0)

    def list(self, storage: str, namespace: str | None = None) -> Objects:
        """Current objects in key order (namespace, name), like an etcd range read."""
        objects = self._objects.get(storage, {})
        return [clone(objects[key]) for key in sorted(objects) if namespace is None or key[0] == namespace]

    def snapshot(self, storage: str, resource_version: int) -> Objects:
        """The objects as they were at resource_version, rebuilt by undoing newer history (what etcd's MVCC
        gives a paged list). Raises Compacted when that history is gone."""
        if resource_version < self._compacted_rv:
            raise Compacted(resource_version, self._compacted_rv)
        state = dict(self._objects.get(storage, {}))
        for event in reversed(self._history):
            if event.rv <= resource_version:
                break
            if event.storage != storage:
                continue
            key = object_key(event.obj)
            if event.prev is None:
                state.pop(key, None)
            else:
                state[key] = event.prev
        return [clone(state[key]) for key in sorted(state)]

    def events_since(self, resource_version: int, storages: frozenset[str] | None = None) -> EventList:
        if resource_version < self._compacted_rv:
            raise Compacted(resource_version, self._compacted_rv)
        return [e for e in self._history if e.rv > resource_version and (storages is None or e.storage in storages)]

    # writes

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def create(self, storage: str, obj: Obj) -> Obj:
        key = object_key(obj)
        objects = self._objects.setdefault(storage, {})
        if key in objects:
            raise ExistsInStore(key)
        stored = clone(obj)
        stored["metadata"]["resourceVersion"] = str(self._next_rv())
        objects[key] = stored
        self._record(StoredEvent(self._rv, storage, "ADDED", stored, None))
        return clone(stored)

    def update(self, storage: str, obj: Obj, expected_rv: str | None) -> Obj:
        """Compare-and-swap on resourceVersion when expected_rv is given. A write that changes nothing is not
        a write (no new resourceVersion, no watch event), as in the real apiserver."""
        key = object_key(obj)
        objects = self._objects.get(storage, {})
        current = objects.get(key)
        if current is None:
            raise NotFoundInStore(key)
        if expected_rv is not None and current["metadata"]["resourceVersion"] != expected_rv:
            raise VersionMismatch(clone(current))
        if _without_rv(obj) == _without_rv(current):
            return clone(current)
        stored = clone(obj)
        stored["metadata"]["resourceVersion"] = str(self._next_rv())
        objects[key] = stored
        self._record(StoredEvent(self._rv, storage, "MODIFIED", stored, current))
        return clone(stored)

    def delete(self, storage: str, namespace: str, name: str, expected_rv: str | None = None) -> Obj:
        objects = self._objects.get(storage, {})
        current = objects.get((namespace, name))
        if current is None:
            raise NotFoundInStore((namespace, name))
        if expected_rv is not None and current["metadata"]["resourceVersion"] != expected_rv:
            raise VersionMismatch(clone(current))
        del objects[(namespace, name)]
        tombstone = clone(current)
        tombstone["metadata"]["resourceVersion"] = str(self._next_rv())
        self._record(StoredEvent(self._rv, storage, "DELETED", tombstone, current))
        return clone(tombstone)

    def _record(self, event: StoredEvent) -> None:
        self._last_write[event.storage] = event.rv
        self._history.append(event)
        while len(self._history) > self.history_limit:
            self._compacted_rv = self._history.popleft().rv
        for sub in self._subscriptions:
            if sub.wants(event.storage):
                sub.queue.put_nowait(event)

    def compact(self, resource_version: int | None = None) -> int:
        """Forget history up to and including resource_version (default: everything so far)."""
        target = self._rv if resource_version is None else min(resource_version, self._rv)
        while self._history and self._history[0].rv <= target:
            self._history.popleft()
        self._compacted_rv = max(self._compacted_rv, target)
        return self._compacted_rv

    def all_objects(self) -> StoredObjects:
        """(storage, object) for every stored object, for garbage collection across kinds. The objects are the
        stored ones, not copies: read them, never change them."""
        return [(storage, obj) for storage, objects in self._objects.items() for obj in objects.values()]

    # watchers

    def subscribe(
        self, storages: frozenset[str] | None = None, queue: asyncio.Queue[Any] | None = None
    ) -> Subscription:
        sub = Subscription(storages) if queue is None else Subscription(storages, queue)
        self._subscriptions.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subscriptions.discard(sub)
