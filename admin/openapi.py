"""The OpenAPI 3.1 document, generated from the routes' pydantic models (never written by hand)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from admin.api import Route
from admin.auth import Access
from admin.models import Problem

_REF = "#/components/schemas/{model}"
_ERRORS = {
    400: "bad query parameters",
    401: "missing or unknown bearer token",
    403: "the token's role does not allow this",
    404: "no such workload, team or endpoint",
    409: "the action does not apply in the workload's current state",
    413: "request body too large",
    422: "invalid request body",
    503: "this replica does not run the controller or is not the leader",
}


def openapi_document(routes: list[Route], title: str = "kuota admin API", version: str = "1") -> dict[str, Any]:
    models: set[type[BaseModel]] = {Problem}
    for route in routes:
        models.update(m for m in (route.response, route.body) if m is not None)
    bodies = {r.body for r in routes if r.body is not None}
    ordered = sorted(models, key=lambda m: m.__name__)
    _, defs = models_json_schema(
        [(m, "validation" if m in bodies else "serialization") for m in ordered], ref_template=_REF
    )
    schemas = defs.get("$defs", {})
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        path = re.sub(r"\{(\w+)(:[^}]*)?\}", r"{\1}", route.path)
        paths.setdefault(path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": title,
            "version": version,
            "description": "Queues, workloads, quota and fair-share credits of a kuota controller. "
            "Errors are RFC 9457 problem+json.",
        },
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _operation(route: Route) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": route.summary,
        "operationId": f"{route.method.lower()}_{re.sub(r'[^a-zA-Z0-9]+', '_', route.path).strip('_')}",
        "tags": [route.tag],
        "parameters": _path_parameters(route.path) + _query_parameters(route.query),
        "responses": _responses(route),
    }
    if route.access is not Access.PUBLIC:
        operation["security"] = [{"bearer": []}]
    if route.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": _REF.format(model=route.body.__name__)}}},
        }
    return operation


def _path_parameters(path: str) -> list[dict[str, Any]]:
    return [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[^/]+$"}}
        for name in re.findall(r"\{(\w+)(?::[^}]*)?\}", path)
    ]


def _query_parameters(model: type[BaseModel] | None) -> list[dict[str, Any]]:
    if model is None:
        return []
    schema = model.model_json_schema(by_alias=True, ref_template=_REF)
    required = set(schema.get("required", []))
    parameters = []
    for name, prop in schema.get("properties", {}).items():
        prop = dict(prop)
        description = prop.pop("description", None)
        prop.pop("title", None)
        parameter: dict[str, Any] = {"name": name, "in": "query", "required": name in required, "schema": prop}
        if description:
            parameter["description"] = description
        parameters.append(parameter)
    return parameters


def _responses(route: Route) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    if route.response is not None:
        content: dict[str, Any] = {"application/json": {"schema": {"$ref": _REF.format(model=route.response.__name__)}}}
        content.update(route.extra_content)
        responses["200"] = {"description": "OK", "content": content}
    else:
        responses["200"] = {"description": "OK", "content": route.extra_content or {"text/plain": {"schema": {}}}}
    problem = {"application/problem+json": {"schema": {"$ref": _REF.format(model="Problem")}}}
    codes = {400, 404, 413, 422} if route.access is Access.PUBLIC else {400, 401, 403, 404, 413, 422}
    codes.update(route.statuses)
    for code in sorted(codes):
        if code in route.same_body and route.response is not None:
            responses[str(code)] = {
                "description": _ERRORS.get(code, "error"),
                "content": {"application/json": {"schema": {"$ref": _REF.format(model=route.response.__name__)}}},
            }
            continue
        responses[str(code)] = {"description": _ERRORS.get(code, "error"), "content": problem}
    return responses
