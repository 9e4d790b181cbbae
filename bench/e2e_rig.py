"""The processes of bench/e2e.py, laid out as they run for real: the API server, kuota, and the client.

* The fake API server with its fake kubelet runs in a child process of its own (`python bench/e2e_rig.py
  apiserver ...`, see `apiserver_main`): it creates the namespaces, registers kuota's webhooks from
  config/deploy/webhooks.yaml with the bench's CA, maps the kuota-webhook Service to the port kuota will listen
  on, writes a kubeconfig for kuota's service account, and prints its URL once it listens.
* kuota is the real `kuota serve --components webhook,controller` command, in a second child, pointed at the
  fake server by that kubeconfig; its JSON log goes to a file, where the bench waits for `leading`.
* The parent is the load client and the timing watch.

Every child gets SIGKILL from the kernel when the parent dies (PR_SET_PDEATHSIG), and `Rig.stop()` sends SIGTERM,
then SIGKILL, to whatever is still running. CPU seconds per process come from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

REPO = Path(__file__).resolve().parents[1]
WEBHOOKS = REPO / "config" / "deploy" / "webhooks.yaml"
WEBHOOK_SERVICE = ("kuota-system", "kuota-webhook")
WEBHOOK_HOST = "kuota-webhook.kuota-system.svc"
CLIENT_USER = "alice"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _spawn(name: str, argv: list[str], log: Path, *, stdout: int | IO[bytes] | None = None) -> Child:
    with log.open("wb") as err:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout if stdout is not None else err,
            stderr=err,
            preexec_fn=_die_with_parent,
            cwd=REPO,
        )
    return Child(name, process, log)


@dataclass
class Rig:
    """The two children and what the parent needs to talk to them."""

    workdir: Path
    children: list[Child] = field(default_factory=list)
    url: str = ""
    webhook_port: int = 0

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.name == name)

    def start_apiserver(self, namespaces: list[str], *, history: int, timeout_s: float = 30) -> None:
        self.webhook_port = free_port()
        ca, cert, key = make_certificates(self.workdir)
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "apiserver",
            "--workdir",
            str(self.workdir),
            "--ca",
            str(ca),
            "--webhook-url",
            f"https://127.0.0.1:{self.webhook_port}",
            "--history",
            str(history),
            *[arg for ns in namespaces for arg in ("--namespace", ns)],
        ]
        child = _spawn("apiserver", argv, self.workdir / "apiserver.log", stdout=subprocess.PIPE)
        self.children.append(child)
        assert child.process.stdout is not None
        ready, _, _ = select.select([child.process.stdout], [], [], timeout_s)
        line = child.process.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("READY "):
            raise RuntimeError(f"the fake API server did not start:\n{child.tail()}")
        self.url = line.split(" ", 1)[1]
        self.certs = (cert, key)

    def start_kuota(
        self, quota: Path, *, kube_qps: float, kube_burst: int, requeue_backoff: str = "10s", timeout_s: float = 60
    ) -> None:
        cert, key = self.certs
        executable = Path(sys.executable).with_name("kuota")
        command = [str(executable)] if executable.exists() else [sys.executable, "-m", "kuota.cli"]
        argv = [
            *command,
            "serve",
            "--components",
            "webhook,controller",
            "--config",
            str(quota),
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
            "--webhook-host",
            "127.0.0.1",
            "--webhook-port",
            str(self.webhook_port),
            "--kubeconfig",
            str(self.workdir / "kubeconfig-kuota"),
            "--database-url",
            f"sqlite+aiosqlite:///{self.workdir / 'ledger.db'}",
            "--kube-qps",
            str(kube_qps),
            "--kube-burst",
            str(kube_burst),
            "--requeue-backoff",
            requeue_backoff,
        ]
        child = _spawn("kuota", argv, self.workdir / "kuota.log")
        self.children.append(child)
        deadline = time.monotonic() + timeout_s
        while b'"event":"leading"' not in child.log.read_bytes():
            if not child.alive():
                raise RuntimeError(f"kuota serve exited with {child.process.returncode}:\n{child.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"kuota serve did not lead within {timeout_s:.0f} s:\n{child.tail()}")
            time.sleep(0.1)
        while not _listening(self.webhook_port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"kuota's webhook does not listen on {self.webhook_port}:\n{child.tail()}")
            time.sleep(0.1)

    def cpu(self) -> dict[str, float]:
        return {c.name: c.cpu() for c in self.children}

    def stop(self, grace_s: float = 10.0) -> None:
        """Last started, first stopped: SIGTERM (kuota finishes in flight, releases the Lease while the API server
        still answers, flushes the ledger), then SIGKILL after the grace period."""
        for child in reversed(self.children):
            if child.alive():
                child.process.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.process.wait(grace_s)
            if child.alive():
                child.process.kill()
                child.process.wait()
            if child.process.stdout is not None:
                child.process.stdout.close()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def make_certificates(workdir: Path) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for the webhook Service's name and 127.0.0.1."""
    import trustme

    ca = trustme.CA()
    leaf = ca.issue_cert(WEBHOOK_HOST, "127.0.0.1")
    ca_path, cert, key = workdir / "ca.crt", workdir / "tls.crt", workdir / "tls.key"
    ca.cert_pem.write_to_path(str(ca_path))
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return ca_path, cert, key


