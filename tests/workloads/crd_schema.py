"""Checking an object against its CRD's structural schema, as the API server would before storing it.

The subset of OpenAPI v3 that controller-gen writes: types, properties (a field the schema does not name would be
pruned or refused), additionalProperties, items, required, enum, minimum, maxItems, int-or-string, embedded
resources and list-maps whose keys must be unique. CEL rules are not evaluated.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


@functools.cache
def crd_schema(path: Path, version: str) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(path.read_text(), Loader=loader)
    (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema: dict[str, Any] = found["schema"]["openAPIV3Schema"]
    return schema


def schema_errors(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """Every place where `value` breaks `schema`, as `path: what`; empty when the API server would take it."""
    if value is None:
        return [] if schema.get("nullable") else [f"{where or '.'}: null where {schema.get('type')} goes"]
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
        return [] if ok else [f"{where}: {value!r} is neither an integer nor a string"]
    kind = schema.get("type")
    if kind is not None:
        wanted = _TYPES[kind]
        if not isinstance(value, wanted) or (isinstance(value, bool) and kind in ("integer", "number")):
            return [f"{where or '.'}: {value!r} is not of type {kind}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{where}: {value!r} is below {schema['minimum']}")
    if isinstance(value, dict):
        errors += _object_errors(value, schema, where)
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: {len(value)} items, more than {schema['maxItems']}")
        keys = schema.get("x-kubernetes-list-map-keys")
        if keys:
            seen = [tuple(item.get(k) for k in keys) for item in value if isinstance(item, dict)]
            if len(set(seen)) != len(seen):
                errors.append(f"{where}: list-map keys {keys} repeat")
        for i, item in enumerate(value):
            errors += schema_errors(item, schema.get("items", {}), f"{where}[{i}]")
    return errors


def _object_errors(value: dict[str, Any], schema: dict[str, Any], where: str) -> list[str]:
    errors = [f"{where}.{name}: required" for name in schema.get("required", ()) if name not in value]
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    for name, item in value.items():
        here = f"{where}.{name}"
        if properties is not None and name in properties:
            errors += schema_errors(item, properties[name], here)
        elif isinstance(extra, dict):
            errors += schema_errors(item, extra, here)
        elif properties is not None and not _kept(schema, name):
            errors.append(f"{here}: not a field of the schema")
    return errors


def _kept(schema: dict[str, Any], name: str) -> bool:
    """A field the schema does not name that the API server keeps all the same."""
    embedded = schema.get("x-kubernetes-embedded-resource") and name in ("apiVersion", "kind", "metadata")
    return bool(schema.get("x-kubernetes-preserve-unknown-fields") or embedded)
