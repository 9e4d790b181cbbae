"""FakeKubeServer: the HTTP face of the fake apiserver (an aiohttp application on 127.0.0.1) and the hooks
tests use to control it."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import yaml
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration

from . import discovery, errors, resources, strategies
from .failures import InjectedFailure
from .jsonutil import clone, dumps, loads
from .patch import JSON_PATCH, PATCH_TYPES
from .registry import Registry
from .resources import MUTATING_WEBHOOKS, NAMESPACES, VALIDATING_WEBHOOKS, ResourceType
from .selectors import SelectorError, parse_field_selector, parse_label_selector
from .store import ObjectStore
from .users import ADMIN, GROUPS_HEADER, USER_HEADER, UserInfo
from .watch import WatchHub, WatchRequest
from .webhooks import AdmissionRecord, WebhookDispatcher

Obj = dict[str, Any]

log = logging.getLogger(__name__)

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True)
class RequestRecord:
    """One request as served, for tests to assert on (`server.request_log`)."""

    method: str
    path: str
    query: str
    verb: str  # the Kubernetes verb, or "" for discovery and unknown paths
    resource: str  # "jobs.batch", "jobs.batch/status", or ""
    namespace: str
    name: str
    code: int
    user: str


@dataclass(frozen=True)
class _Target:
    rt: ResourceType
    namespace: str | None  # None: cluster-scoped, or a list/watch across all namespaces
    name: str | None
    subresource: str


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true")


def _json(obj: Obj, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=dumps(obj),
        status=status,
        content_type="application/json",
        headers=headers,
    )


class FakeKubeServer:
    """An in-memory Kubernetes API server speaking the real REST and watch protocol.

    history_limit: how many writes the watch/continue history keeps before older resourceVersions expire
    (410). bookmark_interval_s: how often a watch with allowWatchBookmarks=true gets a BOOKMARK.
    require_namespaces: namespaced creates in a namespace that does not exist get 404, as with
    NamespaceLifecycle. namespaces: created at construction (labelled kubernetes.io/metadata.name like real
    ones).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        history_limit: int = 10_000,
        bookmark_interval_s: float = 1.0,
        require_namespaces: bool = True,
        namespaces: Iterable[str] = DEFAULT_NAMESPACES,
    ) -> None:
        self.host = host
        self.store = ObjectStore(history_limit=history_limit)
        self._service_urls: dict[tuple[str, str, int], str] = {}
        self.webhooks = WebhookDispatcher(self.store, self._resolve_service)
        self.registry = Registry(self.store, self.webhooks, require_namespaces=require_namespaces)
        self.watches = WatchHub(self.store, bookmark_interval_s)
        self.request_log: list[RequestRecord] = []
        self._failures: list[InjectedFailure] = []
        self._tokens: dict[str, UserInfo] = {}
        self._clients: list[ApiClient] = []
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._discovery: dict[str, Obj] = {}
        for namespace in namespaces:
            self._put_directly(NAMESPACES, {"metadata": {"name": namespace}})

    # lifecycle

    async def start(self) -> Self:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # Watch streams never finish on their own, so stop() ends them first; the grace period is then short.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        self._discovery = discovery.documents(f"{self.host}:{self._port}")
        return self

    async def stop(self) -> None:
        self.watches.drop_all()
        for client in self._clients:
            await client.close()
        self._clients.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.webhooks.close()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        if not self._port:
            raise RuntimeError("the server is not started")
        return f"http://{self.host}:{self._port}"

    # clients

    def kubeconfig(self, path: str | Path, *, user: str | None = None, namespace: str = "default") -> Path:
        """Write a kubeconfig for kubernetes_asyncio.config.load_kube_config and kubectl. With user=...,
        requests made through it authenticate as that user (via a bearer token registered here)."""
        user_entry: Obj = {}
        if user is not None:
            token = f"fake-token-{user}"
            self.add_token(token, user)
            user_entry = {"token": token}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fakekube", "cluster": {"server": self.url}}],
            "users": [{"name": "fakekube-user", "user": user_entry}],
            "contexts": [
                {
                    "name": "fakekube",
                    "context": {"cluster": "fakekube", "user": "fakekube-user", "namespace": namespace},
                }
            ],
            "current-context": "fakekube",
            "preferences": {},
        }
        target = Path(path)
        target.write_text(yaml.safe_dump(config, sort_keys=False))
        return target

    async def api_client(self, *, user: str | None = None, groups: Iterable[str] | None = None) -> ApiClient:
        """A kubernetes_asyncio ApiClient pointed at this server; closed by stop() if the test does not close
        it."""
        configuration = Configuration(host=self.url)
        client = ApiClient(configuration=configuration)
        if user is not None:
            client.set_default_header(USER_HEADER, user)
        if groups is not None:
            client.set_default_header(GROUPS_HEADER, ",".join(groups))
        self._clients.append(client)
        return client

    def add_token(self, token: str, username: str, groups: Iterable[str] = ("system:authenticated",)) -> None:
        """Requests with `Authorization: Bearer <token>` are made as this user."""
        self._tokens[token] = UserInfo(username, tuple(groups))

    def _user(self, request: web.Request) -> UserInfo:
        name = request.headers.get(USER_HEADER)
        if name:
            raw_groups = request.headers.get(GROUPS_HEADER)
            groups = tuple(g for g in (raw_groups or "").split(",") if g) or ("system:authenticated",)
            return UserInfo(name, groups)
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer ") and auth[7:] in self._tokens:
            return self._tokens[auth[7:]]
        return ADMIN

    # test hooks

    def inject_failure(
        self,
        code: int = 500,
        *,
        verb: str | None = None,
        resource: str | None = None,
        path: str | None = None,
        times: int = 1,
        message: str | None = None,
        retry_after_s: int = 1,
        user: str | None = None,
    ) -> InjectedFailure:
        """The next `times` requests matching verb/resource/path answer `code` with a proper Status body (429
        also sends Retry-After). user= limits it to requests made as that username. Returns the rule; its
        .hits counts the requests it failed."""
        failure = InjectedFailure(
            code=code,
            verb=verb,
            resource=resource,
            path=path,
            remaining=times,
            message=message,
            retry_after_s=retry_after_s,
            user=user,
        )
        self._failures.append(failure)
        return failure

    def clear_failures(self) -> None:
        self._failures.clear()

    def drop_watches(self, *, abrupt: bool = False) -> int:
        """End every open watch stream: cleanly (the final chunk is sent; clients see end-of-stream), or with
        abrupt=True by cutting the TCP connection mid-stream. Returns how many were open."""
        return self.watches.drop_all(abrupt=abrupt)

    def send_bookmarks(self) -> int:
        """Send a BOOKMARK now on every open watch that asked for bookmarks (allowWatchBookmarks=true).
        Returns how many watch streams are open."""
        return self.watches.bookmark_all()

    async def wait_for_watches(self, count: int = 1, timeout_s: float = 5.0) -> None:
        """Wait until at least `count` watch streams are open (to avoid racing a watcher that is still
        connecting)."""
        await self.watches.wait_for_open(count, timeout_s)

    @property
    def open_watches(self) -> int:
        return self.watches.open_count

    def compact(self, resource_version: int | str | None = None) -> int:
        """Forget history up to resource_version (default: now). Watches and continue tokens from before it
        get 410 Expired. Returns the compacted resourceVersion."""
        return self.store.compact(int(resource_version) if resource_version is not None else None)

    @property
    def resource_version(self) -> str:
        return str(self.store.resource_version)

    @property
    def admission_log(self) -> list[AdmissionRecord]:
        return self.webhooks.log

    def set_service_url(self, namespace: str, name: str, url: str, port: int = 443) -> None:
        """Where a webhook clientConfig.service {namespace, name, port} is reached, e.g.
        "https://127.0.0.1:8443". The serving certificate is still verified for <name>.<namespace>.svc, as the
        real apiserver does."""
        self._service_urls[(namespace, name, port)] = url

    def _resolve_service(self, namespace: str, name: str, port: int) -> str | None:
        return self._service_urls.get((namespace, name, port))

    def register_webhooks(self, mutating: Obj | None = None, validating: Obj | None = None) -> list[Obj]:
        """Create or replace webhook configurations as an admin would, validated like the real API."""
        stored = []
        for rt, body in ((MUTATING_WEBHOOKS, mutating), (VALIDATING_WEBHOOKS, validating)):
            if body is not None:
                stored.append(self._put_directly(rt, body))
        return stored

    def objects(self, kind: str, namespace: str | None = None) -> list[Obj]:
        """Every stored object of a kind ("Job", "jobs", "jobs.batch", "events.events.k8s.io", ...), with kind
        and apiVersion set, in key order."""
        rt = resources.find(kind)
        return [rt.to_wire(o) for o in self.store.list(rt.storage, namespace if rt.namespaced else None)]

    def get_object(self, kind: str, namespace: str, name: str) -> Obj | None:
        rt = resources.find(kind)
        stored = self.store.get(rt.storage, namespace if rt.namespaced else "", name)
        return rt.to_wire(stored) if stored is not None else None

    async def create(self, body: Obj, *, user: UserInfo = ADMIN) -> Obj:
        """Create an object in-process through the full pipeline (defaults, webhooks, validation, watch
        events)."""
        rt = self._type_of(body)
        namespace = (body.get("metadata") or {}).get("namespace") or "default"
        return await self.registry.create(rt, namespace, body, user=user)

    @staticmethod
    def _type_of(body: Obj) -> ResourceType:
        for rt in resources.RESOURCE_TYPES:
            if rt.api_version == body.get("apiVersion") and rt.kind == body.get("kind"):
                return rt
        raise KeyError(f"the fake API server does not serve {body.get('apiVersion')}/{body.get('kind')}")

    def _put_directly(self, rt: ResourceType, body: Obj) -> Obj:
        """Create or replace without admission (webhook configurations are never sent to webhooks anyway)."""
        obj = clone(body)
        obj.setdefault("apiVersion", rt.api_version)
        obj.setdefault("kind", rt.kind)
        strategies.apply_defaults(rt, obj)
        name = obj["metadata"].get("name", "")
        existing = self.store.get(rt.storage, "", name) if name else None
        if existing is None:
            strategies.prepare_for_create(rt, obj, "")
            strategies.validate(rt, obj, None)
            return self.store.create(rt.storage, obj)
        strategies.prepare_for_update(rt, obj, existing, "")
        strategies.validate(rt, obj, existing)
        return self.store.update(rt.storage, obj, None)

    # HTTP

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        verb, target, user = "", None, ADMIN
        try:
            user = self._user(request)
            protobuf = discovery.wants_protobuf(request.headers.get("Accept", ""))
            if request.method == "GET" and request.path == "/openapi/v2" and protobuf:
                response: web.StreamResponse = web.Response(
                    body=discovery.openapi_v2_protobuf(), content_type=discovery.OPENAPI_V2_PROTOBUF
                )
            elif request.method == "GET" and request.path.rstrip("/") in self._discovery:
                response = _json(self._discovery[request.path.rstrip("/")])
            elif request.path in ("/healthz", "/readyz", "/livez"):
                response = web.Response(text="ok")
            else:
                target = self._route(request.path)
                verb = self._verb(request, target)
                if target.rt.namespaced and target.namespace is None and verb not in ("list", "watch"):
                    raise errors.resource_not_served()  # only list and watch span all namespaces
                self._fail_if_injected(verb, target, request.path, user.username)
                response = await self._serve(request, verb, target, user)
        except errors.ApiError as exc:
            response = _json(exc.status, exc.code, exc.headers)
        except Exception as exc:
            # A bug in the fake: answer like an apiserver that panicked, and leave the traceback in the log.
            log.exception("fake API server failed on %s %s", request.method, request.path)
            failure = errors.internal_error(f"{type(exc).__name__}: {exc}")
            response = _json(failure.status, failure.code)
        self.request_log.append(
            RequestRecord(
                request.method,
                request.path,
                request.query_string,
                verb,
                (target.rt.group_resource + (f"/{target.subresource}" if target.subresource else "")) if target else "",
                (target.namespace or "") if target else "",
                (target.name or "") if target else "",
                response.status,
                user.username,
            )
        )
        return response

    def _route(self, path: str) -> _Target:
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.resource_not_served()
        if rest and rest[0] == "watch":  # the deprecated /watch/ path prefix
            rest = rest[1:]
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = resources.lookup(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise errors.resource_not_served()
        rt = resources.lookup(group, version, rest[0])
        if rt is None:
            raise errors.resource_not_served()
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else ""
        if subresource and subresource not in rt.subresources:
            raise errors.resource_not_served()
        if rt.namespaced and name is not None and namespace is None:
            raise errors.resource_not_served()
        return _Target(rt, namespace, name, subresource)

    @staticmethod
    def _verb(request: web.Request, target: _Target) -> str:
        method = request.method
        if method == "GET":
            watching = _truthy(request.query.get("watch")) or "/watch/" in request.path
            if target.name is None:
                return "watch" if watching else "list"
            return "watch" if watching else "get"
        verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
        if method not in verbs:
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        if method == "DELETE" and target.name is None:
            return "deletecollection"
        if method == "POST" and target.name is not None:
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        if method in ("PUT", "PATCH") and target.name is None:
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        return verbs[method]

    def _fail_if_injected(self, verb: str, target: _Target, path: str, username: str) -> None:
        resource = target.rt.group_resource + (f"/{target.subresource}" if target.subresource else "")
        plural = target.rt.plural + (f"/{target.subresource}" if target.subresource else "")
        for failure in self._failures:
            if failure.matches(verb, resource, plural, path, username):
                failure.remaining -= 1
                failure.hits += 1
                raise failure.error()

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        try:
            if request.content_type in ("application/yaml", "application/apply-patch+yaml"):
                return yaml.safe_load(raw)
            return loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"the body of the request could not be decoded: {exc}") from None

    @staticmethod
    def _dry_run(request: web.Request) -> bool:
        values = request.query.getall("dryRun", [])
        for value in values:
            if value != "All":
                raise errors.bad_request(f'Unsupported value: "{value}": supported values: "All"')
        return bool(values)

    async def _serve(self, request: web.Request, verb: str, target: _Target, user: UserInfo) -> web.StreamResponse:
        rt, q = target.rt, request.query
        warnings: list[str] = []
        namespace = target.namespace or ""
        response_status = 200
        if verb == "watch":
            return await self._watch(request, target)
        if verb in ("get", "list"):
            if verb == "get":
                obj = self.registry.get(rt, namespace, target.name or "")
                if discovery.wants_table(request.headers.get("Accept", "")):
                    return _json(discovery.table(rt, [obj], obj["metadata"].get("resourceVersion", "")))
                return _json(obj)
            limit = q.get("limit")
            listing = self.registry.list(
                rt,
                target.namespace,
                label_selector=q.get("labelSelector"),
                field_selector=q.get("fieldSelector"),
                limit=int(limit) if limit and limit.isdigit() else None,
                continue_token=q.get("continue"),
                resource_version=q.get("resourceVersion"),
                resource_version_match=q.get("resourceVersionMatch"),
            )
            if discovery.wants_table(request.headers.get("Accept", "")):
                meta = listing["metadata"]
                return _json(discovery.table(rt, listing["items"], meta["resourceVersion"], meta.get("continue")))
            return _json(listing)
        dry_run = self._dry_run(request)
        field_manager = q.get("fieldManager")
        body = await self._body(request)
        if verb == "create":
            obj = await self.registry.create(
                rt,
                namespace,
                body,
                user=user,
                dry_run=dry_run,
                field_manager=field_manager,
                warnings=warnings,
            )
            response_status = 201
        elif verb == "update":
            obj = await self.registry.update(
                rt,
                namespace,
                target.name or "",
                body,
                user=user,
                subresource=target.subresource,
                dry_run=dry_run,
                field_manager=field_manager,
                warnings=warnings,
            )
        elif verb == "patch":
            content_type = request.content_type
            if content_type not in PATCH_TYPES:
                raise errors.unsupported_media_type(content_type)
            if body is None:
                body = [] if content_type == JSON_PATCH else {}
            obj, created = await self.registry.patch(
                rt,
                namespace,
                target.name or "",
                body,
                content_type,
                user=user,
                subresource=target.subresource,
                dry_run=dry_run,
                field_manager=field_manager,
                warnings=warnings,
            )
            response_status = 201 if created else 200
        elif verb == "delete":
            obj = await self.registry.delete(
                rt,
                namespace,
                target.name or "",
                user=user,
                options=self._delete_options(request, body),
                dry_run=dry_run,
                warnings=warnings,
            )
        else:  # deletecollection
            obj = await self.registry.delete_collection(
                rt,
                target.namespace,
                user=user,
                label_selector=q.get("labelSelector"),
                field_selector=q.get("fieldSelector"),
                options=self._delete_options(request, body),
                dry_run=dry_run,
                warnings=warnings,
            )
        headers = {"Warning": ", ".join(f'299 - "{w}"' for w in warnings)} if warnings else None
        return _json(obj, response_status, headers)

    @staticmethod
    def _delete_options(request: web.Request, body: Any) -> Obj:
        options: Obj = dict(body) if isinstance(body, dict) else {}
        if "propagationPolicy" in request.query:
            options["propagationPolicy"] = request.query["propagationPolicy"]
        if "gracePeriodSeconds" in request.query:
            options["gracePeriodSeconds"] = int(request.query["gracePeriodSeconds"])
        return options

    async def _watch(self, request: web.Request, target: _Target) -> web.StreamResponse:
        q = request.query
        try:
            label_match = parse_label_selector(q.get("labelSelector"))
            field_match = parse_field_selector(q.get("fieldSelector"), target.rt.field_labels)
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from None
        if target.name is not None:  # GET .../jobs/NAME?watch=1, the older way to watch one object
            by_name = parse_field_selector(f"metadata.name={target.name}", target.rt.field_labels)
            selected = field_match
            field_match = lambda obj: by_name(obj) and selected(obj)  # noqa: E731
        timeout = q.get("timeoutSeconds")
        watch_request = WatchRequest(
            rt=target.rt,
            namespace=target.namespace,
            label_match=label_match,
            field_match=field_match,
            resource_version=q.get("resourceVersion", ""),
            allow_bookmarks=_truthy(q.get("allowWatchBookmarks")),
            timeout_s=float(timeout) if timeout else None,
            send_initial_events=_truthy(q.get("sendInitialEvents")),
        )
        return await self.watches.serve(request, watch_request)
