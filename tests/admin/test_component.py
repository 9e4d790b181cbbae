"""The serve component: refuses to start without tokens, serves HTTPS when given certificates."""

from __future__ import annotations

import ssl
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import pytest
import trustme

from admin.auth import add_token
from admin.component import AdminStartError, make_admin_component
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


def test_needs_a_token_file(tmp_path: Path) -> None:
    runtime = Runtime(load_config_text(CONFIG), CONFIG)
    with pytest.raises(AdminStartError, match="--admin-tokens"):
        make_admin_component(options(), runtime)
    with pytest.raises(AdminStartError, match="does not exist"):
        make_admin_component(options(admin_token_file=tmp_path / "missing.yaml"), runtime)


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
