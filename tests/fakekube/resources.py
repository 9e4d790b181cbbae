"""The resource types the fake API server serves, and how each maps onto the shared object store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
Converter = Callable[[Obj], Obj]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

# Field selectors the real apiserver accepts per resource; anything else is a 400 there too, and a test that
# passes here with an unsupported selector would fail against a real cluster.
_META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_CORE_EVENT_FIELDS = frozenset(
    {f"involvedObject.{k}" for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")}
    | {"reason", "reportingComponent", "source", "type"}
)
_EVENTS_V1_FIELDS = frozenset(
    {f"regarding.{k}" for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")}
    | {"reason", "reportingController", "type"}
)
_POD_FIELDS = frozenset(
    {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)

# core/v1 Event and events.k8s.io/v1 Event are two views of one storage in the real apiserver, so an event
# written through one API is listed and watched through the other. Pairs are (core field, events.k8s.io/v1
# field).
_EVENT_FIELD_PAIRS = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
)


def _rename(obj: Obj, pairs: tuple[tuple[str, str], ...], api_version: str) -> Obj:
    out: Obj = {}
    for key, value in obj.items():
        for src, dst in pairs:
            if key == src:
                key = dst
                break
        out[key] = value
    out["apiVersion"] = api_version
    return out


def core_event_to_events_v1(obj: Obj) -> Obj:
    return _rename(obj, _EVENT_FIELD_PAIRS, "events.k8s.io/v1")


def events_v1_to_core_event(obj: Obj) -> Obj:
    return _rename(obj, tuple((b, a) for a, b in _EVENT_FIELD_PAIRS), "v1")


def _identity(obj: Obj) -> Obj:
    return obj


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    # Which top-level field counts as "spec" for metadata.generation; None for kinds without a generation.
    generation_field: str | None = None
    # Pods answer DELETE with the object, most other kinds with a Status (genericregistry
    # ReturnDeletedObject).
    returns_deleted_object: bool = False
    # Objects are stored in one form per storage key; the converters map that form to and from this API's wire
    # form.
    storage_key: str = ""
    to_wire: Converter = _identity
    from_wire: Converter = _identity
    extra_field_labels: frozenset[str] = field(default_factory=frozenset)
    # Served from a CustomResourceDefinition rather than built into the apiserver.
    custom: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """The qualified name the apiserver uses in messages, e.g. `jobs.batch` or `pods`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """`Job.batch` or `Pod`, as in `Job.batch "x" is invalid: ...`."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def storage(self) -> str:
        return self.storage_key or self.group_resource

    @property
    def field_labels(self) -> frozenset[str]:
        return _META_FIELDS | self.extra_field_labels

    @property
    def base_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


NAMESPACES = ResourceType(
    "",
    "v1",
    "namespaces",
    "Namespace",
    namespaced=False,
    short_names=("ns",),
    subresources=("status",),
    returns_deleted_object=True,
    extra_field_labels=frozenset({"status.phase"}),
)
PODS = ResourceType(
    "",
    "v1",
    "pods",
    "Pod",
    namespaced=True,
    short_names=("po",),
    categories=("all",),
    subresources=("status",),
    returns_deleted_object=True,
    extra_field_labels=_POD_FIELDS,
)
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", namespaced=True, short_names=("cm",))
CORE_EVENTS = ResourceType(
    "",
    "v1",
    "events",
    "Event",
    namespaced=True,
    short_names=("ev",),
    storage_key="events",
    extra_field_labels=_CORE_EVENT_FIELDS,
)
EVENTS_V1 = ResourceType(
    "events.k8s.io",
    "v1",
    "events",
    "Event",
    namespaced=True,
    short_names=("ev",),
    storage_key="events",
    to_wire=core_event_to_events_v1,
    from_wire=events_v1_to_core_event,
    extra_field_labels=_EVENTS_V1_FIELDS,
)
JOBS = ResourceType(
    "batch",
    "v1",
    "jobs",
    "Job",
    namespaced=True,
    categories=("all",),
    subresources=("status",),
    generation_field="spec",
    extra_field_labels=frozenset({"status.successful"}),
)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
MUTATING_WEBHOOKS = ResourceType(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
    categories=("api-extensions",),
    generation_field="webhooks",
)
VALIDATING_WEBHOOKS = ResourceType(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
    categories=("api-extensions",),
    generation_field="webhooks",
)

# What config/deploy installs besides the kinds above. Their objects are stored as sent, apart from the status
# reset on create and the few defaults in strategies.py; the real registries default and validate much more.
SERVICE_ACCOUNTS = ResourceType("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True, short_names=("sa",))
SERVICES = ResourceType(
    "",
    "v1",
    "services",
    "Service",
    namespaced=True,
    short_names=("svc",),
    categories=("all",),
    subresources=("status",),
)
DEPLOYMENTS = ResourceType(
    "apps",
    "v1",
    "deployments",
    "Deployment",
    namespaced=True,
    short_names=("deploy",),
    categories=("all",),
    subresources=("status",),
    generation_field="spec",
)
POD_DISRUPTION_BUDGETS = ResourceType(
    "policy",
    "v1",
    "poddisruptionbudgets",
    "PodDisruptionBudget",
    namespaced=True,
    short_names=("pdb",),
    subresources=("status",),
    generation_field="spec",
)
CLUSTER_ROLES = ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = ResourceType(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
ROLES = ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", namespaced=True)
ROLE_BINDINGS = ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", namespaced=True)
# cert-manager's CRDs (cert-manager.io_issuers.yaml, cert-manager.io_certificates.yaml), served as the apiserver
# serves a CRD-installed group: status subresource, generation bumped by every change outside metadata and status.
ISSUERS = ResourceType(
    "cert-manager.io",
    "v1",
    "issuers",
    "Issuer",
    namespaced=True,
    short_names=("iss",),
    categories=("cert-manager",),
    subresources=("status",),
    generation_field="spec",
    custom=True,
)
CERTIFICATES = ResourceType(
    "cert-manager.io",
    "v1",
    "certificates",
    "Certificate",
    namespaced=True,
    short_names=("cert", "certs"),
    categories=("cert-manager",),
    subresources=("status",),
    generation_field="spec",
    custom=True,
)

RESOURCE_TYPES: tuple[ResourceType, ...] = (
    NAMESPACES,
    PODS,
    CONFIGMAPS,
    CORE_EVENTS,
    SERVICE_ACCOUNTS,
    SERVICES,
    EVENTS_V1,
    JOBS,
    DEPLOYMENTS,
    POD_DISRUPTION_BUDGETS,
    LEASES,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
    ROLES,
    ROLE_BINDINGS,
    MUTATING_WEBHOOKS,
    VALIDATING_WEBHOOKS,
    ISSUERS,
    CERTIFICATES,
)

_BY_PATH: dict[tuple[str, str, str], ResourceType] = {(r.group, r.version, r.plural): r for r in RESOURCE_TYPES}


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_PATH.get((group, version, plural))


def find(name: str) -> ResourceType:
    """Resolve what a test writes: a kind (`Job`), a plural (`jobs`) or a qualified name (`jobs.batch`,
    `Job.batch`, `events.events.k8s.io`). A bare `Event`/`events` means the core/v1 view."""
    for rt in RESOURCE_TYPES:
        if name in (rt.kind, rt.plural, rt.group_resource, rt.qualified_kind, *rt.short_names):
            return rt
    raise KeyError(f"the fake API server does not serve {name!r}")
