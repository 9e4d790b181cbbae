"""A small HTTP/1.1 client for the requests kuota makes for every Job: one host, keep-alive, nothing else.

aiohttp's client builds, for each request, a URL object, a multidict of headers, a request and a response object,
a payload writer, timers and a stream reader; on the real control plane that was most of the CPU of the three
requests every Job makes. What those requests need is much less: a method, a path, a body of a few hundred bytes,
headers that are the same every time, and an answer whose body is small and whole. Here a request is one write of
bytes built by concatenation, and an answer is read by a protocol that finds the end of the head, reads the
`Content-Length` (or the chunks) and hands back status, headers and body. The TLS is the event loop's own, as it is
under aiohttp.

What it does not do, and where that matters the caller keeps aiohttp's path (clusters/kube/direct.py): proxies,
redirects, compression (it never asks for it), `Expect: 100-continue`, bodies it would have to stream.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass
from typing import Final, cast

#: An answer's head larger than this is not an API server's; the connection is dropped instead of buffered.
MAX_HEAD_BYTES: Final = 64 * 1024
#: An answer's body larger than this is not one of the answers these requests get (a patched object is a few kB).
MAX_BODY_BYTES: Final = 64 * 1024 * 1024


class HttpProtocolError(ConnectionError):
    """The server's bytes are not an HTTP/1.1 answer kuota can read; the connection is closed."""


class CannotConnect(ConnectionError):
    """No connection could be made (refused, unreachable, or its TLS handshake failed)."""


