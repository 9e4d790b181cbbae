"""`kuota certs`: a CA and serving certificate the webhook can serve and the API server can verify."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import ssl
import stat
from pathlib import Path

from cryptography import x509
from typer.testing import CliRunner

from kuota.cli import app
from quota.loader import load_config_file
from webhooks.server import WebhookServer
from webhooks.state import WebhookState
from webhooks.tls import ReloadingTLS

from .helpers import QUOTA_FILE

SERVICE_NAMES = [
    "kuota-webhook",
    "kuota-webhook.kuota-system",
    "kuota-webhook.kuota-system.svc",
    "kuota-webhook.kuota-system.svc.cluster.local",
]


def run_certs(out: Path, *extra: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        app, ["certs", "--service", "kuota-webhook", "--namespace", "kuota-system", "--out", str(out), *extra]
    )
    return result.exit_code, result.stdout, result.stderr


def test_certs_writes_a_ca_and_a_serving_certificate_and_prints_the_patches(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    code, stdout, _ = run_certs(out)
    assert code == 0
    ca_pem, cert_pem = (out / "ca.crt").read_bytes(), (out / "tls.crt").read_bytes()
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate(cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert sans == SERVICE_NAMES
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True

    bundle = base64.b64encode(ca_pem).decode()
    assert stdout.rstrip().endswith(bundle)
    patches = re.findall(r"kubectl patch (\S+) (\S+) --type=json -p '([^']+)'", stdout)
    assert [(kind, name) for kind, name, _ in patches] == [
        ("mutatingwebhookconfiguration", "kuota-mutate"),
        ("validatingwebhookconfiguration", "kuota-validate"),
    ]
    for _, _, patch in patches:
        assert json.loads(patch) == [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle} for i in range(2)
        ]
    assert "create secret tls kuota-webhook-tls" in stdout


def test_existing_files_need_force(tmp_path: Path) -> None:
    assert run_certs(tmp_path)[0] == 0
    first = (tmp_path / "ca.crt").read_bytes()
    code, _, stderr = run_certs(tmp_path)
    assert code == 2 and "--force" in stderr
    assert (tmp_path / "ca.crt").read_bytes() == first
    assert run_certs(tmp_path, "--force")[0] == 0
    assert (tmp_path / "ca.crt").read_bytes() != first


async def test_the_webhook_serves_them_to_a_client_that_trusts_the_ca(tmp_path: Path) -> None:
    assert run_certs(tmp_path)[0] == 0
    state = WebhookState(load_config_file(QUOTA_FILE))
    server = WebhookServer(state, ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key"), host="127.0.0.1", port=0)
    await server.start()
    try:
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        for name in SERVICE_NAMES:  # as the API server dials it, verifying the name
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=context, server_hostname=name)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert (await reader.read()).startswith(b"HTTP/1.1 200")
            writer.close()
    finally:
        await server.stop()


async def test_ip_addresses_for_a_webhook_called_by_url(tmp_path: Path) -> None:
    assert run_certs(tmp_path, "--ip", "127.0.0.1")[0] == 0
    state = WebhookState(load_config_file(QUOTA_FILE))
    server = WebhookServer(state, ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key"), host="127.0.0.1", port=0)
    await server.start()
    try:
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))  # verifies 127.0.0.1 as the name
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=context)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 200")
        writer.close()
    finally:
        await server.stop()
    code, _, stderr = run_certs(tmp_path / "bad", "--ip", "localhost")
    assert code == 2 and "not an IP address" in stderr
