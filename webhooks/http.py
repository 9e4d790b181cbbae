"""The webhook's HTTP/1.1 server: one asyncio protocol per TLS connection, answering reviews as they arrive.

kube-apiserver sends every review the same way: a POST with a Content-Length, on keep-alive connections, one
request at a time. On the Kueue mix the webhook's connections were a quarter of kuota's CPU, and less than half of
that was the review itself: the rest was the general web framework around it, which builds request and response
objects, a task and a routing pass for each review. Here the request head is split once, the body is collected in
the connection's buffer, and a review that has arrived whole is answered within the same `data_received` call,
with no task and no await; a large one waits for its turn and goes to the worker thread (webhooks/app.py).

What a hostile or broken client gets, every time with a short plain-text reason:

* 400 for a request line or header it cannot read; 405 for a method a path does not take; 404 for any other path;
* 411 for a body sent without a Content-Length (chunked), 413 for one over `MAX_BODY_BYTES`, 431 for a head over
  `MAX_HEAD_BYTES`; the connection is closed after each, since what follows on it cannot be trusted;
* 408 when a body has not arrived whole `BODY_TIMEOUT_S` after its head; a connection that sends nothing for
  `idle_timeout` (between requests, or halfway through a head) is closed.

Responses go out in request order (a connection that sends its next request before the answer, pipelining, waits).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import cast

import structlog

from webhooks.app import LARGE_REVIEW_BYTES, MAX_BODY_BYTES, Review, Routes

log = structlog.get_logger("kuota.webhook")

#: kube-apiserver sends a review at once and waits at most 30 s (timeoutSeconds) for the answer.
BODY_TIMEOUT_S = 10.0
#: A request line and headers larger than this are refused; kube-apiserver's are a few hundred bytes.
MAX_HEAD_BYTES = 64 * 1024

_REASONS = {
    100: b"Continue",
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    411: b"Length Required",
    413: b"Payload Too Large",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    503: b"Service Unavailable",
}
JSON = b"application/json"
TEXT = b"text/plain; charset=utf-8"


class _Refused(Exception):
    """A request this server will not read further: answered with `status` and `reason`, then the connection
    closes."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _Head:
    __slots__ = ("close", "length", "method", "path", "received_at")

    def __init__(self, method: bytes, path: str, length: int, close: bool, received_at: float) -> None:
        self.method = method
        self.path = path
        self.length = length
        self.close = close
        self.received_at = received_at


