"""Label selectors (query-string and metav1.LabelSelector forms) and field selectors."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
Labels = Mapping[str, str]
Predicate = Callable[[Labels], bool]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")
_EQUALITY = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_COMPARE = re.compile(rf"^\s*({_KEY})\s*(<|>)\s*(-?\d+)\s*$")


class SelectorError(ValueError):
    pass


def _split_requirements(text: str) -> list[str]:
    """Split on commas that are not inside `in (...)` value lists."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _requirement(text: str) -> Predicate:
    if m := _EXISTS.match(text):
        negate, key = m.group(1) == "!", m.group(2)
        return (lambda labels: key not in labels) if negate else (lambda labels: key in labels)
    if m := _EQUALITY.match(text):
        key, op, value = m.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _SET.match(text):
        key, op, raw = m.groups()
        values = {v.strip() for v in raw.split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _COMPARE.match(text):
        key, op, bound = m.group(1), m.group(2), int(m.group(3))

        def compare(labels: Labels) -> bool:
            try:
                number = int(labels[key])
            except (KeyError, ValueError):
                return False
            return number > bound if op == ">" else number < bound

        return compare
    raise SelectorError(f"unable to parse requirement: {text.strip()!r}")


def parse_label_selector(text: str | None) -> Predicate:
    """`app=x,tier!=db,env in (a,b),!legacy`; an empty selector matches everything."""
    if not text:
        return lambda labels: True
    predicates = [_requirement(part) for part in _split_requirements(text)]
    return lambda labels: all(p(labels) for p in predicates)


def match_label_selector(selector: Obj | None, labels: Labels) -> bool:
    """metav1.LabelSelector; None and {} both select everything, as for webhook namespace/object selectors."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    value: str
    negate: bool

    def matches(self, obj: Obj) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negate


def field_value(obj: Obj, path: str) -> str:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, dict):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def parse_field_selector(text: str | None, supported: frozenset[str]) -> Callable[[Obj], bool]:
    if not text:
        return lambda obj: True
    requirements: list[FieldRequirement] = []
    for part in text.split(","):
        if not part.strip():
            continue
        m = re.match(r"^\s*([A-Za-z0-9.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        path, op, value = m.groups()
        if path not in supported:
            raise SelectorError(f"field label not supported: {path}")
        requirements.append(FieldRequirement(path, value, op == "!="))
    return lambda obj: all(r.matches(obj) for r in requirements)
