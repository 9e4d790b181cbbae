"""`kuota manifests`: config/deploy's RBAC and webhooks widened to the enabled kinds, and nothing more."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from kuota import cli
from kuota.kind_manifests import widen_rbac, widen_webhooks
from workloads.registry import REGISTRY

DEPLOY = Path(__file__).parents[1] / "config" / "deploy"


def _documents(name: str) -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_each_kind_gets_its_rule_and_webhooks_on_its_own_path() -> None:
    kinds = REGISTRY.enabled(["Job", "JobSet", "RayJob"])
    role = next(d for d in widen_rbac(_documents("rbac.yaml"), kinds) if d["kind"] == "ClusterRole")
    resources = {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in role["rules"]}  # type: ignore[index]
    assert (
        resources[("batch", "jobs")] == resources[("jobset.x-k8s.io", "jobsets")] == ["get", "list", "watch", "patch"]
    )
    assert ("ray.io", "rayjobs") in resources and ("kubeflow.org", "pytorchjobs") not in resources
    # The three kinds, Events, and nodes and pods to read for node failures: none of these refers to other objects.
    assert len(resources) == 3 + 1 + 2
    for document in widen_webhooks(_documents("webhooks.yaml"), kinds):
        hooks = document["webhooks"]
        assert len(hooks) == 2 * 3  # the two Job webhooks, once per kind
        names = [h["name"] for h in hooks]
        assert len(set(names)) == len(names)
        endpoint = "mutate" if document["kind"] == "MutatingWebhookConfiguration" else "validate"
        paths = {h["clientConfig"]["service"]["path"] for h in hooks}
        assert paths == {
            f"/{endpoint}/batch/v1/jobs",
            f"/{endpoint}/jobset.x-k8s.io/v1alpha2/jobsets",
            f"/{endpoint}/ray.io/v1/rayjobs",
        }
        for hook in hooks:
            (rule,) = hook["rules"]
            assert hook["clientConfig"]["service"]["path"].endswith(f"/{rule['apiVersions'][0]}/{rule['resources'][0]}")


def test_trainjob_gets_list_and_watch_on_its_runtimes_and_webhooks_for_itself_only() -> None:
    kinds = REGISTRY.enabled(["TrainJob", "Job"])
    role = next(d for d in widen_rbac(_documents("rbac.yaml"), kinds) if d["kind"] == "ClusterRole")
    rules = [(r["apiGroups"], r["resources"], r["verbs"]) for r in role["rules"]]  # type: ignore[index]
    assert rules == [
        (["batch"], ["jobs"], ["get", "list", "watch", "patch"]),
        (["trainer.kubeflow.org"], ["trainjobs"], ["get", "list", "watch", "patch"]),
        # What the adapter's reflectors do with the runtimes, and nothing more: kuota never gets or writes one.
        (["trainer.kubeflow.org"], ["trainingruntimes"], ["list", "watch"]),
        (["trainer.kubeflow.org"], ["clustertrainingruntimes"], ["list", "watch"]),
        ([""], ["events"], ["create"]),
        ([""], ["nodes"], ["list", "watch"]),
        ([""], ["pods"], ["list", "watch", "patch"]),
    ]
    for document in widen_webhooks(_documents("webhooks.yaml"), kinds):
        resources = {r["resources"][0] for hook in document["webhooks"] for r in hook["rules"]}
        assert resources == {"jobs", "trainjobs"}


def test_job_alone_is_config_deploy_as_shipped() -> None:
    jobs = REGISTRY.enabled(["Job"])
    assert widen_rbac(_documents("rbac.yaml"), jobs) == _documents("rbac.yaml")
    assert widen_webhooks(_documents("webhooks.yaml"), jobs) == _documents("webhooks.yaml")


def test_the_command_prints_applyable_documents_and_refuses_unknown_kinds() -> None:
    runner = CliRunner()
    result = runner.invoke(cli.app, ["manifests", "--kinds", "Job,PyTorchJob", "--deploy", str(DEPLOY)])
    assert result.exit_code == 0, result.output
    kinds = [d["kind"] for d in yaml.safe_load_all(result.output) if d]
    assert "ClusterRole" in kinds and "MutatingWebhookConfiguration" in kinds
    trainjobs = runner.invoke(cli.app, ["manifests", "--kinds", "TrainJob", "--deploy", str(DEPLOY)])
    assert trainjobs.exit_code == 0, trainjobs.output
    role = next(d for d in yaml.safe_load_all(trainjobs.output) if d and d["kind"] == "ClusterRole")
    assert [r["resources"] for r in role["rules"]] == [
        ["trainjobs"],
        ["trainingruntimes"],
        ["clustertrainingruntimes"],
        ["events"],
        ["nodes"],
        ["pods"],
    ]
    refused = runner.invoke(cli.app, ["manifests", "--kinds", "Job,SlurmJob", "--deploy", str(DEPLOY)])
    assert refused.exit_code == 2 and "SlurmJob" in refused.output and "JobSet" in refused.output


def _hooks(documents: list[dict[str, object]], kind: str) -> list[dict[str, object]]:
    document = next(d for d in documents if d["kind"] == kind)
    return document["webhooks"]  # type: ignore[return-value]


def test_kinds_held_back_pod_by_pod_get_read_only_sets_and_the_pod_verbs() -> None:
    kinds = REGISTRY.enabled(["LeaderWorkerSet", "Pod"])
    role = next(d for d in widen_rbac(_documents("rbac.yaml"), kinds) if d["kind"] == "ClusterRole")
    resources = {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in role["rules"]}  # type: ignore[index]
    assert resources == {
        ("leaderworkerset.x-k8s.io", "leaderworkersets"): ["get", "list", "watch"],
        ("", "pods"): ["get", "list", "watch", "patch", "delete"],
        ("", "events"): ["create"],
        ("", "nodes"): ["list", "watch"],
    }
    # Pods alone: the pod rule once (it grants what node failures read of pods too), and nothing for a set kuota
    # does not queue.
    role = next(
        d for d in widen_rbac(_documents("rbac.yaml"), REGISTRY.enabled(["Job", "Pod"])) if d["kind"] == "ClusterRole"
    )
    assert [(r["apiGroups"], r["resources"]) for r in role["rules"]] == [  # type: ignore[index]
        (["batch"], ["jobs"]),
        ([""], ["pods"]),
        ([""], ["events"]),
        ([""], ["nodes"]),
    ]


def test_the_pod_webhooks_only_see_pods_that_name_a_queue_outside_the_system_namespaces() -> None:
    shipped = _documents("webhooks.yaml")
    widened = widen_webhooks(shipped, REGISTRY.enabled(["Job", "LeaderWorkerSet", "Pod"]))
    for configuration, operations in (
        ("MutatingWebhookConfiguration", ["CREATE"]),
        ("ValidatingWebhookConfiguration", ["CREATE", "UPDATE"]),
    ):
        endpoint = "mutate" if configuration.startswith("Mutating") else "validate"
        hooks = _hooks(widened, configuration)
        # Two per kind with objects (Job, LeaderWorkerSet) and one for pods: never one for unlabelled pods.
        paths = [h["clientConfig"]["service"]["path"] for h in hooks]  # type: ignore[index]
        assert paths.count(f"/{endpoint}/core/v1/pods") == 1 and len(hooks) == 5
        (pods,) = [h for h in hooks if h["clientConfig"]["service"]["path"].endswith("/pods")]  # type: ignore[index]
        (queued_jobs,) = [h for h in _hooks(shipped, configuration) if h["name"].startswith("queued-jobs.")]
        assert pods["name"] == f"queued-pods.{endpoint}.kuota.dev"
        assert pods["rules"] == [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": operations,
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ]
        assert pods["failurePolicy"] == "Fail" and pods["timeoutSeconds"] == 3
        assert pods["namespaceSelector"] == queued_jobs["namespaceSelector"]
        assert pods["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kuota-system"]  # type: ignore[index]
        assert pods["matchConditions"] == queued_jobs["matchConditions"]
        conditions = " ".join(c["expression"] for c in pods["matchConditions"])  # type: ignore[attr-defined]
        assert "'kuota.dev/queue' in object.metadata.labels" in conditions
        assert "'kueue.x-k8s.io/queue-name' in object.metadata.labels" in conditions
        if endpoint == "validate":
            assert "request.userInfo.username == 'system:serviceaccount:kuota-system:kuota'" in conditions
            assert "oldObject" in conditions  # removing the queue label is still seen
    # Without a kind held back pod by pod, no pod webhook at all.
    for configuration in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        plain = _hooks(widen_webhooks(shipped, REGISTRY.enabled(["Job", "JobSet"])), configuration)
        assert not any("pods" in h["clientConfig"]["service"]["path"] for h in plain)  # type: ignore[index]


def test_the_command_widens_config_deploy_to_leaderworkersets_and_pods() -> None:
    result = CliRunner().invoke(cli.app, ["manifests", "--kinds", "LeaderWorkerSet,Pod", "--deploy", str(DEPLOY)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("# The pod webhooks (queued-pods.*) see only pods that name a queue")
    documents = [d for d in yaml.safe_load_all(result.output) if d]
    paths = {h["clientConfig"]["service"]["path"] for d in documents for h in d.get("webhooks", [])}
    assert paths == {
        "/mutate/leaderworkerset.x-k8s.io/v1/leaderworkersets",
        "/validate/leaderworkerset.x-k8s.io/v1/leaderworkersets",
        "/mutate/core/v1/pods",
        "/validate/core/v1/pods",
    }
