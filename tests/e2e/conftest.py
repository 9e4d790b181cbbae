"""The end-to-end rig, on the real control plane of testing/cluster.

One control plane per test session (kube-apiserver, etcd, controller-manager, scheduler, kwok with four GPU
nodes), because starting it costs seconds; each test gets its own namespace, which is deleted afterwards. kuota's
identity is installed from config/deploy (Namespace, ServiceAccount, RBAC) and the controller runs with that
ServiceAccount's token, so every request it makes is authorised by the shipped least-privilege roles. The webhooks
are registered from config/deploy/webhooks.yaml with only `clientConfig` rewritten (a 127.0.0.1 URL and its
caBundle), so kube-apiserver itself evaluates their CEL matchConditions and calls kuota's webhook server over
TLS. Users act as `alice`, impersonated, with the built-in `edit` role in the test's namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client.exceptions import ApiException

from admission.labels import QUEUE_LABEL
from kuota.components.controller import ControllerComponent
from kuota.kind_manifests import widen_rbac, widen_webhooks
from kuota.runtime import Runtime
from tests.kube.controlplane import ControlPlane
from tests.kube.kinds import QUEUED, crd_paths, kind
from tests.kube.manifests import Obj, job_manifest
from tests.kube.proxy import FaultProxy
from webhooks.server import WebhookServer
from webhooks.state import WebhookState
from webhooks.tls import ReloadingTLS
from workloads.kind import JobKind
from workloads.registry import REGISTRY

HERE = Path(__file__).parent
REPO = HERE.parent.parent
DEPLOY = REPO / "config" / "deploy"
QUOTA_TEMPLATE = HERE / "quota.yaml"
KUOTA_SA = ("kuota-system", "kuota")
USER = "alice"
QUEUE = {"kuota.dev/queue": "ml"}
MERGE_PATCH = "application/merge-patch+json"
_names = itertools.count()


@dataclass
class Options:
    """What `kuota serve` would pass the controller component."""

    config: Path | None
    kubeconfig: Path | None
    database_url: str | None
    cluster: str = "kube"
    lease_name: str = "kuota-controller"
    lease_namespace: str = "kuota-system"
    lease_duration: int = 2
    config_map: str | None = None
    kube_qps: float = 200.0
    kube_burst: int = 400
    requeue_backoff_ms: int = 1_000
    kinds: tuple[str, ...] | None = None


def own_control_plane(root: Path, **up: Any) -> Iterator[ControlPlane]:
    """A control plane with kuota's identity installed, for the life of a fixture."""
    plane = ControlPlane(root)
    plane.up(nodes=up.pop("nodes", 4), **up)
    plane.install_kuota_identity()
    try:
        yield plane
    finally:
        plane.down()


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    yield from own_control_plane(tmp_path_factory.mktemp("cluster"))


async def admin_client(plane: ControlPlane, *, impersonate: str | None = None) -> client.ApiClient:
    configuration = client.Configuration()
    await kube_config.load_kube_config(config_file=str(plane.kubeconfig), client_configuration=configuration)
    api = client.ApiClient(configuration)
    if impersonate is not None:
        api.set_default_header("Impersonate-User", impersonate)
    return api


async def eventually(check: Callable[[], Any | Awaitable[Any]], timeout_s: float = 20.0, what: str = "") -> Any:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = check()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not reached in {timeout_s}s: {what or check}")
        await asyncio.sleep(0.1)