class ServerClosed(ConnectionResetError):
    """The connection ended before the whole answer arrived (a kept-alive connection the server had closed)."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    #: Header names in lower case; a repeated header keeps its last value.
    headers: dict[str, str]
    body: bytes


def _invalid(value: str) -> bool:
    return "\r" in value or "\n" in value


def request_head(method: str, target: str, host: str, headers: dict[str, str], length: int) -> bytes:
    """The request line and headers, ending in the blank line. Raises ValueError for a value that would break the
    framing (a CR or LF in it: a header injected into the request)."""
    if _invalid(method) or _invalid(target) or " " in target or _invalid(host):
        raise ValueError("a request line may hold no space in its target and no CR or LF")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        if _invalid(name) or _invalid(value) or ":" in name:
            raise ValueError(f"header {name!r} would break the request's framing")
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class AnswerReader:
    """Reads one answer from the bytes fed to it: `feed` returns the Answer once it is whole, else None. Pure, so
    that the framing is tested without a socket."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.buffer = bytearray()
        self.status = 0
        self.headers: dict[str, str] | None = None
        self.length: int | None = None
        self.chunked = False
        self.keep_alive = True
        self._body_start = 0

    def feed(self, data: bytes) -> Answer | None:
        self.buffer += data
        if self.headers is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD_BYTES:
                    raise HttpProtocolError("the answer's head is too large")
                return None
            self._read_head(bytes(self.buffer[:end]))
            if self.status < 200:  # an interim answer (100 Continue, 103): the real one follows
                del self.buffer[: end + 4]
                self.headers = None
                return self.feed(b"")
            self._body_start = end + 4
        return self._body()

    def closed(self) -> Answer | None:
        """The server closed the connection: an answer delimited by the close is whole now; any other is not."""
        if self.headers is not None and self.length is None and not self.chunked:
            return Answer(self.status, self.headers, bytes(self.buffer[self._body_start :]))
        return None

    def _read_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit() or (len(rest) > 3 and rest[3] != " "):
            raise HttpProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        self.status = int(code)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise HttpProtocolError(f"malformed header line: {line[:80]!r}")
            headers[name.lower()] = value.strip()
        self.headers = headers
        connection = headers.get("connection", "").lower()
        self.keep_alive = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.chunked = True
        elif self.method == "HEAD" or self.status in (204, 304):
            self.length = 0
        elif "content-length" in headers:
            raw = headers["content-length"]
            if not raw.isdigit() or int(raw) > MAX_BODY_BYTES:
                raise HttpProtocolError(f"unreadable Content-Length {raw[:40]!r}")
            self.length = int(raw)
        else:
            self.keep_alive = False  # the body ends when the server closes

    def _body(self) -> Answer | None:
        assert self.headers is not None
        start = self._body_start
        if self.chunked:
            return self._chunks()
        if self.length is None:
            if len(self.buffer) - start > MAX_BODY_BYTES:
                raise HttpProtocolError("the answer's body is too large")
            return None
        if len(self.buffer) - start < self.length:
            return None
        if len(self.buffer) - start > self.length:
            raise HttpProtocolError("bytes after the answer's body (a pipelined answer nobody asked for)")
        return Answer(self.status, self.headers, bytes(self.buffer[start : start + self.length]))

    def _chunks(self) -> Answer | None:
        """Parsed from the start of the body each time: answers are small, and a partial read is rare."""
        assert self.headers is not None
        buffer = self.buffer
        position = self._body_start
        parts: list[bytes] = []
        while True:
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                return None
            size_text = bytes(buffer[position:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HttpProtocolError(f"unreadable chunk size {size_text[:20]!r}") from None
            if size < 0 or size > MAX_BODY_BYTES:
                raise HttpProtocolError("chunk too large")
            if size == 0:
                # Trailers (none expected) end with a blank line.
                trailer_end = buffer.find(b"\r\n\r\n", line_end)
                if trailer_end < 0:
                    return None
                return Answer(self.status, self.headers, b"".join(parts))
            data_start = line_end + 2
            if len(buffer) < data_start + size + 2:
                return None
            parts.append(bytes(buffer[data_start : data_start + size]))
            if buffer[data_start + size : data_start + size + 2] != b"\r\n":
                raise HttpProtocolError("a chunk does not end where its size says")
            position = data_start + size + 2
            if sum(map(len, parts)) > MAX_BODY_BYTES:
                raise HttpProtocolError("the answer's body is too large")


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reader: AnswerReader | None = None
        self.waiter: asyncio.Future[Answer] | None = None
        self.open = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio's, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def send(self, method: str, data: bytes, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Answer]:
        assert self.transport is not None and self.waiter is None
        self.reader = AnswerReader(method)
        self.waiter = loop.create_future()
        self.transport.write(data)
        return self.waiter

    def data_received(self, data: bytes) -> None:
        reader, waiter = self.reader, self.waiter
        if reader is None or waiter is None or waiter.done():
            self._fail(HttpProtocolError("the server sent bytes nobody asked for"))
            return
        try:
            answer = reader.feed(data)
        except HttpProtocolError as exc:
            self._fail(exc)
            return
        if answer is not None:
            self.reader = self.waiter = None
            if not reader.keep_alive:
                self.close()
            waiter.set_result(answer)

    def eof_received(self) -> bool:
        reader, waiter = self.reader, self.waiter
        answer = reader.closed() if reader is not None else None
        if answer is not None and waiter is not None and not waiter.done():
            self.reader = self.waiter = None
            waiter.set_result(answer)
        self.open = False
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self._fail(exc if isinstance(exc, ConnectionError) else ServerClosed("the server closed the connection"))

    def _fail(self, exc: Exception) -> None:
        waiter = self.waiter
        self.reader = self.waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def close(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.close()


class Http1Pool:
    """Connections to one server, each carrying one request at a time; idle ones are reused, most recent first
    (the one least likely to have been closed by the server's idle timeout)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        limit: int = 100,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.connect_timeout_s = connect_timeout_s
        default_port = 443 if ssl_context is not None else 80
        bracketed = f"[{host}]" if ":" in host else host
        self.authority = bracketed if port == default_port else f"{bracketed}:{port}"
        self._idle: deque[_Connection] = deque()
        self._slots = asyncio.Semaphore(limit)
        self._all: set[_Connection] = set()
        self.opened = 0  # connections opened so far (tests, diagnostics)

    async def request(
        self, method: str, target: str, headers: dict[str, str], body: bytes, *, timeout_s: float
    ) -> Answer:
        """One request and its whole answer. Connection failures raise ConnectionError (or OSError, ssl.SSLError);
        no answer within `timeout_s` raises TimeoutError; either way the connection is dropped, never reused."""
        data = request_head(method, target, self.authority, headers, len(body)) + body
        async with self._slots, asyncio.timeout(timeout_s):
            connection = self._idle_connection() or await self._connect()
            try:
                answer = await connection.send(method, data, asyncio.get_running_loop())
            except BaseException:
                connection.close()
                self._all.discard(connection)
                raise
            if connection.open:
                self._idle.append(connection)
            else:
                self._all.discard(connection)
            return answer

    def _idle_connection(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.open:
                return connection
            self._all.discard(connection)
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, connection = await loop.create_connection(
                    _Connection,
                    self.host,
                    self.port,
                    ssl=self.ssl_context,
                    server_hostname=(self.server_hostname or self.host) if self.ssl_context is not None else None,
                )
        except OSError as exc:  # ssl.SSLError is one too
            raise CannotConnect(f"cannot connect to {self.authority}: {exc}") from exc
        self.opened += 1
        self._all.add(connection)
        return connection

    async def close(self) -> None:
        for connection in list(self._all):
            connection.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports finish closing
