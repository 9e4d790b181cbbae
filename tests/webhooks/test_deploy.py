"""config/deploy/webhooks.yaml and certificate.yaml, shape-checked (kubectl cannot validate these kinds offline).

Field names are checked against the admissionregistration.k8s.io/v1 wire fixtures; the settings the issue asks
for are checked one by one; the CEL matchConditions are checked by evaluating them on the cases that matter.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from admission.labels import KUEUE_QUEUE_LABEL, MANAGED_NAMESPACE_LABEL, QUEUE_LABEL
from kuota.commands.certs import WEBHOOK_CONFIGURATIONS
from webhooks.app import MUTATE_PATH, VALIDATE_PATH
from webhooks.certs import service_dns_names

from .helpers import K8S_API, ROOT
from .test_review_shapes import assert_conforms

WEBHOOKS = list(yaml.safe_load_all((ROOT / "config/deploy/webhooks.yaml").read_text()))
CERTIFICATES = list(yaml.safe_load_all((ROOT / "config/deploy/cert-manager/certificate.yaml").read_text()))
BY_KIND = {doc["kind"]: doc for doc in WEBHOOKS}


def fixture(kind: str) -> Any:
    return json.loads((K8S_API / f"admissionregistration.k8s.io.v1.{kind}.json").read_text())


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_configuration_shape_and_settings(kind: str) -> None:
    document = BY_KIND[kind]
    assert document["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert_conforms(document, fixture(kind))
    name, count = WEBHOOK_CONFIGURATIONS[kind.lower()]
    assert document["metadata"]["name"] == name and len(document["webhooks"]) == count
    assert document["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "kuota-system/kuota-webhook"
    path = MUTATE_PATH if kind.startswith("Mutating") else VALIDATE_PATH
    operations = ["CREATE"] if kind.startswith("Mutating") else ["CREATE", "UPDATE"]
    for hook in document["webhooks"]:
        assert hook["failurePolicy"] == "Fail"
        assert hook["timeoutSeconds"] == 3
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["clientConfig"]["service"] == {
            "name": "kuota-webhook",
            "namespace": "kuota-system",
            "path": path,
            "port": 443,
        }
        assert hook["rules"] == [
            {
                "apiGroups": ["batch"],
                "apiVersions": ["v1"],
                "operations": operations,
                "resources": ["jobs"],
                "scope": "Namespaced",
            }
        ]
        excluded = hook["namespaceSelector"]["matchExpressions"]
        assert {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "kuota-system"],
        } in excluded
        # The validating webhooks also skip kuota's own UPDATEs (tests/e2e/test_lifecycle.py shows kube-apiserver
        # evaluating it: kuota admits while its webhook is down).
        names = [c["name"] for c in hook["matchConditions"]]
        assert names[1:] == ([] if kind.startswith("Mutating") else ["not-kuotas-own-update"])
        assert re.fullmatch(r"[a-z0-9.-]+\.kuota\.dev", hook["name"])
        if kind.startswith("Mutating"):
            assert hook["reinvocationPolicy"] == "IfNeeded"
    assert [h["namespaceSelector"].get("matchLabels") for h in document["webhooks"]] == [
        None,
        {MANAGED_NAMESPACE_LABEL: "true"},
    ]


# -- the CEL expressions, evaluated on the cases that matter ------------------------------------------------------


def evaluate(expression: str, obj: dict[str, Any] | None, old: dict[str, Any] | None) -> bool:
    """The expressions use `has()`, `in`, `&&`, `||`, `!` and `!= null`: translate those few to Python."""
    text = " ".join(expression.split())
    text = re.sub(r"has\((\w+)\.metadata\.labels\)", r"('labels' in \1['metadata'])", text)
    text = re.sub(r"(\w+)\.metadata\.labels", r"\1['metadata']['labels']", text)
    text = text.replace("&&", " and ").replace("||", " or ").replace("!(", " not (").replace("!= null", " is not None")
    assert "!" not in text, text
    return bool(eval(text, {}, {"object": obj, "oldObject": old}))


def job(labels: dict[str, str] | None) -> dict[str, Any]:
    return {"metadata": {"labels": labels} if labels is not None else {}}


CASES = [
    (job({QUEUE_LABEL: "q"}), None, True),
    (job({KUEUE_QUEUE_LABEL: "q"}), None, True),
    (job({"app": "x"}), None, False),
    (job(None), None, False),
    (job(None), job({QUEUE_LABEL: "q"}), True),  # removing the label on UPDATE still reaches validation
    (job({"app": "x"}), job({"app": "x"}), False),
]


@pytest.mark.parametrize(("obj", "old", "queued"), CASES)
def test_match_conditions_split_jobs_between_the_two_webhooks(obj: Any, old: Any, queued: bool) -> None:
    for kind, document in BY_KIND.items():
        if kind.startswith("Mutating") and old is not None:
            continue  # CREATE only: there is no oldObject
        by_queue, by_namespace = document["webhooks"]
        queue_condition = by_queue["matchConditions"][0]
        namespace_condition = by_namespace["matchConditions"][0]
        assert evaluate(queue_condition["expression"], obj, old) is queued
        # Exactly one of the two webhooks is called: Jobs are never reviewed twice by the same configuration.
        assert evaluate(namespace_condition["expression"], obj, old) is not queued


def test_certificate_issues_for_the_service_names() -> None:
    kinds = [(doc["kind"], doc["metadata"]["name"]) for doc in CERTIFICATES]
    assert kinds == [
        ("Issuer", "kuota-selfsigned"),
        ("Certificate", "kuota-webhook-ca"),
        ("Issuer", "kuota-webhook-ca"),
        ("Certificate", "kuota-webhook"),
    ]
    for doc in CERTIFICATES:
        assert doc["apiVersion"] == "cert-manager.io/v1" and doc["metadata"]["namespace"] == "kuota-system"
    ca, serving = CERTIFICATES[1]["spec"], CERTIFICATES[3]["spec"]
    assert ca["isCA"] is True and ca["issuerRef"]["name"] == "kuota-selfsigned"
    assert CERTIFICATES[2]["spec"]["ca"]["secretName"] == ca["secretName"]
    assert serving["dnsNames"] == service_dns_names("kuota-webhook", "kuota-system")
    assert serving["issuerRef"] == {"kind": "Issuer", "name": "kuota-webhook-ca"}
    assert serving["secretName"] == "kuota-webhook-tls"  # the Secret `kuota certs` tells you to create
    assert "server auth" in serving["usages"]
