"""The validating webhook: refuse what kuota could never run, and every way around the queue.

Two kinds of rule, checked in this order:

* who may do what (403): only kuota starts a queued Job (`spec.suspend: false`), sets the annotations that record
  an admission, and nobody moves an admitted Job to another queue or priority class, grows it while it runs, or
  takes it out of kuota by removing its queue label. kuota's own service account is exempt: it is the one doing it.
* what the Job asks for (422, or 403 when it can never fit): the queue exists and is open to the namespace, the
  priority class is configured, the annotations are well-formed, the request fits what the team could ever hold.
  On UPDATE only problems the update introduces are refused, so that a Job admitted under an older quota file can
  still be labelled, scaled down or deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.job import (
    JobConversion,
    convert_job,
    is_managed,
    job_annotations,
    pod_count,
    requested_names,
    structure_problems,
)
from admission.labels import ADMITTED_FLAVOR, KUOTA_OWNED_ANNOTATIONS
from webhooks.checks import not_a_job_kind, problems_denial, request_namespace
from webhooks.review import ALLOW, AdmissionRequest, Decision, deny
from webhooks.state import ConfigView, WebhookState

Job = Mapping[str, Any]


def validate_job(request: AdmissionRequest, state: WebhookState) -> Decision:
    if request.sub_resource is not None or request.operation in ("DELETE", "CONNECT"):
        return ALLOW
    if request.operation not in ("CREATE", "UPDATE"):
        return deny(
            f"operation {request.operation[:40]!r} is not one kuota reviews; list only CREATE and UPDATE in the "
            "webhook configuration's rules",
            code=400,
            reason="BadRequest",
        )
    wrong_kind = not_a_job_kind(request)
    if wrong_kind is not None:
        return wrong_kind
    job = request.object
    problems = structure_problems(job)
    if problems:
        return problems_denial(problems)
    old: Job | None = None
    if request.operation == "UPDATE":
        if structure_problems(request.old_object):
            return deny(
                "this UPDATE review carries no readable previous Job in oldObject; send the Job as stored",
                code=400,
                reason="BadRequest",
            )
        old = request.old_object
    namespace = request_namespace(request)
    view = state.view
    managed_before = old is not None and is_managed(old, view.config, namespace)
    if not managed_before and not is_managed(job, view.config, namespace):
        return ALLOW
    if request.username == state.service_account:
        if old is not None:
            return ALLOW  # kuota carrying out its own decisions (start, evict, stamp the flavor)
    else:
        denial = _who_may(job, old, view, namespace)
        if denial is not None:
            return denial
    return _what_is_asked(job, old, view, namespace)


# -- who may do what ----------------------------------------------------------------------------------------------


def _suspended(job: Job) -> bool:
    spec = job.get("spec")
    return isinstance(spec, Mapping) and spec.get("suspend") is True


def _queue_name(job: Job, view: ConfigView, namespace: str | None) -> str | None:
    name = requested_names(job).queue
    if name is None and namespace is not None:
        name = view.index.default_queue(namespace)
    return name


def _who_may(job: Job, old: Job | None, view: ConfigView, namespace: str | None) -> Decision | None:
    new_names = requested_names(job)
    if old is not None:
        old_names = requested_names(old)
        if old_names.queue is not None and not is_managed(job, view.config, namespace):
            return deny(
                f"removing label {old_names.queue_label} would take this Job out of kuota's queue "
                f"{old_names.queue!r}; put the label back, or delete the Job if it should not run"
            )
    annotations = job_annotations(job)
    old_annotations = job_annotations(old) if old is not None else {}
    for key in KUOTA_OWNED_ANNOTATIONS:
        if annotations.get(key) != old_annotations.get(key):
            remedy = "remove it from the manifest" if old is None else "leave it as kuota set it"
            return deny(f"annotation {key} is set by kuota only (it records what kuota did with this Job); {remedy}")
    if old is not None and ADMITTED_FLAVOR in old_annotations:
        old_queue, new_queue = _queue_name(old, view, namespace), _queue_name(job, view, namespace)
        if new_queue != old_queue:
            return deny(
                f"this Job was admitted from queue {old_queue!r} and cannot move to {new_queue!r} while admitted; "
                "keep its queue, or delete the Job and submit it again to the other queue"
            )
        old_class = requested_names(old).priority_class
        if new_names.priority_class != old_class:
            return deny(
                f"this Job was admitted with priority class {old_class!r} and cannot change to "
                f"{new_names.priority_class!r} while admitted; keep the class, or delete the Job and submit it again"
            )
        old_count, new_count = pod_count(old), pod_count(job)
        if new_count > old_count and not _suspended(job):
            return deny(
                f"kuota admitted this Job for {old_count} pods at once and it cannot grow to {new_count} while it "
                f"runs; keep spec.parallelism at {old_count} or less, or delete the Job and submit it again"
            )
    if not _suspended(job) and (old is None or _suspended(old)):
        queue = _queue_name(job, view, namespace)
        return deny(
            f"only kuota may start this Job: it waits in queue {queue!r} and kuota sets spec.suspend to false when "
            "it is admitted; leave spec.suspend: true (or leave it out) and kuota will start the Job when quota allows"
        )
    return None


# -- what the Job asks for ----------------------------------------------------------------------------------------


def _what_is_asked(job: Job, old: Job | None, view: ConfigView, namespace: str | None) -> Decision:
    conversion = convert_job(job, view.config, namespace)
    before: JobConversion | None = convert_job(old, view.config, namespace) if old is not None else None
    problems = [p for p in conversion.problems if before is None or p not in before.problems]
    if problems:
        return problems_denial(problems)
    if conversion.workload is None:
        return ALLOW
    reason = view.capacity.never_fits(conversion.workload)
    if reason is None:
        return ALLOW
    if before is not None and before.workload is not None and view.capacity.never_fits(before.workload) == reason:
        return ALLOW
    return deny(reason)
