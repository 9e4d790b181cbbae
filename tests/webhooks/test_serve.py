"""`kuota serve`: the webhook component in a real process, its options, and a clean exit on SIGTERM."""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import trustme
from typer.testing import CliRunner

from kuota.cli import app

from .helpers import QUOTA_FILE, ROOT, encode, manifest, review

KUOTA = [sys.executable, "-c", "from kuota.cli import main; main()"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[trustme.CA, Path, Path]:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return ca, cert, key


def test_serve_runs_the_webhook_and_stops_cleanly_on_sigterm(tls_files: tuple[trustme.CA, Path, Path]) -> None:
    ca, cert, key = tls_files
    port = free_port()
    args = ["serve", "--components", "webhook", "--config", str(QUOTA_FILE), "--tls-cert", str(cert)]
    args += ["--tls-key", str(key), "--webhook-host", "127.0.0.1", "--webhook-port", str(port)]
    process = subprocess.Popen([*KUOTA, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    context = ssl.create_default_context()
    ca.configure_trust(context)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context, timeout=2) as resp:
                    assert resp.status == 200
                    break
            except (urllib.error.URLError, ConnectionError):
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "kuota serve did not get ready"
                time.sleep(0.1)
        request = urllib.request.Request(
            f"https://127.0.0.1:{port}/mutate/batch/v1/job",
            data=encode(review(manifest("kueue/jobs__sample-job.yaml"), uid="from-a-process")),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=context, timeout=5) as resp:
            answer = json.loads(resp.read())
        assert answer["response"]["uid"] == "from-a-process" and answer["response"]["allowed"]
        request = urllib.request.Request(
            f"https://127.0.0.1:{port}/validate/batch/v1/job",
            data=encode(review(manifest("kueue/jobs__sample-job.yaml"), uid="to-deny")),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=context, timeout=5) as resp:
            assert json.loads(resp.read())["response"]["allowed"] is False
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert stdout == b""  # logs go to stderr, as JSON lines
    lines = [json.loads(line) for line in stderr.decode().splitlines()]
    assert lines[0]["event"] == "webhook serving" and lines[-1]["event"] == "webhook stopped"
    (denied,) = [line for line in lines if line["event"] == "denied"]
    assert denied["uid"] == "to-deny" and denied["level"] == "info" and "only kuota may start" in denied["message"]


def test_bad_files_stop_serve_with_exit_2(tmp_path: Path, tls_files: tuple[trustme.CA, Path, Path]) -> None:
    _, cert, key = tls_files
    bad = tmp_path / "quota.yaml"
    bad.write_text("teams: [{name: Not A Label}]\n")
    for config, tls_key, message in (
        (bad, key, "teams[0].name"),
        (QUOTA_FILE, cert, "cannot load the TLS certificate and key"),
        (tmp_path / "missing.yaml", key, "cannot read the file"),
    ):
        args = ["serve", "--components", "webhook", "--config", str(config), "--tls-cert", str(cert)]
        result = CliRunner().invoke(app, [*args, "--tls-key", str(tls_key)])
        assert result.exit_code == 2, result.output
        assert message in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("components", "message"),
    [
        ("controller", "the controller component needs --config FILE or --config-map NAMESPACE/NAME"),
        ("webhook,admin", "the webhook component needs --config, --tls-cert, --tls-key"),
        ("webhook,scheduler", "--components takes a comma list of webhook, controller, admin"),
        ("webhook", "the webhook component needs --config, --tls-cert, --tls-key"),
    ],
)
def test_component_selection(components: str, message: str) -> None:
    result = CliRunner().invoke(app, ["serve", "--components", components])
    assert result.exit_code == 2
    assert message in result.stderr


def test_default_components_are_all_three_and_need_their_files() -> None:
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 2 and "needs --config" in result.stderr


def test_a_port_in_use_is_one_error_line_and_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = [
            "serve",
            "--components",
            "admin",
            "--cluster",
            "sim",
            "--config",
            str(ROOT / "config/samples/org-quota.yaml"),
        ]
        args += ["--admin-host", "127.0.0.1", "--admin-port", str(port)]
        done = subprocess.run([*KUOTA, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"error: cannot listen on 127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr
