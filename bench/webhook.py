"""The admission webhooks under load, over HTTPS with keep-alive on loopback.

Three servers run the same stack — `WebhookServer` with webhooks/http.py's HTTP/1.1 protocol, the same TLS
context, uvloop when available, the collector tuned and start-up frozen as `kuota serve` runs it, each in a process
of its own: kuota's webhook routes; a no-op handler that reads the body and returns a fixed allowed review (the
practical limit of the stack); and a handler that also decodes the review with kuota's parser before the same
fixed answer, which splits kuota's distance from the no-op into what any Python webhook pays to read a review and
what kuota's rules add. A lean client in this process sends realistic AdmissionReviews (an EIDF-style GPU Job;
mutate and validate alternating, as the API server calls both per Job) and measures:

* at fixed rates (open loop: each request is timed from when it was due, so queueing counts): p50/p99/p99.9;
* at saturation (every connection back to back): reviews per second, latencies, and the server process's CPU time
  per review, which is kuota's cost independent of what the client on the same machine can drive.

The servers run side by side and every phase alternates between them in short rounds, so that changes in the
machine's load during the run hit all alike. The server gets one CPU and the client the others where there are two.

Targets: p99 ≤ 5 ms at 500 reviews/s; ≥ 2,000 reviews/s from one process at saturation; kuota's CPU per review
within 1.5× the no-op's. Results are reported, not asserted.

    .venv/bin/python bench/webhook.py [--rates 500,1000] [--seconds 6] [--rounds 3] [--connections 8]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing
import os
import ssl
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from queues.heap import freeze_what_is_alive, tune_collector
from quota.loader import load_config_text
from webhooks.app import MUTATE_PATH, VALIDATE_PATH, Review
from webhooks.certs import make_certificates
from webhooks.review import parse_review
from webhooks.server import WebhookServer
from webhooks.state import WebhookState
from webhooks.tls import ReloadingTLS

HOSTNAME = "kuota-webhook.kuota-system.svc"

QUOTA = (
    """
apiVersion: kuota.dev/v1
kind: QuotaConfig
flavors:
  - {name: default-flavor}
  - {name: a100, nodeLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB}}
  - {name: a100-1g, nodeLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB-MIG-1g.5gb}}
priorityClasses:
  - {name: production, value: 10000}
  - {name: research, value: 1000, default: true}
cohorts: [{name: org}]
teams:
"""
    + "".join(
        f"""
  - name: team-{i}
    parent: org
    queues: [ns-{i}/user-queue, ns-{i}/urgent]
    resourceGroups:
      - coveredResources: [cpu, memory]
        flavors: [{{flavor: default-flavor, resources: {{cpu: {{nominal: 100}}, memory: {{nominal: 1Ti}}}}}}]
      - coveredResources: [nvidia.com/gpu]
        flavors:
          - {{flavor: a100, resources: {{nvidia.com/gpu: {{nominal: 8, borrowingLimit: 8}}}}}}
          - {{flavor: a100-1g, resources: {{nvidia.com/gpu: {{nominal: 16}}}}}}
"""
        for i in range(50)
    )
    + """
namespaces:
"""
    + "".join(f"  - {{name: ns-{i}, managed: true, defaultQueue: user-queue}}\n" for i in range(50))
)


def job(i: int, suspend: bool) -> dict[str, Any]:
    """An EIDF-style PyTorch Job (GPU in limits only, MIG node selector), as the API server sends it."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"pytorch-job-{i:05d}",
            "generateName": "pytorch-job-",
            "namespace": f"ns-{i % 50}",
            "uid": str(uuid.uuid4()),
            "creationTimestamp": "2026-03-01T08:00:00Z",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue", "app": "pytorch"},
            "annotations": {"kuota.dev/checkpoint-url": "http://ckpt.example.svc:8080/checkpoint"},
        },
        "spec": {
            "parallelism": 2,
            "completions": 4,
            "backoffLimit": 4,
            "suspend": suspend,
            "completionMode": "NonIndexed",
            "template": {
                "metadata": {"labels": {"app": "pytorch"}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"},
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "pytorch/pytorch:2.0.1-cuda11.7-cudnn8-devel",
                            "command": ["python3"],
                            "args": ["/mnt/ceph/example_pytorch_code.py"],
                            "resources": {
                                "requests": {"cpu": "2", "memory": "1Gi"},
                                "limits": {"cpu": "4", "memory": "4Gi", "nvidia.com/gpu": "1"},
                            },
                            "volumeMounts": [{"mountPath": "/mnt/ceph", "name": "volume"}],
                        }
                    ],
                    "volumes": [{"name": "volume", "persistentVolumeClaim": {"claimName": "pytorch-pvc"}}],
                },
            },
        },
    }


