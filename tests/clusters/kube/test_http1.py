"""The small HTTP/1.1 client of kuota's per-Job requests: its framing on any split of the bytes (pure), and its
connections over real TLS sockets on 127.0.0.1 (reuse, idle close by the server, timeouts, resets, refusals)."""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trustme
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes_asyncio import client

from clusters.kube.direct import pool_for
from clusters.kube.http1 import (
    MAX_HEAD_BYTES,
    Answer,
    AnswerReader,
    CannotConnect,
    Http1Pool,
    HttpProtocolError,
    ServerClosed,
    request_head,
)

# -- framing, without sockets ----------------------------------------------------------------------------------


def _pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)] or [b""]


def _read(method: str, pieces: list[bytes]) -> tuple[list[Answer | None], AnswerReader]:
    reader = AnswerReader(method)
    return [reader.feed(piece) for piece in pieces], reader


def _chunked(body: bytes, sizes: list[int]) -> bytes:
    out, position = b"", 0
    for size in sizes:
        part = body[position : position + size]
        if not part:
            break
        out += f"{len(part):x}\r\n".encode() + part + b"\r\n"
        position += len(part)
    if position < len(body):
        rest = body[position:]
        out += f"{len(rest):X};ext=1\r\n".encode() + rest + b"\r\n"
    return out + b"0\r\n\r\n"


@settings(max_examples=300, deadline=None)
@given(
    body=st.binary(max_size=3000),
    chunked=st.booleans(),
    sizes=st.lists(st.integers(1, 700), max_size=8),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
    status=st.sampled_from([200, 201, 404, 409, 429, 500]),
)
def test_an_answer_is_whole_exactly_when_its_last_byte_arrives(
    body: bytes, chunked: bool, sizes: list[int], cuts: list[int], status: int
) -> None:
    framing = b"Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {len(body)}\r\n".encode()
    head = f"HTTP/1.1 {status} Whatever\r\nContent-Type: application/json\r\nRetry-After: 3\r\n".encode()
    wire = head + framing + b"\r\n" + (_chunked(body, sizes) if chunked else body)
    answers, reader = _read("PATCH", _pieces(wire, cuts))
    assert all(a is None for a in answers[:-1])
    last = answers[-1]
    assert last is not None
    assert (last.status, last.body) == (status, body)
    assert last.headers["retry-after"] == "3" and last.headers["content-type"] == "application/json"
    assert reader.keep_alive


