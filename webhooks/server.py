"""Running the webhook application over TLS: start, keep the quota file and certificate fresh, stop gracefully."""

from __future__ import annotations

import asyncio

import structlog
from aiohttp import web

from queues.tasks import BackgroundTasks
from webhooks.app import make_app
from webhooks.state import WebhookState
from webhooks.tls import ReloadingTLS

log = structlog.get_logger("kuota.webhook")

DEFAULT_PORT = 9443


#: A connection that sends nothing for this long (idle between requests, or stopped halfway through one) is closed:
#: kube-apiserver's webhook client reconnects at once, and a client that opens connections and goes silent cannot
#: hold them (aiohttp's default keeps them 75 s).
IDLE_TIMEOUT_S = 30.0


class WebhookServer:
    """One listening socket serving `make_app(state)` (or `app`) over TLS.

    `stop()` stops accepting, answers what is in flight (up to `shutdown_timeout` seconds), then closes.
    """

    def __init__(
        self,
        state: WebhookState,
        tls: ReloadingTLS,
        *,
        host: str = "0.0.0.0",
        port: int = DEFAULT_PORT,
        app: web.Application | None = None,
        poll_interval: float = 2.0,
        shutdown_timeout: float = 10.0,
        idle_timeout: float = IDLE_TIMEOUT_S,
    ) -> None:
        self.state = state
        self.tls = tls
        self.host = host
        self.port = port
        self.app = app if app is not None else make_app(state)
        self.poll_interval = poll_interval
        self.shutdown_timeout = shutdown_timeout
        self.idle_timeout = idle_timeout
        self._runner: web.AppRunner | None = None
        self._tasks = BackgroundTasks("webhook server")

    async def start(self) -> None:
        self._runner = web.AppRunner(
            self.app, access_log=None, shutdown_timeout=self.shutdown_timeout, keepalive_timeout=self.idle_timeout
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.tls.context)
        await site.start()
        addresses = self._runner.addresses
        if addresses:
            self.port = int(addresses[0][1])  # the real port when asked for port 0
        self._tasks.start(self._poll(), "kuota-webhook-reload")
        self.state.ready = True
        log.info("webhook serving", host=self.host, port=self.port)

    async def stop(self) -> None:
        self.state.ready = False
        await self._tasks.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        log.info("webhook stopped")

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                await self.state.reload_if_changed()
                await self.tls.reload_if_changed()
            except Exception:
                log.exception("reload check failed; will try again")
