"""Convert Kueue manifests into a kuota team-quota file (a QuotaConfig body).

Pure: it takes already-parsed YAML documents and returns a plain dict plus warnings; reading files, printing
and validating the result belong to `kuota import-kueue`. Everything kuota cannot express becomes a warning
naming the object, the field and what kuota does instead: a silent drop would change admission unseen.

NVIDIA knavigator ships its Kueue objects as Go templates driven by workflow files, so the small Go-template
subset those files use (`{{.x}}`, `{{- if}}`, `{{- range $k, $v := .m}}`, `{{- with}}`, trim markers) is here.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

import yaml

from quota.config import (
    BorrowPolicy,
    FungibilityPolicy,
    FungibilityPreference,
    PreemptionStrategy,
    QueueingStrategy,
    ReclaimPolicy,
    WithinTeamPolicy,
)
from quota.quantity import MILLI, QuantityError, parse_quantity
from quota.rules import is_dns_label, split_queue
from workloads.registry import REGISTRY

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_CONFIG_GROUP = "config.kueue.x-k8s.io"
#: The Kueue kinds the importer converts, in the order their sections appear in the output.
KUEUE_KINDS = ("Topology", "ResourceFlavor", "WorkloadPriorityClass", "Cohort", "ClusterQueue", "LocalQueue")
_KNOWN_VERSIONS = ("v1alpha1", "v1beta1", "v1beta2")
_KINDS = frozenset(KUEUE_KINDS)

Doc = dict[str, Any]


class KueueImportError(ValueError):
    """Input that is not a usable Kueue object (a missing name, a quantity that is not one…)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class TemplateError(ValueError):
    """A Go template that cannot be rendered: unset placeholders or constructs outside the subset."""


@dataclass(frozen=True)
class ImportResult:
    config: Doc
    warnings: list[str]


# ------------------------------------------------------------------------------------------------------------
# Documents


@dataclass
class _Object:
    kind: str
    version: str
    name: str
    namespace: str | None
    spec: dict[str, Any]
    body: dict[str, Any]

    @property
    def label(self) -> str:
        name = f"{self.namespace}/{self.name}" if self.namespace is not None else self.name
        return f"{self.kind} {name}"


def flatten_documents(documents: Iterable[Any]) -> Iterator[Any]:
    """Unwrap `kind: List` (and `kind: FooList`) into their items, the shape `kubectl get -o yaml` prints."""
    for doc in documents:
        if isinstance(doc, Mapping) and str(doc.get("kind", "")).endswith("List") and "items" in doc:
            items = doc.get("items") or []
            yield from flatten_documents(items if isinstance(items, list) else [items])
        else:
            yield doc


def _group_version(doc: Mapping[str, Any]) -> tuple[str, str]:
    api_version = str(doc.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    return group, version


def _is_kueue_object(doc: Mapping[str, Any]) -> bool:
    return _group_version(doc)[0] == KUEUE_GROUP and doc.get("kind") in KUEUE_KINDS


def _is_kueue_configuration(doc: Mapping[str, Any]) -> bool:
    return _group_version(doc)[0] == KUEUE_CONFIG_GROUP and doc.get("kind") == "Configuration"


# ------------------------------------------------------------------------------------------------------------
# Names


def _to_label(name: str) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower())
    label = re.sub(r"-{2,}", "-", label).strip("-")[:63].rstrip("-")
    return label or "unnamed"


def _unique(candidate: str, original: str, taken: set[str]) -> str:
    # A hash of the original keeps the choice stable across runs and independent of the other names' order.
    if candidate not in taken:
        return candidate
    suffix = hashlib.sha1(original.encode()).hexdigest()[:6]
    base = f"{candidate[: 63 - len(suffix) - 1].rstrip('-')}-{suffix}"
    result, counter = base, 2
    while result in taken:
        result = f"{base[: 63 - len(str(counter)) - 1]}-{counter}"
        counter += 1
    return result


class _Names:
    """Original name → DNS-1123 label for one kind; valid names are reserved first so they never move."""

    def __init__(self, kind: str, names: Iterable[str], warnings: list[str]) -> None:
        ordered = list(dict.fromkeys(names))
        taken = {name for name in ordered if is_dns_label(name)}
        self._map: dict[str, str] = {}
        for name in ordered:
            if is_dns_label(name):
                self._map[name] = name
                continue
            new = _unique(_to_label(name), name, taken)
            taken.add(new)
            self._map[name] = new
            warnings.append(
                f"{kind} {name}: the name is not a DNS-1123 label; renamed to {new!r} (references renamed too)"
            )

    def __getitem__(self, name: str) -> str:
        return self._map[name]

    def __contains__(self, name: object) -> bool:
        return name in self._map


def _queue_name(namespace: str, name: str) -> str:
    if split_queue(f"{namespace}/{name}") is not None:
        return f"{namespace}/{name}"
    subdomain = re.sub(r"[^a-z0-9.-]+", "-", name.lower())
    subdomain = re.sub(r"([-.])[-.]+", r"\1", subdomain).strip("-.")[:253].strip("-.") or "unnamed"
    candidate = f"{_to_label(namespace)}/{subdomain}"
    return candidate if split_queue(candidate) is not None else f"{_to_label(namespace)}/{_to_label(name)}"


# ------------------------------------------------------------------------------------------------------------
# Conversion


_CQ_FIELDS = {
    "cohort", "cohortName", "resourceGroups", "preemption", "flavorFungibility", "queueingStrategy",
    "fairSharing", "namespaceSelector", "stopPolicy", "admissionChecks", "admissionChecksStrategy",
    "admissionScope", "concurrentAdmissionPolicy",
}  # fmt: skip
_COHORT_FIELDS = {"parent", "parentName", "resourceGroups", "fairSharing"}
_FLAVOR_FIELDS = {"nodeLabels", "tolerations", "nodeTaints", "topologyName"}
_TOPOLOGY_FIELDS = {"levels"}
_LQ_FIELDS = {"clusterQueue", "fairSharing", "stopPolicy"}
_TOP_LEVEL = {"apiVersion", "kind", "metadata", "spec", "status"}
_WPC_TOP_LEVEL = {"apiVersion", "kind", "metadata", "value", "description"}
#: Kueue v1beta1 spelled "stop at this flavor" per situation; v1beta2 and kuota say MayStopSearch for both.
_FUNGIBILITY_ALIASES = {"Borrow": "MayStopSearch", "Preempt": "MayStopSearch"}