class Webhook:
    """kuota's webhook server on 127.0.0.1, registered with kube-apiserver from config/deploy/webhooks.yaml."""

    def __init__(
        self, plane: ControlPlane, tmp: Path, quota: Path, kinds: Sequence[JobKind] = (), *, namespace: str
    ) -> None:
        self.plane, self.tmp, self.quota, self.kinds = plane, tmp, quota, list(kinds)
        self.namespace = namespace
        """Where the probe that waits for kube-apiserver to call this server is sent (it must exist)."""
        self.server: WebhookServer | None = None
        self.called: set[str] = set()
        """The endpoints (mutate, validate) kube-apiserver has called on this server."""

    async def start(self) -> None:
        ca = trustme.CA()
        leaf = ca.issue_cert("kuota-webhook.kuota-system.svc", "127.0.0.1")
        cert, key = self.tmp / "webhook.crt", self.tmp / "webhook.key"
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        state = WebhookState.from_file(self.quota)
        self.server = WebhookServer(
            state,
            ReloadingTLS(cert, key),
            host="127.0.0.1",
            port=0,
            shutdown_timeout=0.5,
            observe=lambda endpoint, _: self.called.add(endpoint),
        )
        await self.server.start()
        documents = None
        if self.kinds:  # what `kuota manifests --kinds` makes of config/deploy for these kinds
            documents = widen_webhooks(yaml.safe_load_all((DEPLOY / "webhooks.yaml").read_text()), self.kinds)
        await asyncio.to_thread(self.plane.register_webhooks, self.server.port, ca.cert_pem.bytes(), documents)
        await self._until_called()

    async def _until_called(self, timeout_s: float = 30.0) -> None:
        """Until kube-apiserver calls this server's mutating and validating webhooks. It reads the configurations
        through a watch, so for a moment after they change it may still call the last test's server, which is
        gone: a test's first create would then fail on a refused connection. A server-side dry run of a queued
        Job goes through both webhooks and leaves nothing behind; whether kuota allows it does not matter."""
        probe = job_manifest("webhook-probe", namespace=self.namespace, labels={QUEUE_LABEL: "main"})
        admin = await admin_client(self.plane)
        try:
            jobs = client.BatchV1Api(admin)
            deadline = asyncio.get_running_loop().time() + timeout_s
            while True:
                with contextlib.suppress(ApiException):
                    await jobs.create_namespaced_job(self.namespace, probe, dry_run="All")
                if {"mutate", "validate"} <= self.called:
                    return
                if asyncio.get_running_loop().time() > deadline:
                    raise AssertionError(f"kube-apiserver did not call the webhook within {timeout_s:.0f} s")
                await asyncio.sleep(0.1)
        finally:
            await admin.close()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()


