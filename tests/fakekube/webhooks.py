"""Calls admission webhooks the way the real apiserver's admission plugins do: matching rules and selectors,
AdmissionReview v1 over HTTPS with the configuration's caBundle, timeouts, failurePolicy, JSONPatch from
mutating webhooks applied in order, validating webhooks in parallel, and the apiserver's error wording.

Not modelled: matchConditions (CEL; every rule-matching webhook is called), reinvocationPolicy IfNeeded,
matchPolicy Equivalent conversion (each resource is served in one version only), auditAnnotations."""

from __future__ import annotations

import asyncio
import base64
import ssl
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from . import errors
from .jsonutil import dumps, loads
from .patch import PatchError, json_patch
from .resources import MUTATING_WEBHOOKS, NAMESPACES, VALIDATING_WEBHOOKS, ResourceType
from .selectors import match_label_selector
from .store import ObjectStore
from .users import UserInfo

Obj = dict[str, Any]
# (namespace, name, port) of a webhook's clientConfig.service -> "https://host:port" to connect to, or None.
ServiceResolver = Callable[[str, str, int], str | None]


@dataclass(frozen=True)
class AdmissionAttributes:
    rt: ResourceType
    subresource: str
    operation: str  # CREATE | UPDATE | DELETE
    namespace: str
    name: str
    obj: Obj | None
    old_obj: Obj | None
    user: UserInfo
    dry_run: bool
    options: Obj


@dataclass(frozen=True)
class AdmissionRecord:
    """One webhook call, for tests to assert on (`server.admission_log`)."""

    configuration: str
    webhook: str
    operation: str
    resource: str  # "jobs.batch" or "jobs.batch/status"
    namespace: str
    name: str
    allowed: bool | None  # None: the call failed
    patched: bool = False
    error: str = ""


class _CallFailed(Exception):
    """The webhook could not be called or answered nonsense: failurePolicy decides."""


@dataclass
class _Hook:
    configuration: str
    spec: Obj
    mutating: bool

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))


