"""config/helm/kuota installed with helm (`kuota-cluster helm`) on the real control plane, and removed again.

* `helm install --dry-run=server` renders with the server's version and checks that no object the release would
  create exists already (the default release `kuota` in kuota-system is refused: config/deploy's ServiceAccount
  and RBAC, installed by the rig, are not Helm's); its manifest is then applied with kube-apiserver's own
  server-side dry run, which validates and defaults every object (the webhooks' CEL matchConditions compiled)
  and stores nothing.
* A real install under another release name, into a fresh namespace: every object exists with the values given
  (the Deployment's pods are placed by the scheduler through the tolerations value and run by kwok: the objects
  are checked, not the container); cluster-scoped objects carry the release's prefix, so config/deploy's `kuota`,
  `kuota-mutate` and `kuota-validate` that the other tests use are untouched. `helm upgrade` changes the replicas
  and the quota file; `helm uninstall` removes everything, cluster-scoped objects included.

The release's webhooks select namespaces by a label no namespace carries, so kube-apiserver never calls them
(their Service's address is a cluster IP no process here answers on): the other tests' Jobs never meet them.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from kuota.kind_manifests import widen_rbac
from tests.e2e.conftest import DEPLOY
from tests.kube.controlplane import ControlPlane
from tests.kube.helm import CHART, Helm, Obj, documents
from workloads.registry import REGISTRY

RELEASE = "e2e-helm"
FULLNAME = "e2e-helm-kuota"
KINDS = ["Job", "TrainJob"]
CLUSTER_SCOPED = [
    ("clusterrole", FULLNAME),
    ("clusterrolebinding", FULLNAME),
    ("mutatingwebhookconfiguration", f"{FULLNAME}-mutate"),
    ("validatingwebhookconfiguration", f"{FULLNAME}-validate"),
]
NAMESPACED = [
    ("serviceaccount", FULLNAME),
    ("role", FULLNAME),
    ("rolebinding", FULLNAME),
    ("configmap", f"{FULLNAME}-quota"),
    ("service", f"{FULLNAME}-webhook"),
    ("service", f"{FULLNAME}-admin"),
    ("deployment", FULLNAME),
    ("poddisruptionbudget", FULLNAME),
]


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = f"e2e-helm-{os.getpid() % 1000}"
    control_plane.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


def get(plane: ControlPlane, kind: str, name: str, namespace: str | None = None) -> Obj | None:
    scope = ["-n", namespace] if namespace else []
    done = plane.kubectl("get", kind, name, *scope, "-o", "json", check=False)
    if done.returncode != 0:
        assert "NotFound" in done.stderr, done.stderr
        return None
    found: Obj = json.loads(done.stdout)
    return found


def leftovers(plane: ControlPlane, namespace: str) -> list[tuple[str, str]]:
    """The release's objects that still exist."""
    return [(k, n) for k, n in CLUSTER_SCOPED if get(plane, k, n)] + [
        (k, n) for k, n in NAMESPACED if get(plane, k, n, namespace)
    ]


