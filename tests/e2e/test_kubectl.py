"""kubectl against kuota: the deploy kustomization builds, and a Job created with `kubectl create` through the
(fake) API server is queued by the webhook and admitted by the controller."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest
import yaml

from tests.e2e.conftest import REPO, Rig, eventually
from tests.e2e.test_lifecycle import complete, queued_job

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def test_deploy_kustomization_builds_with_the_expected_objects() -> None:
    # `kubectl apply --dry-run=client` needs a server that knows apps/v1, rbac and cert-manager kinds, which the
    # fake API server does not serve; kustomize itself is offline.
    assert KUBECTL is not None
    built = subprocess.run(
        [KUBECTL, "kustomize", str(REPO / "config" / "deploy")], capture_output=True, text=True, check=True
    )
    objects = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(built.stdout) if o}
    deployment = objects[("Deployment", "kuota")]
    assert deployment["spec"]["replicas"] == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["lifecycle"]["preStop"]
    assert container["resources"]["requests"]
    ports = {p["port"]: p["targetPort"] for p in objects[("Service", "kuota-webhook")]["spec"]["ports"]}
    assert ports == {443: "webhook", 8080: "admin"}
    assert {
        ("ClusterRole", "kuota"),
        ("Role", "kuota"),
        ("PodDisruptionBudget", "kuota"),
        ("ConfigMap", "kuota-quota"),
    } <= set(objects)
    assert ("MutatingWebhookConfiguration", "kuota-mutate") in objects
    role = objects[("ClusterRole", "kuota")]
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    assert "delete" not in verbs and "*" not in verbs and "update" not in verbs
    rbac_text = (REPO / "config" / "deploy" / "rbac.yaml").read_text()
    for line in rbac_text.splitlines():
        if line.strip().startswith("- ") and line.startswith("      - "):
            assert "#" in line, f"verb without a reason: {line}"


async def test_kubectl_create_job_is_queued_and_admitted(rig: Rig) -> None:
    assert KUBECTL is not None
    await rig.controller()
    kubeconfig = rig.server.kubeconfig(rig.tmp / "kc-user", user="bob")
    manifest = rig.tmp / "job.yaml"
    manifest.write_text(yaml.safe_dump(queued_job("from-kubectl", runtime_s=0.3)))
    done = await asyncio.to_thread(
        subprocess.run,
        [KUBECTL, "--kubeconfig", str(kubeconfig), "create", "-f", str(manifest)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "job.batch/from-kubectl created" in done.stdout
    await eventually(lambda: complete(rig.job("from-kubectl")), what="admitted and run")
    assert rig.job("from-kubectl")["metadata"]["annotations"]["kuota.dev/admitted-flavor"] == "pool-a"
