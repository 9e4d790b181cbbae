"""The processes of bench/e2e.py, laid out as they run for real: the control plane, kuota, and the client.

* The control plane of testing/cluster (tests/kube/controlplane.py starts it): etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler and kwok, each a process of its own, with kwok nodes big enough for the
  mix's quota (the rig adds no taint or label: the mix's one flavor selects any node). kuota's Namespace,
  ServiceAccount and RBAC come from config/deploy; the mix's namespaces get a RoleBinding for the load client's
  user (`alice`, impersonated by the admin certificate, so kube-apiserver authorises and throttles her as a user).
* kuota is the real `kuota serve --components webhook,controller` command, pointed at kube-apiserver by a
  kubeconfig holding the kuota ServiceAccount's token; its webhooks are registered from config/deploy/webhooks.yaml
  with a 127.0.0.1 URL and the bench's CA; its JSON log goes to a file, where the bench waits for `leading`.
* The parent is the load client and the timing watch.

CPU seconds per process come from /proc and are reported in three groups: etcd with kube-apiserver, the
controller-manager with the scheduler and kwok, and kuota.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.kube.controlplane import ControlPlane  # noqa: E402

WEBHOOK_HOST = "kuota-webhook.kuota-system.svc"
CLIENT_USER = "alice"
GROUPS = {
    "etcd": "etcd+apiserver",
    "kube-apiserver": "etcd+apiserver",
    "kube-controller-manager": "controllers",
    "kube-scheduler": "controllers",
    "kwok": "controllers",
}
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


def children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def component_of(pid: int) -> str | None:
    """Which control-plane component a kuota-cluster child runs (its first argument)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return argv[1].decode() if len(argv) > 1 else None


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
    """The control plane, kuota, and what the parent needs to talk to them."""

    workdir: Path
    children: list[Child] = field(default_factory=list)
    plane: ControlPlane | None = None
    webhook_port: int = 0
    component_pids: dict[str, int] = field(default_factory=dict)

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.name == name)

    def start_cluster(self, namespaces: list[str], *, nodes: int, node_cpu: str) -> None:
        self.plane = ControlPlane(self.workdir / "cluster")
        group = self.plane.up(
            nodes=nodes,
            node_labels="",
            node_taints="",
            extra=[f"--cpu-per-node={node_cpu}", "--pods-per-node=1000", "--gpus-per-node=0"],
        )
        for pid in children(group.process.pid):
            name = component_of(pid)
            if name is not None:
                self.component_pids[name] = pid
        self.plane.install_kuota_identity()
        objects: list[dict[str, object]] = []
        for namespace in namespaces:
            objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            objects.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": "load-client", "namespace": namespace},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": CLIENT_USER}],
                }
            )
        self.plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
        for namespace in namespaces:  # pods need the namespace's default ServiceAccount
            deadline = time.monotonic() + 60
            while self.plane.kubectl("get", "sa", "default", "-n", namespace, check=False).returncode != 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"namespace {namespace} has no default ServiceAccount")
                time.sleep(0.2)

    def start_kuota(
        self, quota: Path, *, kube_qps: float, kube_burst: int, requeue_backoff: str = "10s", timeout_s: float = 60
    ) -> None:
        assert self.plane is not None
        self.webhook_port = free_port()
        ca, cert, key = make_certificates(self.workdir)
        kubeconfig = self.plane.token_kubeconfig(
            self.workdir / "kubeconfig-kuota", self.plane.token("kuota-system", "kuota")
        )
        executable = Path(sys.executable).with_name("kuota")
        command = [str(executable)] if executable.exists() else [sys.executable, "-m", "kuota.cli"]
        argv = [
            *command, "serve", "--components", "webhook,controller", "--config", str(quota),
            "--tls-cert", str(cert), "--tls-key", str(key),
            "--webhook-host", "127.0.0.1", "--webhook-port", str(self.webhook_port),
            "--kubeconfig", str(kubeconfig), "--database-url", f"sqlite+aiosqlite:///{self.workdir / 'ledger.db'}",
            "--kube-qps", str(kube_qps), "--kube-burst", str(kube_burst), "--requeue-backoff", requeue_backoff,
        ]  # fmt: skip
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
        self.plane.register_webhooks(self.webhook_port, ca.read_bytes())

    def pids(self) -> dict[str, int]:
        return {**self.component_pids, **{c.name: c.pid for c in self.children}}

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far per group of processes."""
        totals: dict[str, float] = {}
        for name, pid in self.pids().items():
            group = GROUPS.get(name, name)
            totals[group] = totals.get(group, 0.0) + cpu_seconds(pid)
        return totals

    def stop(self, grace_s: float = 10.0) -> None:
        """kuota first (it releases the Lease while the API server still answers), then the control plane."""
        for child in reversed(self.children):
            if child.alive():
                child.process.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.process.wait(grace_s)
            if child.alive():
                child.process.kill()
                child.process.wait()
        if self.plane is not None:
            self.plane.down()


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
