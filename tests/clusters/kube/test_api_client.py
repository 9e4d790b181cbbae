"""The two shortcuts KubeApi takes inside kubernetes-asyncio: the proxy and ~/.netrc are looked up once, and plain
JSON bodies are sent as they are. Both must leave what goes on the wire as the client would have made it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client

from clusters.kube.api import pass_plain_json_through, resolve_environment_once

HOST = "https://api.cluster.example:6443"


def api_client() -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = HOST
    return client.ApiClient(configuration)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text("")
    monkeypatch.setenv("NETRC", str(netrc))
    return netrc


async def test_a_proxy_for_the_api_server_becomes_the_clients_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.example:3128")
    api = api_client()
    resolve_environment_once(api)
    session = api.rest_client.pool_manager
    assert isinstance(session, aiohttp.ClientSession)
    assert not session.trust_env
    assert api.rest_client.proxy == "http://proxy.example:3128"
    assert api.rest_client.proxy_headers["Proxy-Authorization"].startswith("Basic ")
    await api.close()


async def test_no_proxy_for_the_host_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", ".cluster.example")
    api = api_client()
    resolve_environment_once(api)
    assert not api.rest_client.pool_manager.trust_env
    assert not api.rest_client.proxy
    await api.close()


@pytest.fixture
def netrc_for_the_host(clean_environment: Path) -> Path:
    clean_environment.write_text("machine api.cluster.example login kuota password secret\n")
    return clean_environment


@pytest.mark.usefixtures("netrc_for_the_host")
async def test_netrc_credentials_for_the_host_leave_the_session_as_it_was() -> None:
    api = api_client()
    resolve_environment_once(api)
    assert api.rest_client.pool_manager.trust_env  # aiohttp keeps reading ~/.netrc and sends the credentials
    await api.close()


async def test_plain_bodies_pass_as_they_are_and_others_take_the_clients_path() -> None:
    api = api_client()
    pass_plain_json_through(api)
    plain = {"spec": {"suspend": False}, "metadata": {"annotations": {"a": "b"}}, "n": [1, 2.5, None, True]}
    assert api.sanitize_for_serialization(plain) is plain
    dated = {"at": datetime(2026, 3, 1, 8, 0, tzinfo=UTC)}
    assert api.sanitize_for_serialization(dated) == {"at": "2026-03-01T08:00:00+00:00"}
    model = client.V1ObjectMeta(name="x", labels={"k": "v"})
    assert api.sanitize_for_serialization(model) == {"name": "x", "labels": {"k": "v"}}
    await api.close()
