"""The end-to-end rig: the fake API server, kuota's real webhook over TLS registered from config/deploy, kuota's
controller component in-process (as `kuota serve --components controller` builds it), a fake kubelet, and a
SQLite ledger."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from kubernetes_asyncio import client

from kuota.components.controller import ControllerComponent
from kuota.runtime import Runtime
from tests.fakekube import FakeKubelet, FakeKubeServer
from webhooks.server import WebhookServer
from webhooks.state import DEFAULT_SERVICE_ACCOUNT, WebhookState
from webhooks.tls import ReloadingTLS

HERE = Path(__file__).parent
REPO = HERE.parent.parent
QUOTA = HERE / "quota.yaml"
WEBHOOKS = REPO / "config" / "deploy" / "webhooks.yaml"


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
    requeue_backoff_ms: int = 10_000


@dataclass
class Rig:
    server: FakeKubeServer
    kubelet: FakeKubelet
    tmp: Path
    batch: client.BatchV1Api
    core: client.CoreV1Api
    controllers: list[ControllerComponent] = field(default_factory=list)

    @property
    def database_url(self) -> str:
        return f"sqlite+aiosqlite:///{self.tmp / 'ledger.db'}"

    async def controller(self, **overrides: Any) -> ControllerComponent:
        kubeconfig = self.server.kubeconfig(self.tmp / f"kc-{len(self.controllers)}", user=DEFAULT_SERVICE_ACCOUNT)
        options = Options(config=QUOTA, kubeconfig=kubeconfig, database_url=self.database_url)
        for key, value in overrides.items():
            setattr(options, key, value)
        runtime = Runtime.from_file(QUOTA) if options.config is not None else Runtime.__new__(Runtime)
        component = ControllerComponent(options, runtime)
        await component.start()
        self.controllers.append(component)
        return component

    def job(self, name: str) -> dict[str, Any]:
        job = self.server.get_object("Job", "default", name)
        assert job is not None, name
        return job


async def eventually(check: Callable[[], Any | Awaitable[Any]], timeout_s: float = 10.0, what: str = "") -> Any:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = check()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not reached in {timeout_s}s: {what or check}")
        await asyncio.sleep(0.05)


async def start_webhook(server: FakeKubeServer, tmp: Path) -> WebhookServer:
    ca = trustme.CA()
    leaf = ca.issue_cert("kuota-webhook.kuota-system.svc", "127.0.0.1")
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    state = WebhookState.from_file(QUOTA)
    webhook = WebhookServer(state, ReloadingTLS(cert, key), host="127.0.0.1", port=0, shutdown_timeout=0.5)
    await webhook.start()
    bundle = base64.b64encode(ca.cert_pem.bytes()).decode()
    mutating, validating = list(yaml.safe_load_all(WEBHOOKS.read_text()))
    for document in (mutating, validating):
        for hook in document["webhooks"]:
            hook["clientConfig"]["caBundle"] = bundle
    server.register_webhooks(mutating=mutating, validating=validating)
    server.set_service_url("kuota-system", "kuota-webhook", f"https://127.0.0.1:{webhook.port}")
    return webhook


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with FakeKubeServer(bookmark_interval_s=0.2) as server:
        await server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kuota-system"}})
        webhook = await start_webhook(server, tmp_path)
        api = await server.api_client(user="alice")
        async with FakeKubelet(server, default_runtime_s=0.5) as kubelet:
            rig = Rig(server, kubelet, tmp_path, client.BatchV1Api(api), client.CoreV1Api(api))
            try:
                yield rig
            finally:
                for component in rig.controllers:
                    await component.stop()
        await webhook.stop()
