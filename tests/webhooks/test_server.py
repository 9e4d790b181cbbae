"""The webhook server over real TLS sockets on 127.0.0.1: endpoints, TLS policy, reloads, graceful shutdown."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from quota.loader import load_config_file
from webhooks import app as webhook_app
from webhooks import http as webhook_http
from webhooks.app import MUTATE_PATH, VALIDATE_PATH, Routes, review_path
from webhooks.server import WebhookServer
from webhooks.state import WebhookState
from webhooks.tls import ReloadingTLS
from workloads.gates import GATED_POD
from workloads.registry import REGISTRY

from ..held import hold
from .denials import queued
from .helpers import QUOTA_FILE, apply_patch, decode_patch, encode, gpu_job, manifest, review

POLL = 0.05


@dataclass
class Running:
    server: WebhookServer
    ca: trustme.CA
    cert: Path
    key: Path
    config: Path
    session: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.port}"

    async def post(self, path: str, body: bytes) -> tuple[int, Any]:
        async with self.session.post(self.url + path, data=body, headers={"Content-Type": "application/json"}) as resp:
            text = await resp.read()
            return resp.status, json.loads(text) if resp.content_type == "application/json" else text

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        self.ca.configure_trust(context)
        return context

    async def peer_certificate(self, server_hostname: str | None = None) -> bytes:
        """The DER certificate a fresh connection is served, with SNI when a hostname is given."""
        context = self.client_context()
        if server_hostname is None:
            context.check_hostname = False  # by IP: Python sends no SNI, the server must still pick the newest cert
        _, writer = await asyncio.open_connection(
            "127.0.0.1", self.server.port, ssl=context, server_hostname=server_hostname
        )
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        await writer.wait_closed()
        assert der is not None
        return bytes(der)


def write_cert(ca: trustme.CA, cert: Path, key: Path) -> trustme.LeafCert:
    leaf = ca.issue_cert("127.0.0.1", "localhost", "kuota-webhook.kuota-system.svc")
    # Like a Secret volume update: new files swapped in whole, never half-written.
    for pem, path in ((leaf.cert_chain_pems[0], cert), (leaf.private_key_pem, key)):
        tmp = path.with_suffix(".tmp")
        pem.write_to_path(str(tmp))
        tmp.replace(path)
    return leaf


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    ca = trustme.CA()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    write_cert(ca, cert, key)
    config = tmp_path / "quota.yaml"
    shutil.copy(QUOTA_FILE, config)
    state = WebhookState.from_file(config)
    server = WebhookServer(state, ReloadingTLS(cert, key), host="127.0.0.1", port=0, poll_interval=POLL)
    await server.start()
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(context)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=4))
    try:
        yield Running(server, ca, cert, key, config, session)
    finally:
        await session.close()
        await server.stop()


async def until(condition: Any, seconds: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(POLL)


async def test_mutate_then_validate_over_https(running: Running) -> None:
    job = manifest("eidf-gpu-service/training__L3_running_a_pytorch_task__block2.yaml", "eidf018ns")
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "eidf018ns-user-queue"}
    status, document = await running.post(MUTATE_PATH, encode(review(job, uid="req-1")))
    assert status == 200 and document["response"]["uid"] == "req-1" and document["response"]["allowed"]
    patched = apply_patch(job, decode_patch(document["response"]))
    assert patched["spec"]["suspend"] is True and patched["metadata"]["labels"]["kuota.dev/queue"]
    status, document = await running.post(VALIDATE_PATH, encode(review(patched, uid="req-2")))
    assert (status, document["response"]) == (200, {"uid": "req-2", "allowed": True})
    status, document = await running.post(VALIDATE_PATH, encode(review(gpu_job(gpus=64), uid="req-3")))
    assert document["response"]["allowed"] is False and document["response"]["uid"] == "req-3"


async def test_a_kind_that_is_not_enabled_is_denied_with_what_is_queued(running: Running) -> None:
    """The test quota file enables Job only: a review on JobSet's path is answered, denied, and says so."""
    for path in ("/validate/jobset.x-k8s.io/v1alpha2/jobsets", "/mutate/example.org/v1/nothings"):
        status, document = await running.post(path, encode(review(gpu_job(), uid="req-k")))
        response = document["response"]
        assert status == 200 and response["uid"] == "req-k" and response["allowed"] is False
        assert response["status"]["code"] == 400
        assert "it queues: Job" in response["status"]["message"] and "jobKinds" in response["status"]["message"]
    # The first version's paths still serve Jobs.
    status, document = await running.post("/mutate/batch/v1/job", encode(review(gpu_job(), uid="req-old")))
    assert status == 200 and document["response"]["allowed"] is True


