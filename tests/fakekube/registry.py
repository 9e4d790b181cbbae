"""The verbs, in-process: what the real apiserver does between decoding a request and answering it
(defaulting, mutating admission, create/update preparation, validation, validating admission, the storage
write, garbage collection). The HTTP layer and the fake kubelet both go through here, so both are subject to
the same rules and both produce watch events."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

from . import errors, strategies
from .jsonutil import clone
from .patch import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, PatchError, apply_patch
from .resources import JOBS, NAMESPACES, ResourceType
from .selectors import SelectorError, parse_field_selector, parse_label_selector
from .store import Compacted, ExistsInStore, NotFoundInStore, ObjectStore, VersionMismatch, object_key
from .users import UserInfo
from .webhooks import AdmissionAttributes, WebhookDispatcher

Obj = dict[str, Any]
# Aliases, because inside Registry the name `list` is the method.
Objects = list[Obj]
Warnings = list[str]

# How often an unconditional update or patch is retried when the object changes under it (during webhook
# calls); the real apiserver's GuaranteedUpdate loops the same way.
_MAX_UPDATE_ATTEMPTS = 5


def _continue_token(resource_version: int, last_key: tuple[str, str]) -> str:
    # The real token is base64 JSON {"v": "meta.k8s.io/v1", "rv": N, "start": "<key>\x00"}; clients treat it
    # as opaque, but keeping the shape costs nothing.
    start = "/".join(k for k in last_key if k) + "\x00"
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": resource_version, "start": start, "key": list(last_key)})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        namespace, name = raw["key"]
        return int(raw["rv"]), (str(namespace), str(name))
    except (ValueError, KeyError, TypeError):
        raise errors.bad_request(f"continue key is not valid: {token}") from None


_CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _patch_precondition(content_type: str, patch: Any) -> str | None:
    """A resourceVersion written in the patch itself is a precondition, as in the real apiserver."""
    if content_type == JSON_PATCH and isinstance(patch, list):
        for op in patch:
            if isinstance(op, dict) and op.get("path") == "/metadata/resourceVersion" and op.get("op") != "remove":
                return str(op.get("value"))
        return None
    if isinstance(patch, dict):
        rv = _meta(patch).get("resourceVersion")
        return str(rv) if rv else None
    return None


class Registry:
    def __init__(self, store: ObjectStore, webhooks: WebhookDispatcher, *, require_namespaces: bool = True) -> None:
        self.store = store
        self.webhooks = webhooks
        self.require_namespaces = require_namespaces

    # helpers

    def _current(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        stored = self.store.get(rt.storage, namespace if rt.namespaced else "", name)
        if stored is None:
            raise errors.not_found(rt, name)
        return rt.to_wire(stored)

    def _decode(self, rt: ResourceType, body: Any, namespace: str, name: str | None = None) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        obj = clone(body)
        # A body without kind/apiVersion takes them from the URL, as the apiserver's decoder defaults them.
        api_version = obj.setdefault("apiVersion", rt.api_version)
        kind = obj.setdefault("kind", rt.kind)
        if api_version != rt.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({rt.api_version})"
            )
        if kind != rt.kind:
            raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        if name is not None and meta.get("name") != name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        return obj

    def _require_namespace(self, rt: ResourceType, namespace: str) -> None:
        if not rt.namespaced or not self.require_namespaces:
            return
        if self.store.get(NAMESPACES.storage, "", namespace) is None:
            raise errors.namespace_not_found(namespace)

    @staticmethod
    def _options(kind: str, dry_run: bool, field_manager: str | None, extra: Obj | None = None) -> Obj:
        options: Obj = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
        if dry_run:
            options["dryRun"] = ["All"]
        if field_manager:
            options["fieldManager"] = field_manager
        options.update(extra or {})
        return options

    # reads

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        return self._current(rt, namespace, name)

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> Obj:
        try:
            label_match = parse_label_selector(label_selector)
            field_match = parse_field_selector(field_selector, rt.field_labels)
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from None
        after: tuple[str, str] | None = None
        if continue_token:
            snapshot_rv, after = _decode_continue(continue_token)
        elif resource_version_match == "Exact" and resource_version:
            if not resource_version.isdigit():
                raise errors.bad_request(f"invalid resource version: {resource_version}")
            snapshot_rv = int(resource_version)
        else:
            snapshot_rv = self.store.resource_version
        try:
            if snapshot_rv == self.store.resource_version:
                stored = self.store.list(rt.storage, namespace if rt.namespaced else None)
            else:
                stored = self.store.snapshot(rt.storage, snapshot_rv)
        except Compacted as exc:
            if continue_token and after is not None:
                fresh = _continue_token(self.store.resource_version, after)
                raise errors.expired(_CONTINUE_TOO_OLD, {"continue": fresh}) from None
            raise errors.expired(f"too old resource version: {exc.requested} ({exc.compacted})") from None
        items: Objects = []
        remaining = 0
        last_key: tuple[str, str] | None = None
        for obj in stored:
            key = object_key(obj)
            if namespace is not None and rt.namespaced and key[0] != namespace:
                continue
            if after is not None and key <= after:
                continue
            wire = rt.to_wire(obj)
            if not (label_match(_meta(wire).get("labels") or {}) and field_match(wire)):
                continue
            if limit and len(items) >= limit:
                remaining += 1
                continue
            items.append(wire)
            last_key = key
        metadata: Obj = {"resourceVersion": str(snapshot_rv)}
        if remaining and last_key is not None:
            metadata["continue"] = _continue_token(snapshot_rv, last_key)
            if not label_selector and not field_selector:
                metadata["remainingItemCount"] = remaining
        # Items of a built-in list carry no kind/apiVersion on the wire; only the list does.
        for item in items:
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": metadata, "items": items}

    # writes

    async def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Any,
        *,
        user: UserInfo,
        dry_run: bool = False,
        field_manager: str | None = None,
        warnings: Warnings | None = None,
        options_kind: str = "CreateOptions",
    ) -> Obj:
        warnings = [] if warnings is None else warnings
        obj = self._decode(rt, body, namespace)
        self._require_namespace(rt, namespace)
        strategies.apply_defaults(rt, obj)
        attrs = AdmissionAttributes(
            rt,
            "",
            "CREATE",
            namespace if rt.namespaced else "",
            str(_meta(obj).get("name") or ""),
            obj,
            None,
            user,
            dry_run,
            self._options(options_kind, dry_run, field_manager),
        )
        obj = await self.webhooks.mutate(attrs, warnings) or obj
        strategies.prepare_for_create(rt, obj, namespace)
        strategies.validate(rt, obj, None)
        name = str(obj["metadata"]["name"])
        await self.webhooks.validate(replace(attrs, obj=obj, name=name), warnings)
        key_namespace = namespace if rt.namespaced else ""
        if dry_run:
            if self.store.get(rt.storage, key_namespace, name) is not None:
                raise errors.already_exists(rt, name)
            return obj
        try:
            stored = self.store.create(rt.storage, rt.from_wire(obj))
        except ExistsInStore:
            raise errors.already_exists(rt, name) from None
        return rt.to_wire(stored)

    async def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        user: UserInfo,
        subresource: str = "",
        dry_run: bool = False,
        field_manager: str | None = None,
        warnings: Warnings | None = None,
    ) -> Obj:
        warnings = [] if warnings is None else warnings
        new = self._decode(rt, body, namespace, name)
        precondition = str(new["metadata"].get("resourceVersion") or "") or None
        options = self._options("UpdateOptions", dry_run, field_manager)
        for _ in range(_MAX_UPDATE_ATTEMPTS):
            old = self._current(rt, namespace, name)
            if precondition is not None and precondition != old["metadata"]["resourceVersion"]:
                raise errors.conflict(rt, name, errors.STALE_OBJECT)
            if new["metadata"].get("uid") and new["metadata"]["uid"] != old["metadata"].get("uid"):
                raise errors.conflict(
                    rt,
                    name,
                    f"Precondition failed: UID in precondition: {new['metadata']['uid']}, "
                    f"UID in object meta: {old['metadata'].get('uid')}",
                )
            result = await self._admit_and_write(
                rt, clone(new), old, subresource, user, dry_run, options, precondition, warnings
            )
            if result is not None:
                return result
        raise errors.conflict(rt, name, errors.STALE_OBJECT)

    async def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        patch: Any,
        content_type: str,
        *,
        user: UserInfo,
        subresource: str = "",
        dry_run: bool = False,
        field_manager: str | None = None,
        warnings: Warnings | None = None,
    ) -> tuple[Obj, bool]:
        """Returns (object, created). Server-side apply is approximated: create when absent, otherwise a merge
        patch of the applied configuration (no field ownership, nothing pruned)."""
        warnings = [] if warnings is None else warnings
        options = self._options("PatchOptions", dry_run, field_manager)
        if content_type == APPLY_PATCH:
            if not field_manager:
                raise errors.bad_request(
                    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
                )
            if self.store.get(rt.storage, namespace if rt.namespaced else "", name) is None and not subresource:
                body = self._decode(rt, patch, namespace, name)
                created = await self.create(
                    rt,
                    namespace,
                    body,
                    user=user,
                    dry_run=dry_run,
                    field_manager=field_manager,
                    warnings=warnings,
                    options_kind="PatchOptions",
                )
                return created, True
            content_type = MERGE_PATCH
        precondition = _patch_precondition(content_type, patch)
        for _ in range(_MAX_UPDATE_ATTEMPTS):
            old = self._current(rt, namespace, name)
            if precondition is not None and precondition != old["metadata"]["resourceVersion"]:
                raise errors.conflict(rt, name, errors.STALE_OBJECT)
            try:
                patched = apply_patch(content_type, old, patch)
            except PatchError as exc:
                if exc.malformed:
                    raise errors.bad_request(str(exc)) from None
                raise errors.ApiError(errors.status_object(422, "Invalid", str(exc))) from None
            patched_meta = _meta(patched)
            if patched_meta.get("name", name) != name or (
                rt.namespaced and patched_meta.get("namespace", namespace) != namespace
            ):
                raise errors.bad_request("metadata.name and metadata.namespace cannot be changed by a patch")
            patched["metadata"] = patched_meta
            result = await self._admit_and_write(
                rt, patched, old, subresource, user, dry_run, options, precondition, warnings
            )
            if result is not None:
                return result, False
        raise errors.conflict(rt, name, errors.STALE_OBJECT)

    async def _admit_and_write(
        self,
        rt: ResourceType,
        obj: Obj,
        old: Obj,
        subresource: str,
        user: UserInfo,
        dry_run: bool,
        options: Obj,
        precondition: str | None,
        warnings: Warnings,
    ) -> Obj | None:
        """The shared tail of update and patch; None means the object changed meanwhile, try again."""
        name = str(old["metadata"]["name"])
        namespace = str(old["metadata"].get("namespace") or "")
        strategies.apply_defaults(rt, obj)
        attrs = AdmissionAttributes(rt, subresource, "UPDATE", namespace, name, obj, old, user, dry_run, options)
        obj = await self.webhooks.mutate(attrs, warnings) or obj
        strategies.prepare_for_update(rt, obj, old, subresource)
        strategies.validate(rt, obj, old)
        await self.webhooks.validate(replace(attrs, obj=obj), warnings)
        if dry_run:
            obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            return obj
        try:
            stored = self.store.update(rt.storage, rt.from_wire(obj), old["metadata"]["resourceVersion"])
        except NotFoundInStore:
            raise errors.not_found(rt, name) from None
        except VersionMismatch:
            if precondition is not None:
                raise errors.conflict(rt, name, errors.STALE_OBJECT) from None
            return None
        return rt.to_wire(stored)

    async def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        *,
        user: UserInfo,
        options: Obj | None = None,
        dry_run: bool = False,
        warnings: Warnings | None = None,
    ) -> Obj:
        warnings = [] if warnings is None else warnings
        options = dict(options or {})
        old = self._current(rt, namespace, name)
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] != old["metadata"].get("uid"):
            raise errors.conflict(
                rt,
                name,
                f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                f"UID in object meta: {old['metadata'].get('uid')}",
            )
        expected_rv = preconditions.get("resourceVersion")
        if expected_rv and expected_rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(
                rt,
                name,
                f"Precondition failed: ResourceVersion in precondition: {expected_rv}, "
                f"ResourceVersion in object meta: {old['metadata']['resourceVersion']}",
            )
        wire_options = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"} | {
            k: v for k, v in options.items() if k not in ("kind", "apiVersion")
        }
        if dry_run:
            wire_options["dryRun"] = ["All"]
        attrs = AdmissionAttributes(
            rt, "", "DELETE", namespace if rt.namespaced else "", name, None, old, user, dry_run, wire_options
        )
        await self.webhooks.mutate(attrs, warnings)
        await self.webhooks.validate(attrs, warnings)
        if dry_run:
            return self._delete_response(rt, old)
        try:
            tombstone = self.store.delete(rt.storage, namespace if rt.namespaced else "", name, expected_rv or None)
        except NotFoundInStore:
            raise errors.not_found(rt, name) from None
        except VersionMismatch:
            raise errors.conflict(rt, name, errors.STALE_OBJECT) from None
        self._collect_garbage(rt, tombstone, options)
        return self._delete_response(rt, rt.to_wire(tombstone))

    @staticmethod
    def _delete_response(rt: ResourceType, obj: Obj) -> Obj:
        if rt is NAMESPACES:
            obj = clone(obj)
            obj.setdefault("status", {})["phase"] = "Terminating"
        if rt.returns_deleted_object:
            return obj
        details: Obj = {"name": obj["metadata"]["name"]}
        if rt.group:
            details["group"] = rt.group
        details["kind"] = rt.plural
        details["uid"] = obj["metadata"].get("uid", "")
        return errors.success_status(details)

    def _collect_garbage(self, rt: ResourceType, deleted: Obj, options: Obj) -> None:
        """Namespace deletion removes everything in it; otherwise dependents go unless the propagation policy
        (by default Orphan for batch/v1 Jobs, Background for the rest) says to keep them. Immediate, unlike
        the real garbage collector and namespace controller, and without admission."""
        if rt is NAMESPACES:
            doomed_namespace = deleted["metadata"]["name"]
            for storage, obj in self.store.all_objects():
                if _meta(obj).get("namespace") == doomed_namespace:
                    self._delete_quietly(storage, obj)
            return
        policy = options.get("propagationPolicy")
        if policy is None:
            policy = "Orphan" if options.get("orphanDependents") or rt is JOBS else "Background"
        if policy == "Orphan":
            return
        pending = [deleted["metadata"].get("uid")]
        while pending:
            owner_uid = pending.pop()
            for storage, obj in self.store.all_objects():
                owners = _meta(obj).get("ownerReferences") or []
                if any(ref.get("uid") == owner_uid for ref in owners) and self._delete_quietly(storage, obj):
                    pending.append(_meta(obj).get("uid"))

    def _delete_quietly(self, storage: str, obj: Obj) -> bool:
        namespace, name = object_key(obj)
        try:
            self.store.delete(storage, namespace, name)
        except NotFoundInStore:
            return False
        return True

    async def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        user: UserInfo,
        label_selector: str | None = None,
        field_selector: str | None = None,
        options: Obj | None = None,
        dry_run: bool = False,
        warnings: Warnings | None = None,
    ) -> Obj:
        listing = self.list(rt, namespace, label_selector=label_selector, field_selector=field_selector)
        deleted: Objects = []
        for item in listing["items"]:
            meta = item["metadata"]
            try:
                await self.delete(
                    rt,
                    meta.get("namespace", ""),
                    meta["name"],
                    user=user,
                    options=options,
                    dry_run=dry_run,
                    warnings=warnings,
                )
            except errors.ApiError as exc:
                if exc.code != 404:
                    raise
                continue
            deleted.append(item)
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(self.store.resource_version)},
            "items": deleted,
        }
