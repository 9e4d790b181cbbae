"""config/helm/kuota rendered by the helm built with the control plane (`kuota-cluster helm`).

* Left at its defaults, the chart renders config/deploy's objects, field for field, but for the differences the
  README's "Helm" section lists (no Namespace object, Helm's labels, the pinned image tag, `--kinds`, and the
  cert-manager annotation only with cert-manager); with cert-manager it renders config/deploy/cert-manager's.
* Its RBAC and webhook configurations for any set of kinds are what `kuota manifests --kinds` prints.
* Release names prefix every name, cluster-scoped ones included; the namespace and ServiceAccount reach the CEL
  condition, the Lease flags and the Role.
* values.schema.json and the templates refuse bad values, naming them; the admin component never runs without
  its tokens file.
"""

from __future__ import annotations

import base64
import copy
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from kuota import cli
from quota.loader import load_config_file
from tests.kube.controlplane import DEPLOY, REPO
from tests.kube.helm import CHART, Helm, Obj, container, documents, find
from webhooks.state import DEFAULT_SERVICE_ACCOUNT
from workloads.registry import REGISTRY

HELM_LABELS = {
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
}
CERT_MANAGER = {"webhook": {"certManager": {"enabled": True}}}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def deploy_objects() -> list[Obj]:
    """config/deploy as its kustomization lists it."""
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    return [d for name in kustomization["resources"] for d in documents((DEPLOY / name).read_text())]


def key(obj: Obj) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace", "")


def label_maps(node: Any) -> Iterator[dict[str, Any]]:
    """Every mapping of kuota's labels in an object: metadata and template labels, selectors, affinity terms."""
    if isinstance(node, dict):
        if "app.kubernetes.io/name" in node:
            yield node
        for value in node.values():
            yield from label_maps(value)
    elif isinstance(node, list):
        for value in node:
            yield from label_maps(value)


def without_helm_labels(obj: Obj) -> Obj:
    """The object with Helm's own labels taken out of every label map and selector (each map must have the
    release's instance label: a selector without it would select another release's pods)."""
    obj = copy.deepcopy(obj)
    maps = list(label_maps(obj))
    assert maps, f"{key(obj)} has no labels"
    for labels in maps:
        assert "app.kubernetes.io/instance" in labels, f"{key(obj)}: {labels}"
        for name in HELM_LABELS:
            labels.pop(name, None)
    return obj


def manifests(kinds: list[str]) -> list[Obj]:
    result = CliRunner().invoke(cli.app, ["manifests", "--kinds", ",".join(kinds), "--deploy", str(DEPLOY)])
    assert result.exit_code == 0, result.output
    return documents(result.output)


def args(objects: list[Obj]) -> list[str]:
    return list(container(objects)["args"])


# Left at its defaults: config/deploy.


