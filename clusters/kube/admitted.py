"""What kuota writes on an admitted object, and reads back after a restart: the flavors of each pod set, and
where each pod set (or, for kinds held back pod by pod, each pod) may run: its node selector and tolerations. Pure.

The `kuota.dev/admitted-flavor` annotation is the flavor's name when every pod set got one flavor (nearly always,
and what users read), `resource=flavor,...` for one pod set whose resources came from different flavors, and
`podset:...;podset:...` when the pod sets differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from admission.labels import ADMITTED_FLAVOR, CHECKPOINT_REQUESTED_AT, RESUME_FROM, WORKLOAD_ID
from quota.config import Flavor, QuotaConfig, Team
from quota.pod_set import PodSet
from workloads.kind import JobKind, JSONPatch, Placement, PodTemplate, Resolve, pointer

Obj = dict[str, Any]


def annotation_ops(obj: Mapping[str, Any], values: Mapping[str, str | None]) -> JSONPatch:
    """JSON patch ops that set (a string) or remove (None) annotations, against the object as it is."""
    current = (obj.get("metadata") or {}).get("annotations")
    if not isinstance(current, dict):
        present = {k: v for k, v in values.items() if v is not None}
        return [{"op": "add", "path": "/metadata/annotations", "value": present}] if present else []
    ops: JSONPatch = []
    for key, value in values.items():
        path = pointer(("metadata", "annotations", key))
        if value is None:
            if key in current:
                ops.append({"op": "remove", "path": path})
        elif current.get(key) != value:
            ops.append({"op": "add", "path": path, "value": value})
    return ops


def admission_annotations(
    key: str, flavors: Mapping[str, Mapping[str, str]], resume_from: str | None
) -> dict[str, str | None]:
    """The annotations an admission sets (None: removed): the flavors, the workload, where to resume from."""
    return {
        ADMITTED_FLAVOR: encode_admission(flavors),
        WORKLOAD_ID: key,
        RESUME_FROM: resume_from,
        CHECKPOINT_REQUESTED_AT: None,
    }


def encode_flavors(flavors: Mapping[str, str]) -> str:
    """One pod set's flavors: the flavor's name, or `resource=flavor,...` when resources differ."""
    names = set(flavors.values())
    if len(names) == 1:
        return next(iter(names))
    return ",".join(f"{resource}={flavor}" for resource, flavor in sorted(flavors.items()))


def encode_admission(flavors: Mapping[str, Mapping[str, str]]) -> str:
    """The annotation for every pod set's flavors (`none` when no pod set holds a resource with a flavor)."""
    used = {name: dict(f) for name, f in flavors.items() if f}
    if not used:
        return "none"
    names = {flavor for f in used.values() for flavor in f.values()}
    if len(names) == 1:
        return next(iter(names))
    if len(used) == 1:
        return encode_flavors(next(iter(used.values())))
    return ";".join(f"{pod_set}:{encode_flavors(f)}" for pod_set, f in sorted(used.items()))


def decode_flavors(text: str, pod_set: PodSet, team: Team | None) -> dict[str, str]:
    """One pod set's flavors from its part of the annotation."""
    if "=" in text:
        pairs = (part.split("=", 1) for part in text.split(",") if "=" in part)
        return {resource.strip(): flavor.strip() for resource, flavor in pairs}
    flavor = text.strip()
    covered: set[str] = set()
    for group in team.groups() if team is not None else ():
        if any(entry.flavor == flavor for entry in group.flavors):
            covered.update(group.covered_resources)
    return {resource: flavor for resource in pod_set.requests if resource in covered}


def decode_admission(text: str, pod_sets: Sequence[PodSet], team: Team | None) -> dict[str, dict[str, str]]:
    """Every pod set's flavors from the annotation (`none` and unknown pod sets read as no flavors)."""
    if text.strip() == "none":
        return {p.name: {} for p in pod_sets}
    if ":" not in text:
        return {p.name: decode_flavors(text, p, team) for p in pod_sets}
    parts = dict(part.split(":", 1) for part in text.split(";") if ":" in part)
    return {p.name: decode_flavors(parts[p.name], p, team) if p.name in parts else {} for p in pod_sets}


def flavor_labels(config: QuotaConfig, names: Iterable[str]) -> dict[str, str]:
    """The node labels of the flavors named."""
    by_name = {f.name: f for f in config.flavors}
    labels: dict[str, str] = {}
    for name in names:
        found = by_name.get(name)
        if found is not None:
            labels.update(found.node_labels)
    return labels


def _toleration(flavor: Flavor) -> list[Obj]:
    return [
        {
            k: v
            for k, v in (
                ("key", t.key),
                ("operator", t.operator),
                ("value", t.value),
                ("effect", t.effect),
                ("tolerationSeconds", t.toleration_seconds),
            )
            if v is not None
        }
        for t in flavor.tolerations
    ]


def placements(
    kind: JobKind,
    obj: Mapping[str, Any],
    config: QuotaConfig,
    flavors: Mapping[str, Mapping[str, str]],
    counts: Mapping[str, int],
    resolve: Resolve | None = None,
) -> dict[str, Placement]:
    """Where each pod set of `obj` runs: its own selector without any flavor's labels, plus its flavors' labels;
    its own tolerations plus its flavors'; and its admitted count. `resolve` looks up the objects a kind like
    TrainJob reads its pod sets from."""
    flavor_keys = {key for f in config.flavors for key in f.node_labels}
    by_name = {f.name: f for f in config.flavors}
    out: dict[str, Placement] = {}
    for template in kind.read_templates(obj, resolve):
        assigned = sorted(set(flavors.get(template.name, {}).values()))
        out[template.name] = _placement(template, assigned, by_name, flavor_keys, counts.get(template.name))
    return out


def pod_placement(
    pod: Mapping[str, Any], pod_set: str, config: QuotaConfig, flavors: Mapping[str, Mapping[str, str]]
) -> Placement:
    """Where one pod of an admitted workload held back pod by pod runs: its own node selector and tolerations plus
    those of its pod set's flavors (the ungate patch adds what the pod lacks)."""
    flavor_keys = {key for f in config.flavors for key in f.node_labels}
    by_name = {f.name: f for f in config.flavors}
    spec = pod.get("spec")
    template = PodTemplate(pod_set, ("spec",), spec if isinstance(spec, Mapping) else {}, 1)
    return _placement(template, sorted(set(flavors.get(pod_set, {}).values())), by_name, flavor_keys, None)


def _placement(
    template: PodTemplate,
    assigned: list[str],
    by_name: Mapping[str, Flavor],
    flavor_keys: set[str],
    count: int | None,
) -> Placement:
    own = template.spec.get("nodeSelector")
    selector = {k: v for k, v in own.items() if k not in flavor_keys} if isinstance(own, dict) else {}
    existing = template.spec.get("tolerations")
    tolerations: list[Obj] = [t for t in existing if isinstance(t, dict)] if isinstance(existing, list) else []
    for name in assigned:
        flavor = by_name.get(name)
        if flavor is None:
            continue
        selector.update(flavor.node_labels)
        for toleration in _toleration(flavor):
            if toleration not in tolerations:
                tolerations.append(toleration)
    return Placement(selector, tolerations, count if count is not None and count != template.count else None)
