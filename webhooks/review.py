"""AdmissionReview v1 on the wire: reading a request, writing a response.

A body that is not an AdmissionReview v1 with a request uid is a client error (ReviewError, answered 400): there is
no uid to echo, so no review can be answered. Everything else gets a well-formed response, also when the object
inside is nonsense, so that the API server reports kuota's message instead of a failed call.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

JSONPatch = list[dict[str, Any]]


class ReviewError(ValueError):
    """The body cannot be read as an AdmissionReview v1 request."""


@dataclass(slots=True)
class AdmissionRequest:
    uid: str
    operation: str
    namespace: str | None
    name: str | None
    sub_resource: str | None
    kind: Mapping[str, Any]
    """group/version/kind of the object (empty when the request does not say)."""
    username: str
    object: Any
    old_object: Any
    dry_run: bool


class Decision(NamedTuple):
    """The answer to one review. A named tuple rather than a frozen dataclass: the mutating webhook makes one for
    every Job, and a frozen dataclass costs four times as much to make."""

    allowed: bool
    patch: JSONPatch | None = None
    message: str = ""
    code: int = 200
    reason: str = ""
    causes: Sequence[Mapping[str, str]] = ()
    warnings: Sequence[str] = ()


ALLOW = Decision(allowed=True)


def deny(
    message: str, code: int = 403, reason: str = "Forbidden", causes: Sequence[Mapping[str, str]] = ()
) -> Decision:
    return Decision(allowed=False, message=message, code=code, reason=reason, causes=causes)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_review(body: bytes) -> AdmissionRequest:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"the body is not JSON ({exc}); send an {API_VERSION} {KIND}") from None
    if not isinstance(data, dict):
        raise ReviewError(f"the body is not a JSON object; send an {API_VERSION} {KIND}")
    if data.get("apiVersion") != API_VERSION or data.get("kind") != KIND:
        raise ReviewError(
            f"expected apiVersion {API_VERSION} and kind {KIND}, got {str(data.get('apiVersion'))[:60]!r} and "
            f"{str(data.get('kind'))[:60]!r}; list only v1 in the webhook's admissionReviewVersions"
        )
    request = data.get("request")
    if not isinstance(request, dict):
        raise ReviewError(f"the {KIND} has no request object; send the review to answer in `request`")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError(f"the {KIND} request has no uid; a response must echo it")
    kind = request.get("kind")
    user = request.get("userInfo")
    username = user.get("username") if isinstance(user, dict) else None
    operation = request.get("operation")
    # Positional, in the order of the fields: keywords cost half as much again for ten fields, on every review.
    return AdmissionRequest(
        uid,
        operation if isinstance(operation, str) else "",
        _text(request.get("namespace")),
        _text(request.get("name")),
        _text(request.get("subResource")),
        kind if isinstance(kind, dict) else {},
        username if isinstance(username, str) else "",
        request.get("object"),
        request.get("oldObject"),
        request.get("dryRun") is True,
    )


# An allowing response is written as bytes around its uid, exactly as orjson would write the whole review: most
# answers are a plain allow, and building and dumping the nested dicts cost more than the rest of such a review.
_ALLOWED_HEAD = b'{"apiVersion":"%s","kind":"%s","response":{"uid":' % (API_VERSION.encode(), KIND.encode())
_ALLOWED_TAIL = b',"allowed":true}}'


def render_response(uid: str, decision: Decision) -> bytes:
    if not decision.allowed:
        return _render_denied(uid, decision)
    if not decision.patch and not decision.warnings:
        return _ALLOWED_HEAD + orjson.dumps(uid) + _ALLOWED_TAIL
    parts = [_ALLOWED_HEAD, orjson.dumps(uid), b',"allowed":true']
    if decision.patch:
        # Base64 needs no escaping inside a JSON string.
        parts += (b',"patchType":"JSONPatch","patch":"', base64.b64encode(orjson.dumps(decision.patch)), b'"')
    if decision.warnings:
        parts += (b',"warnings":', orjson.dumps(list(decision.warnings)))
    parts.append(b"}}")
    return b"".join(parts)


def _render_denied(uid: str, decision: Decision) -> bytes:
    status: dict[str, Any] = {
        "status": "Failure",
        "message": decision.message,
        "reason": decision.reason,
        "code": decision.code,
    }
    if decision.causes:
        status["details"] = {"causes": list(decision.causes)}
    response: dict[str, Any] = {"uid": uid, "allowed": False, "status": status}
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def render_bad_request(message: str) -> bytes:
    """A metav1.Status for bodies that are not reviews (sent with HTTP 400)."""
    return orjson.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
            "reason": "BadRequest",
            "code": 400,
        }
    )


def pointer(*parts: str) -> str:
    """An RFC 6901 JSON pointer: label keys such as `kuota.dev/queue` need their `/` escaped."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)