def _parse_head(head: bytes, now: float) -> tuple[_Head, bool]:
    """The request's head, and whether it asks for `100 Continue`; raises _Refused."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[1].startswith(b"/") or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise _Refused(400, "the request line is not METHOD /path HTTP/1.1")
    method, target, version = parts
    length: int | None = None
    close = version == b"HTTP/1.0"
    expect = False
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise _Refused(400, "a header line is not NAME: value")
        name = name.lower()
        value = value.strip()
        if name == b"content-length":
            if not value.isdigit() or len(value) > 12 or (length is not None and int(value) != length):
                raise _Refused(400, "the Content-Length header is not one whole number")
            length = int(value)
        elif name == b"transfer-encoding":
            raise _Refused(411, "send the review with a Content-Length, not a chunked body")
        elif name == b"connection":
            tokens = value.lower()
            close = b"close" in tokens or (close and b"keep-alive" not in tokens)
        elif name == b"expect":
            if value.lower() != b"100-continue":
                raise _Refused(400, "the only Expect this server meets is 100-continue")
            expect = True
    path = target.split(b"?", 1)[0].decode("latin-1")
    return _Head(method, path, length or 0, close, now), expect


class Connections:
    """The connections one server holds, so that stopping can close the idle ones and wait for the rest."""

    def __init__(self) -> None:
        self.open: set[WebhookProtocol] = set()
        self.stopping = False
        self.drained = asyncio.Event()
        self.drained.set()

    def add(self, protocol: WebhookProtocol) -> None:
        self.open.add(protocol)
        self.drained.clear()

    def remove(self, protocol: WebhookProtocol) -> None:
        self.open.discard(protocol)
        if not self.open:
            self.drained.set()

    def stop(self) -> None:
        """No new request is started: idle connections close now, busy ones once their answer is sent."""
        self.stopping = True
        for protocol in list(self.open):
            protocol.close_when_idle()

    def abort(self) -> None:
        for protocol in list(self.open):
            protocol.abort()


class WebhookProtocol(asyncio.Protocol):
    def __init__(self, routes: Routes, connections: Connections, idle_timeout: float) -> None:
        self.routes = routes
        self.connections = connections
        self.idle_timeout = idle_timeout
        self.body_timeout = BODY_TIMEOUT_S
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.head: _Head | None = None
        self.busy = False
        """A request is being answered off this call (a large review): nothing more is read until it is."""
        self.last_read = self.loop.time()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0
        self.reading_paused = False
        self.writing_paused = False

    # -- asyncio's protocol ----------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are alike, not subclasses
        self.connections.add(self)
        if self.connections.stopping:
            transport.close()
            return
        self._arm(self.last_read + self.idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.transport = None
        self.routes.large.release(self)  # a connection that closed while holding the large reviews' turn
        self.connections.remove(self)

    def data_received(self, data: bytes) -> None:
        self.last_read = self.loop.time()
        self.buffer += data
        if not self.busy:
            self._serve()

    def eof_received(self) -> bool | None:
        return None  # close: a client that stops sending gets no more answers on this connection

    def pause_writing(self) -> None:
        # The client is not reading its answers: stop reading its requests until it does.
        self.writing_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if not self.busy:
            self._resume_reading()

    # -- serving ---------------------------------------------------------------------------------------------------

    def _serve(self) -> None:
        """Answer every whole request in the buffer, in order, until one is incomplete or is answered elsewhere."""
        try:
            while self.transport is not None and not self.busy:
                if self.head is None and not self._read_head():
                    return
                head = self.head
                assert head is not None
                if len(self.buffer) < head.length:
                    if head.length > LARGE_REVIEW_BYTES and not self.routes.large.has_turn(self):
                        self._wait_for_turn()
                    return
                if len(self.buffer) == head.length:  # the usual case: the body and nothing after it
                    body = bytes(self.buffer)
                    self.buffer.clear()
                else:
                    with memoryview(self.buffer) as view:
                        body = bytes(view[: head.length])  # one copy, where a slice of the bytearray makes two
                    del self.buffer[: head.length]
                self.head = None
                self._dispatch(head, body)
        except _Refused as refused:
            self._refuse(refused)
        except Exception:
            log.exception("webhook request failed")
            self._respond(500, b"kuota could not answer this request; see its log", TEXT, close=True)

    def _read_head(self) -> bool:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise _Refused(431, f"the request's head is over {MAX_HEAD_BYTES} bytes")
            if self.buffer.startswith(b"\r\n"):
                del self.buffer[:2]  # a blank line between requests is allowed
            return False
        if end > MAX_HEAD_BYTES:
            raise _Refused(431, f"the request's head is over {MAX_HEAD_BYTES} bytes")
        head, expect = _parse_head(bytes(self.buffer[:end]), self.last_read)
        del self.buffer[: end + 4]
        if head.length > MAX_BODY_BYTES:
            raise _Refused(413, f"a review is at most {MAX_BODY_BYTES} bytes; this one says {head.length}")
        self.head = head
        if len(self.buffer) < head.length:
            self._arm(head.received_at + self.body_timeout)
            if expect:
                self._write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def _dispatch(self, head: _Head, body: bytes) -> None:
        routes = self.routes
        if head.method == b"POST":
            review = routes.review(head.path)
            if review is not None:
                if len(body) > LARGE_REVIEW_BYTES:
                    self._answer_large(review, body, head.close)
                else:
                    status, answer = review.answer(body)
                    self._respond(status, answer, JSON, close=head.close)
                return
        elif head.method in (b"GET", b"HEAD"):
            probe = routes.probe(head.path)
            if probe is not None:
                status, text = probe
                self._respond(status, b"" if head.method == b"HEAD" else text, TEXT, close=head.close)
                return
        if routes.known(head.path):
            self._respond(405, b"method not allowed on this path", TEXT, close=head.close)
        else:
            self._respond(404, b"not found", TEXT, close=head.close)

    def _answer_large(self, review: Review, body: bytes, close: bool) -> None:
        self.busy = True
        self._pause_reading()
        self.routes.large.tasks.start(self._large(review, body, close), "kuota-large-review")

    async def _large(self, review: Review, body: bytes, close: bool) -> None:
        large = self.routes.large
        try:
            status, answer = await large.answer(review, body)
            self._respond(status, answer, JSON, close=close)
        except Exception:
            log.exception("large review failed")
            self._respond(500, b"kuota could not answer this review; see its log", TEXT, close=True)
        finally:
            large.release(self)
            self.busy = False
            if self.transport is not None:
                if not self.writing_paused:
                    self._resume_reading()
                self._serve()
                self._close_if_stopping()

    def _wait_for_turn(self) -> None:
        """A large body is not read (decrypted and buffered) until it is its turn: a flood of them is held back
        by TCP flow control, one at a time."""
        self.busy = True
        self._pause_reading()
        self.routes.large.tasks.start(self._turn(), "kuota-large-review-turn")

    async def _turn(self) -> None:
        await self.routes.large.take_turn(self)
        self.busy = False
        if self.transport is None:
            self.routes.large.release(self)
            return
        assert self.head is not None
        self.head.received_at = self.loop.time()  # its body's time starts with its turn
        self._arm(self.head.received_at + self.body_timeout)
        self._resume_reading()
        self._serve()

    # -- timing out ------------------------------------------------------------------------------------------------

    def _arm(self, at: float) -> None:
        """Make sure the timer fires by `at`; it works out on firing what is due, and sets itself again."""
        if self.timer is not None:
            if self.timer_at <= at:
                return
            self.timer.cancel()
        self.timer_at = at
        self.timer = self.loop.call_at(at, self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        if self.transport is None:
            return
        now = self.loop.time()
        if self.busy:
            deadline = now + self.idle_timeout  # answering, or waiting for its turn: not the client's doing
        elif self.head is not None:
            deadline = self.head.received_at + self.body_timeout  # the whole body, from its head (or its turn)
            if now >= deadline:
                self._respond(
                    408, f"the review's body did not arrive within {self.body_timeout:.0f} s".encode(), TEXT, close=True
                )
                return
        else:
            deadline = self.last_read + self.idle_timeout
            if now >= deadline:
                self.transport.close()
                return
        self._arm(deadline)

    # -- writing ---------------------------------------------------------------------------------------------------

    def _refuse(self, refused: _Refused) -> None:
        self._respond(refused.status, refused.reason.encode(), TEXT, close=True)

    def _respond(self, status: int, body: bytes, content_type: bytes, *, close: bool = False) -> None:
        close = close or self.connections.stopping
        connection = b"Connection: close\r\n" if close else b""
        head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n" % (
            status,
            _REASONS.get(status, b"Unknown"),
            content_type,
            len(body),
            connection,
        )
        self._write(head + body)
        if close and self.transport is not None:
            self.buffer.clear()
            self.head = None
            self.transport.close()

    def _write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def _pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            with contextlib.suppress(RuntimeError):  # a transport already closing
                self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            with contextlib.suppress(RuntimeError):
                self.transport.resume_reading()

    # -- stopping --------------------------------------------------------------------------------------------------

    def close_when_idle(self) -> None:
        if self.transport is not None and not self.busy and self.head is None:
            self.transport.close()

    def _close_if_stopping(self) -> None:
        if self.connections.stopping:
            self.close_when_idle()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