def test_every_enabled_kinds_paths_are_found_by_a_lookup() -> None:
    """An enabled kind's review is found in the routes' dictionary, served as that kind; pods keep their path, and
    a path of a kind that is not enabled is still answered, as that resource."""
    kinds = REGISTRY.enabled(["Job", "JobSet", "RayJob", "Pod"])
    routes = Routes(WebhookState(load_config_file(QUOTA_FILE), kinds=kinds))
    for kind in kinds:
        for endpoint in ("mutate", "validate"):
            path = review_path(endpoint, kind)
            found = routes.reviews[path]
            # A plain pod is reviewed as whichever kind claims it (webhooks/pods.py).
            expected = GATED_POD if path == review_path(endpoint, GATED_POD) else kind
            assert (found.endpoint, found.kind) == (endpoint, expected)
    other = routes.review("/validate/example.org/v1/nothings")
    assert other is not None and other.kind == "example.org/v1 nothings"
    for path in ("/validate/example.org/v1", "/other/batch/v1/jobs", "/validate/example.org/v1/nothings/x", "/"):
        assert routes.review(path) is None


async def test_health_and_readiness(running: Running) -> None:
    for path in ("/healthz", "/readyz"):
        async with running.session.get(running.url + path) as resp:
            assert resp.status == 200
    running.server.state.ready = False
    async with running.session.get(running.url + "/readyz") as resp:
        assert resp.status == 503
    async with running.session.get(running.url + "/healthz") as resp:
        assert resp.status == 200


async def test_tls_below_1_2_is_refused(running: Running) -> None:
    context = running.client_context()
    context.check_hostname = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = ssl.TLSVersion.TLSv1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let the client offer TLS 1.1; the server must say no
    # asyncio's server aborts the handshake: the client sees the alert or just the reset.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await asyncio.open_connection("127.0.0.1", running.server.port, ssl=context, server_hostname=None)
    modern = running.client_context()
    _, writer = await asyncio.open_connection(
        "127.0.0.1", running.server.port, ssl=modern, server_hostname="kuota-webhook.kuota-system.svc"
    )
    assert writer.get_extra_info("ssl_object").version() in ("TLSv1.2", "TLSv1.3")
    writer.close()
    await writer.wait_closed()


