"""The three PATCH content types: JSON merge patch (RFC 7386), an approximation of strategic merge patch, and
JSON patch (RFC 6902).

JSON patch is implemented here rather than taken from the `jsonpatch` package because that package is not
among the project's declared dependencies (it is only present as a dependency of something else)."""

from __future__ import annotations

from typing import Any

from .jsonutil import clone

Obj = dict[str, Any]


class PatchError(ValueError):
    """The patch could not be applied (the apiserver answers 422) or decoded (400)."""

    def __init__(self, message: str, *, malformed: bool = False) -> None:
        super().__init__(message)
        self.malformed = malformed


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else (lists included) replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# patchMergeKey of the list fields a Job/Pod/Event/Lease test is likely to patch. The real apiserver reads
# these from the Go struct tags; keying on the field name alone is close enough for these kinds.
STRATEGIC_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "schedulingGates": "name",
    "resourceClaims": "name",
}
# Lists of scalars whose patch strategy is merge (union) rather than replace.
STRATEGIC_SET_LISTS = {"finalizers"}


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Merge patch plus: lists with a known merge key are merged element by element, `$patch: delete` removes
    an element, `$patch: replace` replaces a map, `$deleteFromPrimitiveList/<field>` removes scalars, and the
    `$setElementOrder/...` and `$retainKeys` directives are accepted and ignored."""
    if not isinstance(patch, dict):
        return clone(patch)
    if patch.get("$patch") == "replace":
        return {k: clone(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field_name = key.split("/", 1)[1]
            result[field_name] = [v for v in result.get(field_name) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_list(key, result[key], value)
        else:
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    return result


def _merge_list(field_name: str, current: list[Any], patch: list[Any]) -> list[Any]:
    if field_name in STRATEGIC_SET_LISTS:
        return list(current) + [v for v in patch if v not in current]
    merge_key = STRATEGIC_MERGE_KEYS.get(field_name)
    if merge_key is None or not all(isinstance(item, dict) for item in patch):
        return clone(patch)
    merged = [clone(item) for item in current]
    for item in patch:
        if item.get("$patch") == "replace":
            return [clone({k: v for k, v in i.items() if k != "$patch"}) for i in patch]
        index = next(
            (
                i
                for i, existing in enumerate(merged)
                if isinstance(existing, dict) and existing.get(merge_key) == item.get(merge_key)
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                merged.pop(index)
        elif index is None:
            merged.append(strategic_merge_patch({}, item))
        else:
            merged[index] = strategic_merge_patch(merged[index], item)
    return merged


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split_pointer(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {pointer!r}", malformed=True)
    return [_unescape(t) for t in pointer[1:].split("/")]


def _list_index(container: list[Any], token: str, *, for_insert: bool) -> int:
    if token == "-" and for_insert:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if for_insert else len(container) - 1
    if index > limit:
        raise PatchError(f"array index {index} out of bounds")
    return index


def _parent(doc: Any, tokens: list[str]) -> Any:
    current = doc
    for token in tokens[:-1]:
        if isinstance(current, dict):
            if token not in current:
                raise PatchError(f"path component {token!r} does not exist")
            current = current[token]
        elif isinstance(current, list):
            current = current[_list_index(current, token, for_insert=False)]
        else:
            raise PatchError(f"path component {token!r} is not a container")
    return current


def _get(doc: Any, pointer: str) -> Any:
    tokens = _split_pointer(pointer)
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path {pointer!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_list_index(parent, last, for_insert=False)]
    raise PatchError(f"path {pointer!r} does not exist")


def _add(doc: Any, pointer: str, value: Any) -> Any:
    tokens = _split_pointer(pointer)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_list_index(parent, last, for_insert=True), value)
    else:
        raise PatchError(f"cannot add at {pointer!r}")
    return doc


def _remove(doc: Any, pointer: str) -> tuple[Any, Any]:
    tokens = _split_pointer(pointer)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"unable to remove nonexistent key: {last}: missing value")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_list_index(parent, last, for_insert=False))
    raise PatchError(f"cannot remove {pointer!r}")


def json_patch(document: Any, operations: Any) -> Any:
    """RFC 6902. The document is not modified; a patched copy is returned."""
    if not isinstance(operations, list):
        raise PatchError("json patch must be a list of operations", malformed=True)
    doc = clone(document)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid json patch operation: {op!r}", malformed=True)
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {kind} at {path} needs a value", malformed=True)
        if kind == "add":
            doc = _add(doc, path, clone(op["value"]))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            if _split_pointer(path):
                doc, _ = _remove(doc, path)
            doc = _add(doc, path, clone(op["value"]))
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise PatchError(f"operation {kind} needs 'from'", malformed=True)
            if kind == "move":
                if path.startswith(op["from"] + "/"):
                    raise PatchError("cannot move a value into one of its children")
                doc, value = _remove(doc, op["from"])
            else:
                value = clone(_get(doc, op["from"]))
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchError(f"testing value {path} failed")
        else:
            raise PatchError(f"unexpected kind of operation: {kind}", malformed=True)
    return doc


MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH, APPLY_PATCH)


def apply_patch(content_type: str, target: Obj, patch: Any) -> Obj:
    if content_type == JSON_PATCH:
        result = json_patch(target, patch)
    elif not isinstance(patch, dict):
        raise PatchError("a merge patch must be a JSON object", malformed=True)
    elif content_type == STRATEGIC_MERGE_PATCH:
        result = strategic_merge_patch(target, patch)
    else:
        result = merge_patch(target, patch)
    if not isinstance(result, dict):
        raise PatchError("the patched document is not an object")
    return result