@dataclass
class _Converter:
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)
    objects: dict[tuple[str, str | None, str], _Object] = field(default_factory=dict)
    configurations: list[Doc] = field(default_factory=list)
    flavor_names: _Names = field(init=False)
    topology_names: _Names = field(init=False)
    class_names: _Names = field(init=False)
    cohort_names: _Names = field(init=False)
    team_names: _Names = field(init=False)
    cohort_parents: dict[str, str | None] = field(init=False)
    team_parents: dict[str, str | None] = field(init=False)

    # -- collecting ------------------------------------------------------------------------------------------

    def collect(self, documents: Iterable[Any]) -> None:
        for doc in flatten_documents(documents):
            if doc is None:
                continue  # an empty document between `---` separators
            if not isinstance(doc, Mapping):
                self.skipped[("", f"non-object document ({type(doc).__name__})")] += 1
            elif _is_kueue_object(doc):
                self._add(doc)
            elif _is_kueue_configuration(doc):
                self.configurations.append(dict(doc))
            else:
                kind = str(doc.get("kind") or "document without kind")
                self.skipped[(str(doc.get("apiVersion", "")), kind)] += 1

    def _add(self, doc: Mapping[str, Any]) -> None:
        kind = str(doc["kind"])
        version = _group_version(doc)[1]
        metadata = doc.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str) or not name:
            self.problems.append(f"a {kind} has no metadata.name")
            return
        namespace = None
        if kind == "LocalQueue":
            namespace = self._namespace(kind, name, metadata)
        spec = doc.get("spec")
        if spec is not None and not isinstance(spec, Mapping):
            self.problems.append(f"{kind} {name}: spec is not a mapping")
            return
        obj = _Object(kind, version, name, namespace, dict(spec or {}), dict(doc))
        self._check_version(obj)
        if kind != "WorkloadPriorityClass":  # the one kind whose fields sit at the top level, not in spec
            self._unknown(obj, obj.body, _TOP_LEVEL, "")
        key = (kind, namespace, name)
        previous = self.objects.get(key)
        if previous is not None and (previous.spec, previous.body) != (obj.spec, obj.body):
            self.warnings.append(f"{obj.label} is declared more than once; the last declaration is used")
        self.objects[key] = obj

    def _namespace(self, kind: str, name: str, metadata: Any) -> str:
        namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
        if isinstance(namespace, str) and namespace:
            return namespace
        self.warnings.append(
            f"{kind} {name} has no metadata.namespace; assumed 'default' (what kubectl would use by default)"
        )
        return "default"

    def _check_version(self, obj: _Object) -> None:
        if obj.version not in _KNOWN_VERSIONS:
            self.warnings.append(
                f"{obj.label}: apiVersion {KUEUE_GROUP}/{obj.version} is not one the importer knows; read as v1beta2"
            )

    def of_kind(self, kind: str) -> list[_Object]:
        return [obj for (k, _, _), obj in self.objects.items() if k == kind]

    # -- small typed accessors; a wrong shape is an input problem, recorded and replaced by an empty value ---

    def _mapping(self, value: Any, where: str) -> dict[str, Any]:
        if value is None:
            return {}
        if isinstance(value, Mapping):
            return dict(value)
        self.problems.append(f"{where} is not a mapping")
        return {}

    def _list(self, value: Any, where: str) -> list[Any]:
        if value is None:
            return []
        if isinstance(value, list):
            return value
        self.problems.append(f"{where} is not a list")
        return []

    def _string(self, value: Any, where: str) -> str | None:
        if isinstance(value, str) and value:
            return value
        self.problems.append(f"{where} is missing or not a string")
        return None

    def _enum(self, value: Any, enum: type[StrEnum], where: str) -> str | None:
        allowed = [member.value for member in enum]
        if value in allowed:
            return str(value)
        self.problems.append(f"{where}: {value!r} is not one of {', '.join(allowed)}")
        return None

    def _quantity(self, value: Any, where: str) -> tuple[Any, int] | None:
        """The value as written (the output keeps `36Gi`) and its milli-units; None when not a quantity."""
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            self.problems.append(f"{where}: {value!r} is not a quantity")
            return None
        try:
            milli = parse_quantity(value)
        except QuantityError as exc:
            self.problems.append(f"{where}: {exc}")
            return None
        if milli < 0:
            self.problems.append(f"{where}: {value!r} is negative")
            return None
        if isinstance(value, str) and re.fullmatch(r"\d+", value.strip()):
            value = int(value)  # "16" and 16 mean the same; an int reads better in the output
        return value, milli

    def _weight(self, obj: _Object, raw: Any) -> Doc | None:
        fair = self._mapping(raw, f"{obj.label}: spec.fairSharing")
        self._unknown(obj, fair, {"weight"}, "spec.fairSharing")
        if "weight" not in fair:
            return None
        parsed = self._quantity(fair["weight"], f"{obj.label}: spec.fairSharing.weight")
        if parsed is None:
            return None
        # Kueue's weight is a Quantity (`500m` is allowed); kuota's is a plain decimal.
        milli = parsed[1]
        weight: int | float = milli // MILLI if milli % MILLI == 0 else float(Decimal(milli) / MILLI)
        return {"weight": weight}

    def _unknown(self, obj: _Object, mapping: Mapping[str, Any], known: set[str], where: str) -> None:
        for key in mapping:
            if key not in known:
                path = f"{where}.{key}" if where else key
                self.warnings.append(f"{obj.label}: {path} is not a field the importer knows; ignored")

    # -- names -----------------------------------------------------------------------------------------------

    def names(self) -> None:
        self.topology_names = _Names("Topology", [o.name for o in self.of_kind("Topology")], self.warnings)
        flavors = [o.name for o in self.of_kind("ResourceFlavor")] + self.flavor_refs()
        self.flavor_names = _Names("ResourceFlavor", flavors, self.warnings)
        self.class_names = _Names(
            "WorkloadPriorityClass", [o.name for o in self.of_kind("WorkloadPriorityClass")], self.warnings
        )
        self.team_parents = {o.name: self._team_parent(o) for o in self.of_kind("ClusterQueue")}
        self.cohort_parents = self._cohort_parents()
        self.cohort_names = _Names("Cohort", self.cohort_parents, self.warnings)
        teams = [o.name for o in self.of_kind("ClusterQueue")]
        self.team_names = _Names("ClusterQueue", teams, self.warnings)

    def flavor_refs(self) -> list[str]:
        """Flavor names that ClusterQueues and Cohorts use, in order of first use."""
        refs: list[str] = []
        for obj in self.of_kind("ClusterQueue") + self.of_kind("Cohort"):
            groups = obj.spec.get("resourceGroups")
            for group in groups if isinstance(groups, list) else []:
                entries = group.get("flavors") if isinstance(group, Mapping) else None
                for entry in entries if isinstance(entries, list) else []:
                    if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                        refs.append(entry["name"])
        return list(dict.fromkeys(refs))

    def _cohort_parents(self) -> dict[str, str | None]:
        """Every cohort (declared, or only named as a parent) → its parent, in order of first mention."""
        parents: dict[str, str | None] = {}
        for obj in self.of_kind("Cohort"):
            parents[obj.name] = self._cohort_parent(obj)
        for cohort in self.team_parents.values():
            if cohort is not None:
                parents.setdefault(cohort, None)
        for parent in [p for p in list(parents.values()) if p is not None]:
            parents.setdefault(parent, None)
        self._break_cycles(parents)
        return parents

    def _cohort_parent(self, obj: _Object) -> str | None:
        # Cohort v1alpha1 said `parent`; v1beta1 and v1beta2 say `parentName`.
        value = obj.spec.get("parentName", obj.spec.get("parent"))
        return self._string(value, f"{obj.label}: spec.parentName") if value is not None else None

    def _team_parent(self, obj: _Object) -> str | None:
        # ClusterQueue v1beta1 said `cohort`; v1beta2 says `cohortName`. Accept either in either version.
        old, new = obj.spec.get("cohort"), obj.spec.get("cohortName")
        if old and new and old != new:
            self.warnings.append(f"{obj.label}: spec.cohort {old!r} and spec.cohortName {new!r} differ; using {new!r}")
        value = new or old
        return self._string(value, f"{obj.label}: spec.cohortName") if value else None

    def _break_cycles(self, parents: dict[str, str | None]) -> None:
        # Kueue leaves a cohort cycle inactive; kuota rejects it, so cut it where it closes and say so.
        for start in list(parents):
            path: list[str] = []
            node: str | None = start
            while node is not None and node not in path:
                path.append(node)
                node = parents.get(node)
            if node is not None and node == start:
                last = path[-1]
                self.warnings.append(
                    f"Cohort {last}: parent {parents[last]!r} closes a cycle "
                    f"({' -> '.join([*path, start])}); the parent link is dropped so the tree is valid"
                )
                parents[last] = None

    # -- objects ---------------------------------------------------------------------------------------------

    def flavor(self, obj: _Object) -> Doc:
        spec = obj.spec
        self._unknown(obj, spec, _FLAVOR_FIELDS, "spec")
        out: Doc = {"name": self.flavor_names[obj.name]}
        labels = self._mapping(spec.get("nodeLabels"), f"{obj.label}: spec.nodeLabels")
        if labels:
            out["nodeLabels"] = {str(k): _label_value(v) for k, v in labels.items()}
        tolerations = self._list(spec.get("tolerations"), f"{obj.label}: spec.tolerations")
        if tolerations:
            out["tolerations"] = [self._mapping(t, f"{obj.label}: spec.tolerations[]") for t in tolerations]
        if spec.get("nodeTaints"):
            taints = ", ".join(_taint_text(t) for t in spec["nodeTaints"] if isinstance(t, Mapping))
            self.warnings.append(
                f"{obj.label}: spec.nodeTaints ({taints}) not converted: Kueue offers this flavor only to "
                "workloads that already tolerate the taints, kuota does not filter on taints and injects "
                "only the flavor's tolerations; add matching tolerations if admitted pods should tolerate "
                "them"
            )
        topology = spec.get("topologyName")
        if topology:
            if isinstance(topology, str) and topology in self.topology_names:
                out["topology"] = self.topology_names[topology]
            else:
                self.warnings.append(
                    f"{obj.label}: spec.topologyName {topology!r} names no Topology in the input; dropped (pods "
                    "are then placed by the Kubernetes scheduler within the flavor's nodes); import the Topology "
                    "with it to keep topology-aware placement"
                )
        return out

    def topology(self, obj: _Object) -> Doc:
        """A Topology's levels (node labels, widest first), as the quota file's `topologies` entry."""
        self._unknown(obj, obj.spec, _TOPOLOGY_FIELDS, "spec")
        levels = []
        for index, level in enumerate(self._list(obj.spec.get("levels"), f"{obj.label}: spec.levels")):
            label = self._mapping(level, f"{obj.label}: spec.levels[{index}]").get("nodeLabel")
            if not isinstance(label, str) or not label:
                self.problems.append(f"{obj.label}: spec.levels[{index}].nodeLabel is not a node label")
                continue
            levels.append(label)
        if not levels:
            self.problems.append(f"{obj.label}: spec.levels is empty; a topology needs at least one level")
        return {"name": self.topology_names[obj.name], "levels": levels}

    def priority_class(self, obj: _Object) -> Doc:
        self._unknown(obj, obj.body, _WPC_TOP_LEVEL, "")
        out: Doc = {"name": self.class_names[obj.name]}
        value = obj.body.get("value")
        if isinstance(value, int) and not isinstance(value, bool):
            out["value"] = value
        else:
            self.problems.append(f"{obj.label}: value {value!r} is not an integer")
        description = obj.body.get("description")
        if isinstance(description, str) and description:
            out["description"] = description
        return out

    def cohort(self, name: str, obj: _Object | None) -> Doc:
        out: Doc = {"name": self.cohort_names[name]}
        parent = self.cohort_parents.get(name)
        if parent is not None:
            out["parent"] = self.cohort_names[parent]
        if obj is None:
            return out
        self._unknown(obj, obj.spec, _COHORT_FIELDS, "spec")
        out.update(self._quotas(obj, has_parent=parent is not None))
        weight = self._weight(obj, obj.spec.get("fairSharing"))
        if weight is not None:
            out["fairSharing"] = weight
        return out

    def team(self, obj: _Object, queues: list[str]) -> Doc:
        spec = obj.spec
        self._unknown(obj, spec, _CQ_FIELDS, "spec")
        out: Doc = {"name": self.team_names[obj.name]}
        parent = self.team_parents[obj.name]
        if parent is not None:
            out["parent"] = self.cohort_names[parent]
        if queues:
            out["queues"] = queues
        if "queueingStrategy" in spec:
            where = f"{obj.label}: spec.queueingStrategy"
            strategy = self._enum(spec["queueingStrategy"], QueueingStrategy, where)
            if strategy is not None:
                out["queueingStrategy"] = strategy
        out.update(self._quotas(obj, has_parent=parent is not None))
        preemption = self._preemption(obj, spec.get("preemption"))
        if preemption:
            out["preemption"] = preemption
        fungibility = self._fungibility(obj, spec.get("flavorFungibility"))
        if fungibility:
            out["flavorFungibility"] = fungibility
        weight = self._weight(obj, spec.get("fairSharing"))
        if weight is not None:
            out["fairSharing"] = weight
        self._team_warnings(obj, bool(queues))
        return out

    def _team_warnings(self, obj: _Object, has_queues: bool) -> None:
        spec = obj.spec
        selector = spec.get("namespaceSelector")
        if selector:
            self.warnings.append(
                f"{obj.label}: spec.namespaceSelector {_compact(selector)} not converted: kuota opens one "
                "queue per LocalQueue (listed under the team's queues), whatever the namespace's labels"
            )
        elif selector is None and has_queues:
            self.warnings.append(
                f"{obj.label}: has no spec.namespaceSelector, so Kueue admits from no namespace; kuota "
                "admits from every queue listed under the team"
            )
        if spec.get("stopPolicy") not in (None, "None"):
            self.warnings.append(
                f"{obj.label}: spec.stopPolicy {spec['stopPolicy']} not converted: kuota has no per-team "
                "stop; the team admits normally (remove its queues to stop it)"
            )
        for key in ("admissionChecks", "admissionChecksStrategy"):
            if spec.get(key):
                self.warnings.append(
                    f"{obj.label}: spec.{key} {_compact(spec[key])} not converted: kuota has no admission "
                    "checks; workloads are admitted on quota alone"
                )
        scope = spec.get("admissionScope")
        if isinstance(scope, Mapping) and scope.get("admissionMode") in (None, "NoAdmissionFairSharing"):
            pass
        elif scope is not None:
            self.warnings.append(
                f"{obj.label}: spec.admissionScope {_compact(scope)} (admission fair sharing) not "
                "converted: kuota orders a team's workloads by priority and creation time, not by each "
                "LocalQueue's usage"
            )
        if spec.get("concurrentAdmissionPolicy"):
            self.warnings.append(
                f"{obj.label}: spec.concurrentAdmissionPolicy not converted: kuota admits a workload once, "
                "in the first flavor that fits (flavorFungibility), and does not migrate it between flavors"
            )

    def queue(self, obj: _Object) -> tuple[str, str] | None:
        """The LocalQueue as (its ClusterQueue, kuota queue name), or None when it cannot belong to a team."""
        spec = obj.spec
        self._unknown(obj, spec, _LQ_FIELDS, "spec")
        if spec.get("fairSharing"):
            self.warnings.append(
                f"{obj.label}: spec.fairSharing {_compact(spec['fairSharing'])} (admission fair sharing) "
                "not converted: kuota does not weight the queues within a team"
            )
        if spec.get("stopPolicy") not in (None, "None"):
            self.warnings.append(
                f"{obj.label}: spec.stopPolicy {spec['stopPolicy']} not converted: kuota has no per-queue stop"
            )
        cluster_queue = spec.get("clusterQueue")
        if not isinstance(cluster_queue, str) or cluster_queue not in self.team_names:
            self.warnings.append(
                f"{obj.label}: spec.clusterQueue {cluster_queue!r} is not a ClusterQueue in the input; the "
                "queue is dropped"
            )
            return None
        assert obj.namespace is not None  # every LocalQueue got one in _add
        name = _queue_name(obj.namespace, obj.name)
        if name != f"{obj.namespace}/{obj.name}":
            self.warnings.append(f"{obj.label}: not a valid NAMESPACE/NAME for kuota; renamed to {name!r}")
        return cluster_queue, name

    # -- quotas ----------------------------------------------------------------------------------------------

    def _quotas(self, obj: _Object, has_parent: bool) -> Doc:
        groups_raw = self._list(obj.spec.get("resourceGroups"), f"{obj.label}: spec.resourceGroups")
        groups = [self._group(obj, f"spec.resourceGroups[{i}]", g, has_parent) for i, g in enumerate(groups_raw)]
        self._check_groups(obj, groups)
        if not groups:
            return {}
        if len(groups) == 1:
            return {"quotas": groups[0]["flavors"]}
        return {"resourceGroups": groups}

    def _check_groups(self, obj: _Object, groups: list[Doc]) -> None:
        # Kueue rejects these too; caught here so the message names the Kueue object, not a kuota path.
        resources = Counter(r for g in groups for r in g["coveredResources"])
        flavors = Counter(f["flavor"] for g in groups for f in g["flavors"])
        for resource in (r for r, n in resources.items() if n > 1):
            self.problems.append(f"{obj.label}: resource {resource} is covered by more than one resource group")
        for flavor in (f for f, n in flavors.items() if n > 1):
            self.problems.append(f"{obj.label}: flavor {flavor} is listed more than once in its resource groups")

    def _group(self, obj: _Object, where: str, raw: Any, has_parent: bool) -> Doc:
        group = self._mapping(raw, f"{obj.label}: {where}")
        self._unknown(obj, group, {"coveredResources", "flavors"}, where)
        covered_raw = self._list(group.get("coveredResources"), f"{obj.label}: {where}.coveredResources")
        covered = [str(r) for r in covered_raw]
        flavors = []
        for index, entry in enumerate(self._list(group.get("flavors"), f"{obj.label}: {where}.flavors")):
            flavor = self._flavor_quotas(obj, f"{where}.flavors[{index}]", entry, has_parent)
            if flavor is not None and sorted(flavor["resources"]) != sorted(covered):
                self.problems.append(
                    f"{obj.label}: {where}.flavors[{index}] lists resources {sorted(flavor['resources'])} "
                    f"but the group covers {sorted(covered)}; Kueue requires them to match"
                )
            if flavor is not None:
                flavors.append(flavor)
        return {"coveredResources": covered, "flavors": flavors}

    def _flavor_quotas(self, obj: _Object, where: str, raw: Any, has_parent: bool) -> Doc | None:
        entry = self._mapping(raw, f"{obj.label}: {where}")
        self._unknown(obj, entry, {"name", "resources"}, where)
        name = self._string(entry.get("name"), f"{obj.label}: {where}.name")
        if name is None:
            return None
        resources: Doc = {}
        for index, item in enumerate(self._list(entry.get("resources"), f"{obj.label}: {where}.resources")):
            converted = self._resource(obj, f"{where}.resources[{index}]", item, has_parent, name)
            if converted is not None:
                resources[converted[0]] = converted[1]
        return {"flavor": self.flavor_names[name], "resources": resources}

    def _resource(self, obj: _Object, where: str, raw: Any, has_parent: bool, flavor: str) -> tuple[str, Doc] | None:
        item = self._mapping(raw, f"{obj.label}: {where}")
        self._unknown(obj, item, {"name", "nominalQuota", "borrowingLimit", "lendingLimit"}, where)
        resource = self._string(item.get("name"), f"{obj.label}: {where}.name")
        nominal = self._quantity(item.get("nominalQuota"), f"{obj.label}: {where}.nominalQuota")
        if resource is None or nominal is None:
            return None
        out: Doc = {"nominal": nominal[0]}
        for kueue_key in ("borrowingLimit", "lendingLimit"):
            if item.get(kueue_key) is None:
                continue
            limit = self._quantity(item[kueue_key], f"{obj.label}: {where}.{kueue_key}")
            if limit is None:
                continue
            if not has_parent:
                self.warnings.append(
                    f"{obj.label}: {kueue_key} {limit[0]} of {resource} in flavor {flavor} dropped: without "
                    "a cohort there is nobody to "
                    f"{'borrow from' if kueue_key == 'borrowingLimit' else 'lend to'} (kuota rejects limits "
                    "without a parent)"
                )
            elif kueue_key == "lendingLimit" and limit[1] > nominal[1]:
                self.warnings.append(
                    f"{obj.label}: lendingLimit {limit[0]} of {resource} in flavor {flavor} exceeds the "
                    f"nominal {nominal[0]}; capped at the nominal (a team cannot lend more than it has)"
                )
                out[kueue_key] = nominal[0]
            else:
                out[kueue_key] = limit[0]
        return resource, out

    # -- policies --------------------------------------------------------------------------------------------

    def _preemption(self, obj: _Object, raw: Any) -> Doc:
        where = f"{obj.label}: spec.preemption"
        preemption = self._mapping(raw, where)
        self._unknown(obj, preemption, {"withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort"},
                      "spec.preemption")  # fmt: skip
        out: Doc = {}
        if "withinClusterQueue" in preemption:
            within = self._enum(preemption["withinClusterQueue"], WithinTeamPolicy, f"{where}.withinClusterQueue")
            if within is not None:
                out["withinTeam"] = within
        if "reclaimWithinCohort" in preemption:
            reclaim = self._enum(preemption["reclaimWithinCohort"], ReclaimPolicy, f"{where}.reclaimWithinCohort")
            if reclaim is not None:
                out["reclaimWithinCohort"] = reclaim
        if "borrowWithinCohort" in preemption:
            borrow = self._borrow_within_cohort(obj, preemption["borrowWithinCohort"])
            if borrow:
                out["borrowWithinCohort"] = borrow
        return out

    def _borrow_within_cohort(self, obj: _Object, raw: Any) -> Doc:
        where = f"{obj.label}: spec.preemption.borrowWithinCohort"
        borrow = self._mapping(raw, where)
        self._unknown(obj, borrow, {"policy", "maxPriorityThreshold"}, "spec.preemption.borrowWithinCohort")
        out: Doc = {}
        if "policy" in borrow:
            policy = self._enum(borrow["policy"], BorrowPolicy, f"{where}.policy")
            if policy is not None:
                out["policy"] = policy
        threshold = borrow.get("maxPriorityThreshold")
        if threshold is None:
            return out
        if isinstance(threshold, bool) or not isinstance(threshold, int):
            self.problems.append(f"{where}.maxPriorityThreshold: {threshold!r} is not an integer")
        elif out.get("policy", "Never") == "Never":
            self.warnings.append(f"{where}.maxPriorityThreshold dropped: it only applies with policy LowerPriority")
        else:
            out["maxPriorityThreshold"] = threshold
        return out

    def _fungibility(self, obj: _Object, raw: Any) -> Doc:
        where = f"{obj.label}: spec.flavorFungibility"
        fungibility = self._mapping(raw, where)
        known = {"whenCanBorrow", "whenCanPreempt", "preference"}
        self._unknown(obj, fungibility, known, "spec.flavorFungibility")
        out: Doc = {}
        for key in ("whenCanBorrow", "whenCanPreempt"):
            if key in fungibility:
                value = _FUNGIBILITY_ALIASES.get(fungibility[key], fungibility[key])
                policy = self._enum(value, FungibilityPolicy, f"{where}.{key}")
                if policy is not None:
                    out[key] = policy
        if "preference" in fungibility:
            preference = self._enum(fungibility["preference"], FungibilityPreference, f"{where}.preference")
            if preference is not None:
                out["preference"] = preference
        return out

    # -- Kueue's controller Configuration --------------------------------------------------------------------

    def fair_sharing(self) -> Doc | None:
        """kuota's cluster-wide fairSharing from the last Kueue Configuration in the input, if any."""
        if not self.configurations:
            return None
        config = self.configurations[-1]
        raw = self._mapping(config.get("fairSharing"), "Configuration: fairSharing")
        out: Doc = {}
        if "enable" in raw:
            out["enabled"] = bool(raw["enable"])
        where = "Configuration: fairSharing.preemptionStrategies"
        strategies = self._list(raw.get("preemptionStrategies"), where)
        if strategies:
            checked = [self._enum(s, PreemptionStrategy, where) for s in strategies]
            out["preemptionStrategies"] = [s for s in checked if s is not None]
        if config.get("admissionFairSharing"):
            self.warnings.append(
                "Configuration: admissionFairSharing not converted: kuota orders a team's workloads by "
                "priority and creation time, not by each LocalQueue's usage"
            )
        converted = {"apiVersion", "kind", "fairSharing", "admissionFairSharing", "integrations"}
        ignored = [k for k in config if k not in converted]
        if ignored:
            self.warnings.append(
                f"Configuration: {', '.join(ignored)} not converted: controller settings, not part of the quota file"
            )
        return out or None

    def job_kinds(self) -> list[str] | None:
        """kuota's jobKinds from the last Kueue Configuration's `integrations.frameworks`, if it names any.

        Kueue names a framework `GROUP/kind` in lower case (`batch/job`, `jobset.x-k8s.io/jobset`, `pod` for the
        core group); each is matched to the job framework's kind of that group and name, so every registered kind
        is covered (`leaderworkerset.x-k8s.io/leaderworkerset`, `trainer.kubeflow.org/trainjob`, ...). A framework
        kuota does not queue is left out with a warning, so that the file still loads."""
        if not self.configurations:
            return None
        config = self.configurations[-1]
        integrations = self._mapping(config.get("integrations"), "Configuration: integrations")
        frameworks = self._list(integrations.get("frameworks"), "Configuration: integrations.frameworks")
        if not frameworks:
            return None
        known = {(k.group, k.kind.lower()): k.kind for k in REGISTRY}
        kinds: list[str] = []
        for raw in frameworks:
            name = self._string(raw, "Configuration: integrations.frameworks[]")
            if name is None:
                continue
            group, _, kind = name.rpartition("/")
            found = known.get((group, kind.lower()))
            if found is None:
                self.warnings.append(
                    f"Configuration: integrations.frameworks {name!r} not converted: kuota does not queue it "
                    f"(it queues {', '.join(REGISTRY.names())})"
                )
            elif found not in kinds:
                kinds.append(found)
        if "podOptions" in integrations:
            self.warnings.append(
                "Configuration: integrations.podOptions not converted: kuota queues only pods that name a queue "
                "(kuota.dev/queue or kueue.x-k8s.io/queue-name), outside kube-system and kuota-system"
            )
        unconverted = [k for k in integrations if k not in ("frameworks", "podOptions")]
        if unconverted:
            self.warnings.append(
                f"Configuration: integrations.{', integrations.'.join(unconverted)} not converted: "
                "kuota has no equivalent"
            )
        return kinds or None

    def skipped_warnings(self) -> Iterator[str]:
        for (api_version, kind), count in self.skipped.items():
            what = f"{kind} ({api_version})" if api_version else kind
            yield (
                f"skipped {count} {what} object{'s' if count != 1 else ''}: kuota imports only "
                f"{', '.join(KUEUE_KINDS)} (and Kueue's Configuration for fair sharing)"
            )


