"""List and watch every object of one kind, as client-go's reflector does; one reflector per enabled kind, one
per kind that enabled kinds read their pod sets from (a TrainJob's training runtimes), and one for the pods of the
kinds held back pod by pod, selected by label.

List once (paged) and hand the full set over, then watch from the list's resourceVersion with bookmarks so the
version we resume from stays fresh. A watch that ends (server timeout, dropped stream) resumes from the last
version seen; 410 Gone (the version was compacted away) means events were missed, so list again and hand over the
full set, from which the consumer works out what was deleted meanwhile. Errors back off exponentially.

Every object is handed over without `metadata.managedFields`: kuota never reads them, and they are a third of a
Job's bytes. Dropped as soon as the object is decoded, while it is still in the CPU's cache, they cost less to
free than they would when the object is replaced seconds later (15 µs a Job event decoded and kept, 10 µs with
them dropped, in a loop that keeps the last 20,000 as the controller keeps its Jobs).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import orjson
import structlog

from clusters.kube.api import Gone, KubeApi, Resource, api_error, retryable
from clusters.kube.json_lines import JsonLines

log = structlog.get_logger("kuota.kube.watch")

Obj = dict[str, Any]


class WatchExpired(Gone):
    """The resourceVersion we watch from is too old: list again, at once (a 410 from a list is an error)."""


class Reflector:
    def __init__(
        self,
        api: KubeApi,
        kind: Resource,
        on_list: Callable[[list[Obj]], None],
        on_event: Callable[[str, Obj], None],
        *,
        timeout_s: int = 300,
        backoff_s: float = 0.1,
        backoff_max_s: float = 10.0,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> None:
        self.api = api
        self.kind = kind
        self.label_selector = label_selector
        """Only the objects it selects are listed and watched (pods: only those naming a queue)."""
        self.field_selector = field_selector
        """Likewise by field (the pods bound to nodes: `spec.nodeName!=`, not yet terminated)."""
        self.on_list = on_list
        self.on_event = on_event
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.version: str | None = None
        self.lists = 0
        self.watches = 0
        self.synced = asyncio.Event()

    async def list_once(self) -> None:
        items, self.version = await self.api.list_objects(
            self.kind, label_selector=self.label_selector, field_selector=self.field_selector
        )
        self.lists += 1
        for item in items:
            _drop_managed_fields(item)
        self.on_list(items)
        self.synced.set()

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                if self.version is None:
                    await self.list_once()
                if self.version is not None:
                    await self._watch(self.version)
                failures = 0
            except asyncio.CancelledError:
                raise
            except WatchExpired:
                log.info("watch_expired_relisting", kind=self.kind.kind, version=self.version)
                self.version = None
            except Exception as exc:
                failures += 1
                if not retryable(exc) and not isinstance(exc, ValueError):
                    # Something unexpected (a 4xx, Gone from a list included): start from a fresh list rather than
                    # loop on it.
                    self.version = None
                delay = min(self.backoff_max_s, self.backoff_s * 2 ** min(failures - 1, 10)) * (0.5 + random.random())
                log.warning("watch_failed", kind=self.kind.kind, error=str(exc)[:300], retry_in_s=round(delay, 3))
                await asyncio.sleep(delay)

    async def _watch(self, version: str) -> None:
        await self.api.bucket.take()
        self.watches += 1
        response = await self.api.watch_objects(
            self.kind, version, self.timeout_s, label_selector=self.label_selector, field_selector=self.field_selector
        )
        try:
            if response.status == 410:
                raise WatchExpired(410, "")
            if response.status != 200:
                body = await response.read()
                raise api_error(response.status, body.decode("utf-8", "replace"))
            # Lines can be longer than aiohttp's readline limit (a big object), so split chunks ourselves.
            lines = JsonLines()
            async for chunk in response.content.iter_any():
                for line in lines.feed(chunk):
                    self._handle(orjson.loads(line))
        finally:
            response.release()

    def _handle(self, event: Obj) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise WatchExpired(410, str(obj.get("message", "")))
            raise api_error(int(code or 500), str(obj.get("message", "")))
        metadata = obj.get("metadata") or {}
        version = metadata.get("resourceVersion")
        if version:
            self.version = version
        metadata.pop("managedFields", None)
        if kind == "BOOKMARK":
            return
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.on_event(kind, obj)


def _drop_managed_fields(obj: Obj) -> None:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
