"""How fast `kuota serve`'s webhook answers probes while a flood of the largest, most hostile reviews arrives.

A real `kuota serve --components webhook` process on a TLS port is flooded from several connections with reviews
near the 8 MiB body cap (a Job of 20,000 containers on both paths, a 7 MB JSON array that is not a review, JSON
nested 100,000 deep, a 100,000-digit quantity) while one connection of its own probes `/healthz` and an ordinary
review every 20 ms. The same probes with no flood, in alternating rounds of the same run, are the baseline: the
machine's load moves both alike.

Large reviews are answered by one worker thread (webhooks/app.py), so the loop keeps answering; what is left is
the interpreter lock the worker holds between the loop's turns. Goal: probe medians under 50 ms during the flood.
Reported, not asserted (tests/webhooks/test_review_flood.py runs a short flood for its answers only).

    .venv/bin/python bench/review_flood.py [--seconds 4] [--rounds 3] [--flooders 6]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import multiprocessing
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.webhook import QUOTA, job
from webhooks.app import MUTATE_PATH, VALIDATE_PATH
from webhooks.certs import make_certificates

ROOT = Path(__file__).resolve().parents[1]
KUOTA = [sys.executable, "-c", "from kuota.cli import main; main()"]
PROBE_EVERY_S = 0.02

Bodies = list[tuple[str, str, bytes]]
"""(what, path, body) of each hostile review."""


def review(obj: Any, uid: str) -> bytes:
    """An AdmissionReview v1 of a CREATE of `obj` in its namespace."""
    namespace = obj.get("metadata", {}).get("namespace", "default") if isinstance(obj, dict) else "default"
    request = {
        "uid": uid,
        "kind": {"group": "batch", "version": "v1", "kind": "Job"},
        "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
        "namespace": namespace,
        "operation": "CREATE",
        "userInfo": {"username": "alice@example.org", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def hostile_bodies(gpu_job: dict[str, Any]) -> Bodies:
    """(what, path, body), from a Job with one container: each near the cap or built to make parsing and the rules
    expensive."""
    container = gpu_job["spec"]["template"]["spec"]["containers"][0]
    wide = copy.deepcopy(gpu_job)
    wide["spec"]["template"]["spec"]["containers"] = [dict(container, name=f"c{i}") for i in range(20_000)]
    huge_quantity = copy.deepcopy(gpu_job)
    huge_quantity["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "9" * 100_000
    wide_review = review(wide, "wide")
    return [
        ("20,000 containers (validate)", VALIDATE_PATH, wide_review),
        ("20,000 containers (mutate)", MUTATE_PATH, wide_review),
        ("7 MB array, not a review", VALIDATE_PATH, json.dumps(list(range(1_000_000))).encode()),
        ("nesting 100,000 deep", MUTATE_PATH, b"[" * 100_000 + b"]" * 100_000),
        ("100,000-digit quantity", MUTATE_PATH, review(huge_quantity, "huge-quantity")),
    ]


@dataclass
class Probed:
    """What one round saw: each hostile body's HTTP statuses, and each probe's seconds."""

    answers: dict[str, list[int]] = field(default_factory=dict)
    health: list[float] = field(default_factory=list)
    reviews: list[float] = field(default_factory=list)

    @property
    def sent(self) -> int:
        return sum(len(statuses) for statuses in self.answers.values())


def client_context(ca_pem: str) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca_pem)


async def _flood(url: str, ca_pem: str, bodies: Bodies, flooders: int, stop: Any, out: Any) -> dict[str, list[int]]:
    """`flooders` connections sending `bodies` in turn, back to back, until `stop` (a process Event) is set; says
    on `out` when it starts."""
    answers: dict[str, list[int]] = {what: [] for what, _, _ in bodies}
    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(ssl=client_context(ca_pem), limit=flooders)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def send(first: int) -> None:
            turn = first
            while not stop.is_set():
                what, path, body = bodies[turn % len(bodies)]
                turn += 1
                async with session.post(url + path, data=body, headers={"Content-Type": "application/json"}) as resp:
                    await resp.read()
                    answers[what].append(resp.status)

        out.send("flooding")
        await asyncio.gather(*(send(i) for i in range(flooders)))
    return answers


def _flood_process(url: str, ca_pem: str, bodies: Bodies, flooders: int, stop: Any, out: Any) -> None:
    out.send(asyncio.run(_flood(url, ca_pem, bodies, flooders, stop, out)))


@contextlib.asynccontextmanager
async def _flooding(url: str, ca_pem: str, bodies: Bodies, flooders: int, seen: Probed) -> AsyncIterator[None]:
    """The flood, from a process of its own, running for the block; its answers land in `seen.answers`."""
    if not flooders:
        yield
        return
    ctx = multiprocessing.get_context("spawn")
    halt = ctx.Event()
    received, sent = ctx.Pipe(duplex=False)
    flood = ctx.Process(target=_flood_process, args=(url, ca_pem, bodies, flooders, halt, sent), daemon=True)
    flood.start()
    try:
        if not await asyncio.to_thread(received.poll, 60) or received.recv() != "flooding":
            raise RuntimeError("the flood did not start")
        try:
            yield
        finally:
            halt.set()
        if not await asyncio.to_thread(received.poll, 120):
            raise RuntimeError("the flood did not end")
        seen.answers = received.recv()
    finally:
        flood.join(10)
        if flood.is_alive():
            flood.kill()


async def probe_during(
    url: str,
    ca_pem: str,
    bodies: Bodies,
    ordinary: bytes,
    seconds: float,
    flooders: int,
) -> Probed:
    """Probes /healthz and `ordinary` (a mutate review that must be allowed) for `seconds` while `flooders`
    connections send `bodies` in turn, back to back; with no flooders, the probes alone.

    The flood is sent by a process of its own: from this one, encrypting megabytes for the flooders would hold
    this loop, and the probes would time the client's own queue as much as the server's answers."""
    uid = json.loads(ordinary)["request"]["uid"]
    seen = Probed()
    stop = asyncio.Event()

    async def probe(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            started = time.perf_counter()
            async with session.get(f"{url}/healthz") as resp:
                if resp.status != 200:
                    raise AssertionError(f"/healthz answered {resp.status}")
            seen.health.append(time.perf_counter() - started)
            started = time.perf_counter()
            async with session.post(url + MUTATE_PATH, data=ordinary) as resp:
                document: Any = await resp.json()
            seen.reviews.append(time.perf_counter() - started)
            answer = document["response"]
            if answer["uid"] != uid or answer["allowed"] is not True:
                raise AssertionError(f"the ordinary review was answered {answer}")
            await asyncio.sleep(PROBE_EVERY_S)

    connector = aiohttp.TCPConnector(ssl=client_context(ca_pem), limit=1)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as light:
        # The probes' connection is open (and its TLS handshake done) before the flood starts.
        async with light.get(f"{url}/healthz") as resp:
            await resp.read()
        async with _flooding(url, ca_pem, bodies, flooders, seen):
            prober = asyncio.create_task(probe(light))
            await asyncio.sleep(seconds)
            stop.set()
            await prober
    return seen


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serving(quota: Path, cert: Path, key: Path, context: ssl.SSLContext) -> Iterator[str]:
    """A `kuota serve --components webhook` process on a free port, ready: its https URL."""
    port = free_port()
    args = ["serve", "--components", "webhook", "--config", str(quota), "--tls-cert", str(cert)]
    args += ["--tls-key", str(key), "--webhook-host", "127.0.0.1", "--webhook-port", str(port), "--log-level", "error"]
    process = subprocess.Popen([*KUOTA, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError) as exc:
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    _, stderr = process.communicate(timeout=20)
                    raise RuntimeError(
                        f"kuota serve did not get ready: {stderr.decode(errors='replace')[-2000:]}"
                    ) from exc
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=20)
        if b"Traceback" in stderr:
            raise RuntimeError(f"kuota serve failed: {stderr.decode(errors='replace')[-2000:]}")


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:.1f} ms ({min(values) * 1e3:.1f}–{max(values) * 1e3:.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each round, flood and baseline")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of baseline and flood")
    parser.add_argument("--flooders", type=int, default=6, help="connections sending hostile reviews back to back")
    args = parser.parse_args()

    made = make_certificates("kuota-webhook", "kuota-system", ips=("127.0.0.1",))
    bodies = hostile_bodies(job(0, suspend=False))
    ordinary = review(job(1, suspend=False), "ordinary")
    print(f"review flood: {args.flooders} connections, {args.seconds:.0f} s rounds, {args.rounds} of each")
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (other work on the machine)")
    medians: dict[str, dict[str, list[float]]] = {"baseline": {"health": [], "review": []}}
    medians["flood"] = {"health": [], "review": []}
    with tempfile.TemporaryDirectory() as tmp:
        quota, cert, key = (Path(tmp) / name for name in ("quota.yaml", "tls.crt", "tls.key"))
        quota.write_text(QUOTA)
        cert.write_bytes(made.cert_pem)
        key.write_bytes(made.key_pem)
        ca_pem = made.ca_pem.decode()
        with serving(quota, cert, key, client_context(ca_pem)) as url:
            for round_ in range(1, args.rounds + 1):
                for phase, flooders in (("baseline", 0), ("flood", args.flooders)):
                    seen = asyncio.run(probe_during(url, ca_pem, bodies, ordinary, args.seconds, flooders))
                    bad = {what: sorted(set(s) - {200, 400}) for what, s in seen.answers.items() if set(s) - {200, 400}}
                    medians[phase]["health"].append(statistics.median(seen.health))
                    medians[phase]["review"].append(statistics.median(seen.reviews))
                    print(
                        f"  round {round_} {phase:8}: /healthz median {medians[phase]['health'][-1] * 1e3:6.1f} ms "
                        f"max {max(seen.health) * 1e3:6.1f}; ordinary review median "
                        f"{medians[phase]['review'][-1] * 1e3:6.1f} ms max {max(seen.reviews) * 1e3:6.1f} "
                        f"({len(seen.reviews)} probes"
                        + (f", {seen.sent} hostile reviews" if flooders else "")
                        + ")"
                        + (f" UNEXPECTED STATUSES {bad}" if bad else "")
                    )
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("medians of the rounds' medians (range)")
    for probe in ("health", "review"):
        base, flood = medians["baseline"][probe], medians["flood"][probe]
        ratio = statistics.median(flood) / statistics.median(base)
        verdict = "met" if statistics.median(flood) < 0.05 else "MISSED"
        name = "/healthz" if probe == "health" else "ordinary review"
        print(f"  {name}: baseline {_ms(base)}, flood {_ms(flood)}, {ratio:.1f}× — under 50 ms in the flood: {verdict}")


if __name__ == "__main__":
    main()