def release_values(namespace: str, ca_pem: bytes, tmp: Path) -> Path:
    values = {
        "kinds": KINDS,
        "replicas": 2,
        # kwok's nodes are tainted for the tests; the Deployment's pods may go there.
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "e2e", "effect": "NoSchedule"}],
        "webhook": {
            "tls": {"caBundle": base64.b64encode(ca_pem).decode()},
            # No namespace has this label: kube-apiserver never calls the release's webhooks.
            "namespaceSelector": {"matchLabels": {"e2e.kuota.dev/helm-release": namespace}},
        },
        "adminTokens": {"secretName": "ops-tokens"},
        "extraArgs": ["--log-level=debug"],
    }
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_install_dry_run_upgrade_and_uninstall(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> None:
    helm = Helm(tmp_path / "helm", kubeconfig=control_plane.kubeconfig)
    ca = trustme.CA()
    values = release_values(namespace, ca.cert_pem.bytes(), tmp_path)
    install = ["install", RELEASE, str(CHART), "-n", namespace, "-f", str(values)]

    # The default release would take config/deploy's names, which the rig's kubectl apply owns: refused.
    clash = helm.run("install", "kuota", str(CHART), "-n", "kuota-system", "--dry-run=server", check=False)
    assert clash.returncode != 0 and "exists and cannot be imported into the current release" in clash.stderr

    # Server-side dry run: rendered with the server's capabilities, stored nowhere; its manifest validated by
    # kube-apiserver object by object.
    dry = helm.run(*install, "--dry-run=server", "-o", "json")
    release = json.loads(dry.stdout)
    manifest = documents(release["manifest"])
    assert len(manifest) == len(CLUSTER_SCOPED) + len(NAMESPACED)
    assert not leftovers(control_plane, namespace)
    assert helm.run("list", "-n", namespace, "-q").stdout.strip() == ""
    rendered = tmp_path / "manifest.yaml"
    rendered.write_text(release["manifest"])
    validated = control_plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "-n", namespace, "-f", str(rendered)
    )
    lines = [line for line in validated.stdout.splitlines() if line.strip()]
    assert len(lines) == len(manifest) and all("(server dry run)" in line for line in lines), validated.stdout
    assert not leftovers(control_plane, namespace)

    try:
        helm.run(*install, "--wait", "--timeout=120s")
        check_installed(control_plane, namespace, ca.cert_pem.bytes())

        quota = yaml.safe_load((DEPLOY / "configmap.yaml").read_text())["data"]["quota.yaml"]
        changed = quota.replace("nominal: 16, borrowingLimit: 8", "nominal: 24, borrowingLimit: 0")
        assert changed != quota
        new_quota = tmp_path / "quota.yaml"
        new_quota.write_text(changed)
        helm.run(
            "upgrade", RELEASE, str(CHART), "-n", namespace, "--reuse-values", "--set", "replicas=1",
            "--set-file", f"quota={new_quota}", "--wait", "--timeout=120s",
        )  # fmt: skip
        deployment = get(control_plane, "deployment", FULLNAME, namespace)
        assert deployment is not None and deployment["spec"]["replicas"] == 1
        assert deployment["status"].get("readyReplicas") == 1
        configmap = get(control_plane, "configmap", f"{FULLNAME}-quota", namespace)
        assert configmap is not None and configmap["data"]["quota.yaml"] == changed
        history = helm.run("history", RELEASE, "-n", namespace, "-o", "json")
        assert [r["revision"] for r in json.loads(history.stdout)] == [1, 2]

        helm.run("uninstall", RELEASE, "-n", namespace, "--wait", "--timeout=120s")
        assert not leftovers(control_plane, namespace)
        assert helm.run("list", "-n", namespace, "-q").stdout.strip() == ""
    finally:
        if leftovers(control_plane, namespace):
            helm.run("uninstall", RELEASE, "-n", namespace, "--wait", check=False)
        for kind, name in CLUSTER_SCOPED:  # whatever helm left: a webhook configuration must never stay behind
            control_plane.kubectl("delete", kind, name, "--ignore-not-found", check=False)
    assert not leftovers(control_plane, namespace)
    # config/deploy's objects, which the other tests use, were never Helm's and are still there.
    for kind, name in [("clusterrole", "kuota"), ("clusterrolebinding", "kuota")]:
        obj = get(control_plane, kind, name)
        assert obj is not None and "app.kubernetes.io/managed-by" not in obj["metadata"]["labels"]


def check_installed(plane: ControlPlane, namespace: str, ca_pem: bytes) -> None:
    objects = {(kind, name): get(plane, kind, name) for kind, name in CLUSTER_SCOPED}
    objects |= {(kind, name): get(plane, kind, name, namespace) for kind, name in NAMESPACED}
    missing = [key for key, obj in objects.items() if obj is None]
    assert not missing, missing
    found: dict[tuple[str, str], Any] = objects

    deployment = found[("deployment", FULLNAME)]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["status"].get("readyReplicas") == 2  # placed through the tolerations value, run by kwok
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == FULLNAME
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "e2e", "effect": "NoSchedule"}]
    args = pod["containers"][0]["args"]
    username = f"system:serviceaccount:{namespace}:{FULLNAME}"
    for arg in (
        "--kinds=Job,TrainJob",
        f"--lease-name={FULLNAME}-controller",
        f"--lease-namespace={namespace}",
        f"--service-account-username={username}",
        "--log-level=debug",
    ):
        assert arg in args, args
    tokens = next(v["secret"] for v in pod["volumes"] if v["name"] == "tokens")
    assert tokens["secretName"] == "ops-tokens" and tokens["optional"] is True

    # The rules are what `kuota manifests --kinds Job,TrainJob` prints.
    shipped = [d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if d]
    widened = next(d for d in widen_rbac(shipped, REGISTRY.enabled(KINDS)) if d["kind"] == "ClusterRole")
    assert found[("clusterrole", FULLNAME)]["rules"] == widened["rules"]
    subjects = found[("clusterrolebinding", FULLNAME)]["subjects"]
    assert subjects == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": namespace}]
    assert found[("role", FULLNAME)]["rules"][1]["resourceNames"] == [f"{FULLNAME}-controller"]

    service = found[("service", f"{FULLNAME}-webhook")]
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("webhook", 443)]
    admin = found[("service", f"{FULLNAME}-admin")]  # the leader's pod only: it labels itself kuota.dev/leader
    assert [(p["name"], p["port"]) for p in admin["spec"]["ports"]] == [("admin", 8080)]
    assert admin["spec"]["selector"]["kuota.dev/leader"] == "true"
    assert found[("poddisruptionbudget", FULLNAME)]["spec"]["minAvailable"] == 1
    bundle = base64.b64encode(ca_pem).decode()
    for kind, name in CLUSTER_SCOPED[2:]:
        hooks = found[(kind, name)]["webhooks"]
        assert len(hooks) == 2 * len(KINDS)
        for hook in hooks:
            assert hook["clientConfig"]["service"]["name"] == f"{FULLNAME}-webhook"
            assert hook["clientConfig"]["service"]["namespace"] == namespace
            assert hook["clientConfig"]["caBundle"] == bundle
            assert hook["namespaceSelector"]["matchLabels"]["e2e.kuota.dev/helm-release"] == namespace
            if kind.startswith("validating"):
                assert any(username in c["expression"] for c in hook["matchConditions"])
