"""What kubectl and client libraries read before they touch a resource: /version, legacy discovery (/api,
/apis, group and group-version resource lists), a minimal OpenAPI v3 (enough for kubectl to see that the
server validates fields itself, so it skips client-side schema validation), an OpenAPI v2 without definitions
and meta.k8s.io Table rendering for `kubectl get`.

kubectl's default `--validate=strict` asks the OpenAPI v3 document of an object's group-version whether PATCH
takes `fieldValidation`; every served kind answers yes, as on a real apiserver, and kubectl leaves field
validation to the server. Only for a kind the server does not serve does it fall back to validating against
the OpenAPI v2 schema; finding no definition there it lets the object through, and the REST mapping then fails
with `no matches for kind`, as against a real cluster."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from .resources import RESOURCE_TYPES, ResourceType

Obj = dict[str, Any]

KUBERNETES_VERSION = ("1", "36", "v1.36.0")


def version() -> Obj:
    major, minor, git_version = KUBERNETES_VERSION
    return {
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "minCompatibilityMajor": major,
        "minCompatibilityMinor": str(int(minor) - 1),
        "gitVersion": git_version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _groups() -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for rt in RESOURCE_TYPES:
        versions = groups.setdefault(rt.group, [])
        if rt.version not in versions:
            versions.append(rt.version)
    return groups


def _group(name: str, versions: list[str]) -> Obj:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def documents(server_address: str) -> dict[str, Obj]:
    """Every discovery document by request path."""
    docs: dict[str, Obj] = {
        "/version": version(),
        "/api": {
            "kind": "APIVersions",
            "versions": _groups()[""],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        },
        "/apis": {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [_group(name, versions) for name, versions in _groups().items() if name],
        },
    }
    for name, versions in _groups().items():
        if name:
            docs[f"/apis/{name}"] = {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}
        for v in versions:
            types = [rt for rt in RESOURCE_TYPES if rt.group == name and rt.version == v]
            docs[types[0].base_path] = _resource_list(types)
    docs["/openapi/v3"] = {
        "paths": {
            path.lstrip("/"): {"serverRelativeURL": f"/openapi/v3{path}?hash={_hash(path)}"}
            for path in {rt.base_path for rt in RESOURCE_TYPES}
        }
    }
    for path in {rt.base_path for rt in RESOURCE_TYPES}:
        docs[f"/openapi/v3{path}"] = _openapi_v3([rt for rt in RESOURCE_TYPES if rt.base_path == path])
    docs["/openapi/v2"] = {"swagger": "2.0", "info": _OPENAPI_INFO, "paths": {}, "definitions": {}}
    return docs


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32].upper()


def _resource_list(types: list[ResourceType]) -> Obj:
    resources: list[Obj] = []
    for rt in types:
        entry: Obj = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        entry["storageVersionHash"] = _hash(rt.group_resource)[:12]
        resources.append(entry)
        for sub in rt.subresources:
            resources.append(
                {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": types[0].api_version,
        "resources": resources,
    }


_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "pretty")


def _operation(rt: ResourceType, action: str) -> Obj:
    return {
        "operationId": f"{action}{rt.kind}",
        "parameters": [
            {"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": True}} for p in _QUERY_PARAMS
        ],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
    }


_OPENAPI_INFO = {"title": "Kubernetes (fake)", "version": KUBERNETES_VERSION[2]}

# What clients put in Accept (the older spelling, which Go's mime parser rejects in a Content-Type) and what
# the apiserver (kube-openapi) answers with.
OPENAPI_V2_PROTOBUF_ACCEPTED = (
    "com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "com.github.proto-openapi.spec.v2.v1.0+protobuf",
)
OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def wants_protobuf(accept: str) -> bool:
    return any(subtype in accept for subtype in OPENAPI_V2_PROTOBUF_ACCEPTED)


def _protobuf_bytes(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2)."""
    out = bytearray()
    for value in ((number << 3) | 2, len(payload)):
        while value > 0x7F:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out) + payload


def openapi_v2_protobuf() -> bytes:
    """The OpenAPI v2 document as the gnostic openapi_v2.Document protobuf kubectl asks for: swagger (field 1)
    and info (field 2: title 1, version 2), nothing else."""
    title, version = (_OPENAPI_INFO[k].encode() for k in ("title", "version"))
    info = _protobuf_bytes(1, title) + _protobuf_bytes(2, version)
    return _protobuf_bytes(1, b"2.0") + _protobuf_bytes(2, info)