def _label_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") not in (None, "") else ""
    return f"{taint.get('key', '')}{value}:{taint.get('effect', '')}"


def _compact(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text if len(text) <= 120 else text[:117] + "..."


def convert(documents: Sequence[Any]) -> ImportResult:
    """Kueue objects (parsed YAML documents, `kind: List` allowed) → a QuotaConfig body and warnings.

    Raises KueueImportError listing every object that is malformed beyond what a warning can cover.
    """
    conv = _Converter()
    conv.collect(documents)
    conv.names()
    topologies = [conv.topology(o) for o in conv.of_kind("Topology")]
    flavors = _flavors(conv)
    classes = [conv.priority_class(o) for o in conv.of_kind("WorkloadPriorityClass")]
    declared = {o.name: o for o in conv.of_kind("Cohort")}
    cohorts = [conv.cohort(name, declared.get(name)) for name in conv.cohort_parents]
    teams = _teams(conv)
    fair_sharing = conv.fair_sharing()
    job_kinds = conv.job_kinds()
    if fair_sharing is None and any("fairSharing" in holder for holder in [*cohorts, *teams]):
        conv.warnings.append(
            "fairSharing weights were imported, but no Kueue Configuration with fairSharing.enable was "
            "given, so fair sharing stays off as in Kueue's default; set fairSharing.enabled: true to use "
            "the weights"
        )
    conv.warnings.extend(conv.skipped_warnings())
    if not conv.objects:
        conv.warnings.append(f"no Kueue objects ({', '.join(KUEUE_KINDS)}) in the input; the file is empty")
    if conv.problems:
        raise KueueImportError(conv.problems)
    config: Doc = {"apiVersion": "kuota.dev/v1", "kind": "QuotaConfig"}
    sections: list[tuple[str, Any]] = [
        ("topologies", topologies), ("flavors", flavors), ("priorityClasses", classes), ("fairSharing", fair_sharing),
        ("cohorts", cohorts), ("teams", teams), ("jobKinds", job_kinds),
    ]  # fmt: skip
    config.update((key, value) for key, value in sections if value)
    return ImportResult(config, conv.warnings)


def _flavors(conv: _Converter) -> list[Doc]:
    flavors = [conv.flavor(o) for o in conv.of_kind("ResourceFlavor")]
    declared = {o.name for o in conv.of_kind("ResourceFlavor")}
    for name in (ref for ref in conv.flavor_refs() if ref not in declared):
        conv.warnings.append(
            f"ResourceFlavor {name} is used by a queue but not in the input (Kueue keeps such a "
            "ClusterQueue inactive); created without node labels or tolerations, add them to steer pods to "
            "its nodes"
        )
        flavors.append({"name": conv.flavor_names[name]})
    return flavors


def _teams(conv: _Converter) -> list[Doc]:
    queues: dict[str, list[str]] = {}
    for obj in conv.of_kind("LocalQueue"):
        placed = conv.queue(obj)
        if placed is not None:
            queues.setdefault(placed[0], []).append(placed[1])
    return [conv.team(obj, queues.get(obj.name, [])) for obj in conv.of_kind("ClusterQueue")]


# ------------------------------------------------------------------------------------------------------------
# Go templates (the subset knavigator's Kueue templates use)

_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.DOTALL)
_REFERENCE = re.compile(r"^(?P<var>\$[A-Za-z_]\w*|\$)?(?P<path>(?:\.[A-Za-z_]\w*)*|\.)$")
_RANGE = re.compile(r"^range\s+(?:(?P<k>\$\w+)\s*(?:,\s*(?P<v>\$\w+))?\s*:=\s*)?(?P<expr>\S+)$")


