"""The `admin` component of `kuota serve`: the admin API, dashboard and /metrics over HTTP (HTTPS with certs)."""

from __future__ import annotations

import ssl
from pathlib import Path

import structlog
from aiohttp import web

from admin.app import build_app
from admin.auth import TokenFileError, TokenStore
from admin.metrics import REGISTRY
from admin.ports import AdminOptions, RuntimePort

log = structlog.get_logger("kuota.admin")


class AdminStartError(Exception):
    """The admin component cannot start with the options given; the message says which and why."""


#: A connection that sends nothing for this long (idle between requests, or stopped halfway through one) is closed,
#: so that clients that open connections and go silent cannot pile them up (aiohttp's default keeps them 75 s).
IDLE_TIMEOUT_S = 30.0


class AdminComponent:
    def __init__(
        self, runtime: RuntimePort, tokens: TokenStore, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> None:
        self.host, self.port, self.tls = host, port, tls
        self.idle_timeout = IDLE_TIMEOUT_S
        self.app = build_app(runtime, tokens, REGISTRY)
        self.tokens = tokens
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        locked = self.tokens.why_empty()
        if locked is not None:
            # Probes and /metrics need no token, so the process is useful (and a Deployment healthy) without any;
            # the API itself answers 401 with this reason until a token file with tokens is there.
            log.warning("admin_api_locked", reason=locked)
        self._runner = web.AppRunner(self.app, access_log=None, keepalive_timeout=self.idle_timeout)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.tls)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise AdminStartError(f"cannot listen on {self.host}:{self.port}: {exc}") from None

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def make_admin_component(options: AdminOptions, runtime: RuntimePort) -> AdminComponent:
    """Factory for serve's COMPONENTS["admin"]; reads the token file and certificates now so mistakes stop serve
    before anything starts."""
    token_file = options.admin_token_file
    try:
        tokens = TokenStore.from_file(Path(token_file)) if token_file is not None else TokenStore()
    except TokenFileError as exc:
        raise AdminStartError(str(exc)) from None
    cert, key = options.admin_tls_cert, options.admin_tls_key
    tls = None
    if (cert is None) != (key is None):
        raise AdminStartError("--admin-tls-cert and --admin-tls-key go together")
    if cert is not None and key is not None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            tls.load_cert_chain(str(cert), str(key))
        except (OSError, ValueError) as exc:
            raise AdminStartError(f"cannot load the admin TLS certificate and key: {exc}") from None
    return AdminComponent(runtime, tokens, options.admin_host, options.admin_port, tls)