def reviews(count: int) -> list[bytes]:
    """Whole HTTP requests, alternating mutate (the Job as submitted) and validate (the Job after mutation)."""
    requests = []
    for i in range(count):
        mutate = i % 2 == 0
        body = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": str(uuid.uuid4()),
                    "kind": {"group": "batch", "version": "v1", "kind": "Job"},
                    "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
                    "namespace": f"ns-{i % 50}",
                    "operation": "CREATE",
                    "userInfo": {"username": f"user-{i % 7}@example.org", "groups": ["system:authenticated"]},
                    "object": job(i, suspend=not mutate),
                    "oldObject": None,
                    "dryRun": False,
                },
            }
        ).encode()
        path = MUTATE_PATH if mutate else VALIDATE_PATH
        head = f"POST {path}?timeout=3s HTTP/1.1\r\nHost: {HOSTNAME}:443\r\nContent-Type: application/json\r\n"
        requests.append(head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return requests


# -- servers --------------------------------------------------------------------------------------------------------

NOOP_BODY = json.dumps(
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "x", "allowed": True}}
).encode()


@dataclass(frozen=True, slots=True)
class _FixedAnswer(Review):
    """A review path that answers a fixed allowed review (decoding the body with kuota's `parse_review` first when
    `decode`): the same server, with kuota's rules taken out."""

    decode: bool = False

    def answer(self, body: bytes) -> tuple[int, bytes]:
        if self.decode:
            parse_review(body)
        return 200, NOOP_BODY


def _fixed_answers(decode: bool) -> Callable[[WebhookServer], None]:
    def install(server: WebhookServer) -> None:
        routes = server.routes
        for path in (MUTATE_PATH, VALIDATE_PATH):
            kept = routes.reviews[path]
            routes.reviews[path] = _FixedAnswer(kept.endpoint, kept.rule, kept.state, kept.kind, None, decode)

    return install


#: What each server answers with: kuota's routes as they are, or fixed answers in their place.
SERVERS: dict[str, Callable[[WebhookServer], None]] = {
    "noop": _fixed_answers(decode=False),
    "decode": _fixed_answers(decode=True),
    "kuota": lambda _: None,
}
LABELS = {"noop": "no-op handler", "decode": "no-op that decodes the review", "kuota": "kuota's webhooks"}


def pin(cpus: set[int]) -> None:
    """Keep this process on `cpus` (Linux), so that server and client do not evict each other from the caches."""
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)