@dataclass
class Rig:
    plane: ControlPlane
    tmp: Path
    namespace: str
    quota: Path
    admin: client.ApiClient
    user: client.ApiClient
    webhook: Webhook | None = None
    controllers: list[ControllerComponent] = field(default_factory=list)
    proxies: list[FaultProxy] = field(default_factory=list)

    @property
    def database_url(self) -> str:
        return f"sqlite+aiosqlite:///{self.tmp / 'ledger.db'}"

    @property
    def batch(self) -> client.BatchV1Api:
        """The Jobs API as the user alice (RBAC: edit in this namespace)."""
        return client.BatchV1Api(self.user)

    def kuota_kubeconfig(self, *, server: str | None = None, name: str = "kuota") -> Path:
        token = self.plane.token(*KUOTA_SA)
        return self.plane.token_kubeconfig(self.tmp / f"kubeconfig-{name}-{next(_names)}", token, server=server)

    async def proxy(self) -> FaultProxy:
        proxy = await FaultProxy(self.plane.server, self.plane.pki, self.tmp / f"proxy-{len(self.proxies)}").start()
        self.proxies.append(proxy)
        return proxy

    async def controller(self, *, via: FaultProxy | None = None, **overrides: Any) -> ControllerComponent:
        kubeconfig = await asyncio.to_thread(self.kuota_kubeconfig, server=via.url if via else None)
        options = Options(config=self.quota, kubeconfig=kubeconfig, database_url=self.database_url)
        for key, value in overrides.items():
            setattr(options, key, value)
        component = ControllerComponent(options, Runtime.from_file(self.quota))
        await component.start()
        self.controllers.append(component)
        return component

    def manifest(self, name: str, **kwargs: Any) -> Obj:
        labels = {**QUEUE, **kwargs.pop("labels", {})}
        return job_manifest(name, namespace=self.namespace, labels=labels, **kwargs)

    async def create_job(self, name: str, **kwargs: Any) -> Obj:
        body = self.manifest(name, **kwargs)
        created = await self.batch.create_namespaced_job(self.namespace, body)
        return self.admin.sanitize_for_serialization(created)  # type: ignore[no-any-return]

    async def job(self, name: str) -> Obj:
        job = await client.BatchV1Api(self.admin).read_namespaced_job(name, self.namespace)
        return self.admin.sanitize_for_serialization(job)  # type: ignore[no-any-return]

    async def job_matches(self, name: str, predicate: Callable[[Obj], Any]) -> Any:
        return predicate(await self.job(name))

    async def wait_job(self, name: str, predicate: Callable[[Obj], Any], what: str, timeout_s: float = 20.0) -> Obj:
        await eventually(lambda: self.job_matches(name, predicate), timeout_s=timeout_s, what=f"{name}: {what}")
        return await self.job(name)

    async def annotations(self, name: str) -> dict[str, str]:
        return (await self.job(name))["metadata"].get("annotations") or {}

    async def reasons(self, name: str) -> list[str]:
        events = await client.CoreV1Api(self.admin).list_namespaced_event(self.namespace)
        return [e.reason for e in events.items if e.involved_object.name == name]

    async def told(self, name: str) -> dict[str, list[str]]:
        """The messages of the Events on `name`, by reason."""
        events = await client.CoreV1Api(self.admin).list_namespaced_event(self.namespace)
        out: dict[str, list[str]] = {}
        for e in events.items:
            if e.involved_object.name == name:
                out.setdefault(e.reason, []).append(e.message)
        return out

    # Any kind, through the custom objects API (a batch/v1 Job too: for that API it is only a path).

    def _api(self, *, admin: bool = False) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.admin if admin else self.user)

    async def create(self, obj: Obj) -> Obj:
        """Create as the user alice."""
        kind = _kind(obj["kind"])
        created = await self._api().create_namespaced_custom_object(
            kind.group, kind.version, self.namespace, kind.plural, obj
        )
        return created  # type: ignore[no-any-return]

    async def get(self, kind_name: str, name: str) -> Obj:
        kind = _kind(kind_name)
        found = await self._api(admin=True).get_namespaced_custom_object(
            kind.group, kind.version, self.namespace, kind.plural, name
        )
        return found  # type: ignore[no-any-return]

    async def patch(self, kind_name: str, name: str, body: Obj, *, status: bool = False) -> Obj:
        """A merge patch as alice; the status (an operator's write) as the cluster admin."""
        kind = _kind(kind_name)
        api = self._api(admin=status)
        call = api.patch_namespaced_custom_object_status if status else api.patch_namespaced_custom_object
        patched = await call(
            kind.group, kind.version, self.namespace, kind.plural, name, body, _content_type=MERGE_PATCH
        )
        return patched  # type: ignore[no-any-return]

    async def delete(self, kind_name: str, name: str) -> None:
        kind = _kind(kind_name)
        await self._api().delete_namespaced_custom_object(kind.group, kind.version, self.namespace, kind.plural, name)

    async def wait(
        self, kind: str, name: str, predicate: Callable[[Obj], Any], what: str, timeout_s: float = 20.0
    ) -> Obj:
        async def check() -> Any:
            return predicate(await self.get(kind, name))

        await eventually(check, timeout_s=timeout_s, what=f"{kind} {name}: {what}")
        return await self.get(kind, name)

    async def pods(self, job: str) -> list[Obj]:
        pods = await client.CoreV1Api(self.admin).list_namespaced_pod(self.namespace, label_selector=f"job-name={job}")
        return [self.admin.sanitize_for_serialization(p) for p in pods.items]


def _kind(name: str) -> JobKind:
    kind = REGISTRY.get(name)
    assert kind is not None, f"kuota has no job kind {name!r}"
    return kind


def suspended(job: Obj) -> bool:
    return bool(job["spec"].get("suspend"))


def running(job: Obj) -> bool:
    return job["spec"].get("suspend") is False