# -- the API server process ---------------------------------------------------------------------------------------


async def _serve_api(args: argparse.Namespace, webhooks: list[dict[str, Any]]) -> dict[str, Any]:
    from tests.fakekube import FakeKubelet, FakeKubeServer
    from webhooks.state import DEFAULT_SERVICE_ACCOUNT

    workdir = Path(args.workdir)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    async with FakeKubeServer(bookmark_interval_s=1.0, history_limit=args.history) as server:
        for namespace in args.namespace:
            await server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        mutating, validating = webhooks
        server.register_webhooks(mutating=mutating, validating=validating)
        server.set_service_url(*WEBHOOK_SERVICE, args.webhook_url)
        server.kubeconfig(workdir / "kubeconfig-kuota", user=DEFAULT_SERVICE_ACCOUNT)
        async with FakeKubelet(server, default_runtime_s=1.0) as kubelet:
            sys.stdout.write(f"READY {server.url}\n")
            sys.stdout.flush()
            await stopping.wait()
            return {
                "requests": len(server.request_log),
                "by_verb": _count(f"{r.verb} {r.resource}" for r in server.request_log),
                "webhook_calls": len(server.admission_log),
                "webhook_failures": sum(1 for r in server.admission_log if r.allowed is None),
                "kubelet_errors": kubelet.errors[:20],
                "resource_version": server.resource_version,
            }


def _count(items: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def apiserver_main(argv: list[str]) -> None:
    import logging

    parser = argparse.ArgumentParser(prog="e2e_rig.py apiserver")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--webhook-url", required=True)
    parser.add_argument("--history", type=int, default=10_000)
    parser.add_argument("--namespace", action="append", default=[])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    bundle = base64.b64encode(Path(args.ca).read_bytes()).decode()
    webhooks = list(yaml.safe_load_all(WEBHOOKS.read_text()))
    for document in webhooks:
        for hook in document["webhooks"]:
            hook["clientConfig"]["caBundle"] = bundle
    try:
        import uvloop

        factory: Any = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        stats = runner.run(_serve_api(args, webhooks))
    (Path(args.workdir) / "apiserver-stats.json").write_text(json.dumps(stats, indent=1))


if __name__ == "__main__":
    sys.path[0] = str(REPO)  # the repository, not bench/, so that `tests.fakekube` imports
    if len(sys.argv) > 1 and sys.argv[1] == "apiserver":
        apiserver_main(sys.argv[2:])
    else:
        sys.exit("usage: e2e_rig.py apiserver ...")
