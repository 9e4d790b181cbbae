"""config/deploy's RBAC and webhook configurations widened from batch/v1 Jobs to the kinds a deployment enables.

config/deploy ships what Job needs. Each other kind needs the same four verbs on its own resource and the same
webhooks on its own path, so they are made from the Job's: the Job rule and each Job webhook are copied per kind
with the kind's API group, resource and path (`/mutate/GROUP/VERSION/PLURAL`). A kind that reads its pod sets from
objects it refers to (a TrainJob, from its TrainingRuntime or ClusterTrainingRuntime) also gets `list` and `watch`
on their kinds, which is all kuota does with them (it never reads one alone, and never writes one), and no webhook
for them. Least privilege holds: a kind that is not enabled gets no rule and no webhook. Pure: documents in,
documents out.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from webhooks.app import review_path
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
                    widened = copy.deepcopy(rule)
                    widened["apiGroups"], widened["resources"] = [kind.group], [kind.plural]
                    rules.append(widened)
                rules.extend(_referenced_rules(kinds))
            document["rules"] = rules
        out.append(document)
    return out


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
        document["webhooks"] = hooks
        out.append(document)
    return out
