"""The validating webhook: refuse what kuota could never run, and every way around the queue, for every kind.

Two kinds of rule, checked in this order:

* who may do what (403): only kuota starts a queued job (its kind's hold, e.g. `spec.suspend` or the scheduling
  gate on a pod), sets the annotations that record an admission, and nobody moves an admitted Job to another
  queue or priority class, grows it while it runs, takes it out of kuota by removing its queue label, or undoes
  what holds its kind back (a LeaderWorkerSet's pod templates must name its queue). kuota's own service account is
  exempt: it is the one doing it.
* what the Job asks for (422, or 403 when it can never fit): the queue exists and is open to the namespace, the
  priority class is configured, the annotations are well-formed, the request fits what the team could ever hold.
  On UPDATE only problems the update introduces are refused, so that a Job admitted under an older quota file can
  still be labelled, scaled down or deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from admission.labels import ADMITTED_FLAVOR, KUOTA_OWNED_ANNOTATIONS, WORKLOAD_LABEL
from webhooks.checks import not_the_kind, problems_denial, request_namespace
from webhooks.review import ALLOW, AdmissionRequest, Decision, deny
from webhooks.state import ConfigView, WebhookState
from workloads.kind import JobKind, value_at
from workloads.problems import JobProblemKind
from workloads.reading import Reading, read, structure
from workloads.rules import RequestedNames, names_in_labels

Job = Mapping[str, Any]


def validate(kind: JobKind, request: AdmissionRequest, state: WebhookState) -> Decision:
    if request.sub_resource is not None or request.operation in ("DELETE", "CONNECT"):
        return ALLOW
    if request.operation not in ("CREATE", "UPDATE"):
        return deny(
            f"operation {request.operation[:40]!r} is not one kuota reviews; list only CREATE and UPDATE in the "
            "webhook configuration's rules",
            code=400,
            reason="BadRequest",
        )
    wrong_kind = not_the_kind(request, kind)
    if wrong_kind is not None:
        return wrong_kind
    view = state.view
    namespace = request_namespace(request)
    # Read once: the problems, names and pod set that every rule below needs, without building a Workload.
    reading = read(kind, request.object, view.index, namespace)
    if reading.problems:
        unreadable = [p for p in reading.problems if p.kind is JobProblemKind.NOT_A_JOB]
        if unreadable:
            return problems_denial(unreadable)
    job = _Seen.of(kind, request.object, reading.names, reading.annotations, view, namespace)
    old = None
    if request.operation == "UPDATE":
        old_parts, _ = structure(kind, request.old_object)
        if any(p.kind is JobProblemKind.NOT_A_JOB for p in old_parts.problems):
            return deny(
                f"this UPDATE review carries no readable previous {kind.kind} in oldObject; send it as stored",
                code=400,
                reason="BadRequest",
            )
        old_names = names_in_labels(old_parts.labels)
        old = _Seen.of(kind, request.old_object, old_names, old_parts.annotations, view, namespace)
    if not job.managed and not (old is not None and old.managed):
        return ALLOW
    if request.username == state.service_account:
        if old is not None:
            return ALLOW  # kuota carrying out its own decisions (start, evict, stamp the flavor)
    else:
        denial = _who_may(kind, job, old)
        if denial is not None:
            return denial
    return _what_is_asked(kind, reading, old, view, namespace)


@dataclass(slots=True)
class _Seen:
    """What the rules read from one Job, read once."""

    body: Job
    names: RequestedNames
    queue: str | None
    """The queue name it goes to: its label's, else its managed namespace's default."""
    managed: bool
    annotations: Mapping[str, Any]
    suspended: bool

    @classmethod
    def of(
        cls,
        kind: JobKind,
        body: Job,
        names: RequestedNames,
        annotations: Mapping[str, Any],
        view: ConfigView,
        namespace: str | None,
    ) -> _Seen:
        queue = names.queue
        managed = queue is not None or (namespace is not None and view.index.managed(namespace))
        if queue is None and namespace is not None:
            queue = view.index.default_queue(namespace)
        return cls(body, names, queue, managed, annotations, kind.is_suspended(body))


# -- who may do what ----------------------------------------------------------------------------------------------


def _workload_labels(kind: JobKind, body: Job) -> dict[str, object]:
    """The `kuota.dev/workload` label of each pod template by pod set (None where it has none)."""
    out: dict[str, object] = {}
    for template in kind.read_templates(body):
        labels = value_at(body, (*template.path[:-1], "metadata", "labels"))
        out[template.name] = labels.get(WORKLOAD_LABEL) if isinstance(labels, Mapping) else None
    return out


def _who_may(kind: JobKind, job: _Seen, old: _Seen | None) -> Decision | None:
    noun = kind.kind
    if old is not None and old.names.queue is not None and not job.managed:
        return deny(
            f"removing label {old.names.queue_label} would take this {noun} out of kuota's queue "
            f"{old.names.queue!r}; put the label back, or delete the {noun} if it should not run"
        )
    for key in KUOTA_OWNED_ANNOTATIONS:
        if job.annotations.get(key) != (old.annotations.get(key) if old is not None else None):
            remedy = "remove it from the manifest" if old is None else "leave it as kuota set it"
            return deny(f"annotation {key} is set by kuota only (it records what kuota did with this {noun}); {remedy}")
    before = _workload_labels(kind, old.body) if old is not None else {}
    if any(label != before.get(name) for name, label in _workload_labels(kind, job.body).items()):
        remedy = "remove it from the pod templates" if old is None else "leave it as kuota set it"
        return deny(
            f"label {WORKLOAD_LABEL} on pod templates is set by kuota only (it tells which workload the pods on a "
            f"node are, for node failures); {remedy}"
        )
    held = kind.hold_problem(job.body, old.body if old is not None else None)
    if held is not None:
        return deny(held)
    if old is not None and ADMITTED_FLAVOR in old.annotations:
        if job.queue != old.queue:
            return deny(
                f"this {noun} was admitted from queue {old.queue!r} and cannot move to {job.queue!r} while admitted; "
                f"keep its queue, or delete the {noun} and submit it again to the other queue"
            )
        if job.names.priority_class != old.names.priority_class:
            return deny(
                f"this {noun} was admitted with priority class {old.names.priority_class!r} and cannot change to "
                f"{job.names.priority_class!r} while admitted; keep the class, or delete the {noun} and submit it again"
            )
        old_count, new_count = kind.pod_count(old.body), kind.pod_count(job.body)
        if new_count > old_count and not job.suspended:
            return deny(
                f"kuota admitted this {noun} for {old_count} pods at once and it cannot grow to {new_count} while "
                f"it runs; keep {kind.count_fields} at {old_count} pods or less, or delete the {noun} and submit "
                "it again"
            )
    if not job.suspended and (old is None or old.suspended):
        return deny(
            f"only kuota may start this {noun}: it waits in queue {job.queue!r} and kuota lets it run when it is "
            f"admitted; leave {kind.held_by} (or leave it out) and kuota will start the {noun} when quota allows"
        )
    return None


# -- what the Job asks for ----------------------------------------------------------------------------------------


def _what_is_asked(
    kind: JobKind, reading: Reading, old: _Seen | None, view: ConfigView, namespace: str | None
) -> Decision:
    before = read(kind, old.body, view.index, namespace) if old is not None else None
    if reading.problems:
        problems = [p for p in reading.problems if before is None or p not in before.problems]
        if problems:
            return problems_denial(problems)
    reason = _never_fits(reading, view)
    if reason is None:
        return ALLOW
    if before is not None and _never_fits(before, view) == reason:
        return ALLOW  # a problem the job already had
    return deny(reason)


def _never_fits(reading: Reading, view: ConfigView) -> str | None:
    if reading.pod_sets is None or reading.team is None:
        return None  # not kuota's, or unreadable
    return view.capacity.pod_sets_never_fit(reading.team, reading.pod_sets)