def _openapi_v3(types: list[ResourceType]) -> Obj:
    paths: Obj = {}
    for rt in types:
        prefix = f"{rt.base_path}/namespaces/{{namespace}}" if rt.namespaced else rt.base_path
        paths[f"{prefix}/{rt.plural}"] = {"get": _operation(rt, "list"), "post": _operation(rt, "post")}
        paths[f"{prefix}/{rt.plural}/{{name}}"] = {
            "get": _operation(rt, "get"),
            "put": _operation(rt, "put"),
            "patch": _operation(rt, "patch"),
            "delete": _operation(rt, "delete"),
        }
    return {
        "openapi": "3.0.0",
        "info": _OPENAPI_INFO,
        "paths": paths,
        "components": {"schemas": {}},
    }


# Table rendering for kubectl get


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _age(timestamp: str | None, now: datetime) -> str:
    if not timestamp:
        return "<unknown>"
    then = datetime.strptime(timestamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return human_duration((now - then).total_seconds())


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d"


def _column(name: str, description: str, fmt: str = "") -> Obj:
    return {"name": name, "type": "string", "format": fmt, "description": description, "priority": 0}


def _job_status(job: Obj) -> str:
    conditions = {c.get("type"): c.get("status") for c in (job.get("status") or {}).get("conditions") or []}
    for kind in ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet"):
        if conditions.get(kind) == "True":
            return {"FailureTarget": "Failing", "SuccessCriteriaMet": "Completing"}.get(kind, kind)
    if conditions.get("Suspended") == "True":
        return "Suspended"
    return "Running"


def _job_cells(job: Obj, now: datetime) -> list[Any]:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    completions = spec.get("completions")
    done = status.get("succeeded", 0)
    shown = f"{done}/{completions}" if completions is not None else f"{done}/1 of {spec.get('parallelism', 1)}"
    start, end = status.get("startTime"), status.get("completionTime")
    if start and end:
        duration = human_duration(
            (
                datetime.strptime(end[:19], "%Y-%m-%dT%H:%M:%S") - datetime.strptime(start[:19], "%Y-%m-%dT%H:%M:%S")
            ).total_seconds()
        )
    elif start:
        duration = _age(start, now)
    else:
        duration = ""
    return [_job_status(job), shown, duration]


def _pod_cells(pod: Obj, now: datetime) -> list[Any]:
    containers = (pod.get("spec") or {}).get("containers") or []
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    return [f"{ready}/{len(containers)}", (pod.get("status") or {}).get("phase", ""), restarts]


def table(rt: ResourceType, objects: list[Obj], resource_version: str, continue_token: str | None = None) -> Obj:
    now = datetime.now(UTC)
    columns = [_column("Name", "Name must be unique within a namespace.", "name")]
    extra: list[Obj] = []
    if rt.kind == "Job" and rt.group == "batch":
        extra = [
            _column("Status", "Status of the job."),
            _column("Completions", "The desired number of successfully finished pods the job should be run with."),
            _column("Duration", "Time required to complete the job."),
        ]
    elif rt.kind == "Pod":
        extra = [
            _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
            _column("Status", "The aggregate status of the containers in this pod."),
            {
                **_column("Restarts", "The number of times the containers in this pod have been restarted."),
                "type": "integer",
            },
        ]
    elif rt.kind == "Namespace":
        extra = [_column("Status", "The status of the namespace")]
    elif rt.kind == "Lease":
        extra = [_column("Holder", "The holder of the lease.")]
    age = _column("Age", "CreationTimestamp is a timestamp representing the server time when this object was created.")
    columns += [*extra, age]
    rows = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        if rt.kind == "Job" and rt.group == "batch":
            middle = _job_cells(obj, now)
        elif rt.kind == "Pod":
            middle = _pod_cells(obj, now)
        elif rt.kind == "Namespace":
            middle = [(obj.get("status") or {}).get("phase", "")]
        elif rt.kind == "Lease":
            middle = [(obj.get("spec") or {}).get("holderIdentity", "")]
        else:
            middle = []
        rows.append(
            {
                "cells": [meta.get("name", ""), *middle, _age(meta.get("creationTimestamp"), now)],
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta},
            }
        )
    metadata: Obj = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    }
