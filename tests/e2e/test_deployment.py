"""config/deploy as an operator applies it, against the real control plane.

* `kubectl apply --server-side --dry-run=server -k config/deploy`: kube-apiserver validates and defaults every
  object of the kustomization (CEL matchConditions of the webhooks compiled, RBAC rules, the Deployment's pod
  spec) and stores nothing.
* The container of config/deploy/deployment.yaml, run as a process: its arguments and environment exactly as the
  manifest has them, the files it mounts (quota ConfigMap, TLS Secret) laid out under a temporary root, the
  ports moved to free ones, and one addition: `--kubeconfig` with the token of the kuota ServiceAccount, which a
  Pod would get from its mounted ServiceAccount token. It must start, answer its probes, take the Lease and
  admit a Job of the quota file's queue onto the quota file's flavor.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import trustme
import yaml
from kubernetes_asyncio import client

from tests.e2e.conftest import DEPLOY, Rig, delete_namespace, eventually, make_namespace, running
from tests.kube.controlplane import ControlPlane, cluster_binary
from tests.kube.manifests import complete, job_manifest


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_server_side_dry_run_of_the_deploy_kustomization(control_plane: ControlPlane) -> None:
    done = control_plane.kubectl("apply", "--server-side", "--dry-run=server", "-k", str(DEPLOY), check=False)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    built = control_plane.kubectl("kustomize", str(DEPLOY)).stdout
    objects = [d for d in yaml.safe_load_all(built) if d]
    assert len(lines) == len(objects), done.stdout
    assert all("(server dry run)" in line for line in lines), done.stdout
    # Nothing was stored: the Deployment does not exist.
    missing = control_plane.kubectl("get", "deployment", "kuota", "-n", "kuota-system", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_a_broken_manifest_is_refused_by_the_server(control_plane: ControlPlane, tmp_path: Path) -> None:
    # A webhook whose CEL matchCondition does not compile: only a real kube-apiserver can tell.
    webhooks = documents(DEPLOY / "webhooks.yaml")
    webhooks[0]["webhooks"][0]["matchConditions"][0]["expression"] = "object.metadata.labels.("
    broken = tmp_path / "webhooks.yaml"
    broken.write_text(yaml.safe_dump_all(webhooks))
    done = control_plane.kubectl("apply", "--server-side", "--dry-run=server", "-f", str(broken), check=False)
    assert done.returncode != 0
    assert "matchConditions" in done.stderr and "compilation failed" in done.stderr, done.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def deployment_process(rig: Rig, root: Path, ca: trustme.CA) -> tuple[list[str], dict[str, str], Path, dict[str, int]]:
    """The container of deployment.yaml as a command line on this machine (see the module's docstring)."""
    deployment = documents(DEPLOY / "deployment.yaml")[0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}

    def local(path: str) -> Path:
        return root / path.lstrip("/")

    configmap = next(d for d in documents(DEPLOY / "configmap.yaml") if d["kind"] == "ConfigMap")
    assert volumes["quota"]["configMap"]["name"] == configmap["metadata"]["name"]
    for key, text in configmap["data"].items():
        local(mounts["quota"]).mkdir(parents=True, exist_ok=True)
        (local(mounts["quota"]) / key).write_text(text)
    leaf = ca.issue_cert("kuota-webhook.kuota-system.svc", "127.0.0.1")
    tls = local(mounts["tls"])
    tls.mkdir(parents=True, exist_ok=True)
    leaf.cert_chain_pems[0].write_to_path(str(tls / "tls.crt"))
    leaf.private_key_pem.write_to_path(str(tls / "tls.key"))
    for path in mounts.values():  # other volumes (emptyDir, optional Secrets) start empty
        local(path).mkdir(parents=True, exist_ok=True)
    workdir = local(container.get("workingDir", "/"))
    workdir.mkdir(parents=True, exist_ok=True)

    ports: dict[str, int] = {}
    args = []
    for arg in container["args"]:
        flag, eq, value = arg.partition("=")
        if eq and flag.endswith("-port"):
            ports[flag] = free_port()
            value = str(ports[flag])
        elif eq and value.startswith("/"):
            value = str(local(value))
        args.append(f"{flag}={value}" if eq else arg)
    args.append(f"--kubeconfig={rig.kuota_kubeconfig(name='deployment')}")

    env = {k: v for k, v in os.environ.items() if not k.startswith("KUOTA_")}
    for variable in container.get("env", []):
        source = variable.get("valueFrom", {})
        if "fieldRef" in source and source["fieldRef"]["fieldPath"] == "metadata.name":
            env[variable["name"]] = "kuota-7d9f-x2x4q"
        elif "secretKeyRef" in source:
            assert source["secretKeyRef"].get("optional"), f"{variable['name']}: a required Secret"  # absent here
        elif "value" in variable:
            env[variable["name"]] = variable["value"]
    kuota = str(Path(sys.executable).with_name("kuota"))
    return [kuota, *args], env, workdir, ports


def probe(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


async def test_the_deployments_container_starts_and_admits(rig: Rig, control_plane: ControlPlane) -> None:
    ca = trustme.CA()
    argv, env, workdir, ports = deployment_process(rig, rig.tmp / "root", ca)
    log = rig.tmp / "kuota.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=workdir)  # noqa: ASYNC220 (starting it does not block)
    try:
        await asyncio.sleep(3)
        assert process.poll() is None, f"kuota serve exited {process.returncode}:\n{log.read_text()[-3000:]}"
        admin_port = ports["--admin-port"]
        await eventually(lambda: _probe_ok(admin_port, "/readyz"), timeout_s=30, what="readinessProbe /readyz")
        assert await asyncio.to_thread(probe, admin_port, "/healthz") == 200
        # Its webhook port, with the mounted certificate, is what kube-apiserver calls from now on.
        await asyncio.to_thread(control_plane.register_webhooks, ports["--webhook-port"], ca.cert_pem.bytes())

        lease = await eventually(lambda: _holder(rig), timeout_s=30, what="the Deployment's process takes the Lease")
        assert lease.startswith("kuota-7d9f-x2x4q_")

        # A Job of the sample quota's queue nlp/default, on A100 nodes as its flavor selects and tolerates.
        await asyncio.to_thread(_a100_nodes, control_plane)
        await _namespace(rig, "nlp")
        job = job_manifest(
            "llm-sft", namespace="nlp", runtime_s=1, labels={"kuota.dev/queue": "default"}, cpu="1", gpus=8
        )
        created = await client.BatchV1Api(rig.user).create_namespaced_job("nlp", job)
        assert created.spec.suspend is True  # queued by the process's mutating webhook
        await eventually(lambda: _job(rig, "nlp", "llm-sft", running), timeout_s=30, what="admitted by the process")
        await eventually(lambda: _job(rig, "nlp", "llm-sft", complete), timeout_s=30, what="ran on an A100 node")
        assert process.poll() is None
    finally:
        process.terminate()
        try:
            code = process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        await delete_namespace(rig.admin, "nlp", wait_s=0)
    assert code == 0, log.read_text()[-3000:]


async def _probe_ok(port: int, path: str) -> bool:
    return await asyncio.to_thread(probe, port, path) == 200


async def _holder(rig: Rig) -> str | None:
    try:
        lease = await client.CoordinationV1Api(rig.admin).read_namespaced_lease("kuota-controller", "kuota-system")
    except client.exceptions.ApiException:
        return None
    return lease.spec.holder_identity or None


async def _job(rig: Rig, namespace: str, name: str, predicate: Any) -> bool:
    job = await client.BatchV1Api(rig.admin).read_namespaced_job(name, namespace)
    return bool(predicate(rig.admin.sanitize_for_serialization(job)))


async def _namespace(rig: Rig, name: str) -> None:
    await eventually(lambda: _namespace_gone_or_absent(rig, name), timeout_s=60, what=f"{name} from before is gone")
    await make_namespace(rig.admin, name)


async def _namespace_gone_or_absent(rig: Rig, name: str) -> bool:
    try:
        await client.CoreV1Api(rig.admin).read_namespace(name)
    except client.exceptions.ApiException as exc:
        return exc.status == 404
    return False


def _a100_nodes(plane: ControlPlane) -> None:
    subprocess.run(
        [
            str(cluster_binary()), "nodes", f"--kubeconfig={plane.kubeconfig}", "--count=2",
            "--node-prefix=a100-node-", "--node-labels=nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB",
            "--node-taints=nvidia.com/gpu=present:NoSchedule",
        ],
        check=True, capture_output=True,
    )  # fmt: skip
