"""config/deploy's RBAC and webhook configurations widened from batch/v1 Jobs to the kinds a deployment enables.

config/deploy ships what Job needs. Each other kind needs the same four verbs on its own resource and the same
webhooks on its own path, so they are made from the Job's: the Job rule and each Job webhook are copied per kind
with the kind's API group, resource and path (`/mutate/GROUP/VERSION/PLURAL`). A kind that reads its pod sets from
objects it refers to (a TrainJob, from its TrainingRuntime or ClusterTrainingRuntime) also gets `list` and `watch`
on their kinds, which is all kuota does with them (it never reads one alone, and never writes one), and no webhook
for them. Least privilege holds: a kind that is not enabled gets no rule and no webhook. Pure: documents in,
documents out.

The kinds held back pod by pod (LeaderWorkerSet, Pod) differ: kuota only reads a LeaderWorkerSet (get, list,
watch) and acts on pods instead (get, list and watch the labelled ones; patch to let one go; delete to stop one),
and pods have their own webhooks on `/mutate/core/v1/pods` and `/validate/core/v1/pods`, made from the webhooks for
Jobs that name a queue (the webhooks for the other Jobs of managed namespaces have no pod counterpart: a managed
namespace queues its Jobs, not every pod in it).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from webhooks.app import review_path
from workloads.gates import GATED_POD, GatedKind
from workloads.kind import JobKind

Document = dict[str, Any]


def _is_job_rule(rule: Mapping[str, Any]) -> bool:
    return rule.get("apiGroups") == ["batch"] and rule.get("resources") == ["jobs"]


def widen_rbac(documents: Iterable[Document], kinds: Iterable[JobKind]) -> list[Document]:
    """The RBAC documents with the ClusterRole's Job rule replaced by one rule per enabled kind."""
    kinds = list(kinds)
    out: list[Document] = []
    for document in documents:
        document = copy.deepcopy(document)
        if document.get("kind") == "ClusterRole":
            rules: list[Document] = []
            for rule in document.get("rules") or []:
                if not _is_job_rule(rule):
                    rules.append(rule)
                    continue
                for kind in kinds:
                    if isinstance(kind, GatedKind) and not kind.defines_workloads:
                        continue  # its objects are the pods (below)
                    widened = copy.deepcopy(rule)
                    widened["apiGroups"], widened["resources"] = [kind.group], [kind.plural]
                    if isinstance(kind, GatedKind):
                        widened["verbs"] = ["get", "list", "watch"]  # read only: kuota acts on its pods
                    rules.append(widened)
                if any(isinstance(kind, GatedKind) for kind in kinds):
                    rules.append({"apiGroups": [""], "resources": ["pods"], "verbs": list(POD_VERBS)})
                rules.extend(_referenced_rules(kinds))
            if any(isinstance(kind, GatedKind) for kind in kinds):
                # The gated kinds' pod rule grants all the node and topology pod rule does: one rule on pods is enough.
                rules = [r for r in rules if not _is_pod_read_rule(r)]
            document["rules"] = rules
        out.append(document)
    return out


def _is_pod_read_rule(rule: Mapping[str, Any]) -> bool:
    return (
        rule.get("apiGroups") == [""]
        and rule.get("resources") == ["pods"]
        and rule.get("verbs") == ["list", "watch", "patch"]
    )


def _referenced_rules(kinds: Iterable[JobKind]) -> list[Document]:
    """`list` and `watch` on each kind that the enabled kinds refer to, once each."""
    seen = dict.fromkeys((r.group, r.plural) for kind in kinds for r in kind.referenced_kinds)
    return [{"apiGroups": [group], "resources": [plural], "verbs": ["list", "watch"]} for group, plural in seen]


def widen_webhooks(documents: Iterable[Document], kinds: Iterable[JobKind]) -> list[Document]:
    """The webhook configurations with each Job webhook copied once per enabled kind (names and paths per kind)."""
    kinds = list(kinds)
    out: list[Document] = []
    for document in documents:
        document = copy.deepcopy(document)
        endpoint = "mutate" if document.get("kind") == "MutatingWebhookConfiguration" else "validate"
        hooks: list[Document] = []
        for hook in document.get("webhooks") or []:
            for kind in kinds:
                if isinstance(kind, GatedKind) and not kind.defines_workloads:
                    continue  # its objects are the pods (below)
                widened = copy.deepcopy(hook)
                if kind.kind != "Job":
                    widened["name"] = f"{kind.plural}.{kind.group.split('.')[0]}-{hook['name']}"
                widened["clientConfig"]["service"]["path"] = review_path(endpoint, kind)
                for rule in widened.get("rules") or []:
                    rule["apiGroups"], rule["apiVersions"], rule["resources"] = (
                        [kind.group],
                        [kind.version],
                        [kind.plural],
                    )
                hooks.append(widened)
        queued = next((h for h in document.get("webhooks") or [] if h["name"].startswith(QUEUED_JOBS)), None)
        if queued is not None and any(isinstance(kind, GatedKind) for kind in kinds):
            hooks.append(pod_webhook(queued, endpoint))
        document["webhooks"] = hooks
        out.append(document)
    return out


#: What kuota does with pods: the list and watch of the labelled ones, `get` after a conflict, `patch` to let one
#: go (and to ask it for a checkpoint), `delete` to stop one.
POD_VERBS = ("get", "list", "watch", "patch", "delete")

QUEUED_JOBS = "queued-jobs."


#: Why the pod webhooks are safe to run, printed above the documents that hold them.
POD_WEBHOOKS_NOTE = """\
# The pod webhooks (queued-pods.*) see only pods that name a queue, outside kube-system and kuota-system.
# A webhook on every pod would make kuota a point of failure for the whole cluster: were it down or slow, no
# Deployment, DaemonSet or system pod could start. As Kueue's pod integration does with its namespace and pod
# selectors, these keep the Jobs' namespaceSelector (kuota's own pods start while kuota is down) and their
# matchConditions, which kube-apiserver evaluates without calling kuota: only pods labelled kuota.dev/queue or
# kueue.x-k8s.io/queue-name are sent (a LeaderWorkerSet's pods carry the queue its webhook wrote on the set's pod
# templates); every other pod never waits for kuota. failurePolicy stays Fail for the pods that are sent, as in
# Kueue: they asked to be queued, and starting them ungated while kuota is away would skip the queue; their
# controllers create them once kuota answers. kuota's own updates skip the validating webhook, so it goes on
# admitting while the webhook is down.
"""


def pod_webhook(queued_jobs: Document, endpoint: str) -> Document:
    """The pod webhook of one configuration, made from its webhook for Jobs that name a queue (its selectors and
    failurePolicy, for the reasons in POD_WEBHOOKS_NOTE), on the pods path."""
    hook = copy.deepcopy(queued_jobs)
    hook["name"] = "queued-pods." + hook["name"][len(QUEUED_JOBS) :]
    hook["clientConfig"]["service"]["path"] = review_path(endpoint, GATED_POD)
    for rule in hook.get("rules") or []:
        rule["apiGroups"], rule["apiVersions"], rule["resources"] = [""], ["v1"], ["pods"]
    return hook
