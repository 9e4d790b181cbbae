"""Serving TLS from a certificate and key on disk, picking up new ones without a restart.

A server keeps the SSLContext it was started with, and reloading a certificate into a live context is not
atomic (a new certificate with the old key would break every handshake in between). So each change builds a fresh
context, and the context the server holds switches every new handshake over to the newest one from its SNI
callback, which OpenSSL calls for every ClientHello, with or without a server name.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import structlog

from webhooks.files import FileSignature, file_signature

log = structlog.get_logger("kuota.webhook")


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context with TLS 1.2 as the floor and no session tickets; raises OSError or ssl.SSLError when the
    files do not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    context.set_alpn_protocols(["http/1.1"])
    # kube-apiserver's webhook client (client-go's transport) keeps no TLS session cache, so it never resumes a
    # session: the two TLS 1.3 tickets OpenSSL would issue after every handshake are encrypted and sent for
    # nothing, about a fifth of the handshake's CPU, paid for every connection a burst of creates opens.
    context.num_tickets = 0
    context.load_cert_chain(cert, key)
    return context


class ReloadingTLS:
    def __init__(self, cert: Path, key: Path) -> None:
        self.cert = cert
        self.key = key
        self._signature = self._files()
        self.current = server_context(cert, key)
        self.context = self.current
        """The context to give the server: it hands each handshake to `current`."""
        self.context.sni_callback = self._pick

    def _files(self) -> tuple[FileSignature, FileSignature]:
        return file_signature(self.cert), file_signature(self.key)

    def _pick(self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext) -> None:
        current = self.current
        if connection.context is not current:
            connection.context = current

    async def reload_if_changed(self) -> bool:
        """Build a context from the files if they changed; keep serving the old one if they do not load together."""
        signature = self._files()
        if signature == self._signature or None in signature:
            return False
        self._signature = signature
        try:
            context = await asyncio.to_thread(server_context, self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            # Mid-rotation the certificate may already be new and the key still old; the next change retries.
            log.error("TLS certificate or key rejected; serving the previous one", cert=str(self.cert), error=str(exc))
            return False
        self.current = context
        log.info("TLS certificate reloaded", cert=str(self.cert))
        return True
