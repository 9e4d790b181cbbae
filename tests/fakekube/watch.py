"""Watch streams in the wire format of the real apiserver: one JSON WatchEvent per line over a chunked 200
response; replay from a resourceVersion, or synthetic ADDED events for the current state; DELETED/ADDED when
an object stops/starts matching the selectors; BOOKMARKs; an ERROR event carrying a 410 Expired Status when
the requested resourceVersion has been compacted away; a clean end of stream at timeoutSeconds or when a test
drops it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from . import errors
from .jsonutil import dumps
from .resources import ResourceType
from .store import Compacted, ObjectStore, StoredEvent, Subscription, object_key

Obj = dict[str, Any]

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_LIVENESS_CHECK_S = 0.5


class _Drop:
    """Queue item: end the stream. abrupt=True cuts the connection without the final chunk."""

    def __init__(self, abrupt: bool) -> None:
        self.abrupt = abrupt


@dataclass(frozen=True)
class _Bookmark:
    resource_version: int


@dataclass(frozen=True)
class WatchRequest:
    rt: ResourceType
    namespace: str | None
    label_match: Callable[[Any], bool]
    field_match: Callable[[Obj], bool]
    resource_version: str
    allow_bookmarks: bool
    timeout_s: float | None
    send_initial_events: bool

    def matches(self, wire: Obj) -> bool:
        return bool(self.label_match((wire.get("metadata") or {}).get("labels") or {}) and self.field_match(wire))

    def bookmark(self, resource_version: int, *, initial_events_end: bool = False) -> Obj:
        metadata: Obj = {"resourceVersion": str(resource_version)}
        if initial_events_end:
            metadata["annotations"] = {INITIAL_EVENTS_END: "true"}
        return {
            "type": "BOOKMARK",
            "object": {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": metadata},
        }

    def translate(self, event: StoredEvent) -> Obj | None:
        """The stored event as this watcher sees it (cacheWatcher.convertToWatchEvent), or None."""
        if self.namespace is not None and object_key(event.obj)[0] != self.namespace:
            return None
        current = self.rt.to_wire(event.obj) if event.type != "DELETED" else None
        previous = self.rt.to_wire(event.prev) if event.prev is not None else None
        current_passes = current is not None and self.matches(current)
        previous_passes = previous is not None and self.matches(previous)
        if current_passes and previous_passes:
            return {"type": "MODIFIED", "object": current}
        if current_passes:
            return {"type": "ADDED", "object": current}
        if previous_passes and previous is not None:
            gone = dict(previous, metadata={**previous["metadata"], "resourceVersion": str(event.rv)})
            return {"type": "DELETED", "object": gone}
        return None


def _line(event: Obj) -> bytes:
    return dumps(event) + b"\n"


class WatchHub:
    """Serves watch requests and keeps track of them, so tests can drop or bookmark every open stream."""

    def __init__(self, store: ObjectStore, bookmark_interval_s: float) -> None:
        self.store = store
        self.bookmark_interval_s = bookmark_interval_s
        self._open: set[Subscription] = set()
        self._changed = asyncio.Condition()

    @property
    def open_count(self) -> int:
        return len(self._open)

    async def wait_for_open(self, count: int, timeout_s: float) -> None:
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: len(self._open) >= count)

    async def _set_open(self, sub: Subscription, is_open: bool) -> None:
        if is_open:
            self._open.add(sub)
        else:
            self._open.discard(sub)
        async with self._changed:
            self._changed.notify_all()

    def drop_all(self, *, abrupt: bool = False) -> int:
        for sub in self._open:
            sub.queue.put_nowait(_Drop(abrupt))
        return len(self._open)

    def bookmark_all(self) -> int:
        for sub in self._open:
            sub.queue.put_nowait(_Bookmark(self.store.resource_version))
        return len(self._open)

    async def serve(self, request: web.Request, wr: WatchRequest) -> web.StreamResponse:
        rt = wr.rt
        # Subscribe before reading the backlog: both are synchronous, so nothing can slip in between.
        sub = self.store.subscribe(frozenset({rt.storage}))
        response: web.StreamResponse | None = None
        try:
            backlog, failure, initial_rv = self._backlog(wr)
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            await self._set_open(sub, True)
            if failure is not None:
                await response.write(_line({"type": "ERROR", "object": failure}))
                return response
            for event in backlog:
                await response.write(_line(event))
            if wr.send_initial_events and wr.allow_bookmarks:
                await response.write(_line(wr.bookmark(initial_rv, initial_events_end=True)))
            await self._stream(request, response, sub, wr)
            return response
        except ConnectionError:
            # The client went away, or a test cut the stream: nothing more to send.
            if response is None:
                raise
            return response
        finally:
            self.store.unsubscribe(sub)
            await self._set_open(sub, False)

    def _backlog(self, wr: WatchRequest) -> tuple[list[Obj], Obj | None, int]:
        rt, rv = wr.rt, wr.resource_version
        current_rv = self.store.resource_version
        if wr.send_initial_events or rv in ("", "0"):
            objects = self.store.list(rt.storage, wr.namespace if rt.namespaced else None)
            wires = (rt.to_wire(o) for o in objects)
            return [{"type": "ADDED", "object": w} for w in wires if wr.matches(w)], None, current_rv
        if not rv.isdigit():
            raise errors.bad_request(f"invalid resource version: {rv}")
        try:
            stored = self.store.events_since(int(rv), frozenset({rt.storage}))
        except Compacted as exc:
            # What the apiserver sends inside a 200 stream when the watch cache no longer reaches back that
            # far.
            status = errors.status_object(
                410, "Expired", f"too old resource version: {exc.requested} ({exc.compacted})"
            )
            return [], status, current_rv
        translated = (wr.translate(e) for e in stored)
        return [e for e in translated if e is not None], None, current_rv

    async def _stream(
        self, request: web.Request, response: web.StreamResponse, sub: Subscription, wr: WatchRequest
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wr.timeout_s if wr.timeout_s else None
        interval = self.bookmark_interval_s
        next_bookmark = loop.time() + interval if wr.allow_bookmarks else None
        while True:
            now = loop.time()
            # aiohttp does not cancel a handler when its client goes away, so look at the connection now and
            # then; otherwise a quiet watch would stay "open" (and counted) forever.
            waits = [t - now for t in (deadline, next_bookmark) if t is not None] + [_LIVENESS_CHECK_S]
            try:
                if not sub.queue.empty():
                    # A due bookmark makes the timeout 0, and wait_for(get(), 0) gives up before get() has run:
                    # take what is queued directly, or the stream would spin without ever delivering it.
                    item = sub.queue.get_nowait()
                else:
                    item = await asyncio.wait_for(sub.queue.get(), max(0.0, min(waits)))
            except TimeoutError:
                if request.transport is None or request.transport.is_closing():
                    return
                now = loop.time()
                if deadline is not None and now >= deadline:
                    return
                # Only bookmark an empty queue: a bookmark newer than an undelivered event would make the
                # client skip that event when it resumes from the bookmark.
                if next_bookmark is not None and now >= next_bookmark and sub.queue.empty():
                    await response.write(_line(wr.bookmark(self.store.resource_version)))
                    next_bookmark = now + interval
                continue
            if isinstance(item, _Drop):
                if item.abrupt and request.transport is not None:
                    request.transport.abort()
                    raise ConnectionResetError("watch dropped abruptly")
                return
            if isinstance(item, _Bookmark):
                if wr.allow_bookmarks:
                    await response.write(_line(wr.bookmark(item.resource_version)))
                continue
            event = wr.translate(item)
            if event is not None:
                await response.write(_line(event))