def split_cpus() -> tuple[set[int], set[int]]:
    """(server CPUs, client CPUs): one CPU for the server, the rest for the client; no pinning on one CPU."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(allowed) < 2:
        return set(), set()
    return {allowed[0]}, set(allowed[1:])


def _serve(kind: str, cert: str, key: str, ready: Any, stop: Any, cpus: set[int]) -> None:
    import logging

    import structlog

    pin(cpus)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    state = WebhookState(load_config_text(QUOTA))

    async def main() -> None:
        server = WebhookServer(state, ReloadingTLS(Path(cert), Path(key)), host="127.0.0.1", port=0)
        SERVERS[kind](server)
        tune_collector()  # as `kuota serve` runs: the same thresholds, and what start-up built frozen
        await server.start()
        freeze_what_is_alive()
        ready.send(server.port)
        await asyncio.get_running_loop().run_in_executor(None, stop.wait)
        await server.stop()

    try:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
    except ImportError:
        asyncio.run(main())


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux), or None where /proc is not there."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- client ---------------------------------------------------------------------------------------------------------


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def exchange(self, request: bytes) -> int:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.reader.readexactly(length)
        return status


async def connect(port: int, context: ssl.SSLContext, count: int) -> list[Connection]:
    pairs = [
        await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=HOSTNAME) for _ in range(count)
    ]
    return [Connection(r, w) for r, w in pairs]


@dataclass
class Result:
    label: str
    sent: int
    errors: int
    seconds: float
    latencies: list[float]
    cpu_seconds: float | None = None
    """Server CPU time spent over the measurement (saturation only)."""

    def merged(self, other: Result) -> Result:
        cpu = None if self.cpu_seconds is None or other.cpu_seconds is None else self.cpu_seconds + other.cpu_seconds
        return Result(
            self.label,
            self.sent + other.sent,
            self.errors + other.errors,
            self.seconds + other.seconds,
            self.latencies + other.latencies,
            cpu,
        )

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000 if ordered else float("nan")

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.seconds

    @property
    def cpu_per_review(self) -> float | None:
        return self.cpu_seconds / len(self.latencies) if self.cpu_seconds and self.latencies else None

    def line(self) -> str:
        per_review = self.cpu_per_review
        cpu = f"  server CPU {per_review * 1e6:4.0f} µs/review" if per_review else ""
        return (
            f"  {self.label:<16} {self.throughput:6.0f} reviews/s   p50 {self.percentile(50):6.2f} ms   "
            f"p99 {self.percentile(99):6.2f} ms   p99.9 {self.percentile(99.9):6.2f} ms   "
            f"errors {self.errors}{cpu}"
        )


async def fixed_rate(conns: list[Connection], requests: list[bytes], rate: float, seconds: float) -> Result:
    idle: asyncio.Queue[Connection] = asyncio.Queue()
    for conn in conns:
        idle.put_nowait(conn)
    latencies: list[float] = []
    errors = 0
    total = int(rate * seconds)
    start = time.perf_counter() + 0.05

    async def one(i: int, due: float) -> None:
        nonlocal errors
        conn = await idle.get()
        try:
            status = await conn.exchange(requests[i % len(requests)])
        finally:
            idle.put_nowait(conn)
        latencies.append(time.perf_counter() - due)  # from when it was due: waiting for a connection counts
        errors += status != 200

    tasks = []
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, due)))
    await asyncio.gather(*tasks)
    return Result(f"{rate:.0f}/s fixed", total, errors, time.perf_counter() - start, latencies)


async def saturate(conns: list[Connection], requests: list[bytes], seconds: float, cpu: Callable[[], Any]) -> Result:
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker(k: int, conn: Connection) -> None:
        nonlocal errors
        i = k
        while time.perf_counter() < deadline:
            begin = time.perf_counter()
            status = await conn.exchange(requests[i % len(requests)])
            latencies.append(time.perf_counter() - begin)
            errors += status != 200
            i += len(conns)

    cpu_before, begin = cpu(), time.perf_counter()
    await asyncio.gather(*(worker(k, c) for k, c in enumerate(conns)))
    elapsed, cpu_after = time.perf_counter() - begin, cpu()
    cpu_spent = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
    return Result("saturation", len(latencies), errors, elapsed, latencies, cpu_spent)


async def measure(
    servers: dict[str, tuple[int, int]], context: ssl.SSLContext, args: argparse.Namespace, requests: list[bytes]
) -> dict[str, list[Result]]:
    """Every phase in rounds that alternate between the servers, so that drift in the machine's load hits each."""
    conns = {kind: await connect(port, context, args.connections) for kind, (port, _) in servers.items()}
    for kind in servers:
        await saturate(conns[kind], requests, 1.0, lambda: None)  # warm up: caches, TLS, the allocator
    chunk = args.seconds / args.rounds
    results: dict[str, list[Result]] = {kind: [] for kind in servers}
    saturating: dict[str, list[Connection]] = {}
    for rate in [*args.rates, None]:
        if rate is None:
            # Opened only now: left idle through the fixed-rate phases, longer than the server's idle timeout with
            # three servers taking turns, they would be closed under the client.
            extra = max(0, args.saturation_connections - args.connections)
            saturating = {
                kind: conns[kind] + await connect(port, context, extra) for kind, (port, _) in servers.items()
            }
            for kind in servers:
                await saturate(saturating[kind], requests, 0.5, lambda: None)
        merged: dict[str, Result] = {}
        for _ in range(args.rounds):
            for kind, (_, pid) in servers.items():
                if rate is None:
                    part = await saturate(saturating[kind], requests, chunk, functools.partial(cpu_seconds, pid))
                else:
                    part = await fixed_rate(conns[kind], requests, rate, chunk)
                merged[kind] = merged[kind].merged(part) if kind in merged else part
        for kind in servers:
            results[kind].append(merged[kind])
    for kind in servers:
        for conn in saturating.get(kind, conns[kind]):
            conn.writer.close()
    return results


