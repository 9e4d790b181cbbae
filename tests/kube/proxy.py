"""A thin fault-injecting proxy in front of the real kube-apiserver, for the faults a real server cannot be made
to produce on demand: dropped connections and watch streams, bursts of 5xx or 429, added latency, and watches
held back (so that what happens meanwhile, an etcd compaction say, is missed by the watcher).

It terminates TLS with a certificate from the rig's CA, forwards every request (the client's bearer token
included, so kube-apiserver still authenticates and authorizes the caller) and streams the answer back, chunk by
chunk, so that watches work through it. It never answers on the server's behalf except for the faults a test asks
for, and those are counted.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# Hop-by-hop headers, and those aiohttp sets itself for the forwarded body (host, content-length); the rest,
# Content-Encoding included, pass through as they are, with the body's bytes unchanged.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}


def verb_and_resource(request: web.Request) -> tuple[str, str]:
    """Kubernetes' verb (get, list, watch, create, update, patch, delete) and resource (jobs, leases, ...) of a
    request, from its method and path, the way kube-apiserver's request-info resolver reads them."""
    parts = [p for p in request.path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return request.method.lower(), ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    resource = rest[0] if rest else ""
    named = len(rest) >= 2
    method = request.method
    if method == "GET":
        if request.query.get("watch", "").lower() in ("true", "1"):
            return "watch", resource
        return ("get" if named else "list"), resource
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method), resource


@dataclass
class Fault:
    status: int
    verb: str | None
    resource: str | None
    times: int
    retry_after_s: int | None = None
    hits: int = 0

    def matches(self, verb: str, resource: str) -> bool:
        return (
            self.hits < self.times
            and (self.verb is None or self.verb == verb)
            and (self.resource is None or self.resource == resource)
        )


def issue_serving_cert(pki: Path, out: Path) -> tuple[Path, Path]:
    """A serving certificate for 127.0.0.1 signed by the rig's CA, so clients trusting the CA trust the proxy."""
    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-proxy")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    out.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = out / "proxy.crt", out / "proxy.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class FaultProxy:
    def __init__(self, upstream: str, pki: Path, workdir: Path) -> None:
        self.upstream = upstream.rstrip("/")
        self.pki = pki
        self.workdir = workdir
        self.faults: list[Fault] = []
        self.latency_s = 0.0
        self.requests: list[tuple[str, str]] = []
        # Statuses kube-apiserver answered (not the injected ones), per (verb, resource, status).
        self.answered: collections.Counter[tuple[str, str, int]] = collections.Counter()
        # Watch streams that carried an ERROR event with code 410 (kube-apiserver's "too old resource version").
        self.gone_in_watch = 0
        self._watches: set[web.StreamResponse] = set()
        self._watch_gate = asyncio.Event()
        self._watch_gate.set()
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def start(self) -> FaultProxy:
        upstream_tls = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        self._session = ClientSession(
            connector=TCPConnector(ssl=upstream_tls, limit=0),
            timeout=ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
        )
        cert, key = issue_serving_cert(self.pki, self.workdir)
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(str(cert), str(key))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=serving)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # -- what tests ask for ---------------------------------------------------------------------------------------

    def inject(
        self,
        status: int,
        *,
        verb: str | None = None,
        resource: str | None = None,
        times: int = 1,
        retry_after_s: int | None = None,
    ) -> Fault:
        fault = Fault(status, verb, resource, times, retry_after_s)
        self.faults.append(fault)
        return fault

    def drop_watches(self) -> int:
        """Cut every open watch stream mid-flight, as a broken connection would."""
        dropped = 0
        for response in list(self._watches):
            transport = response._req.transport if response._req is not None else None
            if transport is not None:
                transport.abort()
                dropped += 1
        self._watches.clear()
        return dropped

    def hold_watches(self) -> None:
        """New watch requests wait (the client sees a slow server) until `release_watches`."""
        self._watch_gate.clear()

    def release_watches(self) -> None:
        self._watch_gate.set()

    @property
    def open_watches(self) -> int:
        return len(self._watches)

    async def wait_for_watches(self, count: int, timeout_s: float = 20.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(self._watches) < count:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{len(self._watches)} watches open through the proxy, wanted {count}")
            await asyncio.sleep(0.05)

    # -- forwarding -----------------------------------------------------------------------------------------------

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        verb, resource = verb_and_resource(request)
        self.requests.append((verb, resource))
        for fault in self.faults:
            if fault.matches(verb, resource):
                fault.hits += 1
                headers = {"Retry-After": str(fault.retry_after_s)} if fault.retry_after_s is not None else {}
                body = (
                    '{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected by the test proxy",'
                    f'"code":{fault.status}}}'
                )
                return web.Response(status=fault.status, text=body, content_type="application/json", headers=headers)
        if verb == "watch":
            await self._watch_gate.wait()
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        body = await request.read()
        async with self._session.request(
            request.method, self.upstream + request.path_qs, headers=headers, data=body or None
        ) as upstream:
            self.answered[verb, resource, upstream.status] += 1
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    response.headers[key] = value
            await response.prepare(request)
            if verb == "watch":
                self._watches.add(response)
            try:
                async for chunk in upstream.content.iter_any():
                    if verb == "watch" and b'"code":410' in chunk:
                        self.gone_in_watch += 1
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionError:
                pass  # the client went away, or a test cut the stream: nothing more to send
            finally:
                self._watches.discard(response)
            return response
