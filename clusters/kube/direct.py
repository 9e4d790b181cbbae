"""The requests kuota sends for every Job (its run patch, its Events), straight onto the client's aiohttp session.

kubernetes_asyncio's generic path does, for each call, what kuota needs once: it walks the body to sanitize it,
encodes it with the standard library's json, matches the content type with a regular expression, rebuilds the
headers, and wraps the answer. On the real control plane a request through it cost about 0.7 ms of kuota's CPU, and
every Job makes three (one patch, two Events). Here a request is the method, the path, a body encoded by orjson and
the headers the client would send (its default headers and its current credentials, through the configuration's
own auth settings, so a token that is refreshed or read again from a file is picked up as it would be), sent on
the client's own session: the same connection pool, TLS context, proxy and server name.
"""

from __future__ import annotations

from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import client

#: A request that gets no answer in this time is given up (and retried by the caller): the generic path waits for
#: ever, which would leave an admission hanging on a connection that died silently.
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=10)


def segment(value: str) -> str:
    """A namespace, name or plural as one path segment."""
    return quote(value, safe="")


class DirectRequests:
    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client

    async def send(self, method: str, path: str, body: bytes, content_type: str) -> aiohttp.ClientResponse:
        """The unread response (the caller reads and releases it); connection errors propagate as aiohttp's."""
        api_client = self.api_client
        configuration = api_client.configuration
        rest = api_client.rest_client
        headers = {**api_client.default_headers, "Accept": "application/json", "Content-Type": content_type}
        for auth in (await configuration.auth_settings()).values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        session: aiohttp.ClientSession = rest.pool_manager
        return await session.request(
            method,
            f"{configuration.host}{path}",
            data=body,
            headers=headers,
            timeout=REQUEST_TIMEOUT,
            proxy=rest.proxy or None,
            proxy_headers=rest.proxy_headers if rest.proxy else None,
            server_hostname=rest.server_hostname or None,
        )
