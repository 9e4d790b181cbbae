"""config/deploy sends admin traffic to the leader only: the kuota-admin Service selects the label the leader puts
on its own pod, the Deployment gives each replica its pod's name and namespace to find that pod, and the webhook
Service keeps every replica (all of them review)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kuota.components.controller import LEADER_LABEL

DEPLOY = Path(__file__).resolve().parents[1] / "config" / "deploy"


def documents(name: str) -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_the_admin_service_selects_the_leaders_label_and_the_webhook_service_every_replica() -> None:
    services = {d["metadata"]["name"]: d for d in documents("service.yaml")}  # type: ignore[index]
    admin, webhook = services["kuota-admin"], services["kuota-webhook"]
    assert admin["spec"]["selector"][LEADER_LABEL] == "true"  # type: ignore[index]
    assert LEADER_LABEL not in webhook["spec"]["selector"]  # type: ignore[index]
    assert [p["name"] for p in admin["spec"]["ports"]] == ["admin"]  # type: ignore[index]


def test_each_replica_knows_its_pod() -> None:
    (deployment,) = documents("deployment.yaml")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]  # type: ignore[index]
    env = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in container["env"]
        if "fieldRef" in e.get("valueFrom", {})
    }
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
