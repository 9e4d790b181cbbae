"""JSON helpers on the server's hot paths: orjson where the data allows, the standard library otherwise.

Stored objects are JSON documents, so a round trip through orjson is a deep copy, several times faster than
copy.deepcopy; whatever orjson refuses (integers beyond 64 bits, non-string keys) falls back to the slow way.
"""

from __future__ import annotations

import copy
import json
from typing import Any, TypeVar

import orjson

T = TypeVar("T")


def clone(value: T) -> T:
    """A deep copy of JSON-like data."""
    try:
        copied: T = orjson.loads(orjson.dumps(value))
    except TypeError:
        return copy.deepcopy(value)
    return copied


def dumps(value: Any) -> bytes:
    """Compact JSON, as `json.dumps(value, separators=(",", ":"))` writes it."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()


def loads(raw: bytes | str) -> Any:
    """Raises ValueError on bad JSON."""
    return orjson.loads(raw)
