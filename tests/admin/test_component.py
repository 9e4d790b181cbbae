"""The serve component: starts locked without tokens (its probes still answer), serves HTTPS when given certificates."""

from __future__ import annotations

import ssl
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import pytest
import trustme

from admin.auth import add_token
from admin.component import AdminComponent, AdminStartError, make_admin_component
from kuota.runtime import Runtime
from quota.loader import load_config_text
from tests.admin.conftest import CONFIG


def options(**kw: object) -> SimpleNamespace:
    base = {
        "admin_host": "127.0.0.1",
        "admin_port": 0,
        "admin_token_file": None,
        "admin_tls_cert": None,
        "admin_tls_key": None,
    }
    return SimpleNamespace(**{**base, **kw})


async def locked_api(component: AdminComponent) -> tuple[int, int, str]:
    """Start the component; (status of /healthz, status of an API call with some token, its problem detail)."""
    await component.start()
    try:
        assert component._runner is not None
        port = component._runner.addresses[0][1]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as health:
                healthz = health.status
            headers = {"Authorization": "Bearer kuota_guess"}
            async with session.get(f"http://127.0.0.1:{port}/api/v1/queues", headers=headers) as api:
                return healthz, api.status, (await api.json())["detail"]
    finally:
        await component.stop()


async def test_without_a_token_file_the_api_is_locked_and_the_probes_answer() -> None:
    # The shipped Deployment runs the admin component for its probes; no tokens must not stop it from starting.
    runtime = Runtime(load_config_text(CONFIG), CONFIG)
    healthz, status, detail = await locked_api(make_admin_component(options(), runtime))
    assert (healthz, status) == (200, 401)
    assert "--admin-tokens" in detail


async def test_a_token_file_that_appears_later_is_picked_up(tmp_path: Path) -> None:
    runtime = Runtime(load_config_text(CONFIG), CONFIG)
    path = tmp_path / "tokens.yaml"  # an optional Secret not created yet
    component = make_admin_component(options(admin_token_file=path), runtime)
    healthz, status, detail = await locked_api(component)
    assert (healthz, status) == (200, 401)
    assert "does not exist yet" in detail
    token = add_token(path, "root", "admin")
    await component.start()
    try:
        assert component._runner is not None
        port = component._runner.addresses[0][1]
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": f"Bearer {token}"}
            async with session.get(f"http://127.0.0.1:{port}/api/v1/queues", headers=headers) as api:
                assert api.status == 503  # authenticated; no controller leads in this process
    finally:
        await component.stop()


def test_a_bad_token_file_still_stops_serve(tmp_path: Path) -> None:
    runtime = Runtime(load_config_text(CONFIG), CONFIG)
    bad = tmp_path / "tokens.yaml"
    bad.write_text("tokens: [{name: x}]\n")
    with pytest.raises(AdminStartError):
        make_admin_component(options(admin_token_file=bad), runtime)


async def test_https(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    token = add_token(tmp_path / "tokens.yaml", "root", "admin")
    runtime = Runtime(load_config_text(CONFIG), CONFIG)
    component = make_admin_component(
        options(
            admin_token_file=tmp_path / "tokens.yaml",
            admin_tls_cert=tmp_path / "cert.pem",
            admin_tls_key=tmp_path / "key.pem",
        ),
        runtime,
    )
    await component.start()
    try:
        assert component._runner is not None
        port = component._runner.addresses[0][1]
        client_tls = ssl.create_default_context()
        ca.configure_trust(client_tls)
        async with aiohttp.ClientSession() as session:
            async with session.get(
                f"https://127.0.0.1:{port}/api/v1/config", ssl=client_tls, headers={"Authorization": f"Bearer {token}"}
            ) as response:
                assert response.status == 200
                assert (await response.json())["teams"] == ["nlp", "vision"]
            async with session.get(
                f"https://127.0.0.1:{port}/api/v1/tree", ssl=client_tls, headers={"Authorization": f"Bearer {token}"}
            ) as response:
                assert response.status == 503  # no controller on this replica
    finally:
        await component.stop()