async def test_no_session_ticket_is_issued_for_a_client_that_never_resumes(running: Running) -> None:
    """kube-apiserver's webhook client keeps no session cache; tickets would cost every handshake for nothing."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", running.server.port, ssl=running.client_context(), server_hostname="kuota-webhook.kuota-system.svc"
    )
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: kuota\r\n\r\n")
        await writer.drain()
        assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 200")
        await asyncio.wait_for(reader.readuntil(b"ok"), 5)  # TLS 1.3 tickets, if any, come before the answer
        ssl_object = writer.get_extra_info("ssl_object")
        assert ssl_object.version() == "TLSv1.3"
        session = ssl_object.session
        assert session is not None and not session.has_ticket
    finally:
        writer.close()


async def test_certificate_rotation_is_picked_up_without_restart(running: Running) -> None:
    first = await running.peer_certificate("localhost")
    assert await running.peer_certificate() == first
    leaf = write_cert(running.ca, running.cert, running.key)
    new = ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())
    assert new != first

    async def rotated() -> bool:
        return await running.peer_certificate("localhost") == new

    await until(rotated)
    assert await running.peer_certificate() == new  # clients that send no SNI get it too
    status, _ = await running.post(VALIDATE_PATH, encode(review(queued(running.server.state, gpu_job()))))
    assert status == 200


async def test_a_broken_certificate_keeps_the_old_one(running: Running) -> None:
    first = await running.peer_certificate("localhost")
    running.key.write_text("not a key")
    await asyncio.sleep(POLL * 6)
    assert await running.peer_certificate("localhost") == first


async def test_quota_file_reload_and_bad_file_kept_out(running: Running) -> None:
    job = queued(running.server.state, gpu_job("newteam", "q"))
    _, document = await running.post(VALIDATE_PATH, encode(review(job)))
    assert document["response"]["allowed"] is False
    text = running.config.read_text()
    text = text.replace("eidf018ns/urgent]", "eidf018ns/urgent, newteam/q]")
    running.config.write_text(text)

    async def reloaded() -> bool:
        _, document = await running.post(VALIDATE_PATH, encode(review(job)))
        return bool(document["response"]["allowed"])

    await until(reloaded)
    running.config.write_text("teams: [{name: Not A Label}]\n")
    await asyncio.sleep(POLL * 6)
    _, document = await running.post(VALIDATE_PATH, encode(review(job)))
    assert document["response"]["allowed"] is True  # the last good file is still in force
    assert load_config_file(QUOTA_FILE)  # (the shared test file itself is untouched)


async def test_bodies_that_are_not_reviews_get_400_not_500(running: Running) -> None:
    whole = encode(review(queued(running.server.state, gpu_job())))
    for cut in range(0, len(whole), max(1, len(whole) // 40)):
        status, document = await running.post(VALIDATE_PATH, whole[:cut])
        assert status == 400, (cut, document)
        assert document["kind"] == "Status" and document["code"] == 400 and document["message"]
    status, _ = await running.post(MUTATE_PATH, b"\xff\xfe garbage")
    assert status == 400
    async with running.session.get(running.url + VALIDATE_PATH) as resp:
        assert resp.status == 405


async def test_oversized_body_is_refused_with_413(running: Running) -> None:
    status, _ = await running.post(VALIDATE_PATH, b" " * (9 * 1024 * 1024))
    assert status == 413


async def test_many_concurrent_reviews_on_keep_alive_connections(running: Running) -> None:
    body = encode(review(manifest("kueue/jobs__sample-job.yaml")))
    results = await asyncio.gather(*(running.post(MUTATE_PATH, body) for _ in range(200)))
    assert {status for status, _ in results} == {200}
    assert all(document["response"]["allowed"] for _, document in results)


async def test_a_review_sent_in_pieces_is_answered_as_one_sent_at_once(running: Running) -> None:
    """Most bodies have arrived whole when the handler starts and are read without a timeout; one still arriving
    (a slow or chunked sender) is read under the timeout, and gets the same answer."""
    body = encode(review(gpu_job(gpus=64), uid="req-pieces"))
    at_once = await running.post(VALIDATE_PATH, body)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", running.server.port, ssl=running.client_context(), server_hostname="127.0.0.1"
    )
    try:
        head = f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: kuota\r\nContent-Type: application/json\r\n"
        writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body[:40])
        await writer.drain()
        await asyncio.sleep(0.2)  # the handler is waiting for the rest by now
        writer.write(body[40:])
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 5)
        headers = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = next(
            int(line.split(b":")[1]) for line in headers.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        answer = json.loads(await asyncio.wait_for(reader.readexactly(length), 5))
    finally:
        writer.close()
    assert status_line.startswith(b"HTTP/1.1 200"), status_line
    assert at_once == (200, answer)
    assert answer["response"]["allowed"] is False


async def test_while_a_large_review_is_answered_probes_and_small_reviews_are_answered(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review over LARGE_REVIEW_BYTES is answered by the worker thread: held there, it holds nothing else."""
    job = gpu_job()
    container = job["spec"]["template"]["spec"]["containers"][0]
    job["spec"]["template"]["spec"]["containers"] = [dict(container, name=f"c{i}") for i in range(2_000)]
    large = encode(review(job, uid="large"))
    assert len(large) > webhook_app.LARGE_REVIEW_BYTES
    small = encode(review(manifest("kueue/jobs__sample-job.yaml"), uid="small"))
    with hold(monkeypatch, webhook_app, "answer", lambda *args: len(args[3]) > webhook_app.LARGE_REVIEW_BYTES) as held:
        pending = asyncio.create_task(running.post(MUTATE_PATH, large))
        await held.started()
        async with running.session.get(running.url + "/healthz") as resp:
            assert resp.status == 200
        status, document = await running.post(MUTATE_PATH, small)
        assert (status, document["response"]["uid"], document["response"]["allowed"]) == (200, "small", True)
        assert not pending.done()
        held.go()
        status, document = await pending
    assert (status, document["response"]["uid"]) == (200, "large")
    held.assert_held_off_the_loop()