def test_lint_is_clean(helm: Helm) -> None:
    done = helm.run("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout
    every_option = helm.home / "every-option.yaml"
    every_option.write_text(
        yaml.safe_dump(
            {
                "kinds": CHART_KINDS,
                "webhook": {"certManager": {"enabled": True}, "namespaceSelector": {"matchLabels": {"a": "b"}}},
                "components": ["webhook", "admin"],
                "quota": {"apiVersion": "kuota.dev/v1", "kind": "QuotaConfig"},
                "podDisruptionBudget": {"enabled": False},
            }
        )
    )
    done = helm.run("lint", "--strict", str(CHART), "-f", str(every_option))
    assert "0 chart(s) failed" in done.stdout and "[WARNING]" not in done.stdout, done.stdout


def test_defaults_render_config_deploy_but_for_the_documented_differences(helm: Helm) -> None:
    chart = {key(o): o for o in helm.render()}
    deploy = {key(o): o for o in deploy_objects()}
    # Difference 1: no Namespace; the release's namespace is made by `helm install --create-namespace`.
    assert set(deploy) - set(chart) == {("Namespace", "kuota-system", "")}
    assert set(chart) == set(deploy) - {("Namespace", "kuota-system", "")}
    for name, ours in chart.items():
        theirs = copy.deepcopy(deploy[name])
        ours = without_helm_labels(ours)  # difference 2: Helm's labels, and the instance label in selectors
        if name[0] == "Deployment":
            our_container = ours["spec"]["template"]["spec"]["containers"][0]
            their_container = theirs["spec"]["template"]["spec"]["containers"][0]
            # Difference 3: the image is the chart's appVersion, not :latest.
            assert our_container.pop("image") == f"ghcr.io/kuota/kuota:{chart_yaml()['appVersion']}"
            assert their_container.pop("image") == "ghcr.io/kuota/kuota:latest"
            # Difference 4: --kinds, the kinds the chart's RBAC and webhooks are made for, is passed.
            assert our_container.pop("args") == [*their_container.pop("args"), "--kinds=Job"]
        if name[0].endswith("WebhookConfiguration"):
            # Difference 5: cert-manager's annotation only with webhook.certManager.enabled (next test).
            assert "annotations" not in ours["metadata"]
            del theirs["metadata"]["annotations"]
        assert ours == theirs, name


def test_with_cert_manager_it_renders_config_deploy_cert_manager(helm: Helm) -> None:
    chart = {key(o): o for o in helm.render(values=CERT_MANAGER)}
    theirs = documents((DEPLOY / "cert-manager" / "certificate.yaml").read_text())
    for obj in theirs:
        ours = without_helm_labels(chart[key(obj)])
        ours["metadata"].pop("labels")
        assert ours == obj, key(obj)
    for name in ("kuota-mutate", "kuota-validate"):
        kind = "MutatingWebhookConfiguration" if name.endswith("mutate") else "ValidatingWebhookConfiguration"
        deployed = next(o for o in deploy_objects() if key(o) == (kind, name, ""))
        assert chart[(kind, name, "")]["metadata"]["annotations"] == deployed["metadata"]["annotations"]
    # The Secret cert-manager writes is the one the Deployment mounts.
    volumes = find(list(chart.values()), "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "kuota-webhook-tls"}} in volumes


def test_the_default_quota_file_is_config_deploys_and_valid(helm: Helm, tmp_path: Path) -> None:
    configmap = find(helm.render(), "ConfigMap")
    deployed = next(o for o in deploy_objects() if o["kind"] == "ConfigMap")
    assert configmap["data"] == deployed["data"]
    (tmp_path / "quota.yaml").write_text(configmap["data"]["quota.yaml"])
    assert load_config_file(tmp_path / "quota.yaml").teams  # loads, with every rule checked
    # A mapping is written as YAML; an existing ConfigMap is mounted instead of one of the chart's.
    as_mapping = yaml.safe_load(configmap["data"]["quota.yaml"])
    rendered = find(helm.render(values={"quota": as_mapping}), "ConfigMap")
    assert yaml.safe_load(rendered["data"]["quota.yaml"]) == as_mapping
    objects = helm.render(values={"existingQuotaConfigMap": "org-quota"})
    assert not [o for o in objects if o["kind"] == "ConfigMap"]
    volumes = find(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "quota", "configMap": {"name": "org-quota"}} in volumes


def chart_yaml() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return loaded


def test_the_charts_app_version_is_the_packages() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart_yaml()["appVersion"] == project["version"]


# Kinds: what `kuota manifests --kinds` prints, for every kind of the registry, the gated ones (LeaderWorkerSet, Pod,
# with their pod webhooks and rights on pods) included.
CHART_KINDS = [k.kind for k in REGISTRY]


@pytest.mark.parametrize(
    "kinds",
    [
        ["Job"],
        ["RayJob", "Job", "JobSet"],  # out of order: rules and webhooks come in the registry's order
        ["TrainJob"],  # list and watch on its runtimes, no webhook for them
        ["PyTorchJob", "MPIJob", "TrainJob", "Job"],
        ["Pod"],  # pods only: no rule or webhook of its own, the pod rule and the pod webhooks
        ["LeaderWorkerSet", "Job"],  # read-only on the sets, rights on pods, a pair of webhooks and the pod ones
        CHART_KINDS,  # every kind the chart renders: the chart's table of kinds is the registry's
    ],
)
def test_rbac_and_webhooks_are_what_kuota_manifests_prints(helm: Helm, kinds: list[str]) -> None:
    chart = {key(o): o for o in helm.render(values={"kinds": kinds, **CERT_MANAGER})}
    printed = manifests(kinds)
    assert {o["kind"] for o in printed} == {
        "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
        "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
    }  # fmt: skip
    for obj in printed:
        assert without_helm_labels(chart[key(obj)]) == obj, key(obj)
    in_order = [k.kind for k in REGISTRY.enabled(kinds)]
    assert f"--kinds={','.join(in_order)}" in args(list(chart.values()))


def test_an_unknown_kind_is_refused_with_the_known_ones(helm: Helm) -> None:
    done = helm.template(values={"kinds": ["Job", "SlurmJob"]}, check=False)
    assert done.returncode != 0 and "at '/kinds/1': value must be one of 'Job'" in done.stderr, done.stderr
    # Past the schema (--skip-schema-validation), the template refuses it too, listing the known kinds.
    done = helm.template("--skip-schema-validation", values={"kinds": ["SlurmJob"]}, check=False)
    assert done.returncode != 0 and 'unknown job kind "SlurmJob"' in done.stderr, done.stderr
    assert "JobSet" in done.stderr and "RayCluster" in done.stderr


def test_the_schema_knows_the_registrys_kinds() -> None:
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    assert schema["properties"]["kinds"]["items"]["enum"] == CHART_KINDS


# Releases and namespaces.


def test_a_release_prefixes_every_name_and_its_namespace_reaches_every_reference(helm: Helm) -> None:
    objects = helm.render(release="ml", namespace="batch-system", values=CERT_MANAGER)
    for obj in objects:
        assert obj["metadata"]["name"].startswith("ml-kuota"), key(obj)
        assert obj["metadata"].get("namespace", "batch-system") == "batch-system", key(obj)
    names = {o["metadata"]["name"] for o in objects if o["kind"] in CLUSTER_SCOPED}
    assert names == {"ml-kuota", "ml-kuota-mutate", "ml-kuota-validate"}  # never config/deploy's kuota, kuota-*
    username = "system:serviceaccount:batch-system:ml-kuota"
    argv = args(objects)
    assert f"--service-account-username={username}" in argv
    assert "--lease-name=ml-kuota-controller" in argv and "--lease-namespace=batch-system" in argv
    role = find(objects, "Role")
    assert role["rules"][1]["resourceNames"] == ["ml-kuota-controller"]
    service = find(objects, "Service", "ml-kuota-webhook")["metadata"]["name"]
    admin = find(objects, "Service", "ml-kuota-admin")
    assert admin["spec"]["selector"]["kuota.dev/leader"] == "true"  # admin actions reach the leader only
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        configuration = find(objects, kind)
        assert configuration["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": "batch-system/ml-kuota-webhook"
        }
        for hook in configuration["webhooks"]:
            assert hook["clientConfig"]["service"] == {**hook["clientConfig"]["service"], "name": service}
            assert hook["clientConfig"]["service"]["namespace"] == "batch-system"
            (excluded,) = hook["namespaceSelector"]["matchExpressions"]
            assert excluded["values"] == ["kube-system", "batch-system"]  # kuota never blocks its own namespace
            conditions = " ".join(c["expression"] for c in hook["matchConditions"])
            assert (username in conditions) == (kind == "ValidatingWebhookConfiguration")
    certificate = find(objects, "Certificate", "ml-kuota-webhook")
    assert certificate["spec"]["dnsNames"][2] == f"{service}.batch-system.svc"
    assert find(objects, "ClusterRoleBinding")["subjects"] == [
        {"kind": "ServiceAccount", "name": "ml-kuota", "namespace": "batch-system"}
    ]


def test_kuotas_default_service_account_needs_no_flag(helm: Helm) -> None:
    assert DEFAULT_SERVICE_ACCOUNT == "system:serviceaccount:kuota-system:kuota"  # what the template compares with
    assert not [a for a in args(helm.render()) if a.startswith("--service-account-username")]
    existing = helm.render(values={"serviceAccount": {"create": False, "name": "platform"}})
    assert not [o for o in existing if o["kind"] == "ServiceAccount"]
    assert "--service-account-username=system:serviceaccount:kuota-system:platform" in args(existing)
    assert find(existing, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "platform"


# Components, tokens, TLS and the rest of the values.


def test_each_component_gets_what_it_needs_and_nothing_more(helm: Helm) -> None:
    webhook = helm.render(values={"components": ["webhook"], "adminTokens": {"enabled": False}})
    kinds = {o["kind"] for o in webhook}
    assert "ClusterRole" not in kinds and "Role" not in kinds  # only the controller talks to the API
    assert {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= kinds
    argv = args(webhook)
    assert "--components=webhook" in argv and not [a for a in argv if a.startswith(("--lease", "--admin"))]
    assert [p["name"] for p in find(webhook, "Service")["spec"]["ports"]] == ["webhook"]
    probe = container(webhook)["readinessProbe"]
    assert probe["tcpSocket"] == {"port": "webhook"}  # no admin API, so no /readyz

    controller = helm.render(values={"components": ["controller", "admin"]})
    kinds = {o["kind"] for o in controller}
    assert "MutatingWebhookConfiguration" not in kinds and "ClusterRole" in kinds
    argv = args(controller)
    assert "--components=controller,admin" in argv and not [a for a in argv if a.startswith("--tls")]
    assert "--admin-tokens=/etc/kuota/tokens/tokens.yaml" in argv
    volumes = {v["name"] for v in find(controller, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes == {"quota", "tokens", "data"}


def test_the_admin_api_never_runs_without_its_tokens(helm: Helm) -> None:
    refused = helm.template(values={"adminTokens": {"enabled": False}}, check=False)
    assert refused.returncode != 0, refused.stdout
    assert "adminTokens.enabled is false but components has admin" in refused.stderr, refused.stderr
    objects = helm.render(values={"adminTokens": {"secretName": "ops-tokens"}})
    volumes = find(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tokens", "secret": {"secretName": "ops-tokens", "optional": True}} in volumes


def test_tls_from_an_existing_secret_with_its_ca_bundle(helm: Helm) -> None:
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n...\n").decode()
    objects = helm.render(values={"webhook": {"tls": {"secretName": "kuota-tls", "caBundle": bundle}}})
    assert not [o for o in objects if o["kind"] in {"Certificate", "Issuer"}]
    volumes = find(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "kuota-tls"}} in volumes
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert {h["clientConfig"]["caBundle"] for h in find(objects, kind)["webhooks"]} == {bundle}
    both = helm.template(
        values={"webhook": {"tls": {"caBundle": bundle}, "certManager": {"enabled": True}}}, check=False
    )
    assert both.returncode != 0 and "cert-manager injects the caBundle" in both.stderr, both.stderr


def test_scheduling_resources_args_and_selectors_come_from_values(helm: Helm) -> None:
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "kuota", "effect": "NoSchedule"}]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}
    values = {
        "replicas": 3,
        "image": {"repository": "registry.example/kuota", "tag": "0.1.0-rc1", "pullPolicy": "Always"},
        "resources": {"requests": {"cpu": "1"}},
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": tolerations,
        "affinity": affinity,
        "podDisruptionBudget": {"enabled": True, "minAvailable": 2},
        "extraArgs": ["--log-level=debug", "--requeue-backoff=30s"],
        "webhook": {
            "failurePolicy": "Ignore",
            "timeoutSeconds": 5,
            "excludeNamespaces": ["kube-system", "monitoring"],
            "namespaceSelector": {
                "matchLabels": {"team": "ml"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["prod"]}],
            },
        },
    }
    objects = helm.render(values=values)
    excluded = ["kube-system", "monitoring"]
    deployment = find(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 3
    assert pod["tolerations"] == tolerations and pod["affinity"] == affinity
    assert pod["nodeSelector"] == values["nodeSelector"]
    assert container(objects)["image"] == "registry.example/kuota:0.1.0-rc1"
    assert container(objects)["imagePullPolicy"] == "Always"
    # Merged into the defaults, as Helm merges maps (null removes a default).
    assert container(objects)["resources"] == {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    assert args(objects)[-2:] == ["--log-level=debug", "--requeue-backoff=30s"]
    assert find(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        queued, managed = find(objects, kind)["webhooks"]
        for hook in (queued, managed):
            assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 5
            assert hook["namespaceSelector"]["matchExpressions"] == [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [*excluded, "kuota-system"]},
                {"key": "tier", "operator": "NotIn", "values": ["prod"]},
            ]
        assert queued["namespaceSelector"]["matchLabels"] == {"team": "ml"}
        assert managed["namespaceSelector"]["matchLabels"] == {"kuota.dev/managed": "true", "team": "ml"}
    without_pdb = helm.render(values={"podDisruptionBudget": {"enabled": False}})
    assert not [o for o in without_pdb if o["kind"] == "PodDisruptionBudget"]


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"replica": 3}, "replica"),  # a misspelt key
        ({"replicas": -1}, "replicas"),
        ({"replicas": "two"}, "replicas"),
        ({"components": ["webhook", "scheduler"]}, "components"),
        ({"components": []}, "components"),
        ({"kinds": []}, "kinds"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"webhook": {"failurePolicy": "Retry"}}, "failurePolicy"),
        ({"webhook": {"timeoutSeconds": 60}}, "timeoutSeconds"),
        ({"webhook": {"tls": {"caBundle": "not base64!"}}}, "caBundle"),
        ({"adminTokens": {"enabled": "yes"}}, "enabled"),
        ({"quota": 5}, "quota"),
        ({"extraArgs": "--log-level=debug"}, "extraArgs"),
        ({"existingQuotaConfigMap": "Not_A_Name"}, "existingQuotaConfigMap"),
        ({"controller": {"leaseDuration": 1}}, "leaseDuration"),
    ],
)
def test_the_values_schema_refuses_bad_values(helm: Helm, values: Obj, named: str) -> None:
    done = helm.template(values=values, check=False)
    assert done.returncode != 0, f"{values} rendered:\n{done.stdout[:500]}"
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert named in done.stderr, done.stderr
