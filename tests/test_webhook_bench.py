"""bench/webhook.py measures what it says: its reviews get kuota's real answers (a benchmark whose Jobs were denied
would time the denial path), and a short run of the whole benchmark reports every server without errors."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import webhook
from quota.loader import load_config_text
from webhooks.app import Routes
from webhooks.http import Connections, WebhookProtocol
from webhooks.state import WebhookState

BENCH = Path(__file__).resolve().parents[1] / "bench" / "webhook.py"


async def _answers(requests: list[bytes]) -> list[tuple[int, dict[str, Any]]]:
    """Each of the benchmark's whole HTTP requests sent as it sends them, on one keep-alive connection to kuota's
    webhook server (its protocol, without TLS): (status, the AdmissionReview's response)."""
    routes = Routes(WebhookState(load_config_text(webhook.QUOTA)))
    connections = Connections()
    server = await asyncio.get_running_loop().create_server(
        lambda: WebhookProtocol(routes, connections, 30.0), "127.0.0.1", 0
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    answers = []
    try:
        for request in requests:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line[15:]) for line in head.split(b"\r\n") if line[:15].lower() == b"content-length:")
            body = json.loads(await reader.readexactly(length))
            answers.append((int(head[9:12]), body["response"]))
    finally:
        writer.close()
        server.close()
        await routes.large.close()
    return answers


async def test_kuota_admits_the_benchmarks_jobs_as_it_would_a_real_submission() -> None:
    answers = await _answers(webhook.reviews(6))
    assert [status for status, _ in answers] == [200] * 6
    mutations, validations = answers[0::2], answers[1::2]
    for _, response in mutations:
        assert response["allowed"] is True, response
        patch = json.loads(base64.b64decode(response["patch"]))
        assert {"op": "replace", "path": "/spec/suspend", "value": True} in patch
        assert any(op["path"] == "/metadata/labels/kuota.dev~1queue" for op in patch)
    for _, response in validations:
        assert response == {"uid": response["uid"], "allowed": True}


def test_a_short_run_reports_every_server_without_errors() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--rates",
            "100",
            "--seconds",
            "0.6",
            "--rounds",
            "1",
            "--connections",
            "2",
            "--saturation-connections",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    for label in webhook.LABELS.values():
        assert f"\n{label}\n" in out
    phases = re.findall(r"^  (100/s fixed|saturation) .* errors (\d+)", out, re.MULTILINE)
    assert len(phases) == 2 * len(webhook.LABELS), out
    assert all(errors == "0" for _, errors in phases), out
    assert len(re.findall(r"server CPU +\d+ µs/review", out)) == len(webhook.LABELS), out
    assert re.search(r"kuota's server CPU per review ≤ 1\.5× the no-op's: \d+\.\d\d×", out), out
    assert re.search(r"of which decoding the review: \d+\.\d\d× the no-op's", out), out