class _Missing:
    """A placeholder with no value: false in `if`, an error when printed."""


_MISSING = _Missing()


@dataclass
class _Action:
    text: str
    line: int


@dataclass
class _Node:
    kind: str  # text | print | if | with | range
    text: str = ""
    line: int = 0
    body: list[_Node] = field(default_factory=list)
    otherwise: list[_Node] = field(default_factory=list)
    key_var: str | None = None
    value_var: str | None = None


def _tokens(text: str) -> list[str | _Action]:
    tokens: list[str | _Action] = []
    pos = 0
    trim_next = False
    for match in _ACTION.finditer(text):
        chunk = text[pos : match.start()]
        chunk = chunk.lstrip() if trim_next else chunk
        tokens.append(chunk.rstrip() if match.group(1) else chunk)
        tokens.append(_Action(match.group(2).strip(), text.count("\n", 0, match.start()) + 1))
        trim_next = bool(match.group(3))
        pos = match.end()
    tail = text[pos:]
    tokens.append(tail.lstrip() if trim_next else tail)
    return tokens


def _parse(tokens: list[str | _Action], pos: int, source: str) -> tuple[list[_Node], int, _Action | None]:
    """Nodes up to the next `else`/`end` (returned as the stopping action) or the end of the tokens."""
    nodes: list[_Node] = []
    while pos < len(tokens):
        token = tokens[pos]
        pos += 1
        if isinstance(token, str):
            nodes.append(_Node("text", text=token))
            continue
        word = token.text.split(maxsplit=1)[0] if token.text else ""
        if token.text.startswith("/*"):
            continue
        if word in ("end", "else"):
            return nodes, pos, token
        if word in ("if", "with", "range"):
            node, pos = _parse_block(tokens, pos, token, source)
            nodes.append(node)
        else:
            nodes.append(_Node("print", text=_check_reference(token, source), line=token.line))
    return nodes, pos, None