async def test_stop_finishes_requests_in_flight(running: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    """A review being answered (a large one, in the worker thread) when the server stops still gets its answer;
    then the port takes no connection."""
    job = gpu_job()
    container = job["spec"]["template"]["spec"]["containers"][0]
    job["spec"]["template"]["spec"]["containers"] = [dict(container, name=f"c{i}") for i in range(2_000)]
    large = encode(review(job, uid="in-flight"))
    with hold(monkeypatch, webhook_app, "answer") as held:
        in_flight = asyncio.create_task(running.post(MUTATE_PATH, large))
        await held.started()
        stopping = asyncio.create_task(running.server.stop())
        await asyncio.sleep(0.2)
        assert not stopping.done() and running.server.state.ready is False
        held.go()
        status, document = await in_flight
        await stopping
    assert (status, document["response"]["uid"]) == (200, "in-flight")
    with pytest.raises(aiohttp.ClientConnectionError):
        await running.post(MUTATE_PATH, large)


async def test_silent_and_half_sent_connections_are_closed_after_the_idle_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhook_http, "BODY_TIMEOUT_S", 0.5)
    ca = trustme.CA()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    write_cert(ca, cert, key)
    state = WebhookState.from_file(QUOTA_FILE)
    server = WebhookServer(state, ReloadingTLS(cert, key), host="127.0.0.1", port=0, idle_timeout=0.5)
    await server.start()
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(context)
    try:
        silent = await asyncio.open_connection("127.0.0.1", server.port, ssl=context, server_hostname="127.0.0.1")
        half = await asyncio.open_connection("127.0.0.1", server.port, ssl=context, server_hostname="127.0.0.1")
        half[1].write(b"POST /mutate/batch/v1/jobs HTTP/1.1\r\nHost: kuota\r\n")  # headers never finished
        await half[1].drain()
        for what, (reader, writer) in (("silent", silent), ("half-sent", half)):
            started = asyncio.get_running_loop().time()
            rest = await asyncio.wait_for(reader.read(), 10)  # the server hangs up: end of stream
            assert rest == b"", (what, rest)
            assert asyncio.get_running_loop().time() - started < 5, what
            writer.close()
        # A body that stops halfway gets 408 instead of holding the handler.
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=context, server_hostname="127.0.0.1"
        )
        writer.write(b"POST /mutate/batch/v1/jobs HTTP/1.1\r\nHost: kuota\r\nContent-Length: 100\r\n\r\n{")
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 5)
        assert status_line.startswith(b"HTTP/1.1 408"), status_line
        writer.close()
    finally:
        await server.stop()


async def _exchange(
    running: Running, data: bytes, *, answers: int = 1
) -> list[tuple[bytes, dict[bytes, bytes], bytes]]:
    """Send raw bytes on one TLS connection; read `answers` responses: (status line, headers, body)."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", running.server.port, ssl=running.client_context(), server_hostname="127.0.0.1"
    )
    out = []
    try:
        writer.write(data)
        await writer.drain()
        for _ in range(answers):
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            status, *lines = head[:-4].split(b"\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines)}
            body = await asyncio.wait_for(reader.readexactly(int(headers[b"content-length"])), 5)
            out.append((status, headers, body))
    finally:
        writer.close()
    return out


@pytest.mark.parametrize(
    ("request_bytes", "status", "reason"),
    [
        (b"NONSENSE\r\n\r\n", b"400", b"request line"),
        (b"POST /mutate/batch/v1/jobs HTTP/1.1\r\nno colon here\r\n\r\n", b"400", b"NAME: value"),
        (b"POST /mutate/batch/v1/jobs HTTP/1.1\r\nContent-Length: -5\r\n\r\n", b"400", b"Content-Length"),
        (b"POST /mutate/batch/v1/jobs HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", b"400", b"one"),
        (
            b"POST /mutate/batch/v1/jobs HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            b"411",
            b"chunked",
        ),
        (b"POST /mutate/batch/v1/jobs HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", b"413", b"at most"),
        (b"POST /mutate/batch/v1/jobs HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", b"431", b"head"),
        (b"GET /nowhere HTTP/1.1\r\n\r\n", b"404", b"not found"),
        (b"DELETE /healthz HTTP/1.1\r\n\r\n", b"405", b"not allowed"),
    ],
)
async def test_requests_it_cannot_serve_get_a_status_and_a_reason(
    running: Running, request_bytes: bytes, status: bytes, reason: bytes
) -> None:
    [(line, headers, body)] = await _exchange(running, request_bytes)
    assert line.split(b" ")[1] == status, (line, body)
    assert reason in body
    if status not in (b"404", b"405"):
        assert headers.get(b"connection") == b"close"  # what follows on such a connection cannot be trusted


async def test_pipelined_requests_are_answered_in_order_and_connection_close_is_honoured(running: Running) -> None:
    body = encode(review(manifest("kueue/jobs__sample-job.yaml"), uid="piped"))
    post = f"POST {MUTATE_PATH} HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    last = b"GET /readyz HTTP/1.1\r\nConnection: close\r\n\r\n"
    answers = await _exchange(running, b"GET /healthz HTTP/1.1\r\n\r\n" + post + last, answers=3)
    assert [a[2] for a in (answers[0], answers[2])] == [b"ok", b"ok"]
    assert json.loads(answers[1][2])["response"]["uid"] == "piped"
    assert answers[2][1].get(b"connection") == b"close"


async def test_expect_100_continue_is_met(running: Running) -> None:
    body = encode(review(manifest("kueue/jobs__sample-job.yaml"), uid="cont"))
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", running.server.port, ssl=running.client_context(), server_hostname="127.0.0.1"
    )
    try:
        writer.write(
            f"POST {MUTATE_PATH} HTTP/1.1\r\nContent-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        await writer.drain()
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(body)
        await writer.drain()
        assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
