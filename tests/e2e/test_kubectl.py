"""kubectl against kuota: the deploy kustomization builds and passes `kubectl apply --dry-run=client` against the
(fake) API server, and a Job created with `kubectl create` through it is queued by the webhook and admitted by the
controller."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import REPO, Rig, eventually
from tests.e2e.test_lifecycle import complete, queued_job
from tests.fakekube import resources

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

DEPLOY = REPO / "config" / "deploy"


def kustomize(directory: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    built = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, check=True)
    return [o for o in yaml.safe_load_all(built.stdout) if o]


async def kubectl_apply_dry_run(rig: Rig, directory: Path) -> subprocess.CompletedProcess[str]:
    """`kubectl apply --dry-run=client -k DIR` with kubectl's default validation, against the rig's server. Its
    own discovery cache, so every run reads the server's discovery and OpenAPI documents afresh."""
    assert KUBECTL is not None
    kubeconfig = rig.server.kubeconfig(rig.tmp / "kc-kubectl")
    command = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(rig.tmp / "kube-cache")]
    return await asyncio.to_thread(
        subprocess.run,
        [*command, "apply", "--dry-run=client", "-k", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def printed_name(obj: dict[str, Any]) -> str:
    """How kubectl names an object in its output: `deployment.apps/kuota`, `namespace/kuota-system`."""
    group = obj["apiVersion"].rpartition("/")[0]
    return f"{obj['kind'].lower()}{'.' + group if group else ''}/{obj['metadata']['name']}"


def dry_run_lines(rig: Rig, objects: list[dict[str, Any]]) -> set[str]:
    """What `kubectl apply --dry-run=client` prints for these objects: `configured` for those the server has."""
    lines = set()
    for obj in objects:
        meta = obj["metadata"]
        stored = rig.server.get_object(obj["kind"], meta.get("namespace", ""), meta["name"])
        lines.add(f"{printed_name(obj)} {'created' if stored is None else 'configured'} (dry run)")
    return lines


def test_deploy_kustomization_builds_with_the_expected_objects() -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in kustomize(DEPLOY)}
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


async def test_kubectl_apply_client_dry_run_of_the_deploy_kustomization(rig: Rig) -> None:
    # The rig already has the kuota-system namespace and the webhook configurations, so kubectl takes both of its
    # paths: objects the server has are `configured`, the others `created`.
    server = rig.server
    objects = kustomize(DEPLOY)
    expected = dry_run_lines(rig, objects)
    assert len(expected) == len(objects) == 16
    assert {line for line in expected if line.endswith(" configured (dry run)")} == {
        "namespace/kuota-system configured (dry run)",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/kuota-mutate configured (dry run)",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/kuota-validate configured (dry run)",
    }
    stored_before = {rt.group_resource: server.objects(rt.group_resource) for rt in resources.RESOURCE_TYPES}
    resource_version, first_request = server.resource_version, len(server.request_log)

    done = await kubectl_apply_dry_run(rig, DEPLOY)

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert set(done.stdout.splitlines()) == expected, done.stdout
    # Nothing was written: kubectl only read (discovery, OpenAPI, one GET per object), the server's
    # resourceVersion did not move and every kind holds what it held.
    requests = server.request_log[first_request:]
    assert {r.method for r in requests} == {"GET"}
    assert server.resource_version == resource_version
    assert {rt.group_resource: server.objects(rt.group_resource) for rt in resources.RESOURCE_TYPES} == stored_before
    # --validate=strict read the OpenAPI v3 document of every group-version in the kustomization, found that the
    # server validates fields of those kinds itself (as a v1.32 apiserver does), and so validated nothing
    # client-side; the OpenAPI v2 fallback was never needed.
    paths = {r.path for r in requests}
    for api_version in {o["apiVersion"] for o in objects}:
        assert ("/openapi/v3/apis/" if "/" in api_version else "/openapi/v3/api/") + api_version in paths
    assert "/openapi/v2" not in paths
    fetched = {(r.resource, r.namespace, r.name) for r in requests if r.verb == "get"}
    assert fetched == {
        (resources.find(o["kind"]).group_resource, o["metadata"].get("namespace", ""), o["metadata"]["name"])
        for o in objects
    }


BROKEN = [
    # policy/v1beta1 PodDisruptionBudget was removed in Kubernetes 1.25.
    pytest.param(
        "pdb.yaml",
        "apiVersion: policy/v1\n",
        "apiVersion: policy/v1beta1\n",
        'no matches for kind "PodDisruptionBudget" in version "policy/v1beta1"',
        id="removed-api-version",
    ),
    pytest.param(
        "deployment.yaml",
        "kind: Deployment\n",
        "kind: Deploymnet\n",
        'no matches for kind "Deploymnet" in version "apps/v1"',
        id="misspelt-kind",
    ),
]


@pytest.mark.parametrize(("manifest", "good", "bad", "message"), BROKEN)
async def test_kubectl_apply_client_dry_run_fails_on_a_broken_manifest(
    rig: Rig, manifest: str, good: str, bad: str, message: str
) -> None:
    broken = rig.tmp / "deploy"
    shutil.copytree(DEPLOY, broken)
    text = (broken / manifest).read_text()
    assert good in text
    (broken / manifest).write_text(text.replace(good, bad, 1))
    resource_version = rig.server.resource_version

    done = await kubectl_apply_dry_run(rig, broken)

    assert done.returncode != 0
    assert message in done.stderr, done.stderr
    assert "ensure CRDs are installed first" in done.stderr
    # kubectl still went through the other objects (it reports failures at the end), and wrote nothing.
    unbroken = dry_run_lines(rig, kustomize(DEPLOY)) - dry_run_lines(rig, [yaml.safe_load(text)])
    assert set(done.stdout.splitlines()) == unbroken, done.stdout
    assert rig.server.resource_version == resource_version


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