def _parse_block(tokens: list[str | _Action], pos: int, opener: _Action, source: str) -> tuple[_Node, int]:
    word, _, rest = opener.text.partition(" ")
    node = _Node(word, line=opener.line)
    if word == "range":
        match = _RANGE.match(opener.text)
        if match is None:
            raise TemplateError(f"{source}: line {opener.line}: unsupported range {{{{{opener.text}}}}}")
        node.key_var, node.value_var = match["k"], match["v"]
        if node.value_var is None:  # `range $v := .x` binds the element, not the key
            node.key_var, node.value_var = None, node.key_var
        node.text = _check_reference(_Action(match["expr"], opener.line), source)
    else:
        node.text = _check_reference(_Action(rest.strip(), opener.line), source)
    node.body, pos, stop = _parse(tokens, pos, source)
    if stop is not None and stop.text.startswith("else"):
        else_rest = stop.text[len("else") :].strip()
        if else_rest.startswith("if "):  # `else if X` is `else` holding a nested `if X … end`
            nested, pos = _parse_block(tokens, pos, _Action(else_rest, stop.line), source)
            node.otherwise = [nested]
            return node, pos
        node.otherwise, pos, stop = _parse(tokens, pos, source)
    if stop is None or stop.text != "end":
        raise TemplateError(f"{source}: line {opener.line}: {{{{{opener.text}}}}} has no {{{{end}}}}")
    return node, pos


