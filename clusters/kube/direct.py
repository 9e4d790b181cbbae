"""The requests kuota sends for every Job (its run patch, its Events), without kubernetes_asyncio's generic path.

That path does, for each call, what kuota needs once: it walks the body to sanitize it, encodes it with the
standard library's json, matches the content type with a regular expression, rebuilds the headers, and wraps the
answer; under it aiohttp builds its own request and response objects. On the real control plane the three requests
every Job makes were the largest part of kuota's CPU. Here a request is the method, the path, a body encoded by
orjson and the headers the client would send (its default headers and its current credentials, through the
configuration's own auth settings, so a token that is refreshed or read again from a file is picked up as it
would be), sent through clusters/kube/http1.py's keep-alive connections with a TLS context made as
kubernetes_asyncio makes its own (the same CA, client certificate, verification and server name).

Where the configuration asks for what that small client does not do (a proxy), the request goes on the client's
own aiohttp session instead, with the same headers; either way the caller gets an `Answer`.
"""

from __future__ import annotations

import ssl
from urllib.parse import quote, urlsplit

import aiohttp
from kubernetes_asyncio import client

from clusters.kube.http1 import Answer, Http1Pool

#: A request that gets no answer in this time is given up (and retried by the caller): the generic path waits for
#: ever, which would leave an admission hanging on a connection that died silently.
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=10)

#: What these requests accept back: only the object's metadata where the server can convert it, else the object.
#: Nothing reads a 2xx answer (the watch brings the object), so kube-apiserver need not encode the whole patched
#: Job, nor kuota receive and decrypt it: a Job's answer is a third smaller. Errors still come as a JSON Status.
ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json"


def segment(value: str) -> str:
    """A namespace, name or plural as one path segment."""
    return quote(value, safe="")


def ssl_context_for(configuration: client.Configuration) -> ssl.SSLContext:
    """The TLS context kubernetes_asyncio's REST client makes from the same configuration."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def pool_for(api_client: client.ApiClient) -> tuple[Http1Pool, str] | None:
    """A pool of connections to the configured API server and the path prefix of its URL, or None where the
    small client does not apply (a proxy, a scheme other than http and https, no host)."""
    configuration = api_client.configuration
    rest = api_client.rest_client
    if rest.proxy:
        return None
    url = urlsplit(configuration.host or "")
    if url.scheme not in ("http", "https") or not url.hostname:
        return None
    secure = url.scheme == "https"
    pool = Http1Pool(
        url.hostname,
        url.port or (443 if secure else 80),
        ssl_context=ssl_context_for(configuration) if secure else None,
        server_hostname=rest.server_hostname or None,
        limit=configuration.connection_pool_maxsize or 100,
    )
    return pool, url.path.rstrip("/")


class DirectRequests:
    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self._pool: tuple[Http1Pool, str] | bool | None = False  # False: not made yet (needs the running loop)

    async def _headers(self, content_type: str) -> dict[str, str]:
        api_client = self.api_client
        headers = {**api_client.default_headers, "Accept": ACCEPT, "Content-Type": content_type}
        for auth in (await api_client.configuration.auth_settings()).values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        return headers

    async def send(self, method: str, path: str, body: bytes, content_type: str) -> Answer:
        """The whole answer, whatever its status (the caller judges it); connection failures and timeouts raise
        (ConnectionError, TimeoutError or aiohttp's errors), and are the caller's to retry."""
        if self._pool is False:
            self._pool = pool_for(self.api_client)
        headers = await self._headers(content_type)
        if isinstance(self._pool, tuple):
            pool, prefix = self._pool
            total = REQUEST_TIMEOUT.total or 60.0
            return await pool.request(method, prefix + path, headers, body, timeout_s=total)
        return await self._through_aiohttp(method, path, body, headers)

    async def _through_aiohttp(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Answer:
        configuration = self.api_client.configuration
        rest = self.api_client.rest_client
        session: aiohttp.ClientSession = rest.pool_manager
        async with session.request(
            method,
            f"{configuration.host}{path}",
            data=body,
            headers=headers,
            timeout=REQUEST_TIMEOUT,
            proxy=rest.proxy or None,
            proxy_headers=rest.proxy_headers if rest.proxy else None,
            server_hostname=rest.server_hostname or None,
        ) as response:
            data = await response.read()
            return Answer(response.status, {k.lower(): v for k, v in response.headers.items()}, data)

    async def close(self) -> None:
        if isinstance(self._pool, tuple):
            await self._pool[0].close()
        self._pool = False
