"""The kinds config/deploy installs, served by the fake API server: discovery entries as a real apiserver lists
them, the OpenAPI documents kubectl reads before it applies anything, and what create and update do to these
objects, through the unmodified kubernetes_asyncio client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fakekube import FakeKubeServer
from tests.fakekube.resources import RESOURCE_TYPES

FIXTURES = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "k8s-api"

# (group/version, plural): (kind, namespaced, short names, categories, subresources), as `kubectl api-resources`
# and the group-version documents of a v1.32 apiserver with cert-manager installed show them.
EXPECTED = {
    ("v1", "serviceaccounts"): ("ServiceAccount", True, ["sa"], [], []),
    ("v1", "services"): ("Service", True, ["svc"], ["all"], ["status"]),
    ("apps/v1", "deployments"): ("Deployment", True, ["deploy"], ["all"], ["status"]),
    ("policy/v1", "poddisruptionbudgets"): ("PodDisruptionBudget", True, ["pdb"], [], ["status"]),
    ("rbac.authorization.k8s.io/v1", "clusterroles"): ("ClusterRole", False, [], [], []),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings"): ("ClusterRoleBinding", False, [], [], []),
    ("rbac.authorization.k8s.io/v1", "roles"): ("Role", True, [], [], []),
    ("rbac.authorization.k8s.io/v1", "rolebindings"): ("RoleBinding", True, [], [], []),
    ("cert-manager.io/v1", "issuers"): ("Issuer", True, ["iss"], ["cert-manager"], ["status"]),
    ("cert-manager.io/v1", "certificates"): ("Certificate", True, ["cert", "certs"], ["cert-manager"], ["status"]),
}


@pytest.fixture
async def server() -> AsyncIterator[FakeKubeServer]:
    async with FakeKubeServer() as srv:
        yield srv


async def get(server: FakeKubeServer, path: str, accept: str = "application/json") -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.url + path, headers={"Accept": accept}) as resp,
    ):
        return resp.status, await resp.read()


async def get_json(server: FakeKubeServer, path: str) -> Any:
    status, body = await get(server, path)
    assert status == 200, (path, body)
    return json.loads(body)


@pytest.mark.parametrize(("group_version", "plural"), list(EXPECTED))
async def test_discovery_lists_the_kind_as_a_real_apiserver(
    server: FakeKubeServer, group_version: str, plural: str
) -> None:
    kind, namespaced, short_names, categories, subresources = EXPECTED[(group_version, plural)]
    base = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
    listing = await get_json(server, base)
    assert listing["groupVersion"] == group_version
    entries = {r["name"]: r for r in listing["resources"]}
    entry = entries[plural]
    assert (entry["kind"], entry["namespaced"], entry["singularName"]) == (kind, namespaced, kind.lower())
    assert entry.get("shortNames", []) == short_names
    assert entry.get("categories", []) == categories
    assert set(entry["verbs"]) == {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
    assert sorted(name.split("/")[1] for name in entries if name.startswith(f"{plural}/")) == subresources
    if "/" in group_version:
        group = group_version.split("/")[0]
        groups = {g["name"]: g for g in (await get_json(server, "/apis"))["groups"]}
        assert groups[group]["preferredVersion"]["groupVersion"] == group_version


async def test_every_served_kind_tells_kubectl_the_server_validates_fields() -> None:
    # kubectl --validate=strict (the default) looks for the fieldValidation parameter on the PATCH operation of
    # the object's kind in the OpenAPI v3 document of its group-version; where it finds none it validates
    # client-side against the OpenAPI v2 schema instead.
    async with FakeKubeServer() as server:
        index = (await get_json(server, "/openapi/v3"))["paths"]
        for rt in RESOURCE_TYPES:
            key = rt.base_path.lstrip("/")
            document = await get_json(server, index[key]["serverRelativeURL"])
            patches = [
                op["patch"]
                for op in document["paths"].values()
                if "patch" in op
                and op["patch"]["x-kubernetes-group-version-kind"]
                == {"group": rt.group, "version": rt.version, "kind": rt.kind}
            ]
            assert patches, rt.group_resource
            assert "fieldValidation" in {p["name"] for p in patches[0]["parameters"]}, rt.group_resource


async def test_openapi_v2_is_served_as_protobuf_and_json(server: FakeKubeServer) -> None:
    status, body = await get(server, "/openapi/v2", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
    assert status == 200
    # Document{swagger: "2.0" (field 1), info (field 2)}: a length-delimited field 1 first.
    assert body[:5] == b"\x0a\x032.0" and body[5] == 0x12
    document = await get_json(server, "/openapi/v2")
    assert document["swagger"] == "2.0" and document["definitions"] == {}


def deployment(name: str = "web") -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
            },
        },
    }


async def test_deployment_is_defaulted_and_counts_spec_generations(server: FakeKubeServer) -> None:
    apps = client.AppsV1Api(await server.api_client())
    body = deployment()
    body["status"] = {"replicas": 5}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{server.url}/apis/apps/v1/namespaces/default/deployments", json=body) as resp,
    ):
        assert resp.status == 201
        created = await resp.json()
    spec = created["spec"]
    assert spec["replicas"] == 1 and spec["revisionHistoryLimit"] == 10 and spec["progressDeadlineSeconds"] == 600
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    assert spec["template"]["spec"]["restartPolicy"] == "Always"
    assert created["status"] == {} and created["metadata"]["generation"] == 1
    scaled = await apps.patch_namespaced_deployment("web", "default", {"spec": {"replicas": 3}})
    assert scaled.metadata.generation == 2 and scaled.spec.replicas == 3
    relabelled = await apps.patch_namespaced_deployment("web", "default", {"metadata": {"labels": {"x": "y"}}})
    assert relabelled.metadata.generation == 2
    assert [d.metadata.name for d in (await apps.list_deployment_for_all_namespaces()).items] == ["web"]


async def test_service_and_service_account(server: FakeKubeServer) -> None:
    core = client.CoreV1Api(await server.api_client())
    await core.create_namespaced_service_account("default", {"metadata": {"name": "robot"}})
    assert (await core.read_namespaced_service_account("robot", "default")).metadata.name == "robot"
    await core.create_namespaced_service(
        "default",
        {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]}},
    )
    stored = server.get_object("Service", "default", "web")
    assert stored is not None
    assert stored["spec"]["type"] == "ClusterIP" and stored["spec"]["sessionAffinity"] == "None"
    assert stored["spec"]["ports"] == [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}]
    assert stored["status"] == {"loadBalancer": {}}
    assert "generation" not in stored["metadata"]


async def test_pod_disruption_budget_status_has_the_fixture_fields(server: FakeKubeServer) -> None:
    policy = client.PolicyV1Api(await server.api_client())
    created = await policy.create_namespaced_pod_disruption_budget(
        "default", {"metadata": {"name": "web"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}}
    )
    assert created.metadata.generation == 1 and created.status.disruptions_allowed == 0
    stored = server.get_object("pdb", "default", "web")
    assert stored is not None
    path = FIXTURES / "policy.v1.PodDisruptionBudget.json"
    if path.exists():
        real = json.loads(path.read_text())
        assert set(stored) == set(real)
        assert set(stored["status"]) <= set(real["status"])
        assert set(stored["spec"]) <= set(real["spec"])


async def test_rbac_kinds_by_scope(server: FakeKubeServer) -> None:
    rbac = client.RbacAuthorizationV1Api(await server.api_client())
    rule = {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}
    subject = {"kind": "ServiceAccount", "name": "robot", "namespace": "default"}
    await rbac.create_cluster_role({"metadata": {"name": "reader"}, "rules": [rule]})
    await rbac.create_cluster_role_binding(
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
            "subjects": [subject],
        }
    )
    await rbac.create_namespaced_role("default", {"metadata": {"name": "reader"}, "rules": [rule]})
    await rbac.create_namespaced_role_binding(
        "default",
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [subject],
        },
    )
    cluster_role = server.get_object("ClusterRole", "", "reader")
    assert cluster_role is not None and "namespace" not in cluster_role["metadata"]
    assert cluster_role["rules"] == [rule]
    role = server.get_object("roles.rbac.authorization.k8s.io", "default", "reader")
    assert role is not None and role["metadata"]["namespace"] == "default"
    with pytest.raises(ApiException) as missing:
        await rbac.read_namespaced_role("reader", "kube-system")
    assert missing.value.status == 404


async def test_cert_manager_objects_behave_like_custom_resources(server: FakeKubeServer) -> None:
    custom = client.CustomObjectsApi(await server.api_client())
    issuer = {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Issuer",
        "metadata": {"name": "selfsigned"},
        "spec": {"selfSigned": {}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    created = await custom.create_namespaced_custom_object("cert-manager.io", "v1", "default", "issuers", issuer)
    assert "status" not in created and created["metadata"]["generation"] == 1
    certificate = {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": "web"},
        "spec": {"secretName": "web-tls", "dnsNames": ["web"], "issuerRef": {"kind": "Issuer", "name": "selfsigned"}},
    }
    await custom.create_namespaced_custom_object("cert-manager.io", "v1", "default", "certificates", certificate)
    renewed = await custom.patch_namespaced_custom_object(
        "cert-manager.io",
        "v1",
        "default",
        "certificates",
        "web",
        {"spec": {"renewBefore": "720h"}},
        _content_type="application/merge-patch+json",
    )
    assert renewed["metadata"]["generation"] == 2
    assert [c["metadata"]["name"] for c in server.objects("certs", "default")] == ["web"]