def test_an_interim_answer_is_skipped_for_the_real_one() -> None:
    answers, _ = _read("POST", [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"])
    assert answers == [Answer(201, {"content-length": "2"}, b"{}")]


def test_no_content_and_head_answers_have_no_body() -> None:
    assert _read("PATCH", [b"HTTP/1.1 204 No Content\r\n\r\n"])[0] == [Answer(204, {}, b"")]
    answers, _ = _read("HEAD", [b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"])
    assert answers == [Answer(200, {"content-length": "99"}, b"")]


def test_an_answer_without_a_length_ends_with_the_connection() -> None:
    answers, reader = _read("GET", [b"HTTP/1.1 200 OK\r\n\r\nsome", b" bytes"])
    assert answers == [None, None] and not reader.keep_alive
    assert reader.closed() == Answer(200, {}, b"some bytes")


def test_an_unfinished_answer_is_not_whole_when_the_connection_ends() -> None:
    for wire in (b"HTTP/1.1 200 OK\r\nContent-Len", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"):
        _, reader = _read("GET", [wire])
        assert reader.closed() is None


def test_the_server_may_end_keep_alive() -> None:
    for header, version in ((b"Connection: close\r\n", b"1.1"), (b"", b"1.0")):
        _, reader = _read("GET", [b"HTTP/" + version + b" 200 OK\r\n" + header + b"Content-Length: 0\r\n\r\n"])
        assert not reader.keep_alive


@pytest.mark.parametrize(
    "wire",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 200OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n folded: header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nX: " + b"y" * MAX_HEAD_BYTES,
    ],
)
def test_what_is_not_an_answer_is_refused(wire: bytes) -> None:
    with pytest.raises(HttpProtocolError):
        AnswerReader("GET").feed(wire)


def test_a_request_head_is_framed_and_cannot_be_injected_into() -> None:
    head = request_head("PATCH", "/api/v1/x?a=b", "127.0.0.1:6443", {"Authorization": "Bearer t"}, 12)
    assert head == (
        b"PATCH /api/v1/x?a=b HTTP/1.1\r\nHost: 127.0.0.1:6443\r\nAuthorization: Bearer t\r\nContent-Length: 12\r\n\r\n"
    )
    for target, headers in (
        ("/a b", {}),
        ("/a\r\nX: y", {}),
        ("/a", {"Authorization": "Bearer t\r\nX-Evil: 1"}),
        ("/a", {"Bad:Name": "v"}),
    ):
        with pytest.raises(ValueError):
            request_head("GET", target, "h", headers, 0)


# -- connections over real TLS -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _contexts(ca: trustme.CA) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    trusting = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(trusting)
    return server, trusting


async def _echo(request: web.Request) -> web.Response:
    if request.path == "/slow":
        await asyncio.sleep(5)
    if request.path == "/close":
        return web.json_response({"closing": True}, headers={"Connection": "close"})
    return web.json_response(
        {
            "method": request.method,
            "path": request.path_qs,
            "body": (await request.read()).decode(),
            "auth": request.headers.get("Authorization"),
            "host": request.headers.get("Host"),
        },
        status=201 if request.method == "POST" else 200,
    )


@asynccontextmanager
async def _served(server_context: ssl.SSLContext, keepalive_timeout: float = 75.0) -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _echo)
    runner = web.AppRunner(app, keepalive_timeout=keepalive_timeout)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield port
    finally:
        await runner.cleanup()


@asynccontextmanager
async def _tls_pool(ca: trustme.CA, keepalive_timeout: float = 75.0) -> AsyncIterator[tuple[Http1Pool, int]]:
    """A pool of connections to an echo server over TLS, both closed afterwards."""
    server_context, trusting = _contexts(ca)
    async with _served(server_context, keepalive_timeout) as port:
        pool = Http1Pool("127.0.0.1", port, ssl_context=trusting)
        try:
            yield pool, port
        finally:
            await pool.close()


async def test_requests_reuse_one_kept_alive_connection(ca: trustme.CA) -> None:
    async with _tls_pool(ca) as (pool, port):
        for i in range(5):
            answer = await pool.request(
                "POST",
                f"/api/v1/namespaces/n/events?i={i}",
                {"Authorization": "Bearer tok"},
                b"x" * i,
                timeout_s=10,
            )
            assert answer.status == 201
            assert answer.headers["content-type"].startswith("application/json")
            assert json.loads(answer.body) == {
                "method": "POST",
                "path": f"/api/v1/namespaces/n/events?i={i}",
                "body": "x" * i,
                "auth": "Bearer tok",
                "host": f"127.0.0.1:{port}",
            }
        assert pool.opened == 1
        # Concurrent requests each take a connection of their own; the idle ones are kept for the next.
        answers = await asyncio.gather(*(pool.request("GET", "/x", {}, b"", timeout_s=10) for _ in range(4)))
        assert {a.status for a in answers} == {200}
        opened = pool.opened
        await pool.request("GET", "/x", {}, b"", timeout_s=10)
        assert pool.opened == opened


async def test_a_connection_the_server_closed_while_idle_is_not_reused(ca: trustme.CA) -> None:
    async with _tls_pool(ca, keepalive_timeout=0.1) as (pool, _port):
        assert (await pool.request("GET", "/a", {}, b"", timeout_s=10)).status == 200
        await asyncio.sleep(0.5)
        assert (await pool.request("GET", "/b", {}, b"", timeout_s=10)).status == 200
        assert pool.opened == 2


async def test_an_answer_that_ends_keep_alive_closes_its_connection(ca: trustme.CA) -> None:
    async with _tls_pool(ca) as (pool, _port):
        assert (await pool.request("GET", "/close", {}, b"", timeout_s=10)).body == b'{"closing": true}'
        assert (await pool.request("GET", "/x", {}, b"", timeout_s=10)).status == 200
        assert pool.opened == 2


async def test_a_request_without_an_answer_times_out_and_its_connection_is_dropped(ca: trustme.CA) -> None:
    async with _tls_pool(ca) as (pool, _port):
        with pytest.raises(TimeoutError):
            await pool.request("GET", "/slow", {}, b"", timeout_s=0.3)
        assert (await pool.request("GET", "/x", {}, b"", timeout_s=10)).status == 200
        assert pool.opened == 2


@asynccontextmanager
async def _raw_pool(wire: bytes) -> AsyncIterator[Http1Pool]:
    """A pool of plain connections to a server that answers every request with `wire`, then closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(wire)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    pool = Http1Pool("127.0.0.1", server.sockets[0].getsockname()[1], ssl_context=None)
    try:
        yield pool
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        (b'HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{"half', ServerClosed),
        (b"HTTP/1.1 200 OK\r\nContent-Le", ServerClosed),
        (b"", ServerClosed),
        (b"220 smtp.example.com ESMTP\r\n\r\n", HttpProtocolError),
    ],
)
async def test_a_broken_answer_raises_a_connection_error(wire: bytes, error: type[Exception]) -> None:
    async with _raw_pool(wire) as pool:
        with pytest.raises(error):
            await pool.request("PATCH", "/x", {}, b"{}", timeout_s=10)
    assert issubclass(error, ConnectionError)  # what the callers' retries treat as retryable


async def test_an_answer_ended_by_the_close_is_read_whole() -> None:
    async with _raw_pool(b'HTTP/1.1 200 OK\r\n\r\n{"whole": 1}') as pool:
        assert (await pool.request("GET", "/x", {}, b"", timeout_s=10)).body == b'{"whole": 1}'


async def test_refused_and_untrusted_servers_cannot_be_connected_to(ca: trustme.CA) -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(CannotConnect):
        await Http1Pool("127.0.0.1", port, ssl_context=None).request("GET", "/", {}, b"", timeout_s=10)
    server_context, _ = _contexts(ca)
    async with _served(server_context) as tls_port:
        stranger = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)  # trusts the system's CAs, not ours
        with pytest.raises(CannotConnect, match="CERTIFICATE_VERIFY_FAILED"):
            await Http1Pool("127.0.0.1", tls_port, ssl_context=stranger).request("GET", "/", {}, b"", timeout_s=10)


async def test_the_small_client_is_not_used_through_a_proxy_or_for_other_schemes() -> None:
    api_clients: list[client.ApiClient] = []

    def made(host: str, proxy: str | None = None) -> tuple[Http1Pool, str] | None:
        configuration = client.Configuration(host=host)
        configuration.proxy = proxy
        api_clients.append(client.ApiClient(configuration))
        return pool_for(api_clients[-1])

    secure = made("https://10.0.0.1:6443/prefix/")
    assert secure is not None and secure[1] == "/prefix"
    assert (secure[0].host, secure[0].port, secure[0].authority) == ("10.0.0.1", 6443, "10.0.0.1:6443")
    assert secure[0].ssl_context is not None
    plain = made("http://[::1]")
    assert plain is not None and (plain[0].port, plain[0].authority, plain[0].ssl_context) == (80, "[::1]", None)
    assert made("https://10.0.0.1", proxy="http://proxy:3128") is None
    assert made("unix:///var/run/kube.sock") is None
    for api_client in api_clients:
        await api_client.close()
