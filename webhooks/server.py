"""Running the webhook over TLS: start, keep the quota file and certificate fresh, stop gracefully."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from queues.tasks import BackgroundTasks
from webhooks.app import Routes
from webhooks.http import Connections, WebhookProtocol
from webhooks.state import WebhookState
from webhooks.tls import ReloadingTLS

log = structlog.get_logger("kuota.webhook")

DEFAULT_PORT = 9443


#: A connection that sends nothing for this long (idle between requests, or stopped halfway through one) is closed:
#: kube-apiserver's webhook client reconnects at once, and a client that opens connections and goes silent cannot
#: hold them.
IDLE_TIMEOUT_S = 30.0


class WebhookServer:
    """One listening socket serving `Routes(state, observe)` (webhooks/app.py) over TLS (webhooks/http.py).

    `stop()` stops accepting, answers what is in flight (up to `shutdown_timeout` seconds), then closes.
    """

    def __init__(
        self,
        state: WebhookState,
        tls: ReloadingTLS,
        *,
        host: str = "0.0.0.0",
        port: int = DEFAULT_PORT,
        observe: Callable[[str, float], None] | None = None,
        poll_interval: float = 2.0,
        shutdown_timeout: float = 10.0,
        idle_timeout: float = IDLE_TIMEOUT_S,
    ) -> None:
        self.state = state
        self.tls = tls
        self.host = host
        self.port = port
        self.routes = Routes(state, observe)
        self.poll_interval = poll_interval
        self.shutdown_timeout = shutdown_timeout
        self.idle_timeout = idle_timeout
        self._server: asyncio.Server | None = None
        self._connections = Connections()
        self._tasks = BackgroundTasks("webhook server")

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: WebhookProtocol(self.routes, self._connections, self.idle_timeout),
            self.host,
            self.port,
            ssl=self.tls.context,
            backlog=1024,
        )
        sockets = self._server.sockets
        if sockets:
            self.port = int(sockets[0].getsockname()[1])  # the real port when asked for port 0
        self._tasks.start(self._poll(), "kuota-webhook-reload")
        self.state.ready = True
        log.info("webhook serving", host=self.host, port=self.port)

    async def stop(self) -> None:
        self.state.ready = False
        await self._tasks.close()
        if self._server is not None:
            self._server.close()
            self._connections.stop()
            try:
                await asyncio.wait_for(self._connections.drained.wait(), self.shutdown_timeout)
            except TimeoutError:
                log.warning("webhook stopped with requests unanswered", connections=len(self._connections.open))
                self._connections.abort()
            self._server = None
        await self.routes.large.close()
        log.info("webhook stopped")

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                await self.state.reload_if_changed()
                await self.tls.reload_if_changed()
            except Exception:
                log.exception("reload check failed; will try again")
