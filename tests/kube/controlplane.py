"""The real control plane of testing/cluster, started from Python.

`cluster_binary()` builds kuota-cluster once per source hash (testing/cluster/build.sh; the Go build caches make
later builds quick). A `ControlPlane` is one folder (PKI, kubeconfig, etcd data, logs) and one or more `up`
processes on it: the usual rig starts every component in one group; a test that restarts kube-apiserver starts
etcd, the API server and the rest as three groups and restarts the middle one on the same etcd data.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "testing" / "cluster" / "build.sh"
DEPLOY = REPO / "config" / "deploy"
ALL = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# The nodes of the usual rig: what tests/e2e/quota.yaml's flavor selects and tolerates.
NODE_LABELS = "kuota.dev/pool=a,nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"
NODE_TAINTS = "dedicated=e2e:NoSchedule"


class ControlPlaneError(RuntimeError):
    pass


@cache
def cluster_binary() -> Path:
    """The kuota-cluster binary for this source tree, built if needed. A missing Go toolchain or a failed build
    is an error, never a skip: the end-to-end suite is only worth anything against the real thing."""
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"building testing/cluster failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass
class Group:
    """One `kuota-cluster up` process and the components it supervises."""

    components: tuple[str, ...]
    process: subprocess.Popen[bytes]
    output: Path

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.running():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """As a crash would: the children die with their parent (Pdeathsig)."""
        if self.running():
            self.process.kill()
            self.process.wait()


@dataclass
class ControlPlane:
    root: Path
    groups: list[Group] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def state(self) -> dict[str, str]:
        data: dict[str, str] = json.loads((self.root / "cluster.json").read_text())
        return data

    @property
    def server(self) -> str:
        return self.state["apiserver"]

    @property
    def etcd(self) -> str:
        return self.state["etcd"]

    def log(self, component: str) -> str:
        path = self.root / "logs" / f"{component}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def up(
        self,
        components: Sequence[str] = ALL,
        *,
        nodes: int = 0,
        node_labels: str = NODE_LABELS,
        node_taints: str = NODE_TAINTS,
        apiserver_args: Iterable[str] = (),
        extra: Iterable[str] = (),
        timeout_s: float = 180.0,
    ) -> Group:
        """Start `up` for these components and wait until it says they are ready."""
        self.root.mkdir(parents=True, exist_ok=True)
        output = self.root / f"up-{len(self.groups)}.out"
        argv = [str(cluster_binary()), "up", "--dir", str(self.root), "--components", ",".join(components)]
        argv += [f"--timeout={int(timeout_s)}s"]
        if nodes:
            argv += [f"--nodes={nodes}", f"--node-labels={node_labels}", f"--node-taints={node_taints}"]
        argv += [f"--apiserver-arg={arg}" for arg in apiserver_args]
        argv += list(extra)
        with output.open("wb") as sink:
            process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        group = Group(tuple(components), process, output)
        deadline = time.monotonic() + timeout_s + 5
        while b"ready in" not in output.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                group.kill()
                logs = "\n".join(f"--- {c}\n{self.log(c)[-3000:]}" for c in components)
                raise ControlPlaneError(f"kuota-cluster up {components} failed:\n{output.read_text()}\n{logs}")
            time.sleep(0.05)
        self.groups.append(group)
        return group

    def restart(self, group: Group, *, timeout_s: float = 120.0) -> Group:
        """Stop a group and start the same components again on the same folder (and so the same ports)."""
        group.stop()
        self.groups.remove(group)
        return self.up(group.components, timeout_s=timeout_s)

    def down(self) -> None:
        for group in reversed(self.groups):
            group.stop()
        self.groups.clear()

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        argv = [str(cluster_binary()), "kubectl", f"--cache-dir={self.root / 'kubectl-cache'}", *args]
        done = subprocess.run(argv, input=input, capture_output=True, text=True, env=env, check=False, timeout=120)
        if check and done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    def token(self, namespace: str, service_account: str, *, duration: str = "24h") -> str:
        """A bound token of a ServiceAccount, as a Pod of it would get (TokenRequest)."""
        done = self.kubectl("create", "token", service_account, "-n", namespace, f"--duration={duration}")
        return done.stdout.strip()

    def token_kubeconfig(self, path: Path, token: str, *, server: str | None = None) -> Path:
        """A kubeconfig that authenticates with a bearer token (so RBAC applies), optionally through a proxy."""
        ca = (self.pki / "ca.crt").read_text()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "rig",
                    "cluster": {
                        "server": server or self.server,
                        "certificate-authority-data": base64.b64encode(ca.encode()).decode(),
                    },
                }
            ],
            "users": [{"name": "sa", "user": {"token": token}}],
            "contexts": [{"name": "rig", "context": {"cluster": "rig", "user": "sa"}}],
            "current-context": "rig",
        }
        path.write_text(json.dumps(config))
        return path

    def install_kuota_identity(self) -> None:
        """kuota's Namespace, ServiceAccount and least-privilege RBAC, exactly as config/deploy ships them."""
        files = [DEPLOY / name for name in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml")]
        self.kubectl("apply", "--server-side", *[arg for f in files for arg in ("-f", str(f))])

    def apply(self, documents: Iterable[dict[str, Any]]) -> None:
        """Server-side apply, taking over fields another apply set: the way tests switch a shared object."""
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(documents))

    def install_crds(self, paths: Iterable[Path], *, timeout_s: float = 60.0) -> None:
        """CustomResourceDefinitions, created server-side (most are too large for a client-side apply's
        last-applied annotation), then waited for until the API server serves them."""
        paths = list(paths)
        self.kubectl("apply", "--server-side", "--force-conflicts", *[arg for p in paths for arg in ("-f", str(p))])
        names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in paths]
        crds = [f"crd/{name}" for name in names]
        self.kubectl("wait", "--for=condition=Established", f"--timeout={int(timeout_s)}s", *crds)

    def register_webhooks(self, port: int, ca_pem: bytes, documents: Sequence[dict[str, Any]] | None = None) -> None:
        """config/deploy/webhooks.yaml (or `documents` made from it) with only clientConfig rewritten: a 127.0.0.1
        URL on `port`, its caBundle."""
        bundle = base64.b64encode(ca_pem).decode()
        if documents is None:
            documents = list(yaml.safe_load_all((DEPLOY / "webhooks.yaml").read_text()))
        documents = copy.deepcopy(list(documents))
        for document in documents:
            for hook in document["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
        self.apply(documents)