def _check_reference(action: _Action, source: str) -> str:
    if not action.text or not _REFERENCE.match(action.text):
        raise TemplateError(
            f"{source}: line {action.line}: unsupported template action {{{{{action.text}}}}} (supported: "
            "{{.key}}, {{$var}}, if/else/with/range … end)"
        )
    return action.text


@dataclass
class _Scope:
    dot: Any
    root: Any
    variables: dict[str, Any]


def _lookup(reference: str, scope: _Scope, source: str, line: int) -> Any:
    match = _REFERENCE.match(reference)
    assert match is not None  # checked when parsed
    var, path = match["var"], match["path"]
    if var is None:
        value = scope.dot
    elif var == "$":
        value = scope.root
    elif var in scope.variables:
        value = scope.variables[var]
    else:
        raise TemplateError(f"{source}: line {line}: undefined variable {var}")
    for key in path.split(".")[1:] if path != "." else []:
        value = value.get(key, _MISSING) if isinstance(value, Mapping) else _MISSING
    return value


def _truthy(value: Any) -> bool:
    if value is _MISSING or value is None:
        return False
    if isinstance(value, bool | int | float):
        return bool(value)
    return len(value) > 0 if hasattr(value, "__len__") else True


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _items(value: Any) -> list[tuple[Any, Any]]:
    if isinstance(value, Mapping):
        return sorted(value.items(), key=lambda item: str(item[0]))  # Go ranges over a map in key order
    if isinstance(value, list | tuple):
        return list(enumerate(value))
    return []


