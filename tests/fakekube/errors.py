"""metav1.Status errors with the reasons, codes and message wording of the real apiserver (k8s.io/apimachinery
pkg/api/errors), so client code that branches on them behaves as it would against a cluster."""

from __future__ import annotations

from typing import Any

from .resources import ResourceType

Obj = dict[str, Any]

REASONS_BY_CODE = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_object(
    code: int,
    reason: str,
    message: str,
    details: Obj | None = None,
    metadata: Obj | None = None,
) -> Obj:
    status: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": metadata or {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        status["details"] = details
    status["code"] = code
    return status


def success_status(details: Obj) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


class ApiError(Exception):
    """Raised below the HTTP layer; the HTTP layer answers with the Status as the body."""

    def __init__(self, status: Obj, headers: dict[str, str] | None = None) -> None:
        super().__init__(status.get("message", ""))
        self.status = status
        self.headers = headers or {}

    @property
    def code(self) -> int:
        return int(self.status["code"])

    @property
    def reason(self) -> str:
        return str(self.status.get("reason", ""))


def _details(rt: ResourceType, name: str, uid: str | None = None) -> Obj:
    details: Obj = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    if uid:
        details["uid"] = uid
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(status_object(404, "NotFound", f'{rt.group_resource} "{name}" not found', _details(rt, name)))


def namespace_not_found(namespace: str) -> ApiError:
    return ApiError(
        status_object(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"})
    )


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        status_object(409, "AlreadyExists", f'{rt.group_resource} "{name}" already exists', _details(rt, name))
    )


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        status_object(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {why}',
            _details(rt, name),
        )
    )


STALE_OBJECT = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(rt: ResourceType, name: str, causes: list[Obj]) -> ApiError:
    """causes: [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.x"}, ...]."""
    rendered = [f"{c['field']}: {c['message']}" for c in causes]
    summary = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    details: Obj = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.kind
    details["causes"] = causes
    return ApiError(status_object(422, "Invalid", f'{rt.qualified_kind} "{name}" is invalid: {summary}', details))


def bad_request(message: str) -> ApiError:
    return ApiError(status_object(400, "BadRequest", message))


def internal_error(cause: str) -> ApiError:
    return ApiError(
        status_object(500, "InternalError", f"Internal error occurred: {cause}", {"causes": [{"message": cause}]})
    )


def expired(message: str, metadata: Obj | None = None) -> ApiError:
    return ApiError(status_object(410, "Expired", message, metadata=metadata))


def too_many_requests(message: str, retry_after_s: int) -> ApiError:
    return ApiError(
        status_object(429, "TooManyRequests", message, {"retryAfterSeconds": retry_after_s}),
        {"Retry-After": str(retry_after_s)},
    )


def resource_not_served() -> ApiError:
    return ApiError(status_object(404, "NotFound", "the server could not find the requested resource", {}))


def method_not_allowed(message: str) -> ApiError:
    return ApiError(status_object(405, "MethodNotAllowed", message, {}))


def unsupported_media_type(content_type: str) -> ApiError:
    accepted = (
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, "
        "application/strategic-merge-patch+json"
    )
    return ApiError(
        status_object(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format ({content_type}) - "
            f"accepted media types include: {accepted}",
        )
    )


def required(field_path: str) -> Obj:
    return {"reason": "FieldValueRequired", "message": "Required value", "field": field_path}


def invalid_value(field_path: str, value: Any, why: str) -> Obj:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {shown}: {why}", "field": field_path}


def not_supported(field_path: str, value: Any, allowed: list[str]) -> Obj:
    options = ", ".join(f'"{a}"' for a in allowed)
    return {
        "reason": "FieldValueNotSupported",
        "message": f'Unsupported value: "{value}": supported values: {options}',
        "field": field_path,
    }