@dataclass
class WebhookDispatcher:
    store: ObjectStore
    resolve_service: ServiceResolver
    log: list[AdmissionRecord] = field(default_factory=list)
    _session: aiohttp.ClientSession | None = None
    _ssl_contexts: dict[str, ssl.SSLContext] = field(default_factory=dict)
    # Webhooks per configuration kind, and the write to that storage they were read at.
    _hook_cache: dict[str, tuple[int, list[_Hook]]] = field(default_factory=dict)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(trust_env=False)
        return self._session

    # selection

    def _hooks(self, rt: ResourceType) -> list[_Hook]:
        """Every webhook of every configuration of this kind, read again only after a configuration changed."""
        version = self.store.last_write(rt.storage)
        cached = self._hook_cache.get(rt.storage)
        if cached is not None and cached[0] == version:
            return cached[1]
        hooks = [
            _Hook(cfg["metadata"]["name"], hook, rt is MUTATING_WEBHOOKS)
            for cfg in self.store.list(rt.storage)
            for hook in cfg.get("webhooks") or []
        ]
        self._hook_cache[rt.storage] = (version, hooks)
        return hooks

    def _matches(self, hook: Obj, attrs: AdmissionAttributes) -> bool:
        if not any(_rule_matches(rule, attrs) for rule in hook.get("rules") or []):
            return False
        labels_of = [_labels(o) for o in (attrs.obj, attrs.old_obj) if o is not None]
        if attrs.rt is NAMESPACES:
            ns_labels = labels_of[0] if labels_of else {}
            if not match_label_selector(hook.get("namespaceSelector"), ns_labels):
                return False
        elif attrs.rt.namespaced:
            namespace = self.store.peek(NAMESPACES.storage, "", attrs.namespace)
            if not match_label_selector(hook.get("namespaceSelector"), _labels(namespace or {})):
                return False
        selector = hook.get("objectSelector")
        return not selector or any(match_label_selector(selector, labels) for labels in labels_of)

    # dispatch

    async def mutate(self, attrs: AdmissionAttributes, warnings: list[str]) -> Obj | None:
        """Run matching mutating webhooks in configuration-name order; returns the possibly patched object."""
        obj = attrs.obj
        if _exempt(attrs):
            return obj
        for hook in self._hooks(MUTATING_WEBHOOKS):
            if not self._matches(hook.spec, attrs):
                continue
            current = replace(attrs, obj=obj)
            response = await self._call_with_policy(hook, current)
            if response is None:
                continue
            warnings.extend(response.get("warnings") or [])
            patch = response.get("patch")
            if patch and obj is not None:
                obj = self._apply_patch(hook, obj, response)
        return obj

    async def validate(self, attrs: AdmissionAttributes, warnings: list[str]) -> None:
        if _exempt(attrs):
            return
        hooks = [h for h in self._hooks(VALIDATING_WEBHOOKS) if self._matches(h.spec, attrs)]
        outcomes = await asyncio.gather(*(self._call_with_policy(h, attrs) for h in hooks), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            if outcome is not None:
                warnings.extend(outcome.get("warnings") or [])

    async def _call_with_policy(self, hook: _Hook, attrs: AdmissionAttributes) -> Obj | None:
        """The webhook's AdmissionResponse when it allowed the request; None when it failed and failurePolicy
        is Ignore. Raises the apiserver's error otherwise."""
        spec = hook.spec
        resource = attrs.rt.group_resource + (f"/{attrs.subresource}" if attrs.subresource else "")
        record = AdmissionRecord(
            hook.configuration, hook.name, attrs.operation, resource, attrs.namespace, attrs.name, None
        )
        if attrs.dry_run and spec.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise errors.bad_request(f'admission webhook "{hook.name}" does not support dry run')
        try:
            response = await self._call(hook, attrs)
        except _CallFailed as failure:
            self.log.append(replace(record, error=str(failure)))
            if spec.get("failurePolicy", "Fail") == "Ignore":
                return None
            raise errors.internal_error(f'failed calling webhook "{hook.name}": {failure}') from None
        allowed = bool(response.get("allowed"))
        self.log.append(replace(record, allowed=allowed, patched=bool(response.get("patch"))))
        if not allowed:
            raise _denied(hook.name, response.get("status"))
        if response.get("patch") and not hook.mutating:
            raise errors.internal_error(
                f'failed calling webhook "{hook.name}": received invalid webhook response: '
                "validating webhook may not return response.patch"
            )
        return response

    def _apply_patch(self, hook: _Hook, obj: Obj, response: Obj) -> Obj:
        if response.get("patchType") != "JSONPatch":
            raise errors.internal_error(
                f'failed calling webhook "{hook.name}": received invalid webhook response: '
                f"unsupported patch type {response.get('patchType')!r}"
            )
        try:
            operations = loads(base64.b64decode(response["patch"]))
            patched = json_patch(obj, operations)
        except (ValueError, PatchError) as exc:
            raise errors.internal_error(f"JSON patch from webhook {hook.name!r} could not be applied: {exc}") from None
        if not isinstance(patched, dict):
            raise errors.internal_error(f"webhook {hook.name!r} patched the object into a non-object")
        return patched

    # the call

    def _target(self, spec: Obj) -> tuple[str, str | None]:
        """(URL to POST to, TLS server name to verify when it differs from the URL's host)."""
        client = spec.get("clientConfig") or {}
        timeout = int(spec.get("timeoutSeconds") or 10)
        if client.get("url"):
            return _with_timeout(str(client["url"]), timeout), None
        service = client.get("service") or {}
        namespace, name = str(service.get("namespace", "")), str(service.get("name", ""))
        port = int(service.get("port") or 443)
        path = str(service.get("path") or "/")
        official = f"https://{name}.{namespace}.svc:{port}{path}"
        base = self.resolve_service(namespace, name, port)
        if base is None:
            shown = _with_timeout(official, timeout)
            raise _CallFailed(f'failed to call webhook: Post "{shown}": service "{name}" not found')
        # The real apiserver verifies the serving certificate for <name>.<namespace>.svc; so do we, wherever
        # the test maps the service to.
        return _with_timeout(base.rstrip("/") + path, timeout), f"{name}.{namespace}.svc"

    def _ssl_context(self, ca_bundle: str | None) -> ssl.SSLContext:
        key = ca_bundle or ""
        if key not in self._ssl_contexts:
            if ca_bundle:
                pem = base64.b64decode(ca_bundle).decode()
                self._ssl_contexts[key] = ssl.create_default_context(cadata=pem)
            else:
                self._ssl_contexts[key] = ssl.create_default_context()
        return self._ssl_contexts[key]

    async def _call(self, hook: _Hook, attrs: AdmissionAttributes) -> Obj:
        spec = hook.spec
        url, server_name = self._target(spec)
        uid = str(uuid.uuid4())
        review = {
            "kind": "AdmissionReview",
            "apiVersion": "admission.k8s.io/v1",
            "request": _request(uid, attrs),
        }
        try:
            context = self._ssl_context((spec.get("clientConfig") or {}).get("caBundle"))
        except (ValueError, ssl.SSLError) as exc:
            raise _CallFailed(f"failed to call webhook: invalid caBundle: {exc}") from None
        timeout = aiohttp.ClientTimeout(total=float(spec.get("timeoutSeconds") or 10))
        extra: Obj = {"server_hostname": server_name} if server_name else {}
        try:
            async with self._client().post(
                url,
                data=dumps(review),
                headers={"Content-Type": "application/json", "Accept": "application/json"},
                ssl=context,
                timeout=timeout,
                **extra,
            ) as resp:
                body = await resp.read()
                status = resp.status
        except TimeoutError:
            raise _CallFailed(f'failed to call webhook: Post "{url}": context deadline exceeded') from None
        except aiohttp.ClientConnectorError as exc:
            cause = (
                f"dial tcp {exc.host}:{exc.port}: connect: connection refused"
                if isinstance(exc.os_error, ConnectionRefusedError)
                else str(exc)
            )
            raise _CallFailed(f'failed to call webhook: Post "{url}": {cause}') from None
        except aiohttp.ClientError as exc:
            raise _CallFailed(f'failed to call webhook: Post "{url}": {exc}') from None
        if status != 200:
            text = body.decode(errors="replace")[:200]
            raise _CallFailed(
                f'failed to call webhook: an error on the server ("{text}") has prevented the request from succeeding'
            )
        return _check_response(body, uid)


def _exempt(attrs: AdmissionAttributes) -> bool:
    """Webhook configurations never go through webhooks, so a broken webhook cannot lock out its own fix."""
    return attrs.rt in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS)