def _render(nodes: list[_Node], scope: _Scope, out: list[str], missing: list[tuple[str, int]], source: str) -> None:
    for node in nodes:
        if node.kind == "text":
            out.append(node.text)
            continue
        value = _lookup(node.text, scope, source, node.line)
        if node.kind == "print":
            if value is _MISSING or value is None:
                missing.append((node.text, node.line))
            elif isinstance(value, Mapping | list):
                raise TemplateError(f"{source}: line {node.line}: {{{{{node.text}}}}} is a map or list, not text")
            else:
                out.append(_format(value))
        elif node.kind == "if":
            _render(node.body if _truthy(value) else node.otherwise, scope, out, missing, source)
        elif node.kind == "with":
            if _truthy(value):
                _render(node.body, _Scope(value, scope.root, scope.variables), out, missing, source)
            else:
                _render(node.otherwise, scope, out, missing, source)
        else:
            _render_range(node, value, scope, out, missing, source)


def _render_range(
    node: _Node, value: Any, scope: _Scope, out: list[str], missing: list[tuple[str, int]], source: str
) -> None:
    items = _items(value)
    if not items:
        _render(node.otherwise, scope, out, missing, source)
    for key, item in items:
        variables = dict(scope.variables)
        if node.key_var:
            variables[node.key_var] = key
        if node.value_var:
            variables[node.value_var] = item
        _render(node.body, _Scope(item, scope.root, variables), out, missing, source)


def placeholder_hint(reference: str) -> str:
    """How to give a placeholder a value on the command line: `.cpu` → `--set cpu=VALUE`."""
    return f"--set {reference.lstrip('.')}=VALUE" if reference.startswith(".") else reference


def render_template(text: str, values: Mapping[str, Any], source: str = "template", hint: str = "") -> str:
    """Render the Go-template subset with `values` as the root; the error names every unset placeholder."""
    nodes, _, stop = _parse(_tokens(text), 0, source)
    if stop is not None:
        raise TemplateError(f"{source}: line {stop.line}: {{{{{stop.text}}}}} without an opening if/with/range")
    out: list[str] = []
    missing: list[tuple[str, int]] = []
    _render(nodes, _Scope(values, values, {}), out, missing, source)
    if missing:
        raise TemplateError(_missing_message(missing, source, hint))
    return "".join(out)


def _missing_message(missing: list[tuple[str, int]], source: str, hint: str) -> str:
    lines: dict[str, list[str]] = {}
    for ref, line in missing:
        lines.setdefault(ref, []).append(str(line))
    listed = ", ".join(f"{{{{{ref}}}}} (line{'s' if len(at) > 1 else ''} {', '.join(at)})" for ref, at in lines.items())
    hints = hint or " ".join(placeholder_hint(ref) for ref in lines)
    plural = "s" if len(lines) > 1 else ""
    return f"{source}: template placeholder{plural} without a value: {listed}; give {hints}"


def is_template(text: str) -> bool:
    return "{{" in text


# ------------------------------------------------------------------------------------------------------------
# knavigator workflows