async def make_namespace(admin: client.ApiClient, name: str, labels: dict[str, str] | None = None) -> None:
    core = client.CoreV1Api(admin)
    await core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
    # alice may do in this namespace what the built-in `edit` role allows: create, patch and delete Jobs.
    await client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(
        name,
        {
            "metadata": {"name": "alice-edit"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
    )
    # The namespace's default ServiceAccount (the controller-manager creates it) must exist before Jobs make pods.
    await eventually(
        lambda: _has_default_sa(core, name), timeout_s=30, what=f"namespace {name} gets its default ServiceAccount"
    )


async def _has_default_sa(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        await core.read_namespaced_service_account("default", namespace)
    except ApiException:
        return False
    return True


async def delete_namespace(admin: client.ApiClient, name: str, *, wait_s: float = 60.0) -> None:
    core = client.CoreV1Api(admin)
    try:
        await core.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise

    async def gone() -> bool:
        try:
            await core.read_namespace(name)
        except ApiException as exc:
            return exc.status == 404
        return False

    if wait_s:
        await eventually(gone, timeout_s=wait_s, what=f"namespace {name} deleted")


def write_quota(tmp: Path, namespace: str, extra: str = "", template: Path = QUOTA_TEMPLATE) -> Path:
    """tests/e2e/quota.yaml for this test's namespace, plus what a test's `quota_extra` marker appends."""
    quota = tmp / "quota.yaml"
    quota.write_text(template.read_text().replace("NAMESPACE", namespace) + extra.replace("NAMESPACE", namespace))
    return quota


@pytest.fixture
async def rig(control_plane: ControlPlane, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    marker = request.node.get_closest_marker("quota_extra")
    labels = request.node.get_closest_marker("namespace_labels")
    async for value in rig_on(
        control_plane,
        tmp_path,
        quota_extra=marker.args[0] if marker else "",
        namespace_labels=labels.args[0] if labels else None,
    ):
        yield value


async def rig_on(
    plane: ControlPlane,
    tmp_path: Path,
    *,
    quota_extra: str = "",
    namespace_labels: dict[str, str] | None = None,
    kinds: Sequence[str] = (),
    template: Path = QUOTA_TEMPLATE,
) -> AsyncIterator[Rig]:
    """A namespace, a quota file and kuota's webhook for one test. With `kinds`, the quota file enables those job
    kinds (`jobKinds`) and the webhooks are registered for each, as `kuota manifests --kinds` widens them."""
    namespace = f"e2e-{os.getpid() % 1000}-{next(_names)}"
    admin = await admin_client(plane)
    user = await admin_client(plane, impersonate=USER)
    await make_namespace(admin, namespace, namespace_labels)
    if kinds:
        quota_extra += f"\njobKinds: [{', '.join(kinds)}]\n"
    quota = write_quota(tmp_path, namespace, quota_extra, template)
    webhook = Webhook(plane, tmp_path, quota, list(REGISTRY.enabled(kinds)), namespace=namespace)
    await webhook.start()
    rig = Rig(plane, tmp_path, namespace, quota, admin, user, webhook)
    try:
        yield rig
    finally:
        for component in rig.controllers:
            await component.stop()
        for proxy in rig.proxies:
            await proxy.stop()
        # Deleted in the background: the namespace controller takes seconds, and nothing of the next test's
        # depends on it (its own namespace, quota file and queue; leftover Jobs name a queue it does not know).
        await delete_namespace(admin, namespace, wait_s=0)
        await webhook.stop()
        try:
            await client.CoordinationV1Api(admin).delete_namespaced_lease("kuota-controller", "kuota-system")
        except ApiException as exc:
            if exc.status != 404:
                raise
        await user.close()
        await admin.close()


# Every kind: the CRDs, alice's rights on them, kuota's widened role.


def alice_may_use_the_kinds() -> dict[str, Any]:
    """What each operator's chart ships for its kinds: aggregated into the built-in `edit` role."""
    kinds = [kind(k) for k in QUEUED if kind(k).group not in ("", "batch")]  # `edit` has Jobs and Pods
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": "e2e-training-jobs-edit",
            "labels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"},
        },
        "rules": [
            {
                "apiGroups": sorted({k.group for k in kinds}),
                "resources": [*sorted({k.plural for k in kinds}), "trainingruntimes"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
            }
        ],
    }


@pytest.fixture(scope="module")
def kinds_plane(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """The session's control plane with the kinds' CRDs, and kuota's ClusterRole widened to them for this module
    (put back to config/deploy's Job-only role afterwards)."""
    control_plane.install_crds(crd_paths())
    control_plane.apply([alice_may_use_the_kinds()])
    shipped = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    control_plane.apply(widen_rbac(shipped, REGISTRY.enabled(QUEUED)))
    try:
        yield control_plane
    finally:
        control_plane.apply(shipped)


@pytest.fixture
async def krig(kinds_plane: ControlPlane, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    """A rig for every kind: the usual quota file, or the one a test's `quota_template` marker names."""
    marker = request.node.get_closest_marker("quota_template")
    template = HERE / marker.args[0] if marker else QUOTA_TEMPLATE
    async for value in rig_on(kinds_plane, tmp_path, kinds=QUEUED, template=template):
        yield value


@contextlib.asynccontextmanager
async def checkpoint_hook(checkpoint: str) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A job's checkpoint URL on 127.0.0.1 that answers every POST with `checkpoint`: its URL, and the requests."""
    calls: list[dict[str, Any]] = []

    async def answer(request: web.Request) -> web.Response:
        calls.append(await request.json())
        return web.json_response({"checkpoint": checkpoint})

    app = web.Application()
    app.router.add_post("/checkpoint", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/checkpoint", calls
    finally:
        await runner.cleanup()
