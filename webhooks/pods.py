"""The pod webhooks: the pods of the kinds kuota holds back pod by pod (LeaderWorkerSet, plain Pods and pod groups).

Only pods that name a queue reach kuota (the webhook configurations' matchConditions; a LeaderWorkerSet's pods name
the queue its mutating webhook copied onto the set's pod templates). The enabled kind that claims the pod
(`Registry.claiming`) reviews it as its `pods` kind, with the rules every object gets: the mutating webhook stamps
the queue and priority class and creates the pod behind kuota's scheduling gate; the validating webhook refuses
what the queue would refuse and every way around it (only kuota's service account removes the gate, nobody edits
kuota's annotations or moves an admitted pod to another queue or priority class). A pod no enabled kind claims, a
Job's pod for one, is allowed as it is: a pod kuota does not queue must never wait for kuota.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from webhooks.review import ALLOW, AdmissionRequest, Decision
from webhooks.state import WebhookState
from workloads.gates import GatedKind
from workloads.kind import JobKind

Rule = Callable[[JobKind, AdmissionRequest, WebhookState], Decision]


def claiming_kind(request: AdmissionRequest, state: WebhookState) -> GatedKind | None:
    """The enabled kind whose pod this is, now or (on UPDATE) before: removing a queue label is still its to judge."""
    for pod in (request.object, request.old_object):
        if isinstance(pod, Mapping):
            kind = state.kinds.claiming(pod)
            if kind is not None:
                return kind
    return None


def for_pods(rule: Rule) -> Rule:
    """`rule` (mutate or validate) applied to a pod as the kind that claims it reads pods."""

    def review(_: JobKind, request: AdmissionRequest, state: WebhookState) -> Decision:
        kind = claiming_kind(request, state)
        if kind is None:
            return ALLOW
        return rule(kind.pods, request, state)

    return review