def is_knavigator_workflow(doc: Any) -> bool:
    return (
        isinstance(doc, Mapping)
        and "apiVersion" not in doc
        and "kind" not in doc
        and isinstance(doc.get("tasks"), list)
    )


def _tasks(workflow: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(t) for t in workflow.get("tasks") or [] if isinstance(t, Mapping)]


def _params(task: Mapping[str, Any]) -> dict[str, Any]:
    params = task.get("params")
    return dict(params) if isinstance(params, Mapping) else {}


def _registered(workflow: Mapping[str, Any]) -> dict[str, str]:
    """RegisterObj task id → template path."""
    return {
        str(t.get("id")): str(_params(t).get("template"))
        for t in _tasks(workflow)
        if t.get("type") == "RegisterObj" and _params(t).get("template")
    }


def workflow_template_paths(workflow: Mapping[str, Any]) -> list[str]:
    """The templates a workflow submits objects from (registered-only templates are never needed)."""
    registered = _registered(workflow)
    refs = [_params(t).get("refTaskId") for t in _tasks(workflow) if t.get("type") == "SubmitObj"]
    return list(dict.fromkeys(registered[str(ref)] for ref in refs if str(ref) in registered))


def template_kind(text: str) -> str | None:
    """The `kind:` of a single-object template, read without rendering it (None when it is templated)."""
    match = re.search(r"^kind:\s*[\"']?([A-Za-z]+)[\"']?\s*$", text, re.MULTILINE)
    return match.group(1) if match else None


def expand_workflow(
    workflow: Mapping[str, Any],
    templates: Mapping[str, str],
    defaults: Mapping[str, Any],
    source: str = "workflow",
) -> tuple[list[Any], list[str]]:
    """The Kueue objects a knavigator workflow creates, as parsed documents, plus warnings.

    SubmitObj tasks render their registered template with the task's params (`defaults` fill what a task
    leaves unset); Configure tasks add the priority classes they create and a Kueue Configuration found in a
    ConfigMap. Objects of other kinds (the Jobs a scenario submits) are counted, not rendered: placeholders
    such as `{{._NAME_}}` in them are filled by knavigator at run time.
    """
    registered = _registered(workflow)
    documents: list[Any] = []
    warnings: list[str] = []
    submitted: dict[str, str] = {}  # SubmitObj task id → kind
    skipped: Counter[str] = Counter()
    for task in _tasks(workflow):
        kind, task_id, params = task.get("type"), str(task.get("id")), _params(task)
        where = f"{source}: task {task_id!r}"
        if kind == "SubmitObj":
            ref = str(params.get("refTaskId"))
            if ref not in registered:
                raise TemplateError(f"{where}: refTaskId {ref!r} is not a RegisterObj task with a template")
            path = registered[ref]
            object_kind = template_kind(templates[path])
            if object_kind is not None and object_kind not in KUEUE_KINDS:
                skipped[object_kind] += 1
                submitted[task_id] = object_kind
                continue
            documents.extend(_submit(where, path, templates[path], params, defaults))
            submitted[task_id] = object_kind or "object"
            if params.get("count", 1) not in (1, "1", None):
                warnings.append(f"{where}: count {params['count']} ignored; one {object_kind} is imported")
        elif kind == "Configure":
            documents.extend(_configure(params))
        elif kind in ("DeleteObj", "UpdateObj") and submitted.get(str(params.get("refTaskId"))) in _KINDS:
            warnings.append(
                f"{where}: {kind} is not replayed; the import shows the Kueue objects as they were first submitted"
            )
    warnings += [
        f"{source}: skipped {n} {k} object{'s' if n != 1 else ''} the workflow submits (only Kueue queueing "
        "objects are imported)"
        for k, n in skipped.items()
    ]
    return documents, warnings


def _submit(where: str, path: str, template: str, params: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[Any]:
    own = params.get("params")
    values = {**defaults, **(own if isinstance(own, Mapping) else {})}
    hint = "them in the task's params or with --set KEY=VALUE"
    text = render_template(template, values, source=f"{where} ({path})", hint=hint)
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise TemplateError(f"{where} ({path}): the rendered template is not valid YAML: {exc}") from None


def _configure(params: Mapping[str, Any]) -> list[Any]:
    """knavigator's cluster setup: the priority classes it creates, and Kueue's Configuration if it has one.

    The workflow's jobs name these classes in `kueue.x-k8s.io/priority-class`, so they belong in the file.
    """
    documents: list[Any] = []
    for pc in params.get("priorityClasses") or []:
        if isinstance(pc, Mapping) and pc.get("op", "create") == "create":
            documents.append({
                "apiVersion": f"{KUEUE_GROUP}/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": pc.get("name")},
                "value": pc.get("value"),
            })  # fmt: skip
    for configmap in params.get("configmaps") or []:
        data = configmap.get("data") if isinstance(configmap, Mapping) else None
        for text in (data or {}).values() if isinstance(data, Mapping) else []:
            try:
                parsed = list(yaml.safe_load_all(str(text)))
            except yaml.YAMLError:
                continue  # a ConfigMap value need not be YAML at all
            documents += [d for d in parsed if isinstance(d, Mapping) and _is_kueue_configuration(d)]
    return documents


# ------------------------------------------------------------------------------------------------------------
# Output


class _Flow(dict[str, Any]):
    pass


class _FlowList(list[Any]):
    pass


class _Dumper(yaml.SafeDumper):
    pass


def _represent_flow(dumper: yaml.SafeDumper, data: _Flow) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=True)


def _represent_flow_list(dumper: yaml.SafeDumper, data: _FlowList) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


_Dumper.add_representer(_Flow, _represent_flow)
_Dumper.add_representer(_FlowList, _represent_flow_list)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _styled(value: Any) -> Any:
    # Leaves (a resource's limits, a toleration, a list of names) read best on one line, as in the spec.
    if isinstance(value, Mapping):
        if value and all(_scalar(v) for v in value.values()) and len(_compact(dict(value))) <= 100:
            return _Flow(value)
        return {k: _styled(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(_scalar(v) for v in value) and len(_compact(value)) <= 100:
            return _FlowList(value)
        return [_styled(v) for v in value]
    return value


def to_yaml(config: Mapping[str, Any]) -> str:
    """The config as YAML in its own key order, a blank line between top-level sections."""

    def dump(key: str, value: Any) -> str:
        styled = value if _scalar(value) else _styled(value)
        return yaml.dump({key: styled}, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)

    head = "".join(dump(k, v) for k, v in config.items() if _scalar(v))
    sections = [dump(k, v) for k, v in config.items() if not _scalar(v)]
    return "\n".join([head, *sections])
