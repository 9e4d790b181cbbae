"""Helpers for writing end-to-end tests against the fake API server: Job manifests and a tiny HTTPS admission
webhook (certificates from trustme) whose behaviour a test supplies as a function."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Self

import trustme
from aiohttp import web

from .kubelet import FAIL_ANNOTATION, RUNTIME_ANNOTATION

Obj = dict[str, Any]


def job_manifest(
    name: str | None = None,
    *,
    namespace: str = "default",
    generate_name: str = "job-",
    suspend: bool | None = None,
    runtime_s: float | None = None,
    fail: bool = False,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    parallelism: int | None = None,
    completions: int | None = None,
    cpu: str = "100m",
) -> Obj:
    """A minimal valid batch/v1 Job; runtime_s and fail set the fake kubelet's annotations."""
    meta: Obj = {"namespace": namespace}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = generate_name
    if labels:
        meta["labels"] = dict(labels)
    notes = dict(annotations or {})
    if runtime_s is not None:
        notes[RUNTIME_ANNOTATION] = str(runtime_s)
    if fail:
        notes[FAIL_ANNOTATION] = "true"
    if notes:
        meta["annotations"] = notes
    spec: Obj = {
        "template": {
            "spec": {
                "containers": [{"name": "main", "image": "busybox:1.36", "resources": {"requests": {"cpu": cpu}}}],
                "restartPolicy": "Never",
            }
        }
    }
    if suspend is not None:
        spec["suspend"] = suspend
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


# What a webhook function returns: None or True to allow, False to deny without a message, or a dict with
# any of {"allowed": bool, "patch": [JSON patch operations], "status": {"message": ..., "code": ...},
# "warnings": [...]}, or {"review": {...}} to answer with that body verbatim (to test malformed answers).
WebhookFunction = Callable[[Obj], Awaitable[Obj | bool | None] | Obj | bool | None]


def admission_response(uid: str, verdict: Obj | bool | None) -> Obj:
    if verdict is None or verdict is True:
        verdict = {"allowed": True}
    elif verdict is False:
        verdict = {"allowed": False}
    response: Obj = {"uid": uid, "allowed": bool(verdict.get("allowed", True))}
    if verdict.get("patch"):
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(verdict["patch"]).encode()).decode()
    for key in ("status", "warnings"):
        if key in verdict:
            response[key] = verdict[key]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class WebhookServer:
    """An HTTPS server on 127.0.0.1 serving admission webhooks at any path. Each path is routed to the
    function registered with `on(path, fn)`; every AdmissionReview request received is kept in `.reviews` as
    (path, review). The certificate is valid for 127.0.0.1, localhost and the given service DNS names."""

    def __init__(self, service_names: Iterable[str] = ("webhook-service.system.svc",)) -> None:
        self.ca = trustme.CA()
        self._cert = self.ca.issue_cert("127.0.0.1", "localhost", *service_names)
        self._handlers: dict[str, WebhookFunction] = {}
        self.reviews: list[tuple[str, Obj]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_bundle(self) -> str:
        """Base64 PEM, as clientConfig.caBundle wants it."""
        return base64.b64encode(self.ca.cert_pem.bytes()).decode()

    def on(self, path: str, fn: WebhookFunction) -> None:
        self._handlers[path] = fn

    async def start(self) -> Self:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._cert.configure_cert(context)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock, ssl_context=context).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.reviews.append((request.path, review))
        fn = self._handlers.get(request.path)
        if fn is None:
            return web.Response(status=404, text=f"no webhook at {request.path}")
        verdict = fn(review["request"])
        if isinstance(verdict, Awaitable):
            verdict = await verdict
        if isinstance(verdict, dict) and "review" in verdict:
            return web.json_response(verdict["review"])
        return web.json_response(admission_response(review["request"]["uid"], verdict))

    def client_config(self, path: str) -> Obj:
        return {"url": f"{self.url}{path}", "caBundle": self.ca_bundle}


def webhook_configuration(
    kind: str,
    name: str,
    hooks: list[Obj],
) -> Obj:
    """A Mutating/ValidatingWebhookConfiguration; each hook needs at least name, clientConfig and rules."""
    filled = [{"sideEffects": "None", "admissionReviewVersions": ["v1"], **hook} for hook in hooks]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": filled,
    }


def job_rule(*operations: str) -> Obj:
    return {
        "apiGroups": ["batch"],
        "apiVersions": ["v1"],
        "operations": list(operations) or ["CREATE"],
        "resources": ["jobs"],
    }