def start_server(kind: str, cert: Path, key: Path, cpus: set[int]) -> tuple[Any, int, Any]:
    """(process, port, stop event) of a server of `kind` in a process of its own."""
    ctx = multiprocessing.get_context("spawn")
    ready_recv, ready_send = ctx.Pipe(duplex=False)
    stop = ctx.Event()
    process = ctx.Process(target=_serve, args=(kind, str(cert), str(key), ready_send, stop, cpus), daemon=True)
    process.start()
    if not ready_recv.poll(60):
        process.kill()
        raise SystemExit(f"the {kind} server did not start")
    return process, int(ready_recv.recv()), stop


def run_client(coroutine: Any) -> dict[str, list[Result]]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="500,1000", help="fixed request rates, reviews per second")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each phase, per server")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections at fixed rates")
    parser.add_argument("--saturation-connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="alternations between the two servers per phase")
    args = parser.parse_args()
    args.rates = [float(r) for r in args.rates.split(",") if r]

    made = make_certificates("kuota-webhook", "kuota-system")
    with tempfile.TemporaryDirectory() as tmp:
        cert, key, ca = Path(tmp) / "tls.crt", Path(tmp) / "tls.key", Path(tmp) / "ca.crt"
        cert.write_bytes(made.cert_pem)
        key.write_bytes(made.key_pem)
        ca.write_bytes(made.ca_pem)
        context = ssl.create_default_context(cafile=str(ca))
        server_cpus, client_cpus = split_cpus()
        placement = (
            f"server on CPU {sorted(server_cpus)}, client on {sorted(client_cpus)}" if server_cpus else "unpinned"
        )
        print(f"webhook benchmark: loopback HTTPS, keep-alive, {placement}, {args.seconds:.0f} s per phase and server")
        print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (other work on the machine)")
        started = time.perf_counter()
        running = {kind: start_server(kind, cert, key, server_cpus) for kind in SERVERS}
        try:
            pin(client_cpus)
            servers = {kind: (port, process.pid or 0) for kind, (process, port, _) in running.items()}
            by_kind = run_client(measure(servers, context, args, reviews(256)))
        finally:
            for process, _, stop in running.values():
                stop.set()
                process.join(15)
                if process.is_alive():
                    process.kill()
        print(f"(measured in {time.perf_counter() - started:.0f} s, {args.rounds} alternating rounds per phase)")
        for kind, label in LABELS.items():
            print(label)
            for result in by_kind[kind]:
                print(result.line())

    kuota, noop, decode = by_kind["kuota"], by_kind["noop"], by_kind["decode"]
    at_500 = next((r for r in kuota if r.label.startswith("500/")), None)
    sat, noop_sat = kuota[-1], noop[-1]
    print("targets")
    if at_500 is not None:
        p99 = at_500.percentile(99)
        print(f"  p99 at 500 reviews/s ≤ 5 ms: {p99:.2f} ms — {'met' if p99 <= 5 else 'MISSED'}")
    print(f"  ≥ 2,000 reviews/s at saturation: {sat.throughput:.0f} — {'met' if sat.throughput >= 2000 else 'MISSED'}")
    if sat.cpu_per_review and noop_sat.cpu_per_review:
        ratio = sat.cpu_per_review / noop_sat.cpu_per_review
        verdict = "met" if ratio <= 1.5 else "MISSED"
        print(f"  kuota's server CPU per review ≤ 1.5× the no-op's: {ratio:.2f}× — {verdict}")
        decoded = decode[-1].cpu_per_review
        if decoded:
            print(
                f"  (of which decoding the review: {decoded / noop_sat.cpu_per_review:.2f}× the no-op's; kuota's "
                f"rules and answer {(sat.cpu_per_review - decoded) * 1e6:.0f} µs a review more)"
            )
    ratio = noop_sat.throughput / sat.throughput
    print(f"  (saturation throughput, no-op ÷ kuota: {ratio:.2f}×)")


if __name__ == "__main__":
    main()
