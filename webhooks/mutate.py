"""The mutating webhook: every job kuota manages, of any enabled kind, is created waiting, with its queue and
priority class stamped.

Stamping kuota's own labels lets the controller, selectors and the validating webhook read one spelling, whatever
the user wrote (Kueue's labels, a namespace's default queue, the pod template's priorityClassName); a kind whose
pods are held one by one copies them onto its pod templates, so that its pods name their queue too. How a job is
made to wait is its kind's (`spec.suspend`, `spec.runPolicy.suspend`, kuota's scheduling gate on a pod...). The
patch is computed against the object as it is, so a second invocation (reinvocationPolicy: IfNeeded) finds nothing
to change.

Only what would make the patch itself wrong is denied here (a body that is not an object of the kind, a queue label
whose value cannot be a label); every other rule belongs to the validating webhook, which sees the final object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.labels import KUEUE_QUEUE_LABEL, PRIORITY_LABEL, QUEUE_LABEL
from webhooks.checks import not_the_kind, problems_denial, request_namespace
from webhooks.review import ALLOW, AdmissionRequest, Decision, JSONPatch, pointer
from webhooks.state import WebhookState
from workloads.kind import JobKind
from workloads.problems import JobProblemKind
from workloads.reading import first_priority, structure
from workloads.rules import names_in_labels, priority_class_for, queue_for


def mutate(kind: JobKind, request: AdmissionRequest, state: WebhookState) -> Decision:
    if request.operation != "CREATE" or request.sub_resource is not None:
        return ALLOW
    wrong_kind = not_the_kind(request, kind)
    if wrong_kind is not None:
        return wrong_kind
    job = request.object
    parts, templates = structure(kind, job)
    unreadable = [p for p in parts.problems if p.kind is JobProblemKind.NOT_A_JOB]
    if unreadable:
        return problems_denial(unreadable)
    namespace = request_namespace(request)
    view = state.view
    labels = parts.labels
    names = names_in_labels(labels)
    if names.queue is None and (namespace is None or not view.index.managed(namespace)):
        return ALLOW
    stamps: dict[str, str] = {}
    kept: dict[str, str] = {}
    """kuota's labels as the object will have them, for kinds whose pods must carry them too."""
    warnings: list[str] = []
    if namespace is not None:
        resolution = queue_for(names, namespace, view.index)
        if resolution.problem is not None and resolution.problem.kind is JobProblemKind.INVALID_QUEUE_NAME:
            return problems_denial([resolution.problem])
        if resolution.name is not None:
            kept[QUEUE_LABEL] = resolution.name
            if labels.get(QUEUE_LABEL) != resolution.name:
                stamps[QUEUE_LABEL] = resolution.name
    kueue_queue = labels.get(KUEUE_QUEUE_LABEL)
    if names.queue_label == QUEUE_LABEL and kueue_queue is not None and kueue_queue != names.queue:
        warnings.append(f"labels {QUEUE_LABEL} and {KUEUE_QUEUE_LABEL} disagree; kuota uses {QUEUE_LABEL}")
    # An unknown class (a problem, and no class) is the validating webhook's to deny, with its message.
    priority_class, _ = priority_class_for(first_priority(templates), names, view.index)
    if priority_class is not None:
        kept[PRIORITY_LABEL] = priority_class.name
        if labels.get(PRIORITY_LABEL) != priority_class.name:
            stamps[PRIORITY_LABEL] = priority_class.name
    patch = _label_patch(job, stamps)
    patch.extend(kind.pod_labels_patch(job, kept))
    patch.extend(kind.suspend_patch(job))
    return Decision(allowed=True, patch=patch, warnings=warnings)


#: JSON pointers of the labels kuota stamps, escaped once rather than for every job.
_LABEL_POINTERS = {key: pointer("metadata", "labels", key) for key in (QUEUE_LABEL, PRIORITY_LABEL)}


def _label_patch(job: Mapping[str, Any], stamps: Mapping[str, str]) -> JSONPatch:
    if not stamps:
        return []
    metadata = job.get("metadata")
    if metadata is None:
        return [{"op": "add", "path": "/metadata", "value": {"labels": dict(stamps)}}]
    if metadata.get("labels") is None:
        return [{"op": "add", "path": "/metadata/labels", "value": dict(stamps)}]
    return [{"op": "add", "path": _LABEL_POINTERS[key], "value": value} for key, value in stamps.items()]