def _with_timeout(url: str, timeout_s: int) -> str:
    parts = urlsplit(url)
    query = f"{parts.query}&timeout={timeout_s}s" if parts.query else f"timeout={timeout_s}s"
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", query, parts.fragment))


def _labels(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _rule_matches(rule: Obj, attrs: AdmissionAttributes) -> bool:
    rt = attrs.rt
    operations = rule.get("operations") or []
    if "*" not in operations and attrs.operation not in operations:
        return False
    if not {"*", rt.group} & set(rule.get("apiGroups") or []):
        return False
    if not {"*", rt.version} & set(rule.get("apiVersions") or []):
        return False
    scope = rule.get("scope") or "*"
    if scope == "Namespaced" and not rt.namespaced:
        return False
    if scope == "Cluster" and rt.namespaced:
        return False
    for resource in rule.get("resources") or []:
        # "jobs" is the resource only, "jobs/*" every subresource, "*" every resource, "*/*" everything (the
        # apiserver's rules.Matcher).
        res, _, sub = resource.partition("/")
        if res in ("*", rt.plural) and sub in ("*", attrs.subresource):
            return True
    return False


def _request(uid: str, attrs: AdmissionAttributes) -> Obj:
    rt = attrs.rt
    kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    resource = {"group": rt.group, "version": rt.version, "resource": rt.plural}
    request: Obj = {"uid": uid, "kind": kind, "resource": resource}
    if attrs.subresource:
        request["subResource"] = attrs.subresource
    request["requestKind"] = dict(kind)
    request["requestResource"] = dict(resource)
    if attrs.subresource:
        request["requestSubResource"] = attrs.subresource
    if attrs.name:
        request["name"] = attrs.name
    if attrs.namespace:
        request["namespace"] = attrs.namespace
    request.update(
        {
            "operation": attrs.operation,
            "userInfo": attrs.user.to_wire(),
            # Serialised as they are (the review is encoded before anything can change them).
            "object": attrs.obj,
            "oldObject": attrs.old_obj,
            "dryRun": attrs.dry_run,
            "options": attrs.options,
        }
    )
    return request


def _check_response(body: bytes, uid: str) -> Obj:
    def invalid(why: str) -> _CallFailed:
        return _CallFailed(f"received invalid webhook response: {why}")

    try:
        review = loads(body)
    except ValueError as exc:
        raise invalid(f"could not decode the body: {exc}") from None
    if not isinstance(review, dict):
        raise invalid("the body is not an object")
    if review.get("apiVersion") != "admission.k8s.io/v1" or review.get("kind") != "AdmissionReview":
        raise invalid(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, "
            f"got {review.get('apiVersion')}, Kind={review.get('kind')}"
        )
    response = review.get("response")
    if not isinstance(response, dict):
        raise invalid("response was absent")
    if response.get("uid") != uid:
        raise invalid(f"expected response.uid={uid!r}, got {response.get('uid')!r}")
    return response


def _denied(webhook: str, result: Obj | None) -> errors.ApiError:
    """webhookerrors.ToStatusErr: at least 400, status Failure, and the webhook's name in front of its
    message."""
    status = dict(result or {})
    denied_by = f'admission webhook "{webhook}" denied the request'
    code = int(status.get("code") or 0)
    if code < 400:
        code = 400
    if status.get("message"):
        message = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied_by}: {status['reason']}"
    else:
        message = f"{denied_by} without explanation"
    denial = errors.status_object(code, str(status.get("reason") or ""), message, status.get("details"))
    if not denial["reason"]:
        del denial["reason"]  # omitempty, as the real apiserver encodes it
    return errors.ApiError(denial)
